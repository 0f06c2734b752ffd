"""Benchmark: what the liveness probe costs the daemon, in the simulator.

Part 1, one probe round: ProbeSource.probe_due() over every chip of a simulated host (default: Atlas A3,
16 chips), as the daemon's probe tier runs it (child processes with the simulated pyACL, max_concurrent
at a time). Measured per round: wall time, CPU time of the daemon process itself (all its threads:
starting children, reading their output, bookkeeping), CPU time of the probe children
(getrusage(RUSAGE_CHILDREN): the CPU they used, whatever else loads the machine) and how many children
the round started.

Part 1 runs once with the runtime facts (probe.runtime_facts, the default: device count, SoC name, versions,
memory, utilisation and core counts asked in the same child) and, with --compare-runtime-facts, once
without them, to show what the added queries cost.

Part 2, the poll tiers: the real Daemon against the same simulated host, once without the probe and once
with it at a compressed interval (default 30 s instead of 300 s, so that the run holds several rounds).
Measured: how late the main-table job starts against its schedule (APScheduler submission time minus
scheduled time), how long the table job takes (npu-smi info + rules), and the daemon's CPU time.

    python benchmarks/bench_probe.py [--product atlas-a3] [--rounds 5] [--daemon-seconds 120]
                                     [--probe-interval 30] [--table-seconds 2] [--compare-runtime-facts]
                                     [--no-daemon]

The simulated pyACL answers in microseconds, so part 1 measures the probe machinery (process start,
Python and module imports, JSON), not a real NPU: on hardware acl.init and set_device add their own time.
"""

import argparse
import os
import platform
import random
import resource
import statistics
import sys
import tempfile
import time
from typing import Dict, List

from apscheduler.events import EVENT_JOB_SUBMITTED

from npumon.model import HostSample
from npumon.sources.base import Parts
from npumon.sources.target import Target
from npumon.config.schema import PollConfig
from npumon.settings import Config
from npumon.daemon.daemon import Daemon
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.source import ProbeSource
from npumon.sim import prepare_simulation
from npumon.sim.target import simulated_target, simulation_config
from npumon.sources.npusmi.source import NpuSmiSource
from npumon.sources.runner import CommandRunner


def cpu_seconds(who: int) -> float:
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def summary(values: List[float], unit_scale: float = 1000.0, unit: str = "ms") -> str:
    if not values:
        return "n/a"
    return "median {:.1f} {u}, p95 {:.1f} {u}, max {:.1f} {u} (n={})".format(
        statistics.median(values) * unit_scale, percentile(values, 0.95) * unit_scale, max(values) * unit_scale,
        len(values), u=unit)


def probe_rounds(target: Target, sim_state_dir: str, rounds: int, max_concurrent: int,
                 runtime_facts: bool = True) -> None:
    # the probe's operator-model cache goes with the simulation, as under `--simulate`, not to /var/lib/npumon
    config = simulation_config(Config(probe=ProbeConfig(max_concurrent=max_concurrent, runtime_facts=runtime_facts)),
                               sim_state_dir)
    table = NpuSmiSource(CommandRunner(target.npu_smi_argv, 10.0, 2, env=target.env))
    table.poll(table.tiers()[0].name)  # the main table: the chips to probe
    chip_list = table.chips(time.time(), 600.0)
    now = [time.time()]
    source = ProbeSource(config, target, clock=lambda: now[0], rng=random.Random(1))
    spawns = [0]
    run_child = source._run_child

    def counted(args, timeout):
        spawns[0] += 1
        return run_child(args, timeout)

    source._run_child = counted
    walls, own, children, query_stages = [], [], [], []
    for _ in range(rounds + 1):
        own_before, children_before = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        source.probe_due(chip_list)
        walls.append(time.perf_counter() - started)
        own.append(cpu_seconds(resource.RUSAGE_SELF) - own_before)
        children.append(cpu_seconds(resource.RUSAGE_CHILDREN) - children_before)
        status = source.status(now[0])
        assert status.ok, status
        probed = source.contribute(Parts(time=now[0], host=HostSample(), chips=tuple(chip_list)), now[0]).chips
        # the child's own time in the stages that hold the runtime queries (init and mem_info)
        query_stages.extend(sum(chip.probe.stage_seconds.get(stage, 0.0) for stage in ("init", "mem_info"))
                            for chip in probed if chip.probe is not None)
        with_facts = sum(1 for chip in probed if "runtime" in chip.extra)
        assert with_facts == (len(chip_list) if runtime_facts else 0), with_facts
        now[0] += 10 * config.probe.interval_seconds  # every chip is due again
    print("part 1: {} chips, max_concurrent {}, {} rounds after a first one, runtime facts {}".format(
        len(chip_list), max_concurrent, rounds, "on" if runtime_facts else "off"))
    print("  round wall:            {}".format(summary(walls[1:], 1.0, "s")))
    print("  daemon CPU per round:  {}".format(summary(own[1:])))
    print("  daemon CPU per chip:   {:.1f} ms".format(statistics.median(own[1:]) / len(chip_list) * 1000))
    print("  children CPU per round: {}".format(summary(children[1:], 1.0, "s")))
    print("  children started per round: {:.1f}".format(spawns[0] / (rounds + 1)))
    print("  child init + mem_info stages per chip: {}".format(summary(query_stages[len(chip_list):])))
    source.close()


