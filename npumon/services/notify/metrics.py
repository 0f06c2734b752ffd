"""Prometheus metrics of notification delivery, rendered from in-memory counts at scrape time.

    npumon_notifications_total{receiver,result}          delivered | retried | failed | dropped
    npumon_notification_outbox_length{receiver}          notifications waiting in the outbox
    npumon_notification_outbox_oldest_age_seconds{receiver}   age of the oldest one (0 when none wait)
    npumon_notification_receiver_up{receiver}            0 while the receiver fails or is misconfigured
    npumon_notification_outbox_up                        0 while the outbox file cannot be written
    npumon_notifications_unpersisted_total{receiver}     queued while it could not: held in memory only
"""

import threading
from typing import Callable, Dict, Iterable, Iterator, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from .outbox import Outbox, ReceiverBacklog

RESULTS = ("delivered", "retried", "failed", "dropped")


class Counters:
    """Notifications per (receiver, result); thread-safe."""

    def __init__(self, receivers: Iterable[str]):
        self._lock = threading.Lock()
        self._counts: Dict[Tuple[str, str], int] = {(name, result): 0 for name in receivers for result in RESULTS}

    def add(self, receiver: str, result: str, count: int) -> None:
        with self._lock:
            self._counts[(receiver, result)] = self._counts.get((receiver, result), 0) + count

    def snapshot(self) -> Dict[Tuple[str, str], int]:
        with self._lock:
            return dict(self._counts)


class NotifyMetrics:
    """A prometheus_client collector over the service's counters, backlog and receiver health."""

    def __init__(self, receivers: Iterable[str], counters: Counters,
                 backlog: Callable[[], Dict[str, ReceiverBacklog]], up: Callable[[str], bool],
                 clock: Callable[[], float], outbox: Optional[Outbox] = None):
        """`outbox`: whose file state and unpersisted counts to show (none: those families are left out)."""
        self._receivers = sorted(receivers)
        self._outbox = outbox
        self._counters = counters
        self._backlog = backlog
        self._up = up
        self._clock = clock

    def collect(self) -> Iterator[Metric]:
        total = CounterMetricFamily("npumon_notifications", "Notifications by receiver and what became of them "
                                    "(retried counts every failed attempt that will be retried).",
                                    labels=("receiver", "result"))
        for (receiver, result), count in sorted(self._counters.snapshot().items()):
            total.add_metric((receiver, result), count)
        length = GaugeMetricFamily("npumon_notification_outbox_length",
                                   "Notifications waiting in the outbox for the receiver.", labels=("receiver",))
        age = GaugeMetricFamily("npumon_notification_outbox_oldest_age_seconds",
                                "Age of the oldest notification waiting for the receiver (0 when none wait).",
                                labels=("receiver",))
        up = GaugeMetricFamily("npumon_notification_receiver_up",
                               "1 if the receiver's last delivery worked (or none was tried yet), 0 while it "
                               "fails or cannot be set up.", labels=("receiver",))
        backlog = self._backlog()
        now = self._clock()
        for receiver in self._receivers:
            waiting = backlog.get(receiver, ReceiverBacklog(0, None))
            length.add_metric((receiver,), waiting.pending)
            oldest = waiting.oldest_created
            age.add_metric((receiver,), max(0.0, now - oldest) if oldest is not None else 0.0)
            up.add_metric((receiver,), 1.0 if self._up(receiver) else 0.0)
        yield total
        yield length
        yield age
        yield up
        if self._outbox is not None:
            yield from self._outbox_families()

    def _outbox_families(self) -> Iterator[Metric]:
        assert self._outbox is not None
        outbox_up = GaugeMetricFamily("npumon_notification_outbox_up",
                                      "1 while notifications are committed to the outbox file; 0 while it cannot be "
                                      "opened or written and they are kept in memory only (retried with backoff).")
        outbox_up.add_metric((), 1.0 if self._outbox.up else 0.0)
        unpersisted = CounterMetricFamily("npumon_notifications_unpersisted",
                                          "Notifications queued while the outbox file could not be written: sent "
                                          "from memory, saved to the file once it works again, lost if the daemon "
                                          "stops first.", labels=("receiver",))
        counts = self._outbox.unpersisted()
        for receiver in self._receivers:
            unpersisted.add_metric((receiver,), counts.get(receiver, 0))
        yield outbox_up
        yield unpersisted
