"""Issue 20 item 3 benchmark: what npumon costs its host with everything on, at the default intervals.

It runs the real daemon (`npumon run --simulate`, a process of its own) for a bounded time with the
simulator's realistic latency model on (NPUMON_SIM_LATENCY_SCALE=1) and the simulated npu-smi and hccn_tool as
real processes per call (NPUMON_SIM_IN_PROCESS=0), as on a host, with every source on: npu-smi (the default
backend of a simulated host: no libdcmi.so there), the host reader, the liveness probe, the serving queue
(the simulator's inference server endpoint), the NPU network (hccn_tool), the kernel log (a file the benchmark
appends driver lines to: an unrelated line every 10 s, a PCIe AER line every 2 minutes, which makes a
finding), the event history and notifications (a webhook receiver on 127.0.0.1). A scraper reads /metrics
every 15 s (Prometheus's default) with gzip, as Prometheus does.

Every 5 s it reads from /proc: the daemon's own CPU (utime+stime), its children's (cutime+cstime of the
reaped ones plus the live descendants'), and its RSS. It reports CPU as % of one core over the run and after
the warm-up, and RSS at the end of the warm-up, at the end, its maximum and its growth per 10 minutes (a
least-squares slope over the samples after the warm-up).

npumon runs as installed: pip compiles a package's bytecode when it installs it, so a host's daemon does not
compile its sources when it starts. The benchmark compiles the checkout's bytecode (`compileall`, into its
__pycache__ directories, which git ignores) before the run; without that, where PYTHONDONTWRITEBYTECODE is set,
every start compiled all of npumon, about 0.35 s of CPU (0.06 % of a core over 10 minutes).

The daemon gets the environment a systemd unit gives it (`--environment unit`, the default): PATH and LANG, plus
PYTHONPATH (which checkout runs) and the NPUMON_* variables set for the run; systemd starts a service with
little more than that. npumon builds every child's environment from its own, so a developer's shell with dozens
of variables made each call dearer than on a host (`--environment inherit` passes the shell's, as every run
before 2026-12-02 did).

The simulated host lives in memory (/dev/shm, where there is one), as a real host's /proc and /sys do, and
some of its work runs in the daemon's own process: it loads itself at start, writes its NPU processes' /proc
entries and its kernel log lines just before each read, and answers the serving source from a thread. That work
is timed in the daemon with each thread's CPU clock (npumon/sim/own_cpu.py) and reported apart; npumon's own
CPU is the daemon's less it. A pure-Python loop timed before and after the run gives the machine's speed then:
a shared machine's moves from run to run, and every figure with it.

The children are the simulators (Python stand-ins for npu-smi and hccn_tool, costlier than the real C
programs) and the probe: their CPU is the simulator's, reported apart, not npumon's.

Products: atlas-800i-a2 (8 chips), atlas-a3 (16), and `bench-a3-64`, a synthetic 64-chip product defined only
for this benchmark (the A3 with 32 NPUs of 2 dies; no such machine exists). It is registered in every Python
process of the run (daemon and simulators) through a sitecustomize module on PYTHONPATH.

Run:  python benchmarks/bench_cost.py --product atlas-a3 --minutes 10     (prints a markdown section)
"""

import argparse
import compileall
import gzip
import http.server
import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Optional

from npumon.sim.own_cpu import IN_PROCESS_FILE

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SYNTHETIC = "bench-a3-64"
WARMUP_SECONDS = 120.0
MEMORY_FS = "/dev/shm"
SAMPLE_SECONDS = 5.0
SCRAPE_SECONDS = 15.0
TICK = os.sysconf("SC_CLK_TCK")

SITECUSTOMIZE = '''\
# Written by benchmarks/bench_cost.py: the synthetic 64-chip product, in every Python process of the run.
import dataclasses
from npumon.sim import latency as _latency, products as _products

_bus = tuple("0000:{:02X}:00.0".format(n) for n in range(1, 65))
_products.PRODUCTS[%r] = dataclasses.replace(
    _products.ATLAS_A3, name=%r, cards=tuple(range(32)), bus_ids=_bus,
    description="synthetic: an A3 with 32 NPUs x 2 dies (benchmark only)")
_latency.PROFILES[%r] = _latency.PROFILES["atlas-a3"]  # the A3's per-call and per-chip times
''' % (SYNTHETIC, SYNTHETIC, SYNTHETIC)

