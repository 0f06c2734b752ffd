"""The notifier, as a daemon Service: findings in, notifications out, at least once.

`on_evaluation` runs in the table job after every rule evaluation. It compares the active findings with
what each receiver was last told (the outbox's `firing` table), queues a firing notification for every
new (receiver, alert) and a resolved one for every alert that is gone, commits -- and only then asks the
delivery threads to send. Comparing states rather than only replaying the engine's transitions is what
makes restarts safe: a restarted daemon's engine fires every active finding again and knows nothing of
findings that cleared while it was down, while the outbox still knows what each receiver was told. After
a restart a finding that was firing is given its rule's `for` plus `restart_grace_seconds` to come back
before it counts as resolved -- unless the engine reports it resolved first.

`tick` (a scheduler job) queues repeats and hands receivers with due notifications to a small thread
pool; `deliver` sends one receiver's messages: grouped, rate-limited, retried with exponential backoff and
jitter. The job does not wake every second to find nothing to do: after each tick, delivery and evaluation
the service works out when the next thing falls due (a group wait or interval ending, a retry's backoff, a
rate limit freeing up, a repeat) and asks the daemon to run the tick then (`wake`), at most once a second;
the job's own interval, IDLE_TICK_SECONDS, is only a safety net.
"""

import logging
import random
import socket
import sqlite3
import threading
import time
from collections import deque
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

from ...model import Finding, Snapshot, SourceStatus
from .alert import RESOLVED, Alert, alert_from_finding, fingerprint
from .config import NotifyConfig
from .flavour import DELIVERED, RETRY
from .metrics import Counters, NotifyMetrics
from .outbox import Notification, Outbox, ReceiverBacklog
from .receiver import Receiver
from .routing import group_due, one_per_alert, receivers_for
from .secrets import SecretError

if TYPE_CHECKING:
    from ..context import ServiceContext

log = logging.getLogger(__name__)

JOB_ID = "notify-deliver"
# The tick runs when something falls due, but never sooner than MIN_WAKE_SECONDS after it is asked for (the
# granularity the once-a-second tick had), and at the latest every IDLE_TICK_SECONDS: that also makes up for
# a wake the scheduler skipped because the tick was still running.
MIN_WAKE_SECONDS = 1.0
IDLE_TICK_SECONDS = 30.0
# Receivers sent to at the same time. A receiver that does not answer holds a thread for its timeout, and then
# backs off (no thread while it waits): two let the others go on while one hangs, within the daemon's task limit.
DELIVERY_THREADS = 2
RATE_WINDOW_SECONDS = 60.0
EVENT_KIND = "notification_failed"

RecordEvent = Callable[..., None]  # ServiceContext.record_event(kind, subject, message, severity, details)
Wake = Callable[[float], None]  # run the tick in so many seconds (ServiceContext.run_soon for JOB_ID)


@dataclass
class _ReceiverState:
    """Delivery bookkeeping of one receiver; only its `deliver` (holding `busy`) changes it."""

    busy: threading.Lock = field(default_factory=threading.Lock)
    last_message: Optional[float] = None
    failures: int = 0  # consecutive retryable failures
    failing_since: Optional[float] = None  # when the current outage began (its first failed attempt)
    next_attempt: float = 0.0
    recent: Deque[float] = field(default_factory=deque)  # message times within the rate window


