"""Issue 14 stress benchmark: `npumon run` under the shipped unit's limits, attacked on loopback.

The daemon runs as a real process on a simulated Atlas 800I A2 (npu-smi is the simulator executable behind a
wrapper) inside the unit's limits: MemoryMax=256M and TasksMax=128 as cgroup v1 memory and pids groups when
/sys/fs/cgroup/{memory,pids} are writable (else RLIMIT_AS as a stand-in for memory and no task limit), and
LimitNOFILE=1024 as RLIMIT_NOFILE. The report says which limits were real. Then, each phase bounded in time:
  scrapers    200 concurrent scrapers, each GET /metrics every --interval seconds (10 s client timeout);
  slowloris   the scrapers plus 300 connections that trickle one header line every 5 s and never finish;
  big-answer  both, and the next `npu-smi info` answers 50 MiB (the table, then lines of junk);
  recovery    attackers gone: does /metrics answer and is npu-smi still polled?
Recorded per phase: scrape successes, p50/p99 latency, `npu-smi info` calls started (the wrapper's log),
peak RSS / cgroup memory / threads, and whether the daemon survived. Exit status 0 when every goal is met
(daemon alive, no OOM kill, >= 99% of scrapes answered with p99 <= --p99-goal, npu-smi polled in every phase
and fresh at the end), 1 when one is not, 2 when it cannot run.

Run:  python benchmarks/bench_stress.py [--quick] [--label TEXT] [--write|--append benchmarks/results/stress.md]
"""

import argparse
import collections
import http.client
import os
import platform
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

from npumon.sim.simulation import prepare_simulation
from stress_limits import MEMORY_LIMIT, Limits

TABLE_SECONDS = 5.0  # the main table's poll interval here (15 s by default): more polls per phase
TITLE = "# Stress: slowloris, 200 scrapers and a 50 MiB npu-smi answer under the unit's limits\n\n"

WRAPPER = '''#!{python}
# npu-smi for the stress benchmark: logs every call; one armed `info` call answers {size} bytes.
import os, subprocess, sys, time
args = sys.argv[1:]
def log(text):
    with open({log!r}, "a") as handle:
        handle.write("%.3f %s\\n" % (time.time(), text))
log(" ".join(args))
sim = [sys.executable, "-m", "npumon.sim.npusmi"]
try:
    if args != ["info"]:
        raise OSError
    os.rename({arm!r}, {arm!r} + ".used")  # armed: this call, and only this one, answers big
except OSError:
    os.execv(sys.executable, sim + args)
log("BIG start")
table = subprocess.run(sim + args, stdout=subprocess.PIPE).stdout
block, left = (b"x" * 99 + b"\\n") * 10000, {size} - len(table)
try:
    sys.stdout.buffer.write(table)
    while left > 0:
        sys.stdout.buffer.write(block[:left])
        left -= min(left, len(block))
    sys.stdout.buffer.flush()
except OSError:  # the reader closed the pipe or killed us at its cap
    log("BIG cut")
    os._exit(0)
log("BIG done")
'''


class Daemon:
    """`npumon run` with stderr counted line by line (the last lines kept)."""

    def __init__(self, config_path, env, limits):
        self.proc = subprocess.Popen([sys.executable, "-m", "npumon.cli.main", "run", "--config", config_path],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                     env=env, preexec_fn=limits.enter, start_new_session=True)
        self.last_lines, self.thread_errors, self.port = collections.deque(maxlen=8), 0, None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self.last_lines.append(line[:300])
            self.thread_errors += "can't start new thread" in line
            if self.port is None and "serving on port " in line:
                self.port = int(line.split("serving on port ")[1].split()[0].rstrip(";"))

    def status(self):
        """(VmRSS bytes, VmHWM bytes, threads) from /proc, or None once it is gone."""
        try:
            with open("/proc/{}/status".format(self.proc.pid)) as handle:
                fields = dict(line.split(":", 1) for line in handle if ":" in line)
        except OSError:
            return None
        return (int(fields["VmRSS"].split()[0]) * 1024, int(fields["VmHWM"].split()[0]) * 1024,
                int(fields["Threads"]))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)


