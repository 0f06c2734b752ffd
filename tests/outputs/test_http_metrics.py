"""npumon_http_*: the HTTP server's counters as Prometheus families."""

import shutil
import subprocess

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from daemon_harness import sample
from npumon.outputs.http_metrics import HttpStatsCollector, ServerStats


def exposition(stats):
    registry = CollectorRegistry()
    registry.register(HttpStatsCollector(lambda: stats))
    return generate_latest(registry).decode()


def test_counters_and_gauges_follow_the_stats():
    stats = ServerStats(workers=3, max_connections=20)
    stats.accepted, stats.refused, stats.evicted, stats.timeouts = 9, 2, 6, 1
    stats.accept_errors, stats.open, stats.busy = 4, 5, 3
    text = exposition(stats)
    assert [sample(text, name) for name in (
        "npumon_http_connections_total", "npumon_http_connections_refused_total",
        "npumon_http_connections_evicted_total", "npumon_http_request_timeouts_total",
        "npumon_http_accept_errors_total", "npumon_http_connections_open", "npumon_http_connections_max",
        "npumon_http_workers_busy", "npumon_http_workers")] == [9, 2, 6, 1, 4, 5, 20, 3, 3]


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed (Debian's prometheus)")
def test_the_families_pass_promtool():
    result = subprocess.run(["promtool", "check", "metrics"], input=exposition(ServerStats(workers=10, max_connections=512)),
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
