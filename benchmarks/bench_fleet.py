"""Issue 20 item 4 benchmark: a simulated fleet of N hosts, one real Prometheus scraping them all.

It starts what `npumon fleet-sim --hosts N` starts (npumon.sim.fleet: N `npumon run --simulate` processes on
127.0.0.1, one port each, npumon's default poll intervals, the simulator answering in-process; Debian's
Prometheus scraping them every 5 s with the shipped `npumon` job and evaluating the shipped alert rules with
their real `for:` durations), holds it for the run, and reads (npumon.sim.fleet_load):

- every target up over the whole run (Prometheus's target health every 15 s, and min_over_time(up[run]));
- each target's scrape duration p99 over the run (quantile_over_time on scrape_duration_seconds);
- each alert rule's longest evaluation seen in /api/v1/rules, and each rule's expression as an instant query;
- every panel query of every shipped dashboard (fleet dashboards over all hosts, node dashboards for one
  host) as Grafana would send it (range queries over 1 h at a 15 s step), wall time and Prometheus's own;
- `npumon fleet --prometheus URL` end to end (a process of its own, Python start included);
- the cost: hosts' CPU (each daemon and its children) and RSS, Prometheus's CPU, RSS, head series and
  samples appended per second.

Run:  python benchmarks/bench_fleet.py --hosts 50 --minutes 10      (prints a markdown section)
"""

import argparse
import os
import shutil
import sys
import tempfile
import time

from npumon.sim.fleet import SHIPPED_ALERT_RULES, Fleet, fleet_hosts
from npumon.sim.fleet_load import FleetWatch

PROMETHEUS = "/usr/bin/prometheus"
SAMPLE_SECONDS = 15.0


def free_base_port(count: int) -> int:
    import random
    import socket

    for _ in range(50):
        base = random.randrange(20000, 32000 - count, 100)  # below Linux's ephemeral ports (32768-60999)
        try:
            for port in range(base, base + count + 1):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise SystemExit("no free block of {} ports on 127.0.0.1".format(count + 1))


def wait_until_all_up(watch: FleetWatch, count: int, deadline_seconds: float) -> float:
    """Seconds until Prometheus has every target up (first scrape done)."""
    started = time.monotonic()
    while time.monotonic() - started < deadline_seconds:
        if watch.fleet.exited():
            raise SystemExit("exited: {}".format({n: watch.fleet.log_tail(n) for n in watch.fleet.exited()}))
        try:
            targets = watch.api("/api/v1/targets", state="active")["activeTargets"]
            if len(targets) == count and all(t["health"] == "up" for t in targets):
                return time.monotonic() - started
        except Exception:  # noqa: BLE001 - Prometheus still starting
            pass
        time.sleep(2)
    raise SystemExit("not every target came up within {:.0f} s".format(deadline_seconds))


def run_fleet(count: int, seconds: float, directory: str, sample=SAMPLE_SECONDS):
    hosts = fleet_hosts(count)
    with Fleet(directory, hosts=hosts, base_port=free_base_port(count), prometheus=PROMETHEUS,
               rule_files=[SHIPPED_ALERT_RULES], scrape_interval="5s", evaluation_interval="5s",
               poll={}, network={}) as fleet:
        watch = FleetWatch(fleet)
        startup = wait_until_all_up(watch, count, 240.0)
        watch = FleetWatch(fleet)  # the run starts with every target up
        started = time.monotonic()
        while time.monotonic() - started < seconds:
            time.sleep(sample)
            watch.sample()
            if fleet.exited():
                raise SystemExit("exited: {}".format({n: fleet.log_tail(n) for n in fleet.exited()}))
        report = watch.report(hosts[1].name)
        report["startup_seconds"] = startup
        return report


def markdown(report: dict, count: int) -> str:
    slowest = report["dashboard_slowest"]
    lines = [
        "| figure | value | target |",
        "|---|---|---|",
        "| hosts (all on 127.0.0.1) | {} | 50 |".format(count),
        "| run after every target was up | {:.1f} min ({} samples; all up after {:.0f} s) | 10 min |".format(
            report["seconds"] / 60, report["samples"], report["startup_seconds"]),
        "| targets ever not up (15 s samples) / min_over_time(up) < 1 | {} / {} | 0 |".format(
            len(report["targets_ever_down"]), sum(1 for v in report["min_up"].values() if v < 1)),
        "| scrape duration p99, worst target / median target | {:.1f} ms / {:.1f} ms | < 100 ms |".format(
            1000 * report["scrape_p99_max"], 1000 * report["scrape_p99_median"]),
        "| alert rules: longest evaluation seen (rule / group) | {:.1f} ms / {:.1f} ms | < 1 s |".format(
            1000 * report["rule_eval_max"], 1000 * report["rule_group_eval_max"]),
        "| alert rule expressions as instant queries ({}), slowest wall | {:.1f} ms | < 1 s |".format(
            report["rules"], 1000 * report["rule_query_wall_max"]),
        "| dashboard queries ({}, 1 h range at 15 s), slowest wall / Prometheus eval | {:.1f} ms / {:.1f} ms | "
        "< 1 s |".format(report["dashboard_queries"], 1000 * report["dashboard_wall_max"],
                         1000 * report["dashboard_eval_max"]),
        "| `npumon fleet` end to end (exit {}): wall / its CPU | {:.2f} s / {:.2f} s | < 2 s |".format(
            report["fleet_exit"], report["fleet_seconds"], report["fleet_cpu_seconds"]),
        "| host CPU, % of a core per host (daemon + children) | {:.2f} % | |".format(report["host_cpu_pct_per_host"]),
        "| host RSS, mean | {:.1f} MB | |".format(report["host_rss_mb_mean"]),
        "| Prometheus CPU, % of a core | {:.1f} % | |".format(report["prometheus_cpu_pct"]),
        "| Prometheus RSS / Go heap in use | {:.0f} MB / {:.0f} MB | |".format(report["prometheus_rss_mb"],
                                                                             report["heap_inuse_mb"]),
        "| head series (per host) | {:.0f} ({:.0f}) | |".format(report["head_series"],
                                                             report["head_series"] / count),
        "| samples appended per second (per host) | {:.0f} ({:.1f}) | |".format(
            report["samples_per_second"], report["samples_per_second"] / count),
        "| load average at the end | {} | |".format(" ".join(report["load"])),
    ]
    lines.append("")
    lines.append("`npumon fleet` said: `{}`".format(report["fleet_line"]))
    if slowest:
        lines.append("Slowest dashboard query: `{}`".format(slowest[0]))
    if report["dashboard_empty"]:
        lines.append("Dashboard queries with no data ({}): {}".format(
            len(report["dashboard_empty"]), "; ".join("`{}`".format(q) for q in report["dashboard_empty"][:8])))
    if report["targets_ever_down"]:
        lines.append("Targets seen not up: " + ", ".join(report["targets_ever_down"]))
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, default=50)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (configs, logs)")
    args = parser.parse_args()
    if not os.path.exists(PROMETHEUS):
        print("needs {} (Debian: apt-get install prometheus)".format(PROMETHEUS), file=sys.stderr)
        return 2
    directory = args.keep or tempfile.mkdtemp(prefix="npumon-fleet-bench-")
    try:
        report = run_fleet(args.hosts, args.minutes * 60.0, directory)
    finally:
        if not args.keep:
            shutil.rmtree(directory, ignore_errors=True)
    print("{} on {} cores; `python benchmarks/bench_fleet.py --hosts {} --minutes {:g}`\n".format(
        time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), os.cpu_count(), args.hosts, args.minutes))
    print(markdown(report, args.hosts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
