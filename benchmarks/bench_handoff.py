"""Issue 32 benchmark: from an NPU fault to npumon's node condition at the API server, on a simulated fleet.

It starts N simulated hosts as `npumon fleet-sim` does (npumon.sim.fleet: N `npumon run --simulate` processes on
127.0.0.1, npumon's default poll intervals, the simulator answering in-process), each with the Kubernetes
hand-off sink on. `--simulate` gives each host its simulated Kubernetes node (npumon/sim/cluster.py): an API-server
stand-in holding the host's Node, reached with the kubeconfig under the host's --sim-state directory. Each host
then runs cycles until the run's time is up:

    healthy -> set_scenario(hbm-ecc-fault) -> NpuOutOfService True at the stand-in (the fault figure)
            -> set_scenario(healthy)       -> NpuOutOfService False at the stand-in (the recovery figure)

The hosts start their cycles at staggered moments and the bench reads every stand-in every POLL_SECONDS, so a
figure is the time the bench saw the condition change, within POLL_SECONDS of it. The recovery figure counts from
the switch to `healthy`; it includes the configured healthy time (`handoff.healthy_seconds`, shortened here to
HEALTHY_SECONDS from its default of 10 minutes) and the time until the findings clear. A sticky finding (the ECC
tier's ecc-uncorrectable, when that tier polls during a fault) keeps the chip out until acknowledged: the bench
acknowledges it with `npumon ack` as it switches back, as an operator would. Flap damping is raised to
MAX_TRANSITIONS transitions per hour, as every cycle is a real out-and-back of the same chip.

Run:  python benchmarks/bench_handoff.py --hosts 6 --minutes 4       (prints a markdown section)
"""

import argparse
import json
import os
import platform
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Dict, List, Optional, Tuple

from npumon.rules.loader import load_rules
from npumon.sim import set_scenario
from npumon.sim.cluster import read_kubeconfig
from npumon.sim.fleet import Fleet, SimHost

POLL_SECONDS = 0.25
HEALTHY_SECONDS = 30
MAX_TRANSITIONS = 120
FAULT_LIMIT_SECONDS = 180.0  # a cycle that has not seen its condition by then counts as missed
RECOVERY_LIMIT_SECONDS = 300.0
TARGET_SECONDS = 60.0  # issue 32: the node condition within a minute of the fault
CONDITION = "NpuOutOfService"
SINK = {"handoff": {"healthy_seconds": HEALTHY_SECONDS, "max_transitions_per_hour": MAX_TRANSITIONS,
                    "kubernetes": {"enabled": True}}}


def condition(kubeconfig: Dict[str, str]) -> Optional[Dict[str, str]]:
    """NpuOutOfService on the stand-in's (only) node, or None before npumon first wrote it."""
    request = urllib.request.Request(kubeconfig["server"] + "/api/v1/nodes",
                                     headers={"Authorization": "Bearer " + kubeconfig["token"]})
    with urllib.request.urlopen(request, timeout=5) as answer:
        [node] = json.load(answer)["items"]
    return next((c for c in node["status"]["conditions"] if c["type"] == CONDITION), None)


def wait_for(kubeconfig: Dict[str, str], status: str, limit: float) -> Tuple[Optional[float], str]:
    """(seconds until the condition has `status` (None past `limit`), its message then)."""
    began = time.monotonic()
    while time.monotonic() - began < limit:
        try:
            held = condition(kubeconfig)
            if held is not None and held["status"] == status:
                return time.monotonic() - began, held.get("message", "")
        except OSError:
            pass  # a stand-in busy under load: the next read
        time.sleep(POLL_SECONDS)
    return None, ""


STICKY = frozenset(rule.id for rule in load_rules()[0] if rule.sticky)


def sticky_findings(message: str) -> List[Tuple[str, str]]:
    """(rule, chip) of the sticky findings a condition's message names ("1 chip: npu3/chip0: rule (...), ...")."""
    found = []
    pieces = re.split(r"(npu\d+/chip\d+): ", message)  # [head, chip, its findings, chip, its findings, ...]
    for chip, text in zip(pieces[1::2], pieces[2::2]):
        found += [(rule, chip) for rule in re.findall(r"([a-z0-9-]+) \(", text) if rule in STICKY]
    return found


class HostCycles(threading.Thread):
    def __init__(self, host_dir: str, until: float, delay: float):
        super().__init__(daemon=True)
        self.sim_dir, self.until, self.delay = os.path.join(host_dir, "sim"), until, delay
        self.config_path = os.path.join(host_dir, "npumon.yaml")
        self.acks = 0
        self.faults: List[float] = []
        self.messages: List[Tuple[float, str]] = []  # (fault figure, the condition's message when it turned True)
        self.recoveries: List[float] = []
        self.missed = 0

    def run(self) -> None:
        kubeconfig = read_kubeconfig(self.sim_dir)
        time.sleep(self.delay)
        while time.monotonic() + 20 < self.until:
            if wait_for(kubeconfig, "False", RECOVERY_LIMIT_SECONDS)[0] is None:  # healthy first
                self.missed += 1
                return
            set_scenario(self.sim_dir, "hbm-ecc-fault")
            took, message = wait_for(kubeconfig, "True", FAULT_LIMIT_SECONDS)
            if took is None:
                self.missed += 1
                return
            self.faults.append(took)
            self.messages.append((took, message))
            try:
                held = condition(kubeconfig) or {}
            except OSError:
                held = {}
            set_scenario(self.sim_dir, "healthy")
            # a sticky finding (the ECC tier's ecc-uncorrectable) keeps the chip out until acknowledged, by design:
            # acknowledge it as an operator would, at once
            for rule, subject in sticky_findings(held.get("message", "")):
                self.acks += 1
                subprocess.run([sys.executable, "-m", "npumon.cli.main", "ack", "--config", self.config_path,
                                "--simulate", "--sim-state", self.sim_dir, rule, subject],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=60, check=False)
            back, _ = wait_for(kubeconfig, "False", RECOVERY_LIMIT_SECONDS)
            if back is None:
                self.missed += 1
                return
            self.recoveries.append(back)
            time.sleep(random.uniform(0, 10))  # the hosts' cycles drift apart


