"""The event history: one SQLite file of what happened on this host, kept for `retention` and read by
`npumon events` while the daemon writes it.

Tables (schema version SCHEMA_VERSION, kept in `PRAGMA user_version`):

    events    one row per event (`Event`); rows older than the retention are pruned
    findings  the findings the daemon holds active or acknowledged, so that a restart takes them over
              (sticky ones stay until acknowledged) however long ago they fired; never pruned
    chips     the chips last seen with their health and error codes, so that a restart compares with
              them instead of logging every chip again; never pruned
    meta      small daemon state (the last acknowledgement it applied)

The file is in WAL mode: readers never block the writer and see only committed transactions, and a
`kill -9` loses at most the transaction in flight, never the file. Every write is one short
`BEGIN IMMEDIATE` transaction; `busy_timeout` lets the daemon and `npumon ack` take turns.
Every problem is an EventStoreError whose message is one line naming the file.
"""

import contextlib
import json
import logging
import os
import sqlite3
import threading
import time as time_module
import urllib.parse
from dataclasses import dataclass, fields
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Tuple

from .. import storage
from ...model import Finding

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
DEFAULT_RETENTION_SECONDS = 30 * 86400
BUSY_TIMEOUT_SECONDS = 5.0
FILE_NAME = "events.sqlite"

# Every kind of event. A new kind is one more name here (record() refuses unknown kinds, so that a typo
# cannot create events nobody can filter for).
KINDS = (
    "finding_fired", "finding_resolved", "finding_acknowledged",
    "health_changed", "error_code_new", "chip_appeared", "chip_disappeared",
    "control_action", "control_refused", "probe_failed", "notification_failed", "host_rebooted",
    "diag_completed",
    "handoff_action", "handoff_problem",  # what a cluster hand-off sink sent (or would), and what kept it from it
    "verdict_changed",
)

# The states of a row in the findings table.
ACTIVE = "active"
ACKNOWLEDGED = "acknowledged"

