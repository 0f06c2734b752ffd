"""The daemon's side of the event history: what to record after each evaluation, and one writer thread.

After every evaluation the table job hands over (never waits for the disk) the rule transitions and what
it saw of the chips; the writer thread records, in one transaction per evaluation:

* every fired and resolved finding (shadow findings too, marked `shadow`), keeping the findings table in
  step, so that the next start can `restore` them into the rule engine;
* chips that appeared or disappeared, health changes and new error codes -- compared with what the
  history last knew, so a restart logs only real changes;
* acknowledgements written by `npumon ack` since the last evaluation, passed to the rule engine.

When the file cannot be opened or written, the daemon goes on without history: it logs the reason once,
shows it as the `events` entry of /status `sources` (and `npumon_source_up{source="events"}`) until the file
works again, and reopens it with backoff (up to REOPEN_SECONDS apart); what arrives meanwhile is dropped and
counted. A corrupt file is moved aside and a new one started. A file deleted or replaced while open is
noticed at the next write: what the open file still holds is copied to a new one, and writing goes on. After
any reopen the findings and chips tables are rewritten from memory (the running engine is the truth then),
so sticky findings survive a history that had to start anew.
"""

import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from .observe import Change, SeenChip, chip_changes, observe_chips, transition_change
from .store import (ACKNOWLEDGED, ACTIVE, KINDS, EventStore, EventStoreError, EventStoreGone, FindingRow,
                     KnownChip, NoFile, events_path)
from ..storage import StorageHealth
from ...model import Finding, Snapshot, SourceStatus
from ...rules.engine import FIRED, RESOLVED, RuleEngine
from ...sources.kmsg.state import BOOT_ID_PATH, read_boot_id
from .reboot import clear_after_reboot

log = logging.getLogger(__name__)

SOURCE_NAME = "events"
QUEUE_SIZE = 10000  # evaluations and records waiting for the disk; beyond this they are dropped
REOPEN_SECONDS = 60.0  # the longest wait between attempts to reopen a history that failed (backoff from 1 s)
PRUNE_SECONDS = 3600.0
CLOSE_TIMEOUT_SECONDS = 10.0
LAST_ACK_KEY = "last_applied_ack_id"

Key = Tuple[str, str]  # (rule id, subject)


@dataclass(frozen=True)
class _Evaluation:
    time: float
    chips: Optional[Dict[str, SeenChip]]
    transitions: List[Tuple[str, Finding]]


@dataclass(frozen=True)
class _Record:
    change: Change
    time: float


_PRUNE = object()  # queue items besides _Evaluation, _Record and flush() events
_STOP = object()