def scrape(port, timeout=10.0):
    """(ok, seconds, text or the failure's name)."""
    started = time.monotonic()
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        connection.request("GET", "/metrics")
        response = connection.getresponse()
        body = response.read().decode("utf-8", "replace")
        connection.close()
        if response.status != 200:
            return False, time.monotonic() - started, "HTTP {}".format(response.status)
        return True, time.monotonic() - started, body
    except (OSError, http.client.HTTPException) as exc:
        return False, time.monotonic() - started, type(exc).__name__


def last_success(metrics_text):
    for line in metrics_text.splitlines():
        if line.startswith('npumon_source_last_success_timestamp_seconds{source="npu-smi"}'):
            return float(line.split()[-1])
    return None


class Load:
    """The scrapers and the slowloris connections, switched on and off by phase."""

    def __init__(self, port, scrapers, interval, slowloris):
        self.port, self.interval, self.slowloris_count = port, interval, slowloris
        self.phase, self.stopping, self.loris_on = None, False, False
        self.results = collections.defaultdict(list)  # phase -> [(ok, seconds, failure)]
        self.last_text, self.loris_open, self.loris_reopened = "", 0, 0
        self.threads = [threading.Thread(target=self._scraper, args=(n * interval / scrapers,), daemon=True)
                        for n in range(scrapers)]
        self.threads.append(threading.Thread(target=self._slowloris, daemon=True))
        for thread in self.threads:
            thread.start()

    def _scraper(self, offset):
        time.sleep(offset)
        while not self.stopping:
            started, phase = time.monotonic(), self.phase
            if phase is not None:
                ok, seconds, text = scrape(self.port)
                self.results[phase].append((ok, seconds, None if ok else text))
                if ok:
                    self.last_text = text
            time.sleep(max(0.0, self.interval - (time.monotonic() - started)))

    def _slowloris(self):
        sockets, next_trickle = [], 0.0
        while not self.stopping:
            if not self.loris_on:
                for sock in sockets:
                    sock.close()
                sockets, self.loris_open = [], 0
                time.sleep(0.2)
                continue
            while len(sockets) < self.slowloris_count:  # (re)open: the attacker keeps up the pressure
                sock = socket.socket()
                sock.settimeout(2)
                try:
                    sock.connect(("127.0.0.1", self.port))
                    sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n")
                    sockets.append(sock)
                except OSError:
                    sock.close()
                    self.loris_reopened += 1
                    break  # refused or full: try again on the next round
            if time.monotonic() >= next_trickle:
                next_trickle = time.monotonic() + 5.0
                alive = []
                for number, sock in enumerate(sockets):
                    try:
                        sock.sendall("X-Trickle-{}: 1\r\n".format(number).encode())
                        alive.append(sock)
                    except OSError:
                        sock.close()
                        self.loris_reopened += 1
                sockets = alive
            self.loris_open = len(sockets)
            time.sleep(0.5)
        for sock in sockets:
            sock.close()


def info_calls(log_path, since, until):
    with open(log_path) as handle:
        stamps = [float(line.split()[0]) for line in handle if line.rstrip().endswith(" info")]
    return sum(1 for stamp in stamps if since <= stamp < until)


def phase_at(stamp, phase_times):
    return next((phase for phase, (start, end) in phase_times.items() if start <= stamp < end), "after the phases")


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))] if ordered else None


def code_version():
    described = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                               cwd=os.path.dirname(os.path.abspath(__file__)))
    return described.stdout.strip() or "unknown (not a git checkout)"


