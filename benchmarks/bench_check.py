"""Issue 2 benchmarks: parsing a 16-chip main table, and one `npumon check` pass on the simulated A3 host.

Run:  python benchmarks/bench_check.py            (prints a markdown table; paste into results/check.md)
Target: at least 5,000 parses per second of a 16-chip table on one core.

      python benchmarks/bench_check.py --a3-quick [RUNS] [--warm]   (issue 34; results/check-a3-quick.md)
Target: the A3 quick check at the latency model's realistic setting (NPUMON_SIM_LATENCY_SCALE=1) ends in a
verdict, not UNKNOWN, at the default --timeout 9 in every one of RUNS (10) runs. The machine's load average is
printed beside it: the machine is shared, and the simulated npu-smi's own Python start grows with the load.
"""

import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

from npumon.sim import prepare_simulation
from npumon.sources.npusmi.table import parse_info
from npumon.sources.runner import CommandRunner


def a3_table() -> str:
    """The simulated A3 host's `npu-smi info`: 8 NPUs x 2 dies = 16 chips, with processes."""
    with tempfile.TemporaryDirectory() as state:
        sim = prepare_simulation(state, "healthy", product="atlas-a3", time_scale=0)
        result = CommandRunner(sim.npu_smi_argv, 10, env=sim.env).run(["info"])
    assert len(parse_info(result.stdout).chips) == 16
    return result.stdout


def parse_rate(text: str, repeat: int = 7, number: int = 2000) -> float:
    best = min(timeit.repeat(lambda: parse_info(text), repeat=repeat, number=number))
    return number / best


def check_pass(runs: int = 5):
    """Wall time and CPU (this process's children: npumon plus every simulated npu-smi) per check pass."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--sim-product",
                               "atlas-a3", "--json"], capture_output=True)
        walls.append(time.monotonic() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append((after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime))
        assert proc.returncode == 0, proc.stdout[-500:]
    return walls, cpus


def npumon_own_cost(runs: int = 5):
    """npumon's own CPU per pass (collection, parsing, rules), without the simulated npu-smi processes,
    which stand in for a real npu-smi whose cost npumon does not control."""
    from npumon.cli.check import load_rule_engine
    from npumon.sources.collection import SourceSet
    from npumon.sim.target import simulated_target, simulation_config
    from npumon.settings import Config

    costs, calls = [], 0
    with tempfile.TemporaryDirectory() as state:
        sim = prepare_simulation(state, "healthy", product="atlas-a3", time_scale=0)
        config = simulation_config(Config(), state)  # its caches and cursors with the simulation, as `--simulate`
        engine, _ = load_rule_engine(config, one_shot=True)
        for _ in range(runs):
            collector = SourceSet(config, simulated_target(sim))
            started = time.process_time()
            snapshot = collector.collect_once()
            engine.evaluate(snapshot)
            costs.append(time.process_time() - started)
        calls = 1 + 8 * 4 + 16  # table + usages/power/ecc/board per card + health per chip
    return costs, calls


def a3_quick_fit(runs: int = 10, warm_state: str = None):
    """Each run of `check --simulate --sim-product atlas-a3` at hardware speed and the default --timeout:
    (exit code, wall seconds, the table's and -t ecc's seconds as the check reports them, load average).
    With `warm_state`, every run shares that simulation and npumon state, as NRPE's checks on a host where the
    daemon runs share /var/lib/npumon: one `check --full` first writes the identity file the daemon keeps."""
    env = dict(os.environ, NPUMON_SIM_LATENCY_SCALE="1")
    check = [sys.executable, "-m", "npumon.cli.main", "check", "--simulate", "--sim-product", "atlas-a3"]
    if warm_state:
        check += ["--sim-state", warm_state]
        subprocess.run(check + ["--full", "--no-probe", "--timeout", "120"], capture_output=True,
                       env=dict(env, NPUMON_SIM_LATENCY_SCALE="0"), check=False)
    rows = []
    for _ in range(runs):
        load = os.getloadavg()[0]
        started = time.monotonic()
        proc = subprocess.run(check + ["--json"], capture_output=True, text=True, env=env)
        wall = time.monotonic() - started
        sources = json.loads(proc.stdout).get("sources", {})
        rows.append((proc.returncode, wall, (sources.get("npu-smi") or {}).get("duration_seconds"),
                     (sources.get("npu-smi:ecc") or {}).get("duration_seconds"), load))
    return rows


def print_a3_quick_fit(runs: int, warm: bool = False) -> None:
    if warm:
        with tempfile.TemporaryDirectory() as state:
            rows = a3_quick_fit(runs, os.path.join(state, "sim"))
    else:
        rows = a3_quick_fit(runs)
    print("| run | exit | wall s | table s | -t ecc (8 cards) s | load average (1 min) before |")
    print("|---|---|---|---|---|---|")
    for index, (code, wall, table, ecc, load) in enumerate(rows, 1):
        print("| {} | {} | {:.2f} | {} | {} | {:.2f} |".format(index, code, wall, _secs(table), _secs(ecc), load))
    verdicts = sum(1 for row in rows if row[0] != 3)
    print()
    print("{} of {} runs ended with a verdict (not UNKNOWN); pass (table + ecc) median {:.2f} s, max {:.2f} s; "
          "wall median {:.2f} s".format(verdicts, len(rows),
                                        statistics.median(row[2] + row[3] for row in rows if row[2] and row[3]),
                                        max(row[2] + row[3] for row in rows if row[2] and row[3]),
                                        statistics.median(row[1] for row in rows)))
    print("Machine: {} {}, Python {}, {} CPUs; {} UTC".format(platform.system(), platform.machine(),
                                                             platform.python_version(), os.cpu_count(),
                                                             time.strftime("%Y-%m-%d %H:%M", time.gmtime())))


def _secs(value) -> str:
    return "-" if value is None else "{:.2f}".format(value)


def main() -> None:
    if sys.argv[1:2] == ["--a3-quick"]:
        print_a3_quick_fit(int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 10,
                           warm="--warm" in sys.argv[2:])
        return
    text = a3_table()
    rate = parse_rate(text)
    walls, cpus = check_pass()
    own, calls = npumon_own_cost()
    print("| measure | value |")
    print("|---|---|")
    print("| 16-chip main table (A3, {} bytes), parses per second, one core, best of 7 x 2000 | {:,.0f} |".format(
        len(text), rate))
    print("| `npumon check --simulate --sim-product atlas-a3`, wall seconds, median of {} | {:.2f} |".format(
        len(walls), statistics.median(walls)))
    print("| same, CPU seconds (npumon + all simulated npu-smi calls), median | {:.2f} |".format(
        statistics.median(cpus)))
    print("| npumon's own CPU per pass in-process ({} npu-smi calls, rules included), median | {:.3f} s |".format(
        calls, statistics.median(own)))
    print()
    print("Machine: {} {}, Python {}, {} CPUs; {}".format(platform.system(), platform.machine(),
                                                         platform.python_version(), os.cpu_count(),
                                                         time.strftime("%Y-%m-%d")))


if __name__ == "__main__":
    main()
