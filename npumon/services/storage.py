"""What the daemon's two SQLite files -- the event history and the notification outbox -- share when the disk
misbehaves: opening them with a corrupt file moved aside, noticing a file deleted or replaced while open,
saving what a deleted file still holds, and retrying with backoff while logging each change of state once.

A file unlinked while SQLite has it open keeps working through the open descriptor, so without a check
nothing would ever fail: every write would go to a file nobody can read again. Comparing the path's
(device, inode) with the one opened is one `stat` per transaction.
"""

import errno
import logging
import os
import sqlite3
import time
from typing import Callable, Optional, Tuple

INITIAL_RETRY_SECONDS = 1.0
MAX_RETRY_SECONDS = 60.0
_CORRUPTION = ("file is not a database", "database disk image is malformed")
_COMPANIONS = ("-wal", "-shm", "-journal")

FileId = Tuple[int, int]  # (st_dev, st_ino)


def connect(path: str, timeout: float, uri: bool = False) -> sqlite3.Connection:
    """An autocommit connection usable from several threads (callers serialise with a lock)."""
    return sqlite3.connect(path, timeout=timeout, isolation_level=None, check_same_thread=False, uri=uri)


def reason(exc: BaseException) -> str:
    """One line for an OSError or sqlite3.Error."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def is_corruption(exc: BaseException) -> bool:
    """SQLite says the file is not a database or is damaged (Python 3.9 has no error codes on exceptions)."""
    return isinstance(exc, sqlite3.DatabaseError) and any(text in str(exc) for text in _CORRUPTION)


def file_id(path: str) -> Optional[FileId]:
    try:
        status = os.stat(path)
    except OSError:
        return None
    return status.st_dev, status.st_ino


def move_aside(path: str, now: float) -> str:
    """Rename a damaged file (and its -wal/-shm) out of the way; returns the new name."""
    stem = "{}.corrupt-{}".format(path, time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)))
    target, number = stem, 1
    while os.path.lexists(target):
        number += 1
        target = "{}.{}".format(stem, number)
    os.replace(path, target)
    for suffix in _COMPANIONS:
        if os.path.lexists(path + suffix):
            os.replace(path + suffix, target + suffix)
    return target


def open_database(path: str, prepare: Callable[[sqlite3.Connection], None], log: logging.Logger, what: str,
                  timeout: float, check: bool = False, mode: int = 0o777) -> Tuple[sqlite3.Connection, FileId]:
    """Connect to `path` (creating its directory) and `prepare` it (pragmas, schema). A file SQLite calls
    corrupt -- at once, or in `quick_check` when `check` -- is moved aside, named in one error line, and a
    new one is made. Anything else raises (sqlite3.Error, OSError, or what `prepare` raises)."""
    _make_directory(os.path.dirname(os.path.abspath(path)), mode)
    try:
        conn = _prepared(path, prepare, timeout, check)
    except sqlite3.DatabaseError as exc:
        if not is_corruption(exc) or not os.path.isfile(path):
            raise
        aside = move_aside(path, time.time())
        log.error("%s %s is corrupt (%s): moved it to %s and started a new one", what, path, reason(exc), aside)
        conn = _prepared(path, prepare, timeout, False)
    identity = file_id(path)
    if identity is None:
        conn.close()
        raise sqlite3.OperationalError("{} vanished while it was being opened".format(path))
    return conn, identity


def _make_directory(directory: str, mode: int) -> None:
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise NotADirectoryError(errno.ENOTDIR, "{} is not a directory".format(directory))
    os.makedirs(directory, mode=mode, exist_ok=True)


def _prepared(path: str, prepare: Callable[[sqlite3.Connection], None], timeout: float,
              check: bool) -> sqlite3.Connection:
    conn = connect(path, timeout)
    try:
        if check:
            verdict = conn.execute("PRAGMA quick_check(1)").fetchone()
            if verdict is None or verdict[0] != "ok":
                raise sqlite3.DatabaseError("database disk image is malformed ({})".format(
                    verdict[0] if verdict else "no answer"))
        prepare(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def rescue_deleted(conn: sqlite3.Connection, path: str, timeout: float, mode: int = 0o777) -> None:
    """Copy what `conn` still reads of its deleted file into a new file at `path`, then close `conn`.
    Copied under another name first: the old connection's -wal would otherwise pair with the new file."""
    _make_directory(os.path.dirname(os.path.abspath(path)), mode)
    temporary = path + ".rescue"
    for name in [temporary] + [temporary + suffix for suffix in _COMPANIONS]:
        if os.path.lexists(name):
            os.unlink(name)
    target = connect(temporary, timeout)
    try:
        try:
            conn.backup(target)
        finally:
            target.close()
    except BaseException:
        for name in [temporary] + [temporary + suffix for suffix in _COMPANIONS]:
            if os.path.lexists(name):
                os.unlink(name)
        raise
    conn.close()
    os.replace(temporary, path)


class StorageHealth:
    """Whether a store's file works, why not, and when to try it again: exponential backoff from
    INITIAL_RETRY_SECONDS up to `maximum` on the given clock. Logs each change of state once -- the failure
    at error, the recovery at info -- and retries that fail again at debug, so a disk that stays broken for
    an hour writes two lines, not one per evaluation."""

    def __init__(self, what: str, path: str, log: logging.Logger, clock: Callable[[], float],
                 maximum: float = MAX_RETRY_SECONDS):
        self.what = what
        self.path = path
        self.maximum = maximum
        self.error: Optional[str] = None
        self.failures = 0
        self._log = log
        self._clock = clock
        self._since: Optional[float] = None
        self._next_attempt = 0.0

    @property
    def up(self) -> bool:
        return self.error is None

    def failed(self, why: str, retry_now: bool = False) -> None:
        now = self._clock()
        self.failures += 1
        delay = 0.0 if retry_now else min(self.maximum, INITIAL_RETRY_SECONDS * 2 ** min(self.failures - 1, 30))
        self._next_attempt = now + delay
        if self.error is None:
            self._log.error("%s: %s", self.what, why)
            self._since = now
        else:
            self._log.debug("%s: still failing (attempt %d, next in %.0fs): %s", self.what, self.failures, delay, why)
        self.error = why

    def due(self) -> bool:
        return self.error is not None and self._clock() >= self._next_attempt

    def recovered(self, detail: str = "") -> None:
        if self.error is not None:
            down = max(0.0, self._clock() - (self._since if self._since is not None else self._clock()))
            self._log.info("%s: %s works again after %.0fs and %d failed attempt(s)%s", self.what, self.path, down,
                           self.failures, detail)
        self.error, self.failures, self._since, self._next_attempt = None, 0, None, 0.0