def notify_services(context: "ServiceContext") -> List["NotifyService"]:
    """The notifier for `build_services`, when the config has receivers. Never raises: a receiver whose
    secrets cannot be read is reported and its notifications wait in the outbox; an outbox file that
    cannot be opened is reported, and notifications wait in memory until it can."""
    config: Any = context.config  # the whole config (npumon/settings.py)
    if not config.notify.receivers:
        return []
    receivers: Dict[str, Receiver] = {}
    broken: Dict[str, str] = {}
    for index, receiver_config in enumerate(config.notify.receivers):
        try:
            receivers[receiver_config.name] = Receiver.from_config(receiver_config, index, config.source)
        except SecretError as exc:
            broken[receiver_config.name] = str(exc)
            log.error("%s (its notifications wait in the outbox until this is fixed)", exc)
            context.record_event(EVENT_KIND, "receiver/" + receiver_config.name, str(exc), "warning", None)
            continue
        if receiver_config.insecure_skip_verify:
            log.warning("receiver %r does not verify TLS certificates (insecure_skip_verify)", receiver_config.name)
    # Never off for the outbox: one that cannot be opened or written keeps notifications in memory (and
    # says so in npumon_notification_outbox_up) while it retries.
    outbox = Outbox(config.state_dir, config.notify.outbox_max_notifications)
    run_soon = context.run_soon
    wake = None if run_soon is None else (lambda seconds: run_soon(JOB_ID, seconds))
    # each rule's `for`, to know how long a finding needs to come back after a restart: from the daemon's
    # engine, whose rules are the ones judged (reading the rule files again cost every start about 25 ms of CPU)
    return [NotifyService(config.notify, receivers, broken, outbox, context.engine.for_seconds(),
                          context.record_event, clock=context.clock, host=context.host_name(), wake=wake)]


