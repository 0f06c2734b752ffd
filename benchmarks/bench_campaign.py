"""The fault campaign benchmark (issue 33): make a campaign, or play one on a simulated fleet and print its figures.

    python3 benchmarks/bench_campaign.py generate --hosts 50 --injections 200 --minutes 30 > campaigns/fleet-50.yaml
    python3 benchmarks/bench_campaign.py run campaigns/fleet-50.yaml --dir /tmp/campaign

`generate` is deterministic (--seed): every class in turn, each on a host and chip not used before (a sticky
finding, a driver fault held until acknowledged, would stay on a chip into its next fault), host-wide faults
on hosts of their own, a fifth of the hosts left healthy, each injection long enough for its rule's `for:`
plus a poll and a minute; the classes added since the shipped campaigns were made (LATER_CLASSES) after the
others, so that a shipped campaign regenerated with its seed only gains their injections (and, where no host had
room for one, a host). `run` is `npumon fleet-sim --campaign` plus the machine's load and the wall time; results
go to benchmarks/results/campaign.md by hand, with the machine and date.
"""

import argparse
import os
import random
import subprocess
import sys
import time

import yaml

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from npumon.sim.campaign import CLASSES, PRODUCT, check_campaign, rule_budgets  # noqa: E402
from npumon.sim.products import get_product  # noqa: E402


# Classes added after the shipped campaigns were first made. Each is drawn after the first round (whose random
# draws it leaves as they were), as often as a first-round class at most, where the first round left room: adding
# a class adds its injections to a shipped campaign and moves none of the others. A class that finds no room at
# all gets one host added for it, numbered after the others (a short campaign keeps every host busy).
LATER_CLASSES = ("dcmi-hang",)


def generate(hosts: int, injections: int, minutes: float, seed: int, time_scale: float, settle: float) -> dict:
    rng = random.Random(seed)
    span = minutes * 60.0
    budgets = rule_budgets()
    chips = [slot.device_id for slot in get_product(PRODUCT).slots()]
    faulty_hosts = list(range(1, hosts - hosts // 5 + 1))
    free = {host: list(chips) for host in faulty_hosts}  # (host, chip) pairs never used yet
    host_wide_free = list(faulty_hosts)
    busy = {host: [] for host in faulty_hosts}  # (start, end) of host-wide faults, and of any fault

    def place(fault):
        """One injection of the class on a host (and chips) with room for it, or None."""
        # long enough for the rule (wall seconds, times the scale) and a minute more; simulated seconds
        duration = round((budgets[fault.name] + 60.0) * time_scale / 10.0) * 10.0
        start = round(rng.uniform(0.0, max(0.0, span - duration)) / 10.0) * 10.0
        end = start + duration
        if fault.device is None:
            candidates = [h for h in host_wide_free if not any(s < end and start < e for s, e, _ in busy[h])]
            if not candidates:
                return None
            host = rng.choice(candidates)
            host_wide_free.remove(host)
            busy[host].append((start, end, True))
            return {"host": host, "class": fault.name, "start": start, "duration": duration}
        candidates = [h for h in faulty_hosts if len(free[h]) >= fault.chips
                      and not any(s < end and start < e for s, e, wide in busy[h] if wide)]
        if not candidates:
            return None
        host = rng.choice(candidates)
        picked = sorted(rng.sample(free[host], fault.chips))
        for chip in picked:
            free[host].remove(chip)
        busy[host].append((start, end, False))
        if host in host_wide_free and fault.chips > 1:
            host_wide_free.remove(host)  # a job's processes would outlive a host-wide fault's window
        injection = {"host": host}
        injection.update({"chips": picked} if fault.chips > 1 else {"chip": picked[0]})
        injection.update({"class": fault.name, "start": start, "duration": duration})
        return injection

    def draw(names, count):
        placed = []
        for index in range(count * 3):  # every class in turn; some draws find no room; stop at the count
            if len(placed) == count:
                break
            injection = place(CLASSES[names[index % len(names)]])
            if injection is not None:
                placed.append(injection)
        return placed

    first = sorted(name for name in CLASSES if name not in LATER_CLASSES)
    result = draw(first, injections)
    healthy = hosts - len(faulty_hosts)
    for name in LATER_CLASSES:
        placed = draw([name], max(1, injections // len(first)))
        if not placed:
            hosts += 1
            faulty_hosts.append(hosts)
            free[hosts], busy[hosts] = list(chips), []
            host_wide_free.append(hosts)
            placed = draw([name], 1)
        result += placed
    result.sort(key=lambda item: (item["start"], item["host"]))
    document = {"description": "{} injections over {:g} simulated minutes on {} hosts ({} left healthy), seed {}"
                .format(len(result), minutes, hosts, healthy, seed),
                "hosts": hosts, "time_scale": time_scale, "settle": settle, "injections": result}
    check_campaign(document, "generated")
    return document


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    make = commands.add_parser("generate", help="print a campaign")
    make.add_argument("--hosts", type=int, default=50)
    make.add_argument("--injections", type=int, default=200)
    make.add_argument("--minutes", type=float, default=30.0)
    make.add_argument("--time-scale", type=float, default=1.0)
    make.add_argument("--seed", type=int, default=33)
    make.add_argument("--settle", type=float, default=120.0, help="simulated seconds after the last fault ends")
    play = commands.add_parser("run", help="play a campaign and print its figures")
    play.add_argument("campaign")
    play.add_argument("--dir", required=True)
    play.add_argument("--base-port", type=int, default=21100)
    args = parser.parse_args()
    if args.command == "generate":
        document = generate(args.hosts, args.injections, args.minutes, args.seed, args.time_scale, args.settle)
        flow = [yaml.safe_dump(item, default_flow_style=True, sort_keys=False).strip() for item in document["injections"]]
        head = {key: value for key, value in document.items() if key != "injections"}
        print("# made by: python3 benchmarks/bench_campaign.py generate --hosts {} --injections {} --minutes {:g} "
              "--time-scale {:g} --seed {} --settle {:g}".format(args.hosts, args.injections, args.minutes, args.time_scale,
                                                                 args.seed, args.settle))
        print(yaml.safe_dump(head, sort_keys=False, width=200).strip())
        print("injections:")
        print("\n".join("  - " + line for line in flow))
        return 0
    started, load = time.time(), open("/proc/loadavg").read().split()[:3]
    code = subprocess.call([sys.executable, "-m", "npumon.cli.main", "fleet-sim", "--campaign", args.campaign,
                            "--no-prometheus", "--dir", args.dir, "--base-port", str(args.base_port)])
    print("wall {:.0f} s; load before {}, after {}; {} cores".format(
        time.time() - started, " ".join(load), " ".join(open("/proc/loadavg").read().split()[:3]), os.cpu_count()))
    return code


if __name__ == "__main__":
    sys.exit(main())