_SCHEMA = """
CREATE TABLE events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,  -- never reused, even after pruning: readers page by id
    time REAL NOT NULL,                    -- unix time
    kind TEXT NOT NULL,
    subject TEXT NOT NULL,                 -- "host" or "npu<N>/chip<C>"
    severity TEXT,
    message TEXT NOT NULL,
    details TEXT                           -- JSON object or NULL
);
CREATE INDEX events_time ON events (time);
CREATE INDEX events_kind_id ON events (kind, id);
CREATE TABLE findings (
    rule TEXT NOT NULL,
    subject TEXT NOT NULL,
    state TEXT NOT NULL,                   -- active | acknowledged
    finding TEXT NOT NULL,                 -- JSON of the Finding
    event_id INTEGER NOT NULL,             -- the finding_fired (or finding_acknowledged) event
    PRIMARY KEY (rule, subject)
);
CREATE TABLE chips (
    subject TEXT PRIMARY KEY,
    name TEXT,
    bus_id TEXT,
    health TEXT,
    error_codes TEXT NOT NULL              -- JSON list of hex strings
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_TABLES = ("chips", "events", "findings", "meta")


@dataclass(frozen=True)
class EventsConfig:
    """The `events:` section of the config."""

    enabled: bool = True
    retention_days: float = 30.0  # events older than this are deleted (the daemon prunes hourly)


def events_config_problems(config: EventsConfig) -> List[Tuple[str, str]]:
    """(dotted key, problem) for every setting that cannot work; config.py turns the first into its error."""
    if config.retention_days <= 0:
        return [("events.retention_days", "must be greater than 0")]
    return []


@dataclass(frozen=True)
class Event:
    id: int
    time: float  # unix time
    kind: str
    subject: str  # "host" or "npu<N>/chip<C>"
    severity: Optional[str]  # info | warning | critical, or None
    message: str
    details: Optional[Dict[str, Any]]


class FindingRow(NamedTuple):
    state: str  # ACTIVE | ACKNOWLEDGED
    finding: Finding
    event_id: int


@dataclass(frozen=True)
class KnownChip:
    """A chip as the history last saw it."""

    subject: str
    name: Optional[str] = None
    bus_id: Optional[str] = None
    health: Optional[str] = None
    error_codes: Tuple[str, ...] = ()


class EventStoreError(Exception):
    """One line naming the file and what is wrong with it."""


class EventStoreGone(EventStoreError):
    """The file opened is no longer the one at the path: deleted, or replaced by another."""


def require_readable(path: str) -> None:
    """Raise EventStoreError with the true reason when this user cannot read the history at `path`: not there,
    or permission denied (os.path.exists says False for a file in a directory closed to the user, and SQLite
    says only "unable to open database file")."""
    try:
        os.stat(path)
    except PermissionError:
        raise EventStoreError("{}: permission denied: its directory is closed to this user (run as root or as "
                              "the user npumon runs as)".format(path)) from None
    except OSError:
        raise EventStoreError("{}: no event history here (`npumon run` creates it; is state_dir in the config "
                              "right?)".format(path)) from None
    if not os.access(path, os.R_OK):
        raise EventStoreError("{}: permission denied: this user cannot read it (run as root or as the user "
                              "npumon runs as)".format(path))


def events_path(state_dir: str) -> str:
    return os.path.join(state_dir, FILE_NAME)


def finding_from_json(data: Dict[str, Any]) -> Finding:
    """The inverse of Finding.to_json(); keys a newer or older npumon wrote are ignored."""
    known = {field.name for field in fields(Finding)}
    return Finding(**{key: value for key, value in data.items() if key in known})


class EventStore:
    """The history file. Thread-safe: one connection, writes serialised by a lock.

    `readonly=True` (for `npumon events`) opens an existing file without ever writing to it; otherwise the
    directory and the file are created when missing. `recover=True` (the daemon) moves a corrupt file aside
    and starts a new one, after a `quick_check` as well when `check`; every write first makes sure the file
    opened is still the one at `path` (EventStoreGone if it was deleted or replaced)."""

    def __init__(self, path: str, retention_seconds: float = DEFAULT_RETENTION_SECONDS, readonly: bool = False,
                 recover: bool = False, check: bool = False):
        self.path = path
        self.retention_seconds = retention_seconds
        self.readonly = readonly
        self._lock = threading.RLock()
        self._file_id: Optional[storage.FileId] = None
        self._conn = self._open(recover, check)

    # -- opening -------------------------------------------------------------------------------------------

    def _open(self, recover: bool, check: bool) -> sqlite3.Connection:
        if self.readonly:
            require_readable(self.path)
        conn = None
        try:
            if self.readonly:
                uri = "file:{}?mode=ro".format(urllib.parse.quote(os.path.abspath(self.path)))
                conn = storage.connect(uri, BUSY_TIMEOUT_SECONDS, uri=True)
                self._check_schema(conn)
                return conn
            if recover:
                conn, self._file_id = storage.open_database(self.path, self._prepare, log, "event history",
                                                            BUSY_TIMEOUT_SECONDS, check=check, mode=0o750)
                return conn
            directory = os.path.dirname(os.path.abspath(self.path))
            if os.path.exists(directory) and not os.path.isdir(directory):
                raise EventStoreError("{}: cannot open the event history: {} is not a directory".format(
                    self.path, directory))
            os.makedirs(directory, mode=0o750, exist_ok=True)
            conn = storage.connect(self.path, BUSY_TIMEOUT_SECONDS)
            self._prepare(conn)
            self._file_id = storage.file_id(self.path)
            return conn
        except (sqlite3.Error, OSError) as exc:
            if conn is not None:
                conn.close()
            raise EventStoreError("{}: cannot open the event history: {}".format(self.path, _reason(exc))) from None
        except EventStoreError:
            if conn is not None:
                conn.close()
            raise

    def _prepare(self, conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        # With WAL, NORMAL is safe against corruption; a power cut may lose the last commits only.
        conn.execute("PRAGMA synchronous=NORMAL")
        self._check_schema(conn)

    def _check_schema(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and not tables and not self.readonly:
            conn.executescript("BEGIN IMMEDIATE;{}PRAGMA user_version = {};COMMIT;".format(_SCHEMA, SCHEMA_VERSION))
            return
        if version > SCHEMA_VERSION:
            raise EventStoreError("{}: written by a newer npumon (schema {}, this one knows up to {})".format(
                self.path, version, SCHEMA_VERSION))
        if version != SCHEMA_VERSION or not set(_TABLES) <= tables:
            raise EventStoreError("{}: not an npumon event history (move it away to start a new one)".format(
                self.path))

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def rescue(self) -> bool:
        """After EventStoreGone: copy what this connection still reads into a new file at `path` if none is
        there (True), and close. False if another file took its place (that one is used as it is)."""
        with self._lock:
            if os.path.lexists(self.path):
                self._conn.close()
                return False
            try:
                storage.rescue_deleted(self._conn, self.path, BUSY_TIMEOUT_SECONDS, mode=0o750)
            except (sqlite3.Error, OSError) as exc:
                self._conn.close()
                raise EventStoreError("{}: cannot save the deleted event history: {}".format(
                    self.path, _reason(exc))) from None
            return True

    # -- writing -------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def batch(self) -> Iterator["EventStore"]:
        """One transaction for several writes: all of them are stored, or none (also on `kill -9`)."""
        with self._lock:
            if self._conn.in_transaction:  # inside another batch(): that one commits
                yield self
                return
            if self.readonly:
                raise EventStoreError("{}: opened read-only".format(self.path))
            if self._file_id is not None and storage.file_id(self.path) != self._file_id:
                raise EventStoreGone("{}: the file was deleted or replaced while in use".format(self.path))
            try:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    yield self
                    self._conn.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise EventStoreError("{}: cannot write the event history: {}".format(self.path, _reason(exc))) from None

    def record(self, kind: str, subject: str, message: str, severity: Optional[str] = None,
               details: Optional[Dict[str, Any]] = None, time: Optional[float] = None) -> int:
        """Append one event; returns its id. `time` defaults to now."""
        if kind not in KINDS:
            raise ValueError("unknown event kind {!r} (known: {})".format(kind, ", ".join(KINDS)))
        when = time_module.time() if time is None else time
        text = None if details is None else json.dumps(details, sort_keys=True, default=str)
        with self.batch():
            cursor = self._conn.execute(
                "INSERT INTO events (time, kind, subject, severity, message, details) VALUES (?, ?, ?, ?, ?, ?)",
                (when, kind, subject, severity, message, text))
            return int(cursor.lastrowid)

    def prune(self, now: Optional[float] = None) -> int:
        """Delete the events older than the retention; returns how many."""
        cutoff = (time_module.time() if now is None else now) - self.retention_seconds
        with self.batch():
            return self._conn.execute("DELETE FROM events WHERE time < ?", (cutoff,)).rowcount

    def put_finding(self, finding: Finding, state: str, event_id: int) -> None:
        with self.batch():
            self._conn.execute(
                "INSERT OR REPLACE INTO findings (rule, subject, state, finding, event_id) VALUES (?, ?, ?, ?, ?)",
                (finding.rule, finding.subject, state, json.dumps(finding.to_json(), sort_keys=True), event_id))

    def delete_finding(self, rule: str, subject: str) -> None:
        with self.batch():
            self._conn.execute("DELETE FROM findings WHERE rule = ? AND subject = ?", (rule, subject))

    def put_chip(self, chip: KnownChip) -> None:
        with self.batch():
            self._conn.execute(
                "INSERT OR REPLACE INTO chips (subject, name, bus_id, health, error_codes) VALUES (?, ?, ?, ?, ?)",
                (chip.subject, chip.name, chip.bus_id, chip.health, json.dumps(list(chip.error_codes))))

    def delete_chip(self, subject: str) -> None:
        with self.batch():
            self._conn.execute("DELETE FROM chips WHERE subject = ?", (subject,))

    def set_meta(self, key: str, value: str) -> None:
        with self.batch():
            self._conn.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value))

    def replace_state(self, rows: Sequence[FindingRow], chips: Sequence[KnownChip]) -> None:
        """Make the findings and chips tables say exactly this (the daemon's memory, after a reopen)."""
        with self.batch():
            self._conn.execute("DELETE FROM findings")
            self._conn.execute("DELETE FROM chips")
            for row in rows:
                self.put_finding(row.finding, row.state, row.event_id)
            for chip in chips:
                self.put_chip(chip)

    # -- reading -------------------------------------------------------------------------------------------

    def query(self, since: Optional[float] = None, npu: Optional[int] = None, kinds: Optional[Sequence[str]] = None,
              limit: Optional[int] = None, until: Optional[float] = None, after_id: Optional[int] = None
              ) -> List[Event]:
        """Events oldest first. `since`/`until`: unix times (inclusive); `npu`: that card's chips only;
        `after_id`: only events with a larger id; `limit`: the newest `limit` of the matching events."""
        conditions, args = [], []  # type: List[str], List[Any]
        if since is not None:
            conditions.append("time >= ?")
            args.append(since)
        if until is not None:
            conditions.append("time <= ?")
            args.append(until)
        if npu is not None:
            conditions.append("subject GLOB ?")
            args.append("npu{}/*".format(int(npu)))
        if kinds is not None:
            conditions.append("kind IN ({})".format(", ".join("?" * len(kinds))))
            args.extend(kinds)
        if after_id is not None:
            conditions.append("id > ?")
            args.append(after_id)
        sql = "SELECT id, time, kind, subject, severity, message, details FROM events"
        if conditions:
            sql += " WHERE " + " AND ".join(conditions)
        sql += " ORDER BY time DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(limit)
        rows = self._read(sql, args)
        return [Event(id=row[0], time=row[1], kind=row[2], subject=row[3], severity=row[4], message=row[5],
                      details=_json_or_none(row[6])) for row in reversed(rows)]

    def finding_rows(self) -> List[FindingRow]:
        rows = self._read("SELECT state, finding, event_id FROM findings ORDER BY rule, subject", ())
        return [FindingRow(state, finding_from_json(json.loads(text)), event_id) for state, text, event_id in rows]

    def known_chips(self) -> Dict[str, KnownChip]:
        rows = self._read("SELECT subject, name, bus_id, health, error_codes FROM chips", ())
        return {row[0]: KnownChip(subject=row[0], name=row[1], bus_id=row[2], health=row[3],
                                  error_codes=tuple(json.loads(row[4]))) for row in rows}

    def last_event_id(self) -> int:
        rows = self._read("SELECT MAX(id) FROM events", ())
        return int(rows[0][0] or 0)

    def get_meta(self, key: str) -> Optional[str]:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def _read(self, sql: str, args: Sequence[Any]) -> List[tuple]:
        with self._lock:
            try:
                return self._conn.execute(sql, tuple(args)).fetchall()
            except sqlite3.Error as exc:
                raise EventStoreError("{}: cannot read the event history: {}".format(self.path, _reason(exc))) from None


class NoFile:
    """Stands in for the store while the file is down: takes every write and keeps nothing, so the writer's
    own logic updates its memory of findings and chips exactly as it would with the file."""

    @contextlib.contextmanager
    def batch(self) -> Iterator["NoFile"]:
        yield self

    def record(self, *args: Any, **kwargs: Any) -> int:
        return 0  # no event id: any later acknowledgement applies

    def query(self, *args: Any, **kwargs: Any) -> List[Event]:
        return []  # acknowledgements are read from the file once it is back

    def prune(self, *args: Any) -> int:
        return 0

    def _ignore(self, *args: Any) -> None:
        return None

    put_finding = delete_finding = put_chip = delete_chip = set_meta = _ignore


def _json_or_none(text: Optional[str]) -> Optional[Dict[str, Any]]:
    return None if text is None else json.loads(text)


_reason = storage.reason
