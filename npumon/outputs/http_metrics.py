"""npumon_http_*: how the exporter's own HTTP server copes, from its counters (ServerStats).

Read at scrape time. Refused connections (over exporter.max_connections), requests closed at their deadline
(exporter.request_timeout_seconds) and accept() errors (out of file descriptors) are the signs of slow or
too many clients; workers busy against workers says whether scrapes wait for one.
"""

import threading
from typing import Callable, Dict, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector


class ServerStats:
    """The HTTP server's counters since start and its load now; also read by its health()."""

    def __init__(self, workers: int, max_connections: int) -> None:
        self.workers, self.max_connections = workers, max_connections
        self.lock = threading.Lock()
        self.accepted = self.refused = self.evicted = self.timeouts = self.accept_errors = 0
        self.open = self.busy = 0

    def snapshot(self) -> Dict[str, int]:
        with self.lock:
            return {"accepted": self.accepted, "refused": self.refused, "evicted": self.evicted,
                    "timeouts": self.timeouts, "accept_errors": self.accept_errors, "open": self.open,
                    "busy": self.busy, "workers": self.workers, "max_connections": self.max_connections}


class HttpStatsCollector(Collector):
    def __init__(self, get_stats: Callable[[], ServerStats]):
        self._get_stats = get_stats  # the web server's current stats: start() replaces them

    def collect(self) -> Iterator[Metric]:
        stats = self._get_stats().snapshot()
        counters = (
            ("npumon_http_connections_total", "Connections accepted by the HTTP server.", "accepted"),
            ("npumon_http_connections_refused_total", "Connections answered 503 at once: exporter.max_connections "
                                                      "were open.", "refused"),
            ("npumon_http_connections_evicted_total", "Connections without a complete request after a while, "
                                                      "closed at exporter.max_connections to make room.", "evicted"),
            ("npumon_http_request_timeouts_total", "Connections closed at the request deadline "
                                                   "(exporter.request_timeout_seconds).", "timeouts"),
            ("npumon_http_accept_errors_total", "accept() failures, e.g. out of file descriptors; accepting "
                                                "pauses with a backoff after each.", "accept_errors"),
        )
        for name, help_text, key in counters:
            yield CounterMetricFamily(name[:-len("_total")], help_text, value=stats[key])
        gauges = (
            ("npumon_http_connections_open", "Connections open now, being read or answered.", "open"),
            ("npumon_http_connections_max", "exporter.max_connections: more are refused.", "max_connections"),
            ("npumon_http_workers_busy", "HTTP workers answering a request now.", "busy"),
            ("npumon_http_workers", "HTTP workers (exporter.http_workers), started once.", "workers"),
        )
        for name, help_text, key in gauges:
            yield GaugeMetricFamily(name, help_text, value=stats[key])
