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
"""

import json
import os
import sqlite3
import threading
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from .alert import FIRING, Alert

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
    def __init__(self, state_dir: str, max_pending: int):
        self.path = os.path.join(state_dir, OUTBOX_FILE)
        self.max_pending = max_pending
        self._lock = threading.Lock()
        try:
            os.makedirs(state_dir, exist_ok=True)
            self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=10)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise OutboxError("cannot open the notification outbox {}: {}".format(
                self.path, getattr(exc, "strerror", None) or exc)) from None

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writes from the rule evaluation ------------------------------------------------------------

    def firing(self) -> Dict[Tuple[str, str], Alert]:
        """(receiver, fingerprint) -> the firing alert that receiver was told about."""
        with self._lock:
            rows = self._db.execute("SELECT receiver, fingerprint, alert FROM firing").fetchall()
        return {(receiver, key): Alert.from_json(json.loads(alert)) for receiver, key, alert in rows}

    def record(self, fired: Sequence[Tuple[str, Alert]], resolved: Sequence[Tuple[str, Alert, bool]],
               now: float) -> Dict[str, int]:
        """In one transaction: start tracking `fired` alerts and queue their notifications; stop tracking
        `resolved` ones and queue a notification where the bool says so. Returns {receiver: dropped}."""
        with self._lock, self._transaction():
            for receiver, alert in fired:
                self._db.execute("INSERT OR REPLACE INTO firing (receiver, fingerprint, alert, last_sent) "
                                 "VALUES (?, ?, ?, ?)", (receiver, alert.fingerprint, _dump(alert), now))
                self._queue(receiver, alert, now)
            for receiver, alert, notify in resolved:
                self._db.execute("DELETE FROM firing WHERE receiver = ? AND fingerprint = ?",
                                 (receiver, alert.fingerprint))
                if notify:
                    self._queue(receiver, alert, now)
            return self._enforce_bound()

    def queue_repeats(self, repeat_seconds: Dict[str, float], now: float) -> Dict[str, int]:
        """Queue a firing notification again for every alert whose receiver repeats, that was last sent
        `repeat_seconds` ago or longer, and that has nothing pending. Returns {receiver: dropped}."""
        with self._lock, self._transaction():
            for receiver, seconds in repeat_seconds.items():
                if seconds <= 0:
                    continue
                due = self._db.execute(
                    "SELECT fingerprint, alert FROM firing f WHERE receiver = ? AND last_sent <= ? AND NOT EXISTS "
                    "(SELECT 1 FROM notifications n WHERE n.receiver = f.receiver AND "
                    "n.fingerprint = f.fingerprint AND n.state = 'pending')",
                    (receiver, now - seconds)).fetchall()
                for key, alert in due:
                    self._queue(receiver, Alert.from_json(json.loads(alert)), now)
                    self._db.execute("UPDATE firing SET last_sent = ? WHERE receiver = ? AND fingerprint = ?",
                                     (now, receiver, key))
            return self._enforce_bound()

    def forget_receivers_except(self, names: Iterable[str]) -> Dict[str, int]:
        """Drop what is queued or tracked for receivers no longer configured. Returns {receiver: dropped}."""
        keep = sorted(set(names))
        marks = ",".join("?" * len(keep)) or "NULL"
        with self._lock, self._transaction():
            rows = self._db.execute("SELECT receiver, COUNT(*) FROM notifications WHERE state = 'pending' AND "
                                    "receiver NOT IN ({}) GROUP BY receiver".format(marks), keep).fetchall()
            self._db.execute("DELETE FROM notifications WHERE receiver NOT IN ({})".format(marks), keep)
            self._db.execute("DELETE FROM firing WHERE receiver NOT IN ({})".format(marks), keep)
        return dict(rows)

    # -- reads and writes from delivery -------------------------------------------------------------

    def pending(self, receiver: str, limit: int) -> List[Notification]:
        with self._lock:
            rows = self._db.execute(
                "SELECT id, receiver, alert, created, attempts FROM notifications "
                "WHERE receiver = ? AND state = 'pending' ORDER BY id LIMIT ?", (receiver, limit)).fetchall()
        return [Notification(id=row[0], receiver=row[1], alert=Alert.from_json(json.loads(row[2])),
                             created=row[3], attempts=row[4]) for row in rows]

    def delivered(self, notifications: Sequence[Notification], now: float) -> None:
        with self._lock, self._transaction():
            for item in notifications:
                self._db.execute("DELETE FROM notifications WHERE id = ?", (item.id,))
                if item.alert.status == FIRING:
                    self._db.execute("UPDATE firing SET last_sent = ? WHERE receiver = ? AND fingerprint = ?",
                                     (now, item.receiver, item.alert.fingerprint))

    def attempt_failed(self, notifications: Sequence[Notification], error: str) -> None:
        """A retryable failure: the notifications stay pending."""
        with self._lock, self._transaction():
            self._db.executemany("UPDATE notifications SET attempts = attempts + 1, last_error = ? WHERE id = ?",
                                 [(error, item.id) for item in notifications])

    def refused(self, notifications: Sequence[Notification], answer: str) -> None:
        """The receiver refused them for good: keep them as failed, with its answer."""
        with self._lock, self._transaction():
            self._db.executemany("UPDATE notifications SET attempts = attempts + 1, state = 'failed', "
                                 "last_error = ? WHERE id = ?", [(answer, item.id) for item in notifications])
            self._db.execute("DELETE FROM notifications WHERE state = 'failed' AND id NOT IN "
                             "(SELECT id FROM notifications WHERE state = 'failed' ORDER BY id DESC LIMIT ?)",
                             (KEEP_FAILED,))

    def backlog(self) -> Dict[str, ReceiverBacklog]:
        with self._lock:
            rows = self._db.execute("SELECT receiver, COUNT(*), MIN(created) FROM notifications "
                                    "WHERE state = 'pending' GROUP BY receiver").fetchall()
        return {receiver: ReceiverBacklog(count, oldest) for receiver, count, oldest in rows}

    # -- internals ------------------------------------------------------------------------------------

    def _queue(self, receiver: str, alert: Alert, now: float) -> None:
        self._db.execute("INSERT INTO notifications (receiver, fingerprint, status, alert, created) "
                         "VALUES (?, ?, ?, ?, ?)", (receiver, alert.fingerprint, alert.status, _dump(alert), now))

    def _enforce_bound(self) -> Dict[str, int]:
        (count,) = self._db.execute("SELECT COUNT(*) FROM notifications WHERE state = 'pending'").fetchone()
        excess = count - self.max_pending
        if excess <= 0:
            return {}
        oldest = self._db.execute("SELECT id, receiver FROM notifications WHERE state = 'pending' "
                                  "ORDER BY id LIMIT ?", (excess,)).fetchall()
        dropped: Dict[str, int] = {}
        for row_id, receiver in oldest:
            self._db.execute("DELETE FROM notifications WHERE id = ?", (row_id,))
            dropped[receiver] = dropped.get(receiver, 0) + 1
        return dropped

    def _transaction(self):
        return _Transaction(self._db)


class _Transaction:
    """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on an exception (the connection runs in autocommit mode)."""

    def __init__(self, db: sqlite3.Connection):
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, traceback) -> None:
        self._db.execute("COMMIT" if exc_type is None else "ROLLBACK")


def _dump(alert: Alert) -> str:
    return json.dumps(alert.to_json(), sort_keys=True, ensure_ascii=False)
