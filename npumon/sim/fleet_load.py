"""Measuring a running simulated fleet through its Prometheus: for benchmarks/bench_fleet.py and the slow fleet
test, which hold a fleet of N hosts for minutes and check the issue's targets.

    watch = FleetWatch(fleet)          # a started sim.fleet.Fleet with a Prometheus
    watch.sample()                     # every few seconds: targets up, rule evaluation times, CPU, RSS
    report = watch.report()            # then: the whole run's figures (a dict)

Everything is read from Prometheus's HTTP API (targets, rules, instant and range queries with their
server-side timings, its own /metrics) and from /proc (the hosts' and Prometheus's CPU and RSS).
"""

import json
import os
import re
import resource
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

import requests
import yaml

from .fleet import REPO_DIR, SCRAPE_JOB, Fleet

DASHBOARD_DIR = os.path.join(REPO_DIR, "grafana", "dashboards")
# Grafana's built-in intervals as it fills them for a 5 s scrape and the dashboards' default range.
BUILT_INS = {"__rate_interval": "20s", "__interval": "5s", "__range": "1h"}
RANGE_SECONDS = 3600
RANGE_STEP = 15  # a 1-hour panel about 240 points wide
TICK = os.sysconf("SC_CLK_TCK")


def substitute(text: str, values: Dict[str, str]) -> str:
    """A dashboard expression with its template variables (and Grafana's built-ins) filled in."""
    def replace(match):
        name = match.group(1) or match.group(2)
        return values[name] if name in values else BUILT_INS[name]
    return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", replace, text)


def dashboard_queries(host: str) -> List[Tuple[str, bool]]:
    """(expression, instant) of every panel target of every shipped dashboard: the fleet dashboards over every
    host, the node dashboards for `host`."""
    queries = []
    for name in sorted(os.listdir(DASHBOARD_DIR)):
        if not name.endswith(".json"):
            continue
        with open(os.path.join(DASHBOARD_DIR, name), encoding="utf-8") as handle:
            dashboard = json.load(handle)
        values = {"job": SCRAPE_JOB, "host": ".*" if "fleet" in name else host, "npu": ".*", "id": ".*",
                  "datasource": "prometheus"}
        for panel in dashboard.get("panels", []):
            for target in panel.get("targets", []):
                if target.get("expr"):
                    queries.append((substitute(target["expr"], values), bool(target.get("instant"))))
    return queries


def rule_expressions(rule_files: List[str]) -> List[Tuple[str, str]]:
    """(name, expression) of every alerting and recording rule in the files."""
    result = []
    for path in rule_files:
        with open(path, encoding="utf-8") as handle:
            document = yaml.safe_load(handle) or {}
        for group in document.get("groups", []):
            for rule in group.get("rules", []):
                result.append((rule.get("alert") or rule.get("record"), str(rule["expr"])))
    return result


