"""Prometheus metrics of the cluster hand-off, rendered from the sink's state at scrape time.

    npumon_handoff_requests_total{sink,action,result}   API requests: ok | failed | dry_run (recorded, not sent)
    npumon_handoff_failures_total{sink,kind}            unreachable|unauthorized|conflict|throttled|server|rejected
    npumon_handoff_in_sync{sink}                        1 when the cluster shows the latest verdict
    npumon_handoff_pending_events{sink}                 transitions waiting for the API server to take their Event
                                                        (mindcluster: fault changes ClusterD has not taken)
    npumon_handoff_dropped_events_total{sink}           Events dropped from a full queue (the conditions still follow)
    npumon_handoff_taint_breaker_open{sink}             1 while too many nodes carry npumon's taint to add it here
"""

from typing import Callable, Iterator, List, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .kubesink import SinkState


class HandoffMetrics:
    """The families of every sink added, one family each with a `sink` label (two collectors would expose the
    same family twice)."""

    def __init__(self, sink: Optional[str] = None, state: Optional[Callable[[], SinkState]] = None):
        self._sinks: List[Tuple[str, Callable[[], SinkState]]] = []
        if sink is not None and state is not None:
            self.add(sink, state)

    def add(self, sink: str, state: Callable[[], SinkState]) -> None:
        self._sinks.append((sink, state))

    def sinks(self) -> List[str]:
        return [sink for sink, _ in self._sinks]

    def collect(self) -> Iterator[Metric]:
        states = [(sink, state()) for sink, state in self._sinks]
        requests = CounterMetricFamily("npumon_handoff_requests",
                                       "Cluster API requests by action and result (dry_run: recorded, not sent).",
                                       labels=("sink", "action", "result"))
        failures = CounterMetricFamily("npumon_handoff_failures", "Failed cluster API requests by kind (retried).",
                                       labels=("sink", "kind"))
        for sink, state in states:
            for (action, result), count in sorted(state.requests.items()):
                requests.add_metric((sink, action, result), count)
            for kind, count in sorted(state.failures.items()):
                failures.add_metric((sink, kind), count)
        yield requests
        yield failures
        for name, text, value in (
                ("npumon_handoff_in_sync", "1 when the cluster shows the latest verdict.",
                 lambda state: int(state.in_sync)),
                ("npumon_handoff_pending_events",
                 "Changes the cluster has not taken yet: transitions' Events (kubernetes), faults (mindcluster).",
                 lambda state: state.pending_events),
                ("npumon_handoff_taint_breaker_open", "1 while too many nodes carry npumon's taint to add it here.",
                 lambda state: int(state.breaker_open))):
            gauge = GaugeMetricFamily(name, text, labels=("sink",))
            for sink, state in states:
                gauge.add_metric((sink,), value(state))
            yield gauge
        dropped = CounterMetricFamily("npumon_handoff_dropped_events",
                                      "Events dropped from a full queue (the conditions still follow).",
                                      labels=("sink",))
        for sink, state in states:
            dropped.add_metric((sink,), state.dropped_events)
        yield dropped