def daemon_run(target: Target, state_dir: str, seconds: float, table_seconds: float, probe: ProbeConfig) -> Dict:
    config = Config(state_dir=state_dir, poll=PollConfig(table_seconds=table_seconds), probe=probe)
    daemon = Daemon(config, target, listen="127.0.0.1:0")
    lateness: List[float] = []
    durations: List[float] = []
    run_tier = daemon.run_tier

    def timed_table_tier(tier: str) -> None:
        started = time.perf_counter()
        run_tier(tier)
        if tier == "npu-smi":
            durations.append(time.perf_counter() - started)

    def submitted(event) -> None:
        if event.job_id == "npu-smi":
            now = time.time()
            lateness.extend(now - when.timestamp() for when in event.scheduled_run_times)

    daemon.run_tier = timed_table_tier
    daemon.scheduler.add_listener(submitted, EVENT_JOB_SUBMITTED)
    own_before, children_before = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    daemon.start()
    time.sleep(seconds)
    daemon.stop()
    time.sleep(1.0)  # let running jobs end
    snapshot = daemon.state().snapshot
    probed = sum(1 for chip in snapshot.chips if chip.probe is not None and chip.probe.state == "ok") if snapshot else 0
    return {"lateness": lateness[1:], "durations": durations[1:], "own": cpu_seconds(resource.RUSAGE_SELF) - own_before,
            "children": cpu_seconds(resource.RUSAGE_CHILDREN) - children_before, "probed": probed}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--product", default="atlas-a3")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--max-concurrent", type=int, default=2)
    parser.add_argument("--daemon-seconds", type=float, default=120.0)
    parser.add_argument("--probe-interval", type=float, default=30.0)
    parser.add_argument("--table-seconds", type=float, default=2.0)
    parser.add_argument("--compare-runtime-facts", action="store_true",
                        help="part 1 also without probe.runtime_facts, after the run with them")
    parser.add_argument("--no-daemon", action="store_true", help="part 1 only")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="npumon-bench-probe-") as work:
        sim_state_dir = os.path.join(work, "sim")
        sim = prepare_simulation(sim_state_dir, "healthy", product=args.product)
        target = simulated_target(sim)
        print("load average before: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
        probe_rounds(target, sim_state_dir, args.rounds, args.max_concurrent)
        if args.compare_runtime_facts:
            probe_rounds(target, sim_state_dir, args.rounds, args.max_concurrent, runtime_facts=False)
        if args.no_daemon:
            print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
            return 0
        runs = {}
        for label, probe in (("without probe", ProbeConfig(enabled=False)),
                             ("with probe", ProbeConfig(interval_seconds=args.probe_interval, jitter_seconds=0.0,
                                                        max_concurrent=args.max_concurrent))):
            runs[label] = daemon_run(target, os.path.join(work, label.replace(" ", "-")), args.daemon_seconds,
                                     args.table_seconds, probe)
        print("part 2: daemon for {:.0f} s each, table every {:.0f} s, probe every {:.0f} s (default 300 s)".format(
            args.daemon_seconds, args.table_seconds, args.probe_interval))
        for label, run in runs.items():
            print("  {}:".format(label))
            print("    table job start lateness: {}".format(summary(run["lateness"])))
            print("    table job duration:       {}".format(summary(run["durations"])))
            print("    daemon CPU: {:.2f} s ({:.1f}% of one CPU); children CPU: {:.2f} s; chips with a probe: {}".format(
                run["own"], 100 * run["own"] / args.daemon_seconds, run["children"], run["probed"]))
        print("load average after: {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))
    print("machine: {} {}, {} CPUs, Python {}".format(platform.system(), platform.machine(), os.cpu_count(),
                                                     platform.python_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