def machine():
    with open("/proc/cpuinfo") as handle:
        model = next((line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")), "?")
    return "{} {}, {} x {}, {:.0f} GiB RAM, Python {}".format(
        platform.system(), platform.release(), os.cpu_count(), model,
        os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2 ** 30, platform.python_version())


def run(args):
    """Set up, attack, clean up (the daemon, its cgroups, the temporary directory) whatever happens."""
    limits = Limits(use_cgroups=not args.no_cgroups)
    directory = tempfile.mkdtemp(prefix="npumon-stress-")
    try:
        return attack(args, limits, directory)
    finally:
        limits.close()
        shutil.rmtree(directory, ignore_errors=True)


def attack(args, limits, directory):
    sim = prepare_simulation(os.path.join(directory, "sim"), "healthy", product="atlas-800i-a2", latency_scale=1.0)
    log_path, arm = os.path.join(directory, "npu-smi.log"), os.path.join(directory, "big-answer")
    wrapper = os.path.join(directory, "npu-smi")
    with open(wrapper, "w") as handle:
        handle.write(WRAPPER.format(python=sys.executable, size=args.big_mib * 2 ** 20, log=log_path, arm=arm))
    os.chmod(wrapper, 0o755)
    open(log_path, "w").close()
    config = os.path.join(directory, "npumon.yaml")
    with open(config, "w") as handle:
        handle.write("npu_smi: {}\nroot: {}\nstate_dir: {}\nexporter:\n  listen: 127.0.0.1:0\n"
                     "poll:\n  table_seconds: {}\nprobe:\n  enabled: false\n".format(
                         wrapper, sim.root, os.path.join(directory, "state"), TABLE_SECONDS))
    daemon = Daemon(config, dict(os.environ, **sim.env), limits)
    peaks = collections.defaultdict(lambda: [0, 0, 0, 0])  # phase -> [rss, cgroup memory, threads, tasks]
    phase_times, survived_at, load = {}, {}, None
    try:
        deadline = time.monotonic() + 60
        while daemon.port is None or last_success(scrape(daemon.port)[2]) is None:
            if time.monotonic() > deadline or daemon.proc.poll() is not None:
                raise RuntimeError("the daemon did not serve npu-smi data within 60 s: "
                                   + " | ".join(daemon.last_lines))
            time.sleep(0.5)
        load = Load(daemon.port, args.scrapers, args.interval, args.slowloris)
        for phase in ("scrapers", "slowloris", "big-answer", "recovery"):
            load.loris_on = phase in ("slowloris", "big-answer")
            if phase == "big-answer":
                open(arm, "w").close()
            load.phase = None if phase == "recovery" else phase
            started = time.time()
            while time.time() - started < (args.recovery if phase == "recovery" else args.seconds):
                status, (memory, tasks) = daemon.status(), limits.usage()
                if status:
                    peak = peaks[phase]
                    peaks[phase] = [max(peak[0], status[0]), max(peak[1], memory), max(peak[2], status[2]),
                                    max(peak[3], tasks)]
                time.sleep(0.5)
            phase_times[phase] = (started, time.time())
            survived_at[phase] = daemon.proc.poll() is None
        final_ok, _, final_text = scrape(daemon.port) if daemon.proc.poll() is None else (False, 0, "gone")
        hwm = (daemon.status() or (0, 0, 0))[1]
    finally:
        if load is not None:
            load.stopping = True
        daemon.stop()
    totals = limits.totals()
    fresh = last_success(final_text) if final_ok else None
    with open(log_path) as handle:  # when the big answer started and ended, by phase
        big = ["{} ({})".format(text.strip(), phase_at(float(stamp), phase_times))
               for stamp, text in (line.split(None, 1) for line in handle if " BIG " in line)]
    return {"limits": limits.describe(), "load": load, "peaks": peaks, "times": phase_times,
            "survived": survived_at, "exit": daemon.proc.returncode, "thread_errors": daemon.thread_errors,
            "last_lines": list(daemon.last_lines), "final_ok": final_ok,
            "fresh_age": None if fresh is None else phase_times["recovery"][1] - fresh, "hwm": hwm,
            "totals": totals, "big": big, "info_calls": {p: info_calls(log_path, *t) for p, t in phase_times.items()}}


def report(result, args, command):
    mib = 2 ** 20
    lines = ["## " + args.label, "", "- code: " + code_version(), "- machine: " + machine(),
             "- date: " + time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
             "- command: `{}`".format(command),
             "- load: {} scrapers (GET /metrics every {:g} s, 10 s timeout), {} slowloris connections "
             "(a header line every 5 s), a {} MiB `npu-smi info` answer; {:g} s per phase, main table polled "
             "every {:g} s".format(args.scrapers, args.interval, args.slowloris, args.big_mib, args.seconds,
                                   TABLE_SECONDS),
             "- limits: " + "; ".join(result["limits"]), "",
             "| phase | scrapes answered | p50 answered | p99 answered | failures | `npu-smi info` calls "
             "| peak RSS | peak cgroup memory | peak threads | peak tasks | daemon alive |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    goals = []
    for phase, (start, end) in result["times"].items():
        rows = result["load"].results.get(phase, [])
        times = [seconds for ok, seconds, _ in rows if ok]
        answered = len(times)
        failures = collections.Counter(failure for ok, _, failure in rows if not ok)
        p50, p99 = percentile(times, 0.5), percentile(times, 0.99)
        rss, memory, threads, tasks = result["peaks"][phase]
        lines.append("| {} | {} | {} | {} | {} | {} | {:.0f} MiB | {:.0f} MiB | {} | {} | {} |".format(
            phase, "{}/{}".format(answered, len(rows)) if rows else "-",
            "-" if p50 is None else "{:.3f} s".format(p50), "-" if p99 is None else "{:.3f} s".format(p99),
            ", ".join("{} {}".format(n, name) for name, n in failures.most_common()) or "-",
            result["info_calls"][phase], rss / mib, memory / mib, threads, tasks,
            "yes" if result["survived"][phase] else "no"))
        if rows:
            goals.append(("{}: >= 99% of scrapes answered".format(phase), answered >= 0.99 * len(rows)))
            every = percentile([seconds if ok else float("inf") for ok, seconds, _ in rows], 0.99)  # failed: never
            goals.append(("{}: p99 of all scrapes <= {:g} s".format(phase, args.p99_goal), every <= args.p99_goal))
        goals.append(("{}: npu-smi info polled".format(phase), result["info_calls"][phase] > 0))
    totals = result["totals"]
    goals += [("daemon alive at the end", all(result["survived"].values())),
              ("no OOM kill", totals["oom_kills"] == 0),
              ("memory peak under 256 MiB", (totals["memory_peak"] or result["hwm"]) < MEMORY_LIMIT),
              ("/metrics answers after the attack", result["final_ok"]),
              ("npu-smi data fresh at the end (< 3 table intervals old)",
               result["fresh_age"] is not None and result["fresh_age"] < 3 * TABLE_SECONDS)]
    lines += ["", "Totals: cgroup memory peak {:.0f} MiB, OOM kills {}, tasks peak {}, task creations refused at "
              "the limit {}; daemon VmHWM {:.0f} MiB; 'can't start new thread' in the log {} times; slowloris "
              "connections refused or dropped {}; the big answer: {}; daemon exit status {}.".format(
                  totals["memory_peak"] / mib, totals["oom_kills"], totals["pids_peak"], totals["pids_refused"],
                  result["hwm"] / mib, result["thread_errors"], result["load"].loris_reopened,
                  ", ".join(result["big"]) or "never asked for", result["exit"]), "", "| goal | met |", "|---|---|"]
    lines += ["| {} | {} |".format(name, "yes" if met else "**no**") for name, met in goals]
    lines += ["", "Last daemon log lines:", "", "```"] + result["last_lines"] + ["```", ""]
    return "\n".join(lines), all(met for _, met in goals)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="15 s phases instead of 45 s")
    parser.add_argument("--seconds", type=float, help="length of each attack phase")
    parser.add_argument("--scrapers", type=int, default=200)
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between one scraper's scrapes")
    parser.add_argument("--slowloris", type=int, default=300)
    parser.add_argument("--big-mib", type=int, default=50)
    parser.add_argument("--p99-goal", type=float, default=5.0, help="seconds (default 5)")
    parser.add_argument("--no-cgroups", action="store_true", help="rlimits only, even where cgroups work")
    parser.add_argument("--label", default="npumon as it is", help="the report's heading, e.g. what code ran")
    parser.add_argument("--write", metavar="FILE", help="also write the report to FILE (replaced)")
    parser.add_argument("--append", metavar="FILE", help="also add the report to the end of FILE")
    args = parser.parse_args()
    args.seconds = args.seconds or (15.0 if args.quick else 45.0)
    args.recovery = 3 * TABLE_SECONDS
    command = " ".join(shlex.quote(word) for word in ["python", "benchmarks/bench_stress.py"] + sys.argv[1:])
    # SIGTERM as Ctrl-C: run()'s cleanup stops the daemon and removes the cgroups
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        result = run(args)
    except (RuntimeError, OSError) as exc:
        print("bench_stress: cannot run: {}".format(exc), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bench_stress: interrupted", file=sys.stderr)
        return 2
    text, met = report(result, args, command.strip())
    print(text)
    if args.write:
        with open(args.write, "w") as handle:
            handle.write(TITLE + text)
    if args.append:
        with open(args.append, "a") as handle:
            handle.write("\n" + text)
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
