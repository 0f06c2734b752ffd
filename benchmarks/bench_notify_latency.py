"""Benchmark: time from a fault appearing in the simulator to its webhook arriving (and the same for the
fault going away).

The real daemon runs in-process against the simulator: npu-smi subprocesses, the rule engine, the SQLite
outbox, the delivery thread, a real HTTP receiver on 127.0.0.1. The scenario switches chip 0 between OK
and Alarm and back, each state held `--hold` seconds of scenario time, so each fault has an exact
wall-clock start (simulation start + step time); faults start at random points of the poll cycle. `health-alarm` has no `for`, so the target is: at most the poll
interval plus 1 s, for both the firing and the resolved notification.

    python benchmarks/bench_notify_latency.py [--poll 2] [--hold 5] [--cycles 10]
"""

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Tuple

from npumon.settings import parse_config
from npumon.daemon.daemon import Daemon
from npumon.sim import prepare_simulation
from npumon.sim.state import read_state
from npumon.sim.target import simulated_target

LEAD_IN_SECONDS = 4.0  # scenario time before the first fault: the daemon starts and polls once


class Receiver:
    """Records (arrival wall time, status) of every health-alarm alert it is sent."""

    def __init__(self):
        self.arrivals: List[Tuple[float, str]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                now = time.time()
                for alert in json.loads(body)["alerts"]:
                    if alert["labels"]["alertname"] == "health-alarm":
                        receiver.arrivals.append((now, alert["status"]))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = "http://127.0.0.1:{}/hook".format(self.server.server_address[1])


def fault_times(poll: float, hold: float, cycles: int) -> List[Tuple[float, float]]:
    """(fault, recovery) in scenario seconds. Each fault starts at a random point of the poll cycle
    (seeded, so runs are comparable), so the latencies sample every phase, not one; faults and the
    healthy spells between them each last at least `hold`, so every change is seen by some poll."""
    chance = random.Random(42)
    faults = []
    for cycle in range(cycles):
        start = LEAD_IN_SECONDS + cycle * (2 * hold + poll) + chance.uniform(0.0, poll)
        faults.append((round(start, 3), round(start + hold, 3)))
    return faults


def scenario_text(faults: List[Tuple[float, float]]) -> str:
    steps = [[0, "OK"]]
    for fault, recovery in faults:
        steps += [[fault, "Alarm"], [recovery, "OK"]]
    return ("description: chip 0 flips between OK and Alarm\nproduct: atlas-800i-a2\nchips:\n  overrides:\n"
            "    - devices: [0]\n      health: {{steps: {}}}\n".format(json.dumps(steps)))


def record_evaluations(daemon: Daemon) -> List[float]:
    """Wall times at which the notifier was handed a rule evaluation: splits each latency into the poll
    (npu-smi and the rules) and the notifier's own part (outbox, delivery thread, HTTP)."""
    times: List[float] = []
    (service,) = [service for service in daemon.services if service.name == "notify"]
    hand_over = service.on_evaluation

    def timed(*args):
        times.append(time.time())
        hand_over(*args)

    service.on_evaluation = timed
    return times


def percentile(values: List[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--poll", type=float, default=2.0, help="poll.table_seconds")
    parser.add_argument("--hold", type=float, default=5.0, help="seconds each fault lasts (the healthy spells between faults at least as long)")
    parser.add_argument("--cycles", type=int, default=10, help="faults to measure")
    args = parser.parse_args()
    if args.hold <= args.poll + 1:
        parser.error("--hold must be more than --poll + 1 s, so every fault is seen and notified")
    faults = fault_times(args.poll, args.hold, args.cycles)

    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="npumon-bench-") as work:
        scenario = os.path.join(work, "flip.yaml")
        with open(scenario, "w", encoding="utf-8") as handle:
            handle.write(scenario_text(faults))
        config = parse_config(
            "state_dir: {}\npoll: {{table_seconds: {}}}\nnotify:\n  receivers:\n"
            "    - {{name: hook, type: webhook, url: '{}', group_interval_seconds: 0}}\n".format(
                os.path.join(work, "state"), args.poll, receiver.url), "<bench>")
        sim = prepare_simulation(os.path.join(work, "sim"), scenario)
        start = read_state(os.path.join(work, "sim"))["start_time"]
        daemon = Daemon(config, simulated_target(sim), listen="127.0.0.1:0")
        daemon.start()
        evaluations = record_evaluations(daemon)  # services exist once started; the first fault is later
        try:
            end = start + faults[-1][1] + args.poll + 2
            time.sleep(max(0.0, end - time.time()))
        finally:
            daemon.stop()
    receiver.server.shutdown()

    latencies = {"firing": [], "resolved": []}
    notifier_parts = []
    for cycle, (fault, recovery) in enumerate(faults):
        for status, since in (("firing", start + fault), ("resolved", start + recovery)):
            arrived = [when for when, got in receiver.arrivals if got == status and when >= since]
            if not arrived or arrived[0] > since + args.hold:
                print("fault {} at {:.1f} s: no {} notification within {:g} s; arrivals: {}".format(
                    cycle, since - start, status, args.hold,
                    ", ".join("{} at {:.1f} s".format(got, when - start) for when, got in receiver.arrivals)),
                    file=sys.stderr)
                return 1
            latencies[status].append(arrived[0] - since)
            notifier_parts.append(arrived[0] - max(when for when in evaluations if when <= arrived[0]))
    target = args.poll + 1.0
    print("Python {} on {} ({} CPUs), load average {:.1f}".format(
        platform.python_version(), platform.machine(), os.cpu_count(), os.getloadavg()[0]))
    print("poll {:g} s, for 0 s: target at most {:g} s; {} faults".format(args.poll, target, args.cycles))
    print("| notification | median | p90 | max | within target |")
    print("|---|---|---|---|---|")
    worst = 0.0
    for status, values in latencies.items():
        worst = max(worst, max(values))
        print("| {} | {:.2f} s | {:.2f} s | {:.2f} s | {}/{} |".format(
            status, percentile(values, 0.5), percentile(values, 0.9), max(values),
            sum(1 for value in values if value <= target), len(values)))
    print("| of which evaluation -> webhook | {:.3f} s | {:.3f} s | {:.3f} s | |".format(
        percentile(notifier_parts, 0.5), percentile(notifier_parts, 0.9), max(notifier_parts)))
    return 0 if worst <= target else 1


if __name__ == "__main__":
    sys.exit(main())
