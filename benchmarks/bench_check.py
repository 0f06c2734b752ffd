"""Issue 2 benchmarks: parsing a 16-chip main table, and one `npumon check` pass on the simulated A3 host.

Run:  python benchmarks/bench_check.py            (prints a markdown table; paste into results/check.md)
Target: at least 5,000 parses per second of a 16-chip table on one core.
"""

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
    from npumon.sources.target import Target
    from npumon.config.schema import Config

    config = Config()
    engine, _ = load_rule_engine(config, one_shot=True)
    costs, calls = [], 0
    with tempfile.TemporaryDirectory() as state:
        sim = prepare_simulation(state, "healthy", product="atlas-a3", time_scale=0)
        for _ in range(runs):
            collector = SourceSet(config, Target(sim.npu_smi_argv, sim.env, sim.root, simulated=True))
            started = time.process_time()
            snapshot = collector.collect_once()
            engine.evaluate(snapshot)
            costs.append(time.process_time() - started)
        calls = 1 + 8 * 4 + 16  # table + usages/power/ecc/board per card + health per chip
    return costs, calls


def main() -> None:
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
