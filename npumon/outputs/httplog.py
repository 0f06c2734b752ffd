"""A log budget for the HTTP server's failure lines (a failed connection, a failed TLS handshake, a
refused client certificate): a scanner or a misconfigured client can make thousands a minute, and the
journal must stay readable, so at most a few lines a minute are written and the rest counted."""

import logging
import threading
import time

LOG_LINES_PER_MINUTE = 5  # connection failure lines; the rest are counted and mentioned in the next line


class LineBudget:
    """At most `lines` log lines a minute; the ones left out are counted and mentioned in the next line."""

    def __init__(self, log: logging.Logger, lines: int = LOG_LINES_PER_MINUTE, window: float = 60.0) -> None:
        self._log, self._lines, self._window = log, lines, window
        self._lock = threading.Lock()
        self._start, self._used, self._dropped = float("-inf"), 0, 0

    def warn(self, message: str, *args) -> None:
        now = time.monotonic()
        with self._lock:
            if now - self._start >= self._window:
                self._start, self._used = now, 0
            if self._used >= self._lines:
                self._dropped += 1
                return
            self._used += 1
            dropped, self._dropped = self._dropped, 0
        if dropped:
            message += " ({} more such lines left out before this one)".format(dropped)
        self._log.warning(message, *args)