class EventService:
    """A daemon Service (see daemon.Service). Also what `ServiceContext.record_event` writes through."""

    name = SOURCE_NAME

    def __init__(self, path: str, retention_seconds: float, engine: Callable[[], RuleEngine],
                 clock: Callable[[], float] = time.time, boot_id: Optional[str] = None):
        """`engine` returns the daemon's current rule engine; `boot_id` the host's (None: not known, no
        reboot is ever seen)."""
        self.path = path
        self._boot_id = boot_id
        self._retention_seconds = retention_seconds
        self._engine = engine
        self._clock = clock
        self._queue: "queue.Queue[Any]" = queue.Queue(maxsize=QUEUE_SIZE)
        self._store: Optional[EventStore] = None
        self._health = StorageHealth("event history", path, log, clock, maximum=REOPEN_SECONDS)
        self._opened = False  # once opened, a reopen writes memory into the file instead of restoring from it
        self._known_chips: Dict[str, KnownChip] = {}
        self._rows: Dict[Key, FindingRow] = {}
        self._last_ack_id = 0
        self._dropped = 0
        self._dropped_lock = threading.Lock()
        self._last_duration: Optional[float] = None
        self._last_success: Optional[float] = None
        self._closed = False
        self._collector = _DroppedCollector(self)
        # Opened here, before the scheduler starts, so the first evaluation already has the restored findings.
        self._open()
        self._thread = threading.Thread(target=self._run, name="events-writer", daemon=True)
        self._thread.start()

    # -- the Service protocol --------------------------------------------------------------------------------

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]:
        return [("events-prune", PRUNE_SECONDS, self._request_prune)]

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None:
        self._enqueue(_Evaluation(snapshot.time, observe_chips(snapshot), list(transitions)), len(transitions))

    def statuses(self) -> Dict[str, SourceStatus]:
        """The history's state, which the daemon shows with the sources of the snapshot it publishes (the
        rules have already judged that snapshot, so a history problem never counts as a failing hardware
        source)."""
        return {SOURCE_NAME: self.status()}

    def collectors(self) -> List[object]:
        return [self._collector]  # the same object each time: the daemon unregisters what it registered

    def close(self) -> None:
        self._closed = True
        try:
            self._queue.put(_STOP, timeout=CLOSE_TIMEOUT_SECONDS)
        except queue.Full:
            pass
        self._thread.join(CLOSE_TIMEOUT_SECONDS)
        if self._thread.is_alive():
            log.warning("event history: the writer is stuck on %s; leaving it behind", self.path)
            return
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- what other services call (ServiceContext.record_event) --------------------------------------------

    def record(self, kind: str, subject: str, message: str, severity: Optional[str] = None,
               details: Optional[Dict[str, Any]] = None, time: Optional[float] = None) -> None:
        """Queue one event for the writer (same arguments as EventStore.record); never waits for the disk."""
        if kind not in KINDS:
            raise ValueError("unknown event kind {!r} (known: {})".format(kind, ", ".join(KINDS)))
        when = self._clock() if time is None else time
        self._enqueue(_Record(Change(kind, subject, severity, message, dict(details or {})), when), 1)

    def status(self) -> SourceStatus:
        ok = self._store is not None
        error = None if ok else (self._health.error or "not opened yet")
        if self._dropped:
            error = "{}{} events dropped since start".format(error + "; " if error else "", self._dropped)
        return SourceStatus(ok=ok, error=error, duration_seconds=self._last_duration, last_success=self._last_success)

    def dropped(self) -> int:
        return self._dropped

    def flush(self, timeout: float = CLOSE_TIMEOUT_SECONDS) -> bool:
        """Wait until everything queued so far is written (or failed); False on timeout."""
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    # -- the writer thread ---------------------------------------------------------------------------------

    def _enqueue(self, item: Any, events: int) -> None:
        if self._closed:
            log.debug("event history closed; not recording %r", item)
            return
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            if not self._dropped:
                log.warning("event history: the writer cannot keep up with %s; dropping events", self.path)
            self._lost(events)

    def _lost(self, events: int) -> None:
        with self._dropped_lock:
            self._dropped += events

    def _request_prune(self) -> None:
        self._enqueue(_PRUNE, 0)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is _STOP:
                return
            if isinstance(item, threading.Event):  # flush(): everything before it is done
                item.set()
                continue
            if self._store is None and self._health.due():
                self._open()
            if self._store is None:
                self._drop(item)
                continue
            self._write_or_recover(item)

    def _write_or_recover(self, item: Any) -> None:
        started = time.monotonic()
        try:
            try:
                self._write(self._store, item)
            except EventStoreGone as exc:
                # Noticed before the transaction began: nothing of `item` is written yet, so once what the old
                # file still holds is saved into a new one, `item` is written there.
                self._replace_gone(str(exc))
                if self._store is None:
                    self._drop(item)
                    return
                self._write(self._store, item)
        except EventStoreError as exc:
            self._close_failed(str(exc))
            self._drop(item)
            return
        except Exception:  # noqa: BLE001 - a bug here must not end the writer thread
            log.exception("event history: writing failed")
            return
        self._last_duration = time.monotonic() - started
        self._last_success = self._clock()

    def _drop(self, item: Any) -> None:
        """Count the item's events as dropped, but keep what it means for the findings and chips in memory
        (written to the file when it works again): a sticky finding that fires while the disk is broken
        must still be restored after a restart."""
        self._lost(_event_count(item))
        try:
            self._write(NoFile(), item)  # type: ignore[arg-type]
        except Exception:  # noqa: BLE001 - a bug here must not end the writer thread
            log.exception("event history: keeping the state of an unwritten evaluation failed")

    def _replace_gone(self, why: str) -> None:
        store, self._store = self._store, None
        assert store is not None
        try:
            rescued = store.rescue()
        except EventStoreError as exc:
            why, rescued = "{}; {}".format(why, exc), False
        self._health.failed("{} ({})".format(why, "its content is copied to a new file" if rescued
                                              else "starting from the file now there"), retry_now=True)
        self._open()

    def _close_failed(self, why: str) -> None:
        store, self._store = self._store, None
        if store is not None:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - the connection of a failed disk may fail to close too
                pass
        self._health.failed(self._running_without(why))

    def _running_without(self, why: str) -> str:
        return "{} (running without event history; retrying with backoff up to {:.0f}s)".format(
            why, self._health.maximum)

    def _write(self, store: EventStore, item: Any) -> None:
        if item is _PRUNE:
            removed = store.prune(self._clock())
            if removed:
                log.info("event history: pruned %d events older than %.0f days", removed,
                         self._retention_seconds / 86400)
        elif isinstance(item, _Record):
            self._store_change(store, item.change, item.time)
        else:
            with store.batch():
                self._write_evaluation(store, item)

    def _write_evaluation(self, store: EventStore, evaluation: _Evaluation) -> None:
        # Chip changes first: a chip appears (or turns Alarm) before the finding about it fires.
        if evaluation.chips is not None:
            changes, after = chip_changes(self._known_chips, evaluation.chips)
            for change in changes:
                self._store_change(store, change, evaluation.time)
            for subject in set(self._known_chips) - set(after):
                store.delete_chip(subject)
            for subject, chip in after.items():
                if self._known_chips.get(subject) != chip:
                    store.put_chip(chip)
            self._known_chips = after
        for kind, finding in evaluation.transitions:
            self._write_transition(store, kind, finding, evaluation.time)
        self._apply_acknowledgements(store)
        self._forget_cleared_acknowledgements(store)

    def _write_transition(self, store: EventStore, kind: str, finding: Finding, when: float) -> None:
        key = (finding.rule, finding.subject)
        if kind == FIRED:
            event_id = self._store_change(store, transition_change(kind, finding), when)
            store.put_finding(finding, ACTIVE, event_id)
            self._rows[key] = FindingRow(ACTIVE, finding, event_id)
            return
        row = self._rows.get(key)
        acknowledged = row is not None and row.state == ACKNOWLEDGED
        self._store_change(store, transition_change(kind, finding, "acknowledged" if acknowledged else None), when)
        if not acknowledged:  # an acknowledged row stays until the engine lets go of the acknowledgement
            store.delete_finding(*key)
            self._rows.pop(key, None)

    def _apply_acknowledgements(self, store: EventStore) -> None:
        """`npumon ack` only writes an event; the engine hears of it here."""
        acks = store.query(kinds=("finding_acknowledged",), after_id=self._last_ack_id)
        for ack in acks:
            key = ((ack.details or {}).get("rule", ""), ack.subject)
            row = self._rows.get(key)
            engine = self._engine()
            # Already held: this acknowledgement reached the engine before a write failed; apply it again.
            if engine.acknowledge(*key) or (row is not None and row.state == ACTIVE and key in engine.acknowledged()):
                log.info("acknowledged %s on %s", *key)
                if row is not None:
                    store.put_finding(row.finding, ACKNOWLEDGED, ack.id)
                    self._rows[key] = FindingRow(ACKNOWLEDGED, row.finding, ack.id)
            else:
                log.info("acknowledgement of %s on %s: that finding is not active (any more)", *key)
            self._last_ack_id = max(self._last_ack_id, ack.id)
        if acks:
            store.set_meta(LAST_ACK_KEY, str(self._last_ack_id))

    def _forget_cleared_acknowledgements(self, store: EventStore) -> None:
        """The engine drops an acknowledgement once the condition has cleared (the next occurrence fires
        again); so does the findings table."""
        held = set(self._engine().acknowledged())
        for key, row in list(self._rows.items()):
            if row.state == ACKNOWLEDGED and key not in held:
                store.delete_finding(*key)
                del self._rows[key]

    def _store_change(self, store: EventStore, change: Change, when: float) -> int:
        return store.record(change.kind, change.subject, change.message, change.severity, change.details or None,
                            time=when)

    # -- opening and restoring -------------------------------------------------------------------------------

    def _open(self) -> None:
        store = None
        first = not self._opened
        try:
            store = EventStore(self.path, self._retention_seconds, recover=True, check=not first)
            with store.batch():
                if first:
                    self._restore(store)
                else:
                    self._write_memory(store)
                store.prune(self._clock())
        except EventStoreError as exc:
            if store is not None:
                store.close()
            self._health.failed(self._running_without(str(exc)))
            return
        self._store = store
        self._opened = True
        self._health.recovered()
        if first:
            log.info("event history: %s (findings taken over: %d, chips known: %d)", self.path,
                     sum(1 for row in self._rows.values() if row.state == ACTIVE), len(self._known_chips))

    def _write_memory(self, store: EventStore) -> None:
        """A reopened file may be an older one or a new one: it gets the findings and chips this run holds.
        Ids the file never had are forgotten, so acknowledgements written to it are not mistaken for old."""
        last_id = store.last_event_id()
        self._last_ack_id = min(self._last_ack_id, last_id)
        self._rows = {key: row if row.event_id <= last_id else row._replace(event_id=0)
                      for key, row in self._rows.items()}
        store.replace_state(list(self._rows.values()), list(self._known_chips.values()))
        store.set_meta(LAST_ACK_KEY, str(self._last_ack_id))

    def _restore(self, store: EventStore) -> None:
        """Take over what the last run left: acknowledgements made while no daemon ran, then the active and
        acknowledged findings into the rule engine, and the chips as last seen."""
        now = self._clock()
        self._last_ack_id = int(store.get_meta(LAST_ACK_KEY) or 0)
        rows = {(row.finding.rule, row.finding.subject): row for row in store.finding_rows()}
        for ack in store.query(kinds=("finding_acknowledged",), after_id=self._last_ack_id):
            key = ((ack.details or {}).get("rule", ""), ack.subject)
            row = rows.get(key)
            if row is not None and row.state == ACTIVE and ack.id > row.event_id:
                self._store_change(store, transition_change(RESOLVED, row.finding, "acknowledged"), now)
                store.put_finding(row.finding, ACKNOWLEDGED, ack.id)
                rows[key] = FindingRow(ACKNOWLEDGED, row.finding, ack.id)
            self._last_ack_id = max(self._last_ack_id, ack.id)
        store.set_meta(LAST_ACK_KEY, str(self._last_ack_id))
        for key, row in clear_after_reboot(store, rows, self._boot_id, self._engine().cleared_by_reboot(), now):
            if row.state == ACTIVE:
                self._store_change(store, transition_change(RESOLVED, row.finding, "the host rebooted"), now)
        active = [row.finding for row in rows.values() if row.state == ACTIVE]
        acknowledged = [row.finding for row in rows.values() if row.state == ACKNOWLEDGED]
        for key in self._engine().restore(active, [(f.rule, f.subject) for f in acknowledged], acknowledged):
            row = rows.pop(key)
            if row.state == ACTIVE:
                self._store_change(store, transition_change(RESOLVED, row.finding, "rule no longer loaded"), now)
            store.delete_finding(*key)
        self._rows = rows
        self._known_chips = store.known_chips()


def _event_count(item: Any) -> int:
    if isinstance(item, _Evaluation):
        return len(item.transitions)
    return 1 if isinstance(item, _Record) else 0


class _DroppedCollector:
    def __init__(self, service: EventService):
        self._service = service

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily("npumon_events_dropped", "Events the history could not store (queue full "
                                                               "or the file not writable) since the daemon started.")
        family.add_metric([], self._service.dropped())
        yield family


def open_event_history(config: Any, engine: Callable[[], RuleEngine],
                       clock: Callable[[], float] = time.time) -> Optional[EventService]:
    """The event history the config keeps (None: events.enabled is false). `config`: the whole Config."""
    if not config.events.enabled:
        return None
    boot_id = read_boot_id(os.path.join(config.root, BOOT_ID_PATH))
    return EventService(events_path(config.state_dir), config.events.retention_days * 86400, engine, clock=clock,
                        boot_id=boot_id)


def event_services(context: Any) -> List[EventService]:
    """The event history as a service, when the config keeps one. `context`: the ServiceContext
    (services/context.py), which opened the history so that every service can record into it, whatever order
    they are built in."""
    return [] if context.events is None else [context.events]