class NotifyService:
    name = "notify"

    def __init__(self, notify: NotifyConfig, receivers: Dict[str, Receiver], broken: Dict[str, str],
                 outbox: Outbox, rule_for: Dict[str, float], record_event: RecordEvent,
                 clock: Callable[[], float] = time.time, executor: Optional[Executor] = None,
                 host: Optional[str] = None, wake: Optional[Wake] = None):
        """`clock` and `executor` (where deliveries run) are replaceable so tests can control time and
        run deliveries inline. `wake(seconds)` asks for a tick that much later (None: the job's interval
        alone)."""
        self._notify = notify
        self._receivers = receivers
        self._broken = broken
        self._names = [receiver.name for receiver in notify.receivers]
        self._send_resolved = {receiver.name: receiver.send_resolved for receiver in notify.receivers}
        self._outbox = outbox
        self._record_event = record_event
        self._clock = clock
        # Fixed for the service's life: part of every alert's fingerprint, so it must not change when the
        # host source reports in (or reports a simulated host's name).
        self._host = host or socket.gethostname()
        self._states = {name: _ReceiverState() for name in receivers}
        self._counters = Counters(self._names)
        self._closed = threading.Event()
        self._executor = executor or ThreadPoolExecutor(max_workers=max(1, min(DELIVERY_THREADS, len(receivers))),
                                                        thread_name_prefix="notify")
        self._note_dropped(outbox.forget_receivers_except(self._names), "the receiver is no longer configured")
        self._firing: Dict[Tuple[str, str], Alert] = outbox.firing()
        started = clock()
        # What an earlier run told the receivers is firing: resolved only if it does not come back in time.
        self._comeback_deadline = {key: started + rule_for.get(alert.rule, 0.0) + notify.restart_grace_seconds
                                   for key, alert in self._firing.items()}
        self._backlog = outbox.backlog()
        self._wake = wake
        self._wake_lock = threading.Lock()
        self._wake_at: Optional[float] = None  # when the tick was last asked to run (clock time)
        self._repeat_due = outbox.next_repeats(self._repeat_seconds())
        self._outbox_was_up = True
        self._note_outbox_state()
        self._metrics = NotifyMetrics(self._names, self._counters, self._current_backlog, self.receiver_up, clock,
                                      outbox)

    # -- the Service protocol -----------------------------------------------------------------------

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]:
        return [(JOB_ID, IDLE_TICK_SECONDS, self.tick)]

    def collectors(self) -> List[object]:
        return [self._metrics]

    def statuses(self) -> Dict[str, SourceStatus]:
        return {}  # how delivery goes shows in npumon_notification_* (receiver_up, the outbox), not as a source

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None:
        """Queue what changed since the receivers were last told; quick, and no network."""
        if self._closed.is_set():
            return
        now = snapshot.time
        wanted: Dict[Tuple[str, str], Alert] = {}
        for finding in findings:
            if finding.shadow:
                continue
            alert = alert_from_finding(finding, self._host, self._notify.labels)
            for receiver in receivers_for(alert, self._notify.routes, self._names):
                wanted[(receiver, alert.fingerprint)] = alert
        fired = [(key[0], alert) for key, alert in wanted.items() if key not in self._firing]
        # The engine saying so is better than waiting out the comeback grace (it may have restored the
        # finding from the event history and seen it clear).
        said_resolved = {fingerprint(self._host, finding.rule, finding.subject)
                         for kind, finding in transitions if kind == RESOLVED}
        resolved = []
        for key, alert in self._firing.items():
            if key in wanted:
                self._comeback_deadline.pop(key, None)
            elif now >= self._comeback_deadline.get(key, now) or key[1] in said_resolved:
                self._comeback_deadline.pop(key, None)
                resolved.append((key[0], alert.resolved(now), self._send_resolved.get(key[0], True)))
        if not fired and not resolved:
            if self._wake_at is None:  # nothing asked for yet: what an earlier run left may be due
                self._plan(self._clock())
            return
        try:
            dropped = self._outbox.record(fired, resolved, now)
        except sqlite3.Error as exc:  # nothing recorded: the next evaluation finds the same changes
            self._outbox_failed(exc)
            return
        for receiver, alert in fired:
            self._firing[(receiver, alert.fingerprint)] = alert
        for receiver, alert, _ in resolved:
            del self._firing[(receiver, alert.fingerprint)]
        self._note_dropped(dropped, "the outbox is full")
        for receiver in {item[0] for item in fired} | {item[0] for item in resolved}:
            self._submit(receiver)
        self._plan(self._clock())  # a receiver that may not send yet (group interval, backoff) is due later

    def close(self) -> None:
        self._closed.set()
        self._executor.shutdown(wait=True, cancel_futures=True)  # an in-flight send ends within its timeout
        for receiver in self._receivers.values():
            receiver.close()
        self._outbox.close()

    # -- delivery -----------------------------------------------------------------------------------

    def tick(self) -> None:
        """Queue repeats of long-firing alerts, then hand every receiver with something due to a thread."""
        if self._closed.is_set():
            return
        with self._wake_lock:
            self._wake_at = None  # this is the tick that was asked for (or the interval's): plan anew
        now = self._clock()
        repeats = self._repeat_seconds()
        try:
            self._note_dropped(self._outbox.queue_repeats(repeats, now), "the outbox is full")
            self._backlog = self._outbox.backlog()
            self._repeat_due = self._outbox.next_repeats(repeats)
        except sqlite3.Error as exc:
            self._outbox_failed(exc)
            return
        self._note_outbox_state()
        for name, waiting in self._backlog.items():
            if name in self._receivers and self._may_send(name, waiting.oldest_created, now):
                self._submit(name)
        self._plan(now)

    def _repeat_seconds(self) -> Dict[str, float]:
        return {name: receiver.timing.repeat_seconds for name, receiver in self._receivers.items()}

    def _plan(self, now: float) -> None:
        """Ask for the tick when the next thing falls due, unless a tick is already asked for by then."""
        due = self._next_due()
        if due is None or due >= now + IDLE_TICK_SECONDS or self._wake is None or self._closed.is_set():
            return  # nothing due before the job's own interval brings the tick anyway
        due = max(due, now + MIN_WAKE_SECONDS)
        with self._wake_lock:
            if self._wake_at is not None and now < self._wake_at <= due:
                return
            self._wake_at = due
        self._wake(due - now)

    def _next_due(self) -> Optional[float]:
        """The earliest time a receiver may send what it has pending, or a repeat falls due; None: never.
        A receiver whose delivery runs now is left out: that delivery plans again when it ends."""
        times = [self._send_time(name, waiting.oldest_created) for name, waiting in self._backlog.items()
                 if name in self._receivers and waiting.oldest_created is not None
                 and not self._states[name].busy.locked()]
        times.extend(self._repeat_due.values())
        return min(times, default=None)

    def _send_time(self, name: str, oldest_pending: float) -> float:
        """When `_may_send` turns true for a receiver with notifications pending since `oldest_pending`."""
        state, timing = self._states[name], self._receivers[name].timing
        times = [state.next_attempt, oldest_pending + timing.group_wait_seconds]
        if state.last_message is not None:
            times.append(state.last_message + timing.group_interval_seconds)
        if timing.max_per_minute and len(state.recent) >= timing.max_per_minute:
            times.append(state.recent[-timing.max_per_minute] + RATE_WINDOW_SECONDS)
        return max(times)

    def _current_backlog(self) -> Dict[str, ReceiverBacklog]:
        """For a scrape: one short query, or what the last tick saw if the outbox cannot be read."""
        try:
            self._backlog = self._outbox.backlog()
        except sqlite3.Error as exc:
            self._outbox_failed(exc)
        return self._backlog

    def receiver_up(self, name: str) -> bool:
        if name in self._broken or name not in self._states:
            return False
        return self._states[name].failures == 0

    def deliver(self, name: str) -> None:
        """Send everything due for one receiver; one thread per receiver at a time."""
        state = self._states[name]
        if not state.busy.acquire(blocking=False):
            return
        try:
            while not self._closed.is_set():
                now = self._clock()
                pending = self._outbox.pending(name, limit=10 * self._receivers[name].flavour.max_alerts)
                if not pending or not self._may_send(name, pending[0].created, now):
                    break
                self._send(name, pending, now)
        finally:
            state.busy.release()
        if not self._closed.is_set():  # what is left waits for its backoff, group interval or rate limit
            self._backlog = self._outbox.backlog()
            self._repeat_due = self._outbox.next_repeats(self._repeat_seconds())
            self._plan(self._clock())

    def _submit(self, name: str) -> None:
        if name in self._receivers and not self._closed.is_set():
            try:
                self._executor.submit(self._guarded_deliver, name)
            except RuntimeError:  # shut down between the check and the submit
                pass

    def _guarded_deliver(self, name: str) -> None:
        try:
            self.deliver(name)
        except sqlite3.Error as exc:  # a delivered notification may be sent again: at least once
            self._outbox_failed(exc)
        except Exception:  # noqa: BLE001 - a bug here must not end delivery for good; the tick retries
            log.exception("delivering notifications to %r failed", name)

    def _may_send(self, name: str, oldest_pending: Optional[float], now: float) -> bool:
        state, timing = self._states[name], self._receivers[name].timing
        if now < state.next_attempt:
            return False
        while state.recent and now - state.recent[0] >= RATE_WINDOW_SECONDS:
            state.recent.popleft()
        if timing.max_per_minute and len(state.recent) >= timing.max_per_minute:
            return False  # what waits now goes out aggregated in the next message
        return group_due(now, oldest_pending, state.last_message, timing.group_wait_seconds,
                         timing.group_interval_seconds)

    def _send(self, name: str, pending: Sequence[Notification], now: float) -> None:
        receiver, state = self._receivers[name], self._states[name]
        batch = one_per_alert(pending, lambda item: item.alert.fingerprint, receiver.flavour.max_alerts)
        answer = receiver.send([item.alert for item in batch], batch[0].alert.host, now, self._notify.external_url)
        sent = batch[:answer.sent]
        if answer.status is not None:  # the service saw it: it counts against its rate limit
            state.recent.append(now)
        if answer.outcome != RETRY:  # a retry waits for its backoff, not for the group interval
            state.last_message = now
        if answer.outcome == DELIVERED:
            self._outbox.delivered(sent, now)
            self._counters.add(name, "delivered", len(sent))
            self._outage_ended(name, state, now, "works again")
        elif answer.outcome == RETRY:
            self._outbox.attempt_failed(sent, answer.detail)
            self._counters.add(name, "retried", len(sent))
            state.failures += 1
            delay = self._backoff(state.failures, answer.retry_after)
            state.next_attempt = now + delay
            message = "cannot deliver {} notification(s) to {!r} ({}): {}; retrying in {:.1f}s".format(
                len(sent), name, receiver.endpoint, answer.detail, delay)
            # The log gets the start of an outage and its end (_outage_ended), the event history its start;
            # a retry is no news.
            if state.failures == 1:
                state.failing_since = now
                # recorded before it is logged: whoever sees the line (and stops npumon) finds it in the history
                self._record_event(EVENT_KIND, "receiver/" + name, message, "warning",
                                   {"receiver": name, "endpoint": receiver.endpoint, "error": answer.detail})
                log.warning("%s (an outage begins: its retries are logged at debug, its end at info)", message)
            else:
                log.debug("%s", message)
        else:
            self._outbox.refused(sent, answer.detail)
            self._counters.add(name, "failed", len(sent))
            self._outage_ended(name, state, now, "answers again")  # it is up; the message was refused
            message = "receiver {!r} ({}) refused {} notification(s): {}".format(
                name, receiver.endpoint, len(sent), answer.detail)
            self._record_event(EVENT_KIND, "receiver/" + name, message, "critical", {
                "receiver": name, "endpoint": receiver.endpoint, "answer": answer.detail,
                "alerts": [{"rule": item.alert.rule, "subject": item.alert.subject, "status": item.alert.status}
                           for item in sent]})
            log.error("%s", message)  # after the record, as above

    def _outage_ended(self, name: str, state: _ReceiverState, now: float, how: str) -> None:
        """The service answered: the outage, if there was one, is over (one line, as its start had)."""
        if state.failures:
            since = state.failing_since if state.failing_since is not None else now
            log.info("receiver %r (%s) %s after %d failed attempts over %.0fs", name,
                     self._receivers[name].endpoint, how, state.failures, max(0.0, now - since))
        state.failures, state.next_attempt, state.failing_since = 0, 0.0, None

    def _backoff(self, failures: int, retry_after: Optional[float]) -> float:
        """Exponential, capped, with jitter (half to all of the step) so many hosts do not retry in step;
        at least what the service asked for in Retry-After."""
        step = min(self._notify.retry_max_seconds, self._notify.retry_initial_seconds * 2 ** (failures - 1))
        delay = step * random.uniform(0.5, 1.0)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self._notify.retry_max_seconds))
        return delay

    def _note_outbox_state(self) -> None:
        """The event history hears when the outbox file stops working (the log has it from the outbox)."""
        up = self._outbox.up
        if self._outbox_was_up and not up:
            self._record_event(EVENT_KIND, "outbox", "the notification outbox cannot be written: {}".format(
                self._outbox.error), "warning", {"path": self._outbox.path})
        self._outbox_was_up = up

    def _outbox_failed(self, exc: sqlite3.Error) -> None:
        if not self._closed.is_set():  # after close() the connection is gone on purpose
            log.error("cannot use the notification outbox %s: %s", self._outbox.path, exc)

    def _note_dropped(self, dropped: Dict[str, int], why: str) -> None:
        for receiver, count in sorted(dropped.items()):
            message = "dropped the {} oldest notification(s) for {!r}: {}".format(count, receiver, why)
            log.warning("%s", message)
            self._counters.add(receiver, "dropped", count)
            self._record_event(EVENT_KIND, "receiver/" + receiver, message, "warning", {"dropped": count})
