"""npumon_http_*: how the exporter's own HTTP server copes, from its counters (httpserver.ServerStats).

Read at scrape time. Refused connections (over exporter.max_connections), requests closed at their deadline
(exporter.request_timeout_seconds) and accept() errors (out of file descriptors) are the signs of slow or
too many clients; workers busy against workers says whether scrapes wait for one.
"""

from typing import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .httpserver import ServerStats


class HttpStatsCollector(Collector):
    def __init__(self, get_stats: Callable[[], ServerStats]):
        self._get_stats = get_stats  # the web server's current stats: start() replaces them

    def collect(self) -> Iterator[Metric]:
        stats = self._get_stats().snapshot()
        counters = (
            ("npumon_http_connections_total", "Connections accepted by the HTTP server.", "accepted"),
            ("npumon_http_connections_refused_total", "Connections answered 503 at once: exporter.max_connections "
                                                      "were open.", "refused"),
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
