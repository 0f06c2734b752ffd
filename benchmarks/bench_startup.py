"""Issue 28 part 6 benchmark: the CPU the daemon spends starting, checkouts side by side.

It starts `npumon run --simulate=healthy --sim-product atlas-a3` with bench_cost.py's everything-on config (the
probe, hccn_tool, the kernel log, the event history, a webhook receiver; simulated tools as real processes at
the latency model's speed) and a systemd unit's environment, and reads the daemon's own CPU (utime+stime, from
/proc/PID/stat, which a loaded machine distorts far less than wall time) when it logs "serving on port" (imports,
config, rules, the daemon built, the web server and scheduler started) and again SECONDS after it was started
(the first polls of every tier too). Each checkout's bytecode is compiled first, as pip does on install. Runs
of the checkouts alternate, so that each sees the same load; medians are reported.

Run:  python benchmarks/bench_startup.py --tree /path/to/main --tree . --runs 7
"""

import argparse
import compileall
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cost import daemon_environment, free_port, proc_stat, write_config  # noqa: E402

SERVING = re.compile(r"serving on port \d+")
START_TIMEOUT_SECONDS = 60.0


def start_cpu(tree: str, seconds: float) -> tuple:
    """(CPU s when it serves, CPU s at `seconds`, wall s to serving) of one daemon start from `tree`."""
    with tempfile.TemporaryDirectory(prefix="npumon-startup-") as directory:
        kmsg = os.path.join(directory, "kern.log")
        open(kmsg, "w").close()
        config = write_config(directory, "127.0.0.1:{}".format(free_port()), kmsg, "http://127.0.0.1:9/hook")
        env = dict(daemon_environment(inherit=False), PYTHONPATH=tree, NPUMON_SIM_LATENCY_SCALE="1",
                   NPUMON_SIM_IN_PROCESS="0")
        argv = [sys.executable, "-m", "npumon.cli.main", "run", "--config", config, "--simulate=healthy",
                "--sim-product", "atlas-a3", "--sim-state", os.path.join(directory, "sim"), "--log-level", "info"]
        log = os.path.join(directory, "daemon.log")
        started = time.monotonic()
        with open(log, "wb") as handle:
            daemon = subprocess.Popen(argv, cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=handle,
                                      start_new_session=True)
        try:
            serving = wall = None
            while serving is None and daemon.poll() is None and time.monotonic() - started < START_TIMEOUT_SECONDS:
                with open(log, encoding="utf-8", errors="replace") as handle:
                    if SERVING.search(handle.read()):
                        serving, wall = proc_stat(daemon.pid)[0], time.monotonic() - started
                time.sleep(0.02)
            if serving is None:
                raise SystemExit("{}: the daemon did not start (exit {}); its log: {}".format(
                    tree, daemon.poll(), open(log, errors="replace").read()[-2000:]))
            time.sleep(max(0.0, started + seconds - time.monotonic()))
            later = proc_stat(daemon.pid)[0]
        finally:
            os.killpg(daemon.pid, signal.SIGTERM)
            daemon.wait(30)
    return serving, later, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tree", action="append", metavar="DIR",
                        help="a checkout to start npumon from (repeatable; default: this one)")
    parser.add_argument("--runs", type=int, default=5, help="starts per checkout (default 5)")
    parser.add_argument("--seconds", type=float, default=20.0, help="the second reading, after start (default 20)")
    args = parser.parse_args()
    if not 1 <= args.runs <= 50 or not 2 <= args.seconds <= 300:
        parser.error("--runs must be 1-50 and --seconds 2-300")
    trees = [os.path.abspath(tree) for tree in (args.tree or [os.path.dirname(os.path.dirname(__file__)) or "."])]
    for tree in trees:
        if not compileall.compile_dir(os.path.join(tree, "npumon"), quiet=1):
            raise SystemExit("cannot compile {}".format(tree))
    results = {tree: [] for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            results[tree].append(start_cpu(tree, args.seconds))
    print("{} on {} cores, load {}".format(time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(),
                                           " ".join(open("/proc/loadavg").read().split()[:3])))
    print("| checkout | starts | CPU s when serving: median (min-max) | CPU s at {:g} s: median (min-max) | "
          "wall s to serving (median) |\n|---|---|---|---|---|".format(args.seconds))
    for tree, runs in results.items():
        serving, later, wall = zip(*runs)
        print("| {} | {} | {:.3f} ({:.3f}-{:.3f}) | {:.3f} ({:.3f}-{:.3f}) | {:.2f} |".format(
            tree, len(runs), statistics.median(serving), min(serving), max(serving), statistics.median(later),
            min(later), max(later), statistics.median(wall)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
