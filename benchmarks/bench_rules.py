"""Benchmark: one RuleEngine.evaluate() of all built-in rules on a 64-chip host.

The engine first sees an hour of history at a 15 s poll (240 Snapshots), then each timed evaluation is
one more poll, exactly as the daemon runs it (facts, history, every rule on every subject). The chips are
busy and partly unhealthy so that findings fire, render and stay active. Target: median under 10 ms.

    python benchmarks/bench_rules.py [--chips 64] [--polls 200] [--history-hours 1]
"""

import argparse
import os
import platform
import statistics
import sys
import time
import tracemalloc
from typing import List

from npumon.model import (MIB, ChipSample, DeviceFile, HostSample, NumaNode, PcieLink, ProcessSample, Snapshot,
                          SourceStatus)
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules

POLL_SECONDS = 15.0
HBM_TOTAL = 65536 * MIB


def make_snapshot(poll: int, chips: int) -> Snapshot:
    now = 1_700_000_000.0 + poll * POLL_SECONDS
    samples = []
    for index in range(chips):
        wobble = ((poll * 7 + index * 13) % 20) / 100.0
        sample = ChipSample(
            npu=index // 2, chip=index % 2, name="910B3", health="Alarm" if index % 16 == 0 else "OK",
            bus_id="0000:{:02x}:00.0".format(index), temperature_celsius=60.0 + (index % 30),
            power_watts=300.0 + index, aicore_ratio=0.2 + wobble if index % 8 == 0 else 0.6 + wobble,
            aivector_ratio=0.3, hbm_bandwidth_ratio=0.5 + wobble, hbm_used_bytes=(30000 + poll) * MIB,
            hbm_total_bytes=HBM_TOTAL, memory_used_bytes=0, memory_total_bytes=0,
            ecc_single_bit_errors=poll // 10 * (index % 3), ecc_double_bit_errors=0, ecc_isolated_pages=0,
            error_codes=["A4025021"] if index % 16 == 0 else [], compatibility="OK",
            processes=[ProcessSample(npu=index // 2, chip=index % 2, pid=1000 + index, name="python3",
                                     memory_bytes=20000 * MIB)],
            pcie=PcieLink(16.0, 16.0, 16, 16),
        )
        samples.append(sample)
    host = HostSample(
        hostname="bench", cpu_ratio=0.4, cpu_count=192, load1=50.0, memory_total_bytes=1 << 40,
        memory_available_bytes=1 << 39, numa_balancing=0, max_map_count=262144,
        numa_nodes=[NumaNode(node, cpu_ratio=0.3 + node / 20.0) for node in range(4)],
        device_files=[DeviceFile("/dev/davinci{}".format(i), True, True) for i in range(chips)],
        serving_queue_depth=float(poll % 5),
    )
    sources = {name: SourceStatus(ok=True, last_success=now) for name in
               ("npu-smi", "npu-smi:usages", "npu-smi:health", "npu-smi:ecc", "npu-smi:board", "host")}
    return Snapshot(time=now, host=host, chips=samples, sources=sources)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chips", type=int, default=64)
    parser.add_argument("--polls", type=int, default=500, help="timed evaluations")
    parser.add_argument("--history-hours", type=float, default=1.0)
    args = parser.parse_args()

    rules, params = load_rules()
    engine = RuleEngine(rules, params)
    warmup = int(args.history_hours * 3600 / POLL_SECONDS)
    # Snapshots are built before timing: only the engine is measured.
    snapshots = [make_snapshot(poll, args.chips) for poll in range(warmup + args.polls)]
    tracemalloc.start()
    for snapshot in snapshots[:warmup]:
        engine.evaluate(snapshot)
    history_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    timings = []
    cpu_timings = []  # CPU time of this process: less disturbed by other load on a shared machine
    findings = []
    for snapshot in snapshots[warmup:]:
        started, cpu_started = time.perf_counter(), time.process_time()
        findings = engine.evaluate(snapshot)
        cpu_timings.append((time.process_time() - cpu_started) * 1000.0)
        timings.append((time.perf_counter() - started) * 1000.0)
    engine.transitions()

    print("rules: {}, chips: {}, history: {:.1f} h at {:.0f} s ({} warm-up polls), timed polls: {}".format(
        len(rules), args.chips, args.history_hours, POLL_SECONDS, warmup, len(timings)))
    print("active findings per poll: {}".format(len(findings)))
    print("engine memory after warm-up (tracemalloc, history + state): {:.1f} MiB".format(history_bytes / MIB))
    for label, values in (("wall", timings), ("cpu", cpu_timings)):
        print("evaluate() {}: median {:.2f} ms, p95 {:.2f} ms, max {:.2f} ms".format(
            label, statistics.median(values), percentile(values, 0.95), max(values)))
    print("machine: {} {}, {} x{}, Python {}".format(platform.system(), platform.machine(), cpu_model(),
                                                    os.cpu_count(), platform.python_version()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
