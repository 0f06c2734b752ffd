"""Issue 28 item 1 benchmark: how many threads the daemon runs with everything on (target: at most 40).

It runs the real daemon (`npumon run --simulate --sim-product atlas-a3`, 16 chips, a process of its own) with
the simulator's realistic latency model on (NPUMON_SIM_LATENCY_SCALE=1) and the simulated npu-smi and hccn_tool
as real processes per call (NPUMON_SIM_IN_PROCESS=0), as on a host, and every source and service on: npu-smi,
the host reader, the probe, the serving queue, the NPU network (hccn_tool, all five tiers), the kernel log (a
file the benchmark appends a PCIe AER line to every minute, which makes a finding that is notified), the event
history, 8 webhook receivers on 127.0.0.1 that answer, and a real gRPC kubelet pod-resources server on a unix
socket (tests/sources/k8s/kubelet_server.py) asked every 10 s. A scraper reads /metrics every 5 s.

Every SAMPLE_SECONDS it reads the daemon's thread count (/proc/PID/status Threads) and the tasks of the daemon
and all its descendants (what a unit's TasksMax counts); at each new peak it records the threads' names
(/proc/PID/task/*/comm: grpc names its own threads, Python's show as the program's name).

Run:  python benchmarks/bench_threads.py --minutes 5      (prints a markdown section)
      python benchmarks/bench_threads.py --tree DIR       (the daemon from another checkout, e.g. main's)
"""

import argparse
import collections
import http.server
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from bench_cost import descendants  # every live descendant of a pid, from /proc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SAMPLE_SECONDS = 0.1
SCRAPE_SECONDS = 5.0
AER_SECONDS = 60.0
RECEIVERS = 8
AER_LINE = "<3>[{:>12.6f}] [ascend] [ERROR] [drv_pcie] [devdrv_aer 101] <kworker/0:1:77,77> Error detected. " \
           "(dev_id=3; aer_cnt=1)\n"
PODS = [("default", "infer-{}".format(n), [("server", [("huawei.com/Ascend910", ["Ascend910-{}".format(n)])])])
        for n in range(16)]


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that answers every notification after a realistic 50 ms."""
    received = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        time.sleep(0.05)
        _Receiver.received += 1
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def threads_of(pid: int) -> int:
    try:
        with open("/proc/{}/status".format(pid)) as handle:
            for line in handle:
                if line.startswith("Threads:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def thread_names(pid: int) -> collections.Counter:
    names = collections.Counter()
    try:
        tasks = os.listdir("/proc/{}/task".format(pid))
    except OSError:
        return names
    for task in tasks:
        try:
            with open("/proc/{}/task/{}/comm".format(pid, task)) as handle:
                names[handle.read().strip()] += 1
        except OSError:
            continue
    return names


CALL_FAMILIES = {"npumon_source_calls_total": "calls", "npumon_source_calls_not_started_total": "not_started",
                 "npumon_source_overruns_total": "overruns"}


def call_totals(text: str) -> dict:
    """The runner's call counts over every tier, from one /metrics answer: whether polls kept up."""
    totals = dict.fromkeys(CALL_FAMILIES.values(), 0.0)
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in CALL_FAMILIES:
            totals[CALL_FAMILIES[name]] += float(line.rsplit(" ", 1)[1])
    return totals


def write_config(directory: str, listen: str, kmsg: str, hooks, kubelet: str) -> str:
    path = os.path.join(directory, "npumon.yaml")
    receivers = ", ".join("{{name: hook{}, type: webhook, url: '{}'}}".format(n, url) for n, url in enumerate(hooks))
    with open(path, "w") as handle:
        handle.write(
            "state_dir: {state}\n"
            "exporter: {{listen: '{listen}'}}\n"
            "faults: {{kmsg_path: {kmsg}}}\n"
            "events: {{enabled: true}}\n"
            "probe: {{enabled: true}}\n"
            "network: {{enabled: true}}\n"
            "kubernetes: {{enabled: true, socket: {kubelet}, interval_seconds: 10, timeout_seconds: 5}}\n"
            "notify: {{receivers: [{receivers}]}}\n".format(
                state=os.path.join(directory, "state"), listen=listen, kmsg=kmsg, kubelet=kubelet,
                receivers=receivers))
    return path