AER_LINE = "<3>[{:>12.6f}] [ascend] [ERROR] [drv_pcie] [devdrv_aer 101] <kworker/0:1:77,77> Error detected. " \
           "(dev_id=3; aer_cnt=1)\n"
NOISE_LINE = "<6>[{:>12.6f}] e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex\n"


class _Receiver(http.server.BaseHTTPRequestHandler):
    """A webhook receiver that accepts everything (counts the notifications)."""
    received = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
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


def proc_stat(pid: int):
    """(utime+stime, cutime+cstime) in seconds, or None when the process is gone."""
    try:
        with open("/proc/{}/stat".format(pid)) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK, (int(fields[13]) + int(fields[14])) / TICK


def rss_mb(pid: int) -> float:
    with open("/proc/{}/status".format(pid)) as handle:
        for line in handle:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return 0.0


def descendants(pid: int):
    """Every live descendant of pid (from /proc/*/stat's ppid)."""
    parents = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open("/proc/{}/stat".format(name)) as handle:
                    parents[int(name)] = int(handle.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


class ChildrenCpu:
    """The CPU of a process's children: reaped ones (cutime+cstime) plus the live descendants'."""

    def __init__(self, pid: int):
        self.pid = pid
        self.live = {}  # pid -> (cpu at first sight, cpu now)

    def sample(self) -> None:
        current = set()
        for child in descendants(self.pid):
            stat = proc_stat(child)
            if stat is None:
                continue
            current.add(child)
            first = self.live.get(child, (stat[0] + stat[1], None))[0]
            self.live[child] = (first, stat[0] + stat[1])
        # a descendant gone since was reaped: its CPU is in the parent's cutime now
        self.live = {pid: value for pid, value in self.live.items() if pid in current}

    def live_cpu(self) -> float:
        return sum(now for _, now in self.live.values())


def slope_per_10min(points):
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return 600.0 * sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def write_config(directory: str, listen: str, kmsg: str, webhook: str) -> str:
    path = os.path.join(directory, "npumon.yaml")
    with open(path, "w") as handle:
        handle.write(
            "state_dir: {state}\n"
            "exporter: {{listen: '{listen}'}}\n"
            "faults: {{kmsg_path: {kmsg}}}\n"
            "events: {{enabled: true}}\n"
            "probe: {{enabled: true}}\n"
            "network: {{enabled: true}}\n"
            "notify: {{receivers: [{{name: bench, type: webhook, url: '{webhook}'}}]}}\n".format(
                state=os.path.join(directory, "state"), listen=listen, kmsg=kmsg, webhook=webhook))
    return path


def compile_bytecode() -> None:
    """The bytecode of the npumon the daemon will import, as pip writes it on install."""
    package = importlib.util.find_spec("npumon").submodule_search_locations[0]
    if not compileall.compile_dir(package, quiet=1):
        raise SystemExit("cannot compile {}".format(package))


UNIT_VARIABLES = ("PATH", "LANG", "PYTHONPATH")  # what systemd gives a service, and which checkout runs


def daemon_environment(inherit: bool) -> dict:
    """The daemon's environment: the shell's (`inherit`), or a unit's: UNIT_VARIABLES and NPUMON_*."""
    if inherit:
        return dict(os.environ)
    return {name: value for name, value in os.environ.items()
            if name in UNIT_VARIABLES or name.startswith("NPUMON_")}


def python_speed() -> float:
    """Seconds of CPU a pure-Python loop takes here now: this machine's speed varies with what shares its host
    (0.37-0.69 s on 2026-12-03; up to twice the quiet days' time), and every figure above moves with it."""
    started, total = time.process_time(), 0
    for number in range(10_000_000):
        total += number
    return time.process_time() - started


def memory_directory() -> Optional[str]:
    """A new directory on a memory filesystem (/dev/shm), or None where there is none to write to."""
    try:
        return tempfile.mkdtemp(prefix="npumon-cost-sim-", dir=MEMORY_FS)
    except OSError:
        return None


def in_process_cpu(sim_dir: str) -> Optional[dict]:
    """What the simulated host spent in the daemon's process, by part (sim/own_cpu.py), or None."""
    try:
        with open(os.path.join(sim_dir, IN_PROCESS_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def run(product: str, seconds: float, directory: str, sim_dir: str, inherit_environment: bool = False) -> dict:
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    port = free_port()
    kmsg = os.path.join(directory, "kern.log")
    open(kmsg, "w").close()
    config = write_config(directory, "127.0.0.1:{}".format(port), kmsg,
                          "http://127.0.0.1:{}/hook".format(receiver.server_address[1]))
    env = dict(daemon_environment(inherit_environment), NPUMON_SIM_LATENCY_SCALE="1", NPUMON_SIM_IN_PROCESS="0")
    if product == SYNTHETIC:
        site = os.path.join(directory, "site")
        os.makedirs(site)
        with open(os.path.join(site, "sitecustomize.py"), "w") as handle:
            handle.write(SITECUSTOMIZE)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (site, env.get("PYTHONPATH", REPO)) if p)
    argv = [sys.executable, "-m", "npumon.cli.main", "run", "--config", config, "--simulate=healthy",
            "--sim-product", product, "--sim-state", sim_dir, "--log-level", "warning"]
    log = open(os.path.join(directory, "daemon.log"), "wb")
    daemon = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    children = ChildrenCpu(daemon.pid)
    samples = []  # (t, own cpu, children cpu, rss MB)
    scrapes, scrape_errors, series = 0, 0, 0
    started = time.monotonic()
    next_sample = next_noise = started
    next_scrape = started + SCRAPE_SECONDS  # the first once the daemon listens
    next_aer = started + 60.0
    try:
        while time.monotonic() - started < seconds:
            now = time.monotonic()
            if daemon.poll() is not None:
                raise SystemExit("the daemon exited with {}; see {}".format(daemon.returncode, log.name))
            if now >= next_scrape:
                next_scrape += SCRAPE_SECONDS
                try:
                    request = urllib.request.Request("http://127.0.0.1:{}/metrics".format(port),
                                                     headers={"Accept-Encoding": "gzip"})
                    with urllib.request.urlopen(request, timeout=10) as response:
                        body = response.read()
                        if response.headers.get("Content-Encoding") == "gzip":
                            body = gzip.decompress(body)
                    series = sum(1 for line in body.split(b"\n") if line and not line.startswith(b"#"))
                    scrapes += 1
                except OSError:
                    scrape_errors += 1
            if now >= next_noise:
                next_noise += 10.0
                with open(kmsg, "a") as handle:
                    handle.write(NOISE_LINE.format(now - started))
            if now >= next_aer:
                next_aer += 120.0
                with open(kmsg, "a") as handle:
                    handle.write(AER_LINE.format(now - started))
            if now >= next_sample:
                next_sample += SAMPLE_SECONDS
                samples.append(sample(daemon.pid, children, now - started))
            time.sleep(0.2)
        samples.append(sample(daemon.pid, children, time.monotonic() - started))  # the run's end
    finally:
        _signal_group(daemon.pid, 15)
        try:
            daemon.wait(15)
        except subprocess.TimeoutExpired:
            _signal_group(daemon.pid, 9)
            daemon.wait()
        log.close()
        receiver.shutdown()
    return dict(summarise(product, samples, scrapes, scrape_errors, series, _Receiver.received),
                simulator=in_process_cpu(sim_dir))


def sample(pid: int, children: "ChildrenCpu", t: float):
    """(t, the daemon's CPU, its children's, its RSS MB)."""
    stat = proc_stat(pid)
    children.sample()
    return t, stat[0], stat[1] + children.live_cpu(), rss_mb(pid)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except ProcessLookupError:
        pass


def summarise(product, samples, scrapes, scrape_errors, series, notifications) -> dict:
    first, last = samples[0], samples[-1]
    warm = next((s for s in samples if s[0] >= WARMUP_SECONDS), samples[len(samples) // 2])
    after = [s for s in samples if s[0] >= warm[0]]
    span, warm_span = last[0] - first[0], last[0] - warm[0]
    return {
        "product": product,
        "seconds": last[0],
        "own_pct": 100.0 * (last[1] - first[1]) / span,
        "own_pct_warm": 100.0 * (last[1] - warm[1]) / warm_span,
        "children_pct": 100.0 * (last[2] - first[2]) / span,
        "children_pct_warm": 100.0 * (last[2] - warm[2]) / warm_span,
        "own_cpu_total": last[1],
        "rss_warm": warm[3], "rss_end": last[3], "rss_max": max(s[3] for s in samples),
        "rss_slope": slope_per_10min([(s[0], s[3]) for s in after]),
        "scrapes": scrapes, "scrape_errors": scrape_errors, "series": series, "notifications": notifications,
        "load": open("/proc/loadavg").read().split()[:3],
        "rss_by_minute": [s[3] for s in samples if int(s[0]) % 60 < SAMPLE_SECONDS],
    }


def report(result: dict) -> str:
    simulator = result["simulator"]
    if simulator is None:
        in_process = own = "not known"
    else:
        share = 100.0 * sum(simulator.values()) / result["seconds"]
        in_process = "{:.3f} % ({})".format(share, ", ".join(
            "{} {:.3f} s".format(part, seconds) for part, seconds in sorted(simulator.items())))
        own = "**{:.3f} %**".format(result["own_pct"] - share)
    return (
        "| {product} | {minutes:.1f} min | {own_pct:.3f} % ({own_pct_warm:.3f} %) | {in_process} | {own} | "
        "{children_pct:.2f} % ({children_pct_warm:.2f} %) | {rss_warm:.1f} | {rss_end:.1f} | {rss_max:.1f} | "
        "{rss_slope:+.2f} | {series} | {scrapes}/{errors} | {notifications} | {load} |".format(
            minutes=result["seconds"] / 60.0, errors=result["scrape_errors"], load=" ".join(result["load"]),
            in_process=in_process, own=own,
            **{k: v for k, v in result.items() if k not in ("load", "rss_by_minute", "simulator")}))


HEADER = ("| product | run | daemon CPU, % of a core: run (after warm-up) | of which the simulated host's work in "
          "the daemon's process | npumon's own CPU over the run | children CPU (simulators, probe) | "
          "RSS MB at warm-up end | RSS MB at end | RSS MB max | RSS growth MB/10 min after warm-up | series | "
          "scrapes/errors | notifications | load at end |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--product", default="atlas-a3", help="atlas-800i-a2, atlas-a3 or " + SYNTHETIC)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (logs, state)")
    parser.add_argument("--environment", choices=("unit", "inherit"), default="unit",
                        help="the daemon's environment: a systemd unit's (default) or this shell's")
    args = parser.parse_args()
    directory = args.keep or tempfile.mkdtemp(prefix="npumon-cost-")
    os.makedirs(directory, exist_ok=True)
    # The simulated host's /proc and /sys live in memory, as a real host's do: on this machine's ext4 its
    # /proc writer's renames took 6.8 ms of the daemon's CPU a pass against 2.8 ms on /dev/shm.
    sim_dir = memory_directory() or os.path.join(directory, "sim")
    if args.keep and not sim_dir.startswith(directory):
        os.symlink(sim_dir, os.path.join(directory, "sim"))
    compile_bytecode()
    speed_before = python_speed()
    try:
        result = run(args.product, args.minutes * 60.0, directory, sim_dir,
                     inherit_environment=args.environment == "inherit")
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
            shutil.rmtree(sim_dir, ignore_errors=True)
    print("{} on {} cores, {}, the daemon's environment: {}; a pure-Python loop of 10 million additions took "
          "{:.2f} s of CPU before the run, {:.2f} s after".format(
              time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), " ".join(os.uname()[2:3]),
              args.environment, speed_before, python_speed()))
    print(HEADER)
    print(report(result))
    print("\nRSS MB minute by minute: " + ", ".join("{:.1f}".format(mb) for mb in result["rss_by_minute"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
