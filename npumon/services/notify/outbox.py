"""The durable outbox: `<state_dir>/outbox.sqlite`.

Two tables. `notifications` holds every notification not yet delivered: it is written (and committed)
before any attempt to send it, and a row is deleted only after the receiver accepted it, so a crash or a
`kill -9` at any moment loses nothing -- at worst a notification is sent twice, and receivers recognise
the repeat by its key. Rows a receiver refused for good stay as `failed`, with the service's answer,
until newer failures push them out. `firing` remembers, per receiver, the alerts it was told are firing:
it decides what a restarted daemon still owes (a resolved notification, a repeat) and keeps a finding that
fires again after a restart from being announced twice.

The outbox is bounded: past `max_pending` undelivered notifications the oldest are dropped, and the
caller is told how many per receiver so it can log and count them.

One connection, shared by the daemon's threads under a lock; every method is one short transaction.
WAL with synchronous=FULL: a commit survives the process dying and the power going.

When the file fails -- it cannot be opened, a write fails, it was deleted or replaced -- the outbox goes on
in an SQLite database in memory (a copy of the file where it can still be read), so notifications are
still queued and sent, and counted as unpersisted. Every call retries the file once its backoff has passed
(storage.StorageHealth: 1 s doubling to 60 s); when it opens (a corrupt one is moved aside first), what
memory holds is saved into it. Only a daemon that stops while the file still fails loses what memory held.
"""

import json
import logging
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from ..storage import FileId, StorageHealth, file_id, open_database, reason
from .alert import FIRING, Alert

log = logging.getLogger(__name__)
T = TypeVar("T")

OUTBOX_FILE = "outbox.sqlite"
PENDING = "pending"
FAILED = "failed"
KEEP_FAILED = 1000  # refused notifications kept for inspection

_SCHEMA = """
CREATE TABLE IF NOT EXISTS notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    receiver TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status TEXT NOT NULL,           -- firing | resolved
    alert TEXT NOT NULL,            -- Alert as JSON
    created REAL NOT NULL,          -- unix time it was queued
    attempts INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'pending',   -- pending | failed
    last_error TEXT
);
CREATE INDEX IF NOT EXISTS notifications_by_receiver ON notifications (receiver, state, id);
CREATE TABLE IF NOT EXISTS firing (
    receiver TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    alert TEXT NOT NULL,
    last_sent REAL NOT NULL,        -- when it was last queued or delivered: the repeat clock
    PRIMARY KEY (receiver, fingerprint)
);
"""


class OutboxError(Exception):
    """The outbox file cannot be opened or written; one line."""


@dataclass(frozen=True)
class Notification:
    id: int
    receiver: str
    alert: Alert
    created: float
    attempts: int


@dataclass(frozen=True)
class ReceiverBacklog:
    pending: int
    oldest_created: Optional[float]


