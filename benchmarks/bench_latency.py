"""Issue 13 benchmark: npumon at real npu-smi speed (the simulator's latency model, on by default).

For the simulated 8-card Atlas 800I A2 (910B3) and the 16-chip Atlas A3:
1. `npumon check --simulate` wall time and exit code (the real executable per npu-smi call), median of 3;
2. a daemon (in-process, default intervals, the probe on) run for MINUTES per product: npu-smi calls per minute
   per tier, and the freshness of what /metrics serves: the age of each source's last success, sampled every
   5 s (each field on /metrics comes from one source: temperature, power, AI Core, HBM from `npu-smi`, error
   codes from `npu-smi:health`, vector/cube utilisation from `npu-smi:usages`, ECC from `npu-smi:ecc`,
   firmware from `npu-smi:board`).

Run:  python benchmarks/bench_latency.py [MINUTES]      (default 3; prints a markdown report)
"""

import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("NPUMON_SIM_LATENCY_SCALE", "1")

from npumon.settings import Config  # noqa: E402 - after the latency scale is set
from npumon.daemon.daemon import Daemon  # noqa: E402
from npumon.sim.simulation import prepare_simulation  # noqa: E402
from npumon.sim.target import simulated_target  # noqa: E402

PRODUCTS = ("atlas-800i-a2", "atlas-a3")


def check_runs(product: str, runs: int = 3):
    walls, codes = [], []
    for _ in range(runs):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--sim-product",
                               product], capture_output=True, text=True,
                              env=dict(os.environ, NPUMON_SIM_IN_PROCESS="0"))
        walls.append(time.monotonic() - started)
        codes.append(proc.returncode)
    return statistics.median(walls), max(walls), codes


def daemon_run(product: str, minutes: float):
    with tempfile.TemporaryDirectory() as directory:
        os.environ["NPUMON_SIM_IN_PROCESS"] = "1"  # npu-smi answered in-process, at the model's speed
        sim = prepare_simulation(os.path.join(directory, "sim"), "healthy", product=product)
        del os.environ["NPUMON_SIM_IN_PROCESS"]
        target = simulated_target(sim)
        daemon = Daemon(Config(state_dir=os.path.join(directory, "state")), target, listen="127.0.0.1:0")
        ages = {}
        findings = set()
        daemon.start()
        started = time.time()
        try:
            while time.time() - started < minutes * 60:
                time.sleep(5)
                snapshot = daemon.state().snapshot
                if snapshot is None:
                    continue
                findings.update((f.rule, f.subject) for f in daemon.state().findings)
                for name, status in snapshot.sources.items():
                    if status.last_success is not None:
                        ages.setdefault(name, []).append(time.time() - status.last_success)
            elapsed = (time.time() - started) / 60
            stats = daemon.collection.npu_smi.stats.snapshot()
        finally:
            daemon.stop()
    return elapsed, stats, ages, findings


def main() -> None:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    print("# npumon at real npu-smi speed\n")
    print("Simulator latency model on (scale 1); `python benchmarks/bench_latency.py {:g}`.\n".format(minutes))
    print("| product | `check --simulate` wall, median of 3 | max | exit codes |")
    print("|---|---|---|---|")
    for product in PRODUCTS:
        median, worst, codes = check_runs(product)
        print("| {} | {:.1f} s | {:.1f} s | {} |".format(product, median, worst, ", ".join(map(str, codes))))
    for product in PRODUCTS:
        elapsed, stats, ages, findings = daemon_run(product, minutes)
        print("\n## Daemon on {}, {:.1f} min at the default intervals\n".format(product, elapsed))
        print("Findings raised: {}\n".format(", ".join(sorted("{} {}".format(*f) for f in findings)) or "none"))
        print("| tier | npu-smi calls/min | failures | not started | overruns | mean call | max age served | median age |")
        print("|---|---|---|---|---|---|---|---|")
        for name in sorted(set(stats) | set(ages)):
            counts = stats.get(name)
            calls = counts.calls if counts else 0
            mean = counts.duration_sum / counts.calls if counts and counts.calls else None
            series = ages.get(name, [])
            print("| {} | {:.1f} | {} | {} | {} | {} | {} | {} |".format(
                name or "other", calls / elapsed, counts.failures if counts else 0,
                counts.not_started if counts else 0, counts.overruns if counts else 0,
                "{:.2f} s".format(mean) if mean is not None else "-",
                "{:.0f} s".format(max(series)) if series else "-",
                "{:.0f} s".format(statistics.median(series)) if series else "-"))


if __name__ == "__main__":
    main()