def run(seconds: float, directory: str, tree: str) -> dict:
    sys.path.insert(0, REPO)
    from tests.sources.k8s.kubelet_server import FakeKubelet  # a real gRPC server

    servers = []
    for _ in range(RECEIVERS):
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
    socket_dir = tempfile.mkdtemp(prefix="k8s", dir="/tmp")  # a unix socket path must stay under 108 bytes
    kubelet = FakeKubelet(os.path.join(socket_dir, "kubelet.sock"), PODS,
                          {"huawei.com/Ascend910": ["Ascend910-{}".format(n) for n in range(16)]})
    kubelet.__enter__()
    port = free_port()
    kmsg = os.path.join(directory, "kern.log")
    open(kmsg, "w").close()
    config = write_config(directory, "127.0.0.1:{}".format(port), kmsg,
                          ["http://127.0.0.1:{}/hook".format(s.server_address[1]) for s in servers], kubelet.path)
    env = dict(os.environ, NPUMON_SIM_LATENCY_SCALE="1", NPUMON_SIM_IN_PROCESS="0", PYTHONPATH=tree)
    argv = [sys.executable, "-m", "npumon.cli.main", "run", "--config", config, "--simulate=healthy",
            "--sim-product", "atlas-a3", "--sim-state", os.path.join(directory, "sim"), "--log-level", "warning"]
    log_path = os.path.join(directory, "daemon.log")
    log = open(log_path, "wb")
    daemon = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                              cwd=directory)
    peak, peak_tasks, peak_names, at_peak = 0, 0, collections.Counter(), 0.0
    counts = []
    scrapes, scrape_errors, calls = 0, 0, {}
    started = time.monotonic()
    next_scrape, next_aer, next_tasks = started + SCRAPE_SECONDS, started + 30.0, started
    exited = None
    try:
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            if daemon.poll() is not None:
                exited = daemon.returncode
                break
            threads = threads_of(daemon.pid)
            counts.append(threads)
            if threads > peak:
                peak, at_peak = threads, now - started
                peak_names = thread_names(daemon.pid)
            if now >= next_tasks:  # the whole tree is costlier to walk: once a second
                next_tasks += 1.0
                peak_tasks = max(peak_tasks, sum(threads_of(pid) for pid in descendants(daemon.pid) | {daemon.pid}))
            if now >= next_scrape:
                next_scrape += SCRAPE_SECONDS
                try:
                    with urllib.request.urlopen("http://127.0.0.1:{}/metrics".format(port), timeout=10) as response:
                        calls = call_totals(response.read().decode("utf-8", "replace"))
                    scrapes += 1
                except OSError:
                    scrape_errors += 1
            if now >= next_aer:
                next_aer += AER_SECONDS
                with open(kmsg, "a") as handle:
                    handle.write(AER_LINE.format(now - started))
            time.sleep(SAMPLE_SECONDS)
    finally:
        try:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(20)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(daemon.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            daemon.wait()
        log.close()
        kubelet.stop()
        for server in servers:
            server.shutdown()
        shutil.rmtree(socket_dir, ignore_errors=True)
    with open(log_path, errors="replace") as handle:
        text = handle.read()
    counts.sort()
    return {"seconds": time.monotonic() - started, "peak": peak, "at_peak": at_peak, "peak_tasks": peak_tasks,
            "p50": counts[len(counts) // 2] if counts else 0, "names": peak_names, "scrapes": scrapes,
            "scrape_errors": scrape_errors, "notifications": _Receiver.received, "kubelet_calls": len(kubelet.calls),
            "exited": exited, "calls": int(calls.get("calls", 0)), "not_started": int(calls.get("not_started", 0)),
            "overruns": int(calls.get("overruns", 0)),
            "thread_failures": text.count("can't start new thread") + text.count("pthread_create"),
            "down": text.count(" is down: "), "left_out_lines": text.count(" calls left out"),
            "load": open("/proc/loadavg").read().split()[:3]}


HEADER = ("| run | peak threads (at) | median threads | peak tasks, daemon + children | scrapes/errors | "
          "notifications received | kubelet calls | npu-smi + hccn_tool calls run / not started / polls that left "
          "calls out | source-down / calls-left-out warnings | thread-start failures in the log | daemon exited | "
          "load at end |\n|---|---|---|---|---|---|---|---|---|---|---|---|")


def report(result: dict) -> str:
    return ("| {minutes:.1f} min | {peak} (+{at_peak:.0f} s) | {p50} | {peak_tasks} | {scrapes}/{scrape_errors} | "
            "{notifications} | {kubelet_calls} | {calls} / {not_started} / {overruns} | {down} / {left_out_lines} | "
            "{thread_failures} | {exited} | "
            "{load} |".format(
                minutes=result["seconds"] / 60.0, load=" ".join(result["load"]),
                exited="no" if result["exited"] is None else "yes, {}".format(result["exited"]),
                **{k: v for k, v in result.items() if k not in ("load", "exited")}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--tree", default=REPO, help="the checkout whose npumon runs (default: this one)")
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (logs, state)")
    args = parser.parse_args()
    directory = args.keep or tempfile.mkdtemp(prefix="npumon-threads-")
    os.makedirs(directory, exist_ok=True)
    try:
        result = run(args.minutes * 60.0, directory, os.path.abspath(args.tree))
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print("{} on {} cores, {}".format(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(),
                                      os.uname()[2]))
    print(HEADER)
    print(report(result))
    print("\nThreads by name at the peak: " + ", ".join(
        "{} {}".format(name, count) for name, count in result["names"].most_common()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