def percentile(values: List[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(share * len(ordered) + 0.5)) - 1))]


def machine() -> str:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            model = next(line.split(":", 1)[1].strip() for line in handle if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return "{} x {} ({}), Linux {}, Python {}".format(os.cpu_count(), model, platform.machine(), platform.release(),
                                                   platform.python_version())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=6)
    parser.add_argument("--minutes", type=float, default=4.0)
    parser.add_argument("--base-port", type=int, default=27600)
    args = parser.parse_args()
    directory = tempfile.mkdtemp(prefix="npumon-bench-handoff-")
    hosts = [SimHost("sim-k8s-{:02d}".format(i + 1), "healthy", "atlas-800i-a2", config=SINK)
             for i in range(args.hosts)]
    load_before = os.getloadavg()
    started_at = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    fleet = Fleet(directory, hosts=hosts, base_port=args.base_port, poll={}, network={})  # npumon's defaults
    try:
        fleet.start()
        dead = fleet.wait_started()
        if dead:
            raise SystemExit("exited at start: {}".format({n: fleet.log_tail(n) for n in dead}))
        until = time.monotonic() + args.minutes * 60
        spread = 60.0 / max(1, args.hosts)
        cycles = [HostCycles(os.path.join(directory, host.name), until, index * spread)
                  for index, host in enumerate(hosts)]
        for cycle in cycles:
            cycle.start()
        for cycle in cycles:
            cycle.join(args.minutes * 60 + FAULT_LIMIT_SECONDS + RECOVERY_LIMIT_SECONDS)
        exited = fleet.exited()
    finally:
        fleet.stop()
        shutil.rmtree(directory, ignore_errors=True)
    faults = [value for cycle in cycles for value in cycle.faults]
    recoveries = [value for cycle in cycles for value in cycle.recoveries]
    missed = sum(cycle.missed for cycle in cycles)
    print("## Run: {} hosts, {:g} min, {} UTC\n".format(args.hosts, args.minutes, started_at))
    print("- machine: {}; load average before {} and after {}".format(
        machine(), " ".join("{:.2f}".format(x) for x in load_before),
        " ".join("{:.2f}".format(x) for x in os.getloadavg())))
    print("- hosts: {} x atlas-800i-a2 `npumon run --simulate`, npumon's default poll intervals, Kubernetes sink "
          "defaults (interval 10 s), handoff.healthy_seconds {} (default 600), max_transitions_per_hour {}; "
          "the bench reads each stand-in every {} s\n".format(args.hosts, HEALTHY_SECONDS, MAX_TRANSITIONS,
                                                               POLL_SECONDS))
    print("| figure | value | target |")
    print("|---|---|---|")
    if faults:
        print("| fault -> {} True: cycles / median / p99 / max | {} / {:.1f} s / {:.1f} s / {:.1f} s | "
              "within {:.0f} s |".format(CONDITION, len(faults), statistics.median(faults), percentile(faults, 0.99),
                                          max(faults), TARGET_SECONDS))
    if recoveries:
        print("| recovery -> {} False: cycles / median / p99 / max (healthy time {} s included) | "
              "{} / {:.1f} s / {:.1f} s / {:.1f} s | after {} s |".format(
                  CONDITION, HEALTHY_SECONDS, len(recoveries), statistics.median(recoveries),
                  percentile(recoveries, 0.99), max(recoveries), HEALTHY_SECONDS))
    print("| cycles missed (no change within {:.0f} s / {:.0f} s) | {} | 0 |".format(
        FAULT_LIMIT_SECONDS, RECOVERY_LIMIT_SECONDS, missed))
    print("| cycles whose sticky finding was acknowledged (`npumon ack`) to let the chip back | {} | |".format(
        sum(cycle.acks for cycle in cycles)))
    print("| hosts exited during the run | {} | 0 |".format(len(exited)))
    print("\nfault figures (s): " + ", ".join("{:.1f}".format(v) for v in sorted(faults)))
    print("recovery figures (s): " + ", ".join("{:.1f}".format(v) for v in sorted(recoveries)))
    # what took the chip out each time: the condition's message names the findings
    print("\nthe condition's message when it turned True (fault figure first):")
    for took, message in sorted(m for cycle in cycles for m in cycle.messages):
        print("- {:.1f} s: {}".format(took, message))
    return 0 if faults and missed == 0 and not exited else 1


if __name__ == "__main__":
    sys.exit(main())
