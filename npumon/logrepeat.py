"""One log line per problem, not per poll: a failure that repeats from the same cause is logged the first
time, then at most once per interval with how often it happened meanwhile.

    repeats = Repeats(log)
    repeats.log(logging.WARNING, "kmsg-save", "kmsg: cannot save where it stopped: %s", problem)
    ...
    repeats.clear("kmsg-save")            # it works again: the next failure is news

The first occurrence of a cause is logged as given; later ones within `interval` seconds of the last line
logged are only counted; the first one after that is logged with "(repeated N times in the last 10 min)"
and starts the next interval. A traceback (`exc`) goes to DEBUG only, with the lines that are logged: the
operator's log says what failed in one line, and debug logging says where. The daemon's journal
(daemon/journal.py) does the same for source and finding transitions on the Snapshots' clock; this one is
for the lines sources and servers log from their own threads, on the monotonic clock (or a source's own
clock: one set back ends the interval). Memory is bounded: at most `max_causes` causes are remembered, the
one quiet longest is forgotten first.
"""

import logging
import threading
import time
from collections import OrderedDict
from typing import Callable, Optional

INTERVAL_SECONDS = 600.0  # one line per cause per 10 minutes at most
MAX_CAUSES = 256


class _Cause:
    __slots__ = ("logged_at", "repeated")

    def __init__(self, logged_at: float) -> None:
        self.logged_at = logged_at  # when a line about this cause was last logged
        self.repeated = 0  # occurrences since then that were only counted


class Repeats:
    """Rate-limits `logger`'s lines per cause; thread-safe."""

    def __init__(self, logger: logging.Logger, interval: float = INTERVAL_SECONDS, max_causes: int = MAX_CAUSES,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self.interval = interval
        self.max_causes = max_causes
        self._clock = clock
        self._causes = OrderedDict()  # type: OrderedDict[str, _Cause]  # least recently seen first
        self._lock = threading.Lock()

    def log(self, level: int, cause: str, message: str, *args, exc: Optional[BaseException] = None) -> bool:
        """Log `message % args` at `level` unless `cause` was logged less than an interval ago (then count
        it). `exc`: a traceback for DEBUG. Returns whether a line was logged."""
        now = self._clock()
        with self._lock:
            entry = self._causes.get(cause)
            if entry is not None and 0 <= now - entry.logged_at < self.interval:  # a wall clock set back: news
                entry.repeated += 1
                self._causes.move_to_end(cause)
                return False
            repeated, since = (entry.repeated, now - entry.logged_at) if entry is not None else (0, 0.0)
            self._causes[cause] = _Cause(now)
            self._causes.move_to_end(cause)
            while len(self._causes) > self.max_causes:
                self._causes.popitem(last=False)
        if repeated:
            message += " (repeated {} time{} in the last {})".format(repeated, "" if repeated == 1 else "s",
                                                                     _duration(since))
        self._log.log(level, message, *args)
        if exc is not None:
            self._log.debug("the traceback of: " + message, *args, exc_info=exc)
        return True

    def clear(self, cause: str) -> int:
        """`cause` has gone away: its next occurrence is logged at once. Returns how many occurrences were
        counted and not logged since its last line (for a closing line, if the caller wants one)."""
        with self._lock:
            entry = self._causes.pop(cause, None)
        return entry.repeated if entry is not None else 0

    def __len__(self) -> int:
        return len(self._causes)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return "{:.0f} s".format(seconds)
    if seconds < 2 * 3600:
        return "{:.0f} min".format(seconds / 60)
    return "{:.1f} h".format(seconds / 3600)