def _cpu_and_rss(pid: int) -> Optional[Tuple[float, float]]:
    """(utime+stime+cutime+cstime seconds, RSS MB) of a process, or None when it is gone."""
    try:
        with open("/proc/{}/stat".format(pid)) as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        return sum(int(f) for f in fields[11:15]) / TICK, int(fields[21]) * os.sysconf("SC_PAGE_SIZE") / 1048576.0
    except (OSError, IndexError, ValueError):
        return None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _quantile(values: List[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


class FleetWatch:
    """Samples a running fleet and its Prometheus; report() sums up the run."""

    def __init__(self, fleet: Fleet, timeout_seconds: float = 30.0):
        self.fleet = fleet
        self.url = fleet.prometheus_url
        self.timeout = timeout_seconds
        self.session = requests.Session()
        self.started = time.time()
        self.samples = 0
        self.down_seen: Dict[str, int] = {}  # scrape URL -> samples it was not up in
        self.rule_seconds: Dict[str, float] = {}  # rule -> the longest evaluation seen
        self.group_seconds: Dict[str, float] = {}
        self.first = self._processes()
        self.rss: Dict[str, List[float]] = {}

    # -- Prometheus API ------------------------------------------------------------------------------

    def api(self, path: str, **params) -> Any:
        if "query" in path:  # POST: long expressions; the other endpoints answer GET only
            response = self.session.post(self.url + path, data=params, timeout=self.timeout)
        else:
            response = self.session.get(self.url + path, params=params, timeout=self.timeout)
        document = response.json()
        if document.get("status") != "success":
            raise RuntimeError("{} {}: {}".format(path, params, document.get("error")))
        return document["data"]

    def timed_query(self, expr: str, instant: bool) -> Tuple[float, float, int]:
        """(wall seconds, Prometheus's own evaluation seconds, series returned) of one dashboard-like query."""
        now = time.time()
        params = {"query": expr, "stats": "all"}
        if instant:
            params["time"] = "{:.3f}".format(now)
            path = "/api/v1/query"
        else:
            params.update(start="{:.3f}".format(now - RANGE_SECONDS), end="{:.3f}".format(now), step=str(RANGE_STEP))
            path = "/api/v1/query_range"
        started = time.monotonic()
        data = self.api(path, **params)
        wall = time.monotonic() - started
        evaluation = data.get("stats", {}).get("timings", {}).get("evalTotalTime", wall)
        return wall, evaluation, len(data.get("result", []))

    def self_metrics(self) -> Dict[str, float]:
        """Prometheus's own gauges and counters that size a fleet."""
        text = self.session.get(self.url + "/metrics", timeout=self.timeout).text
        wanted = ("prometheus_tsdb_head_series", "prometheus_tsdb_head_samples_appended_total",
                  "process_resident_memory_bytes", "go_memstats_heap_inuse_bytes",
                  "prometheus_target_interval_length_seconds_count")
        values: Dict[str, float] = {}
        for line in text.splitlines():
            series, _, value = line.rpartition(" ")
            name = series.split("{", 1)[0]
            if name in wanted:  # summed over labels (2.4x splits samples appended by type)
                values[name] = values.get(name, 0.0) + float(value)
        return values

    # -- sampling ------------------------------------------------------------------------------------

    def _processes(self) -> Dict[str, Tuple[float, float]]:
        result = {}
        for name, pid in self.fleet.pids().items():
            usage = _cpu_and_rss(pid)
            if usage is not None:
                result[name] = usage
        return result

    def sample(self) -> None:
        """One look: which targets are up, how long each rule took last, the processes' RSS."""
        self.samples += 1
        for target in self.api("/api/v1/targets", state="active")["activeTargets"]:
            if target["health"] != "up":
                self.down_seen[target["scrapeUrl"]] = self.down_seen.get(target["scrapeUrl"], 0) + 1
            else:
                self.down_seen.setdefault(target["scrapeUrl"], 0)
        for group in self.api("/api/v1/rules")["groups"]:
            self.group_seconds[group["name"]] = max(self.group_seconds.get(group["name"], 0.0),
                                                    group.get("evaluationTime", 0.0))
            for rule in group["rules"]:
                self.rule_seconds[rule["name"]] = max(self.rule_seconds.get(rule["name"], 0.0),
                                                      rule.get("evaluationTime", 0.0))
        for name, (_, rss) in self._processes().items():
            self.rss.setdefault(name, []).append(rss)

    # -- the run's figures ---------------------------------------------------------------------------

    def scrape_durations(self) -> Dict[str, float]:
        """instance -> p99 of its scrape durations over the run (seconds)."""
        window = "{}s".format(max(30, int(time.time() - self.started)))
        result = self.api("/api/v1/query", query='quantile_over_time(0.99, scrape_duration_seconds{{job="{}"}}[{}])'
                          .format(SCRAPE_JOB, window))["result"]
        return {series["metric"].get("instance", "?"): float(series["value"][1]) for series in result}

    def min_up(self) -> Dict[str, float]:
        window = "{}s".format(max(30, int(time.time() - self.started)))
        result = self.api("/api/v1/query", query='min_over_time(up{{job="{}"}}[{}])'.format(SCRAPE_JOB, window))
        return {series["metric"].get("instance", "?"): float(series["value"][1]) for series in result["result"]}

    def fleet_command(self) -> Tuple[float, float, int, str]:
        """(wall seconds, CPU seconds, exit code, first line) of `npumon fleet --prometheus URL`, a process of
        its own (Python's start and the rules' loading included)."""
        started, cpu = time.monotonic(), _children_cpu()
        result = subprocess.run([sys.executable, "-m", "npumon.cli.main", "fleet", "--prometheus", self.url],
                                capture_output=True, text=True, timeout=60)
        return (time.monotonic() - started, _children_cpu() - cpu, result.returncode,
                (result.stdout or result.stderr).split("\n")[0])

    def report(self, node_host: str) -> Dict[str, Any]:
        elapsed = time.time() - self.started
        last = self._processes()
        hosts = [name for name in last if name != "prometheus"]
        host_cpu = sum(last[name][0] - self.first.get(name, (0.0, 0.0))[0] for name in hosts)
        dashboards = [(expr,) + self.timed_query(expr, instant) for expr, instant in dashboard_queries(node_host)]
        rules = [(name, expr) + self.timed_query(expr, True) for name, expr in rule_expressions(self.fleet.rule_files)]
        before = self.self_metrics()
        time.sleep(10.0)
        after = self.self_metrics()
        scrape_p99 = self.scrape_durations()
        fleet_seconds, fleet_cpu, fleet_code, fleet_line = self.fleet_command()
        return {
            "seconds": elapsed, "samples": self.samples, "targets": len(self.down_seen),
            "targets_ever_down": sorted(url for url, count in self.down_seen.items() if count),
            "min_up": self.min_up(),
            "scrape_p99_max": max(scrape_p99.values()) if scrape_p99 else float("nan"),
            "scrape_p99_median": _quantile(list(scrape_p99.values()), 0.5),
            "scrape_p99_targets": len(scrape_p99),
            "dashboard_queries": len(dashboards),
            "dashboard_slowest": max(dashboards, key=lambda row: row[1]) if dashboards else None,
            "dashboard_wall_max": max(row[1] for row in dashboards) if dashboards else float("nan"),
            "dashboard_eval_max": max(row[2] for row in dashboards) if dashboards else float("nan"),
            "dashboard_empty": [row[0] for row in dashboards if row[3] == 0],
            "rules": len(rules),
            "rule_query_wall_max": max((row[2] for row in rules), default=float("nan")),
            "rule_eval_max": max(self.rule_seconds.values(), default=float("nan")),
            "rule_group_eval_max": max(self.group_seconds.values(), default=float("nan")),
            "fleet_seconds": fleet_seconds, "fleet_cpu_seconds": fleet_cpu, "fleet_exit": fleet_code,
            "fleet_line": fleet_line,
            "hosts": len(hosts),
            "host_cpu_pct_per_host": 100.0 * host_cpu / elapsed / max(1, len(hosts)),
            "host_rss_mb_mean": sum(self.rss[n][-1] for n in hosts if n in self.rss) / max(1, len(hosts)),
            "prometheus_cpu_pct": 100.0 * (last["prometheus"][0] - self.first["prometheus"][0]) / elapsed
            if "prometheus" in last and "prometheus" in self.first else float("nan"),
            "prometheus_rss_mb": last.get("prometheus", (0.0, float("nan")))[1],
            "head_series": after.get("prometheus_tsdb_head_series", float("nan")),
            "samples_per_second": (after.get("prometheus_tsdb_head_samples_appended_total", 0.0) -
                                   before.get("prometheus_tsdb_head_samples_appended_total", 0.0)) / 10.0,
            "heap_inuse_mb": after.get("go_memstats_heap_inuse_bytes", float("nan")) / 1048576.0,
            "load": open("/proc/loadavg").read().split()[:3],
        }