class Outbox:
    def __init__(self, state_dir: str, max_pending: int, clock: Callable[[], float] = time.time):
        """Never raises for the file: an outbox that cannot be opened starts in memory and retries."""
        self.path = os.path.join(state_dir, OUTBOX_FILE)
        self.max_pending = max_pending
        self._lock = threading.Lock()
        self._health = StorageHealth("notification outbox", self.path, log, clock)
        self._file: Optional[sqlite3.Connection] = None
        self._file_id: Optional[FileId] = None
        self._memory: Optional[sqlite3.Connection] = None
        self._memory_is_copy = False  # the memory holds everything the file held (else: merge it in)
        self._unpersisted: Dict[str, int] = {}
        self._closed = False
        with self._lock:
            self._reopen(check=False)

    @property
    def up(self) -> bool:
        """True while notifications are committed to the file; False while they are kept in memory only."""
        return self._file is not None

    @property
    def error(self) -> Optional[str]:
        """Why the file is not in use, or None."""
        return self._health.error

    def unpersisted(self) -> Dict[str, int]:
        """Receiver -> notifications queued since start while the file could not be written."""
        with self._lock:
            return dict(self._unpersisted)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            if self._file is None and not self._reopen(check=True):
                waiting = self._memory_pending()
                if waiting:
                    log.warning("notification outbox: %d notification(s) held only in memory are lost: %s "
                                "cannot be written", waiting, self.path)
            for conn in (self._file, self._memory):
                if conn is not None:
                    _close_quietly(conn)
            self._file = self._memory = None
            self._closed = True

    # -- writes from the rule evaluation ------------------------------------------------------------

    def firing(self) -> Dict[Tuple[str, str], Alert]:
        """(receiver, fingerprint) -> the firing alert that receiver was told about."""
        rows = self._run(lambda db: db.execute("SELECT receiver, fingerprint, alert FROM firing").fetchall())
        return {(receiver, key): Alert.from_json(json.loads(alert)) for receiver, key, alert in rows}

    def record(self, fired: Sequence[Tuple[str, Alert]], resolved: Sequence[Tuple[str, Alert, bool]],
               now: float) -> Dict[str, int]:
        """In one transaction: start tracking `fired` alerts and queue their notifications; stop tracking
        `resolved` ones and queue a notification where the bool says so. Returns {receiver: dropped}."""
        def work(db: sqlite3.Connection) -> Dict[str, int]:
            with _Transaction(db):
                for receiver, alert in fired:
                    db.execute("INSERT OR REPLACE INTO firing (receiver, fingerprint, alert, last_sent) "
                               "VALUES (?, ?, ?, ?)", (receiver, alert.fingerprint, _dump(alert), now))
                    self._queue(db, receiver, alert, now)
                for receiver, alert, notify in resolved:
                    db.execute("DELETE FROM firing WHERE receiver = ? AND fingerprint = ?",
                               (receiver, alert.fingerprint))
                    if notify:
                        self._queue(db, receiver, alert, now)
                return self._enforce_bound(db)
        return self._run(work)

    def queue_repeats(self, repeat_seconds: Dict[str, float], now: float) -> Dict[str, int]:
        """Queue a firing notification again for every alert whose receiver repeats, that was last sent
        `repeat_seconds` ago or longer, and that has nothing pending. Returns {receiver: dropped}."""
        def work(db: sqlite3.Connection) -> Dict[str, int]:
            with _Transaction(db):
                for receiver, seconds in repeat_seconds.items():
                    if seconds <= 0:
                        continue
                    due = db.execute(
                        "SELECT fingerprint, alert FROM firing f WHERE receiver = ? AND last_sent <= ? AND NOT EXISTS "
                        "(SELECT 1 FROM notifications n WHERE n.receiver = f.receiver AND "
                        "n.fingerprint = f.fingerprint AND n.state = 'pending')",
                        (receiver, now - seconds)).fetchall()
                    for key, alert in due:
                        self._queue(db, receiver, Alert.from_json(json.loads(alert)), now)
                        db.execute("UPDATE firing SET last_sent = ? WHERE receiver = ? AND fingerprint = ?",
                                   (now, receiver, key))
                return self._enforce_bound(db)
        return self._run(work)

    def next_repeats(self, repeat_seconds: Dict[str, float]) -> Dict[str, float]:
        """Receiver -> when its next repeat falls due (what queue_repeats would queue then), for the receivers
        that repeat and have a firing alert with nothing pending."""
        rows = self._run(lambda db: db.execute(
            "SELECT receiver, MIN(last_sent) FROM firing f WHERE NOT EXISTS (SELECT 1 FROM notifications n "
            "WHERE n.receiver = f.receiver AND n.fingerprint = f.fingerprint AND n.state = 'pending') "
            "GROUP BY receiver").fetchall())
        return {receiver: last_sent + repeat_seconds[receiver] for receiver, last_sent in rows
                if repeat_seconds.get(receiver, 0) > 0}

    def forget_receivers_except(self, names: Iterable[str]) -> Dict[str, int]:
        """Drop what is queued or tracked for receivers no longer configured. Returns {receiver: dropped}."""
        keep = sorted(set(names))
        marks = ",".join("?" * len(keep)) or "NULL"

        def work(db: sqlite3.Connection) -> Dict[str, int]:
            with _Transaction(db):
                rows = db.execute("SELECT receiver, COUNT(*) FROM notifications WHERE state = 'pending' AND "
                                  "receiver NOT IN ({}) GROUP BY receiver".format(marks), keep).fetchall()
                db.execute("DELETE FROM notifications WHERE receiver NOT IN ({})".format(marks), keep)
                db.execute("DELETE FROM firing WHERE receiver NOT IN ({})".format(marks), keep)
            return dict(rows)
        return self._run(work)

    # -- reads and writes from delivery -------------------------------------------------------------

    def pending(self, receiver: str, limit: int) -> List[Notification]:
        rows = self._run(lambda db: db.execute(
            "SELECT id, receiver, alert, created, attempts FROM notifications "
            "WHERE receiver = ? AND state = 'pending' ORDER BY id LIMIT ?", (receiver, limit)).fetchall())
        return [Notification(id=row[0], receiver=row[1], alert=Alert.from_json(json.loads(row[2])),
                             created=row[3], attempts=row[4]) for row in rows]

    def delivered(self, notifications: Sequence[Notification], now: float) -> None:
        def work(db: sqlite3.Connection) -> None:
            with _Transaction(db):
                for item in notifications:
                    db.execute("DELETE FROM notifications WHERE id = ?", (item.id,))
                    if item.alert.status == FIRING:
                        db.execute("UPDATE firing SET last_sent = ? WHERE receiver = ? AND fingerprint = ?",
                                   (now, item.receiver, item.alert.fingerprint))
        self._run(work)

    def attempt_failed(self, notifications: Sequence[Notification], error: str) -> None:
        """A retryable failure: the notifications stay pending."""
        def work(db: sqlite3.Connection) -> None:
            with _Transaction(db):
                db.executemany("UPDATE notifications SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                               [(error, item.id) for item in notifications])
        self._run(work)

    def refused(self, notifications: Sequence[Notification], answer: str) -> None:
        """The receiver refused them for good: keep them as failed, with its answer."""
        def work(db: sqlite3.Connection) -> None:
            with _Transaction(db):
                db.executemany("UPDATE notifications SET attempts = attempts + 1, state = 'failed', "
                               "last_error = ? WHERE id = ?", [(answer, item.id) for item in notifications])
                db.execute("DELETE FROM notifications WHERE state = 'failed' AND id NOT IN "
                           "(SELECT id FROM notifications WHERE state = 'failed' ORDER BY id DESC LIMIT ?)",
                           (KEEP_FAILED,))
        self._run(work)

    def backlog(self) -> Dict[str, ReceiverBacklog]:
        rows = self._run(lambda db: db.execute("SELECT receiver, COUNT(*), MIN(created) FROM notifications "
                                               "WHERE state = 'pending' GROUP BY receiver").fetchall())
        return {receiver: ReceiverBacklog(count, oldest) for receiver, count, oldest in rows}

    # -- the file, or memory while the file fails -----------------------------------------------------

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """`work` on the file; if the file fails (or was deleted or replaced), on memory instead. Every
        call is also where a broken file is retried, when its backoff has passed."""
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("the notification outbox is closed")
            if self._file is not None and file_id(self.path) != self._file_id:
                self._lose_file("{} was deleted or replaced while in use".format(self.path), retry_now=True)
            if self._file is None and self._health.due():
                self._reopen(check=True)
            if self._file is not None:
                try:
                    return work(self._file)
                except sqlite3.Error as exc:
                    self._lose_file("cannot write {}: {}".format(self.path, reason(exc)))
            assert self._memory is not None
            return work(self._memory)

    def _lose_file(self, why: str, retry_now: bool = False) -> None:
        """Go on in memory: with a copy of what the file still shows where it can be read."""
        assert self._file is not None
        memory = _memory_database()
        try:
            self._file.backup(memory)
            copied = True
        except sqlite3.Error:
            _close_quietly(memory)
            memory, copied = _memory_database(), False
        _close_quietly(self._file)
        now_there = file_id(self.path)
        replaced = now_there is not None and now_there != self._file_id  # merge into that one, do not overwrite
        self._file, self._file_id = None, None
        self._memory, self._memory_is_copy = memory, copied and not replaced
        self._health.failed("{} (notifications are kept in memory and still sent; retrying with backoff up to "
                            "{:.0f}s)".format(why, self._health.maximum), retry_now)

    def _reopen(self, check: bool) -> bool:
        """Open the file (a corrupt one is moved aside) and save into it what memory holds; False if not."""
        conn = None
        try:
            conn, identity = open_database(self.path, _prepare, log, "notification outbox", timeout=10, check=check)
            saved = 0 if self._memory is None else _save(self._memory, conn, self._memory_is_copy)
        except (OSError, sqlite3.Error) as exc:
            if conn is not None:
                _close_quietly(conn)
            if self._memory is None:
                self._memory, self._memory_is_copy = _memory_database(), False
            self._health.failed("cannot open {}: {} (notifications are kept in memory and still sent; retrying "
                                "with backoff up to {:.0f}s)".format(self.path, reason(exc), self._health.maximum))
            return False
        if self._memory is not None:
            _close_quietly(self._memory)
        self._file, self._file_id, self._memory = conn, identity, None
        self._health.recovered("; saved the {} notification(s) kept in memory to it".format(saved) if saved else "")
        return True

    def _memory_pending(self) -> int:
        if self._memory is None:
            return 0
        return self._memory.execute("SELECT COUNT(*) FROM notifications WHERE state = 'pending'").fetchone()[0]

    def _queue(self, db: sqlite3.Connection, receiver: str, alert: Alert, now: float) -> None:
        db.execute("INSERT INTO notifications (receiver, fingerprint, status, alert, created) "
                   "VALUES (?, ?, ?, ?, ?)", (receiver, alert.fingerprint, alert.status, _dump(alert), now))
        if db is self._memory:  # rolled back with its transaction only if memory fails too, which it does not
            self._unpersisted[receiver] = self._unpersisted.get(receiver, 0) + 1

    def _enforce_bound(self, db: sqlite3.Connection) -> Dict[str, int]:
        (count,) = db.execute("SELECT COUNT(*) FROM notifications WHERE state = 'pending'").fetchone()
        excess = count - self.max_pending
        if excess <= 0:
            return {}
        oldest = db.execute("SELECT id, receiver FROM notifications WHERE state = 'pending' "
                            "ORDER BY id LIMIT ?", (excess,)).fetchall()
        dropped: Dict[str, int] = {}
        for row_id, receiver in oldest:
            db.execute("DELETE FROM notifications WHERE id = ?", (row_id,))
            dropped[receiver] = dropped.get(receiver, 0) + 1
        return dropped


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception (the connection runs in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection):
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc_type is None:
            self._db.execute("COMMIT")
        elif self._db.in_transaction:
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:  # the disk that failed the statement may fail this too; the first error counts
                pass


def _prepare(db: sqlite3.Connection) -> None:
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(_SCHEMA)


def _memory_database() -> sqlite3.Connection:
    """Where notifications wait while the file fails: not the disk, so never the failing connection class."""
    db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    db.executescript(_SCHEMA)
    return db


_COLUMNS = "receiver, fingerprint, status, alert, created, attempts, state, last_error"


def _save(memory: sqlite3.Connection, file: sqlite3.Connection, overwrite: bool) -> int:
    """Write what memory holds into the reopened file, in one transaction; returns the pending count.
    `overwrite`: memory started as a copy of this file, so it is the whole truth (ids kept). Otherwise the
    file may hold what memory never saw: memory's notifications are added, and an alert memory resolved
    stops being tracked."""
    rows = memory.execute("SELECT id, {} FROM notifications ORDER BY id".format(_COLUMNS)).fetchall()
    firing = memory.execute("SELECT receiver, fingerprint, alert, last_sent FROM firing").fetchall()
    with _Transaction(file):
        if overwrite:
            file.execute("DELETE FROM notifications")
            file.execute("DELETE FROM firing")
            file.executemany("INSERT INTO notifications (id, {}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)".format(_COLUMNS),
                             rows)
        else:
            file.executemany("INSERT INTO notifications ({}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)".format(_COLUMNS),
                             [row[1:] for row in rows])
            file.executemany("DELETE FROM firing WHERE receiver = ? AND fingerprint = ?",
                             [(row[1], row[2]) for row in rows if row[3] != FIRING])
        file.executemany("INSERT OR REPLACE INTO firing (receiver, fingerprint, alert, last_sent) "
                         "VALUES (?, ?, ?, ?)", firing)
    return sum(1 for row in rows if row[7] == PENDING)


def _close_quietly(db: sqlite3.Connection) -> None:
    try:
        db.close()
    except sqlite3.Error:
        pass


def _dump(alert: Alert) -> str:
    return json.dumps(alert.to_json(), sort_keys=True, ensure_ascii=False)
