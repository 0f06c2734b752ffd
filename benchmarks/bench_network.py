"""Issue 17 benchmark: the cost of the network tiers (hccn_tool) at realistic latency.

On the simulated 16-chip Atlas A3 (and the 8-chip Atlas 800I A2), with the simulator's hccn_tool latency
(sim/hccn.py: 0.15 s a call, plus 1 s for -bandwidth's sample and 0.3 s for -optical, x0.8-1.2 jitter) and
npu-smi's own (sim/latency.py), the default config (two ordinary slots shared with npu-smi, one for the
table). For each network tier, one poll: wall time, calls, calls left out. Then every network tier at once
while the main table is read, as the daemon's first minute does: the table's wall time must not grow. Last,
the same with one chip that is not ready (network-not-ready: its calls wait out their deadline).

The simulator answers in-process (no process start per call; real hccn_tool is a small C program): the
figures are the scheduling's, at the latencies the model gives.

Run:  python benchmarks/bench_network.py      (prints a markdown report; about a minute)
"""

import os
import tempfile
import threading
import time

os.environ.setdefault("NPUMON_SIM_LATENCY_SCALE", "1")
os.environ["NPUMON_SIM_IN_PROCESS"] = "1"

from npumon.settings import parse_config  # noqa: E402 - after the environment is set
from npumon.sim.simulation import prepare_simulation  # noqa: E402
from npumon.sim.target import simulated_target, simulation_config  # noqa: E402
from npumon.sources.collection import SourceSet  # noqa: E402
from npumon.sources.hccn.source import TIERS  # noqa: E402

PRODUCTS = ("atlas-a3", "atlas-800i-a2")


def collection(directory, product, scenario="healthy"):
    sim_state_dir = os.path.join(directory, scenario + product)
    sim = prepare_simulation(sim_state_dir, scenario, product=product)
    config = simulation_config(parse_config("probe: {enabled: false}\n"), sim_state_dir)  # as `--simulate`
    return SourceSet(config, simulated_target(sim))


def timed(function, *args):
    started = time.monotonic()
    function(*args)
    return time.monotonic() - started


def calls_of(sources, tier):
    stats = sources.npu_smi.stats.snapshot().get(tier)
    return (stats.calls, stats.not_started) if stats else (0, 0)


def one_by_one(directory, product):
    sources = collection(directory, product)
    try:
        table = timed(sources.poll, "npu-smi")
        rows = []
        for tier in TIERS:
            wall = timed(sources.poll, tier)
            calls, _ = calls_of(sources, tier)
            status = sources.snapshot().sources[tier]
            rows.append((tier, wall, calls, status.left_out, status.ok))
        return table, rows
    finally:
        sources.close()


def all_at_once(directory, product, scenario="healthy"):
    sources = collection(directory, product, scenario)
    try:
        sources.poll("npu-smi")
        walls = {}
        threads = [threading.Thread(target=lambda tier=tier: walls.__setitem__(tier, timed(sources.poll, tier)))
                   for tier in TIERS]
        for thread in threads:
            thread.start()
        time.sleep(0.2)
        table = timed(sources.poll, "npu-smi")
        for thread in threads:
            thread.join()
        snapshot = sources.snapshot()
        answered = sum(1 for chip in snapshot.chips if chip.extra["network"]["link_status"] is not None)
        return table, max(walls.values()), answered, len(snapshot.chips), snapshot.sources["hccn"].error
    finally:
        sources.close()


def main() -> None:
    print("# Network tiers (hccn_tool) at realistic latency\n")
    print("`python benchmarks/bench_network.py`; simulator latency model on (scale 1), in-process answers, "
          "default config (npu_smi_max_concurrent 2, network.timeout_seconds 10).\n")
    with tempfile.TemporaryDirectory() as directory:
        for product in PRODUCTS:
            table, rows = one_by_one(directory, product)
            print("## {}\n".format(product))
            print("Main table alone: {:.2f} s.\n".format(table))
            print("| tier | one poll, wall | hccn_tool calls | left out | up |")
            print("|---|---|---|---|---|")
            for tier, wall, calls, left_out, ok in rows:
                print("| `{}` | {:.2f} s | {} | {} | {} |".format(tier, wall, calls, left_out, ok))
            print()
            for scenario in ("healthy", "network-not-ready"):
                table, slowest, answered, chips, error = all_at_once(directory, product, scenario)
                print("All five network tiers at once, `{}`: the slowest ends after {:.2f} s; the main table read "
                      "meanwhile took {:.2f} s; {} of {} chips' links read.{}\n".format(
                          scenario, slowest, table, answered, chips,
                          "" if not error else " Status: " + error[:160]))


if __name__ == "__main__":
    main()
