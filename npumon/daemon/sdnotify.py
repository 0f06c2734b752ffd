"""systemd integration with the standard library only.

* The notify protocol: READY=1, STATUS=..., WATCHDOG=1, RELOADING=1, STOPPING=1 as datagrams to the unix
  socket named by $NOTIFY_SOCKET ('@' means the abstract namespace). Outside systemd the variable is unset
  and every call is a no-op.
* Whether stderr goes to the journal ($JOURNAL_STREAM names the device and inode of the journal's stream),
  so the log format can leave the time stamp to journald and tag each line with its priority; and the log
  level, set at start and again when a reloaded config changes it.
"""

import logging
import os
import socket
from typing import Optional

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, address: Optional[str] = None):
        self.address = address if address is not None else os.environ.get("NOTIFY_SOCKET")
        self._warned = False

    @property
    def enabled(self) -> bool:
        return bool(self.address)

    def watchdog_interval(self) -> Optional[float]:
        """Half of WatchdogSec (as systemd recommends), or None when no watchdog is set for us."""
        usec = os.environ.get("WATCHDOG_USEC")
        pid = os.environ.get("WATCHDOG_PID")
        if not self.address or not usec or not usec.isdigit() or int(usec) == 0 \
                or (pid and pid != str(os.getpid())):
            return None
        return int(usec) / 1e6 / 2

    def send(self, *fields: str) -> bool:
        if not self.address:
            return False
        target = "\0" + self.address[1:] if self.address.startswith("@") else self.address
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto("\n".join(fields).encode("utf-8"), target)
            return True
        except OSError as exc:
            if not self._warned:  # once: a broken socket would otherwise log on every watchdog ping
                log.warning("cannot notify systemd at %s: %s", self.address, exc)
                self._warned = True
            return False

    def ready(self, status: str) -> bool:
        return self.send("READY=1", "STATUS=" + status)

    def status(self, status: str) -> bool:
        return self.send("STATUS=" + status)

    def watchdog(self) -> bool:
        return self.send("WATCHDOG=1")

    def stopping(self) -> bool:
        return self.send("STOPPING=1", "STATUS=stopping")

    def reloading(self) -> bool:
        return self.send("RELOADING=1", "STATUS=reloading the config")


def stderr_is_journal() -> bool:
    """True when stderr is the journal stream systemd set up for us (not merely inherited from a parent
    whose stderr was: then the device and inode differ)."""
    stream = os.environ.get("JOURNAL_STREAM", "")
    device, _, inode = stream.partition(":")
    if not device.isdigit() or not inode.isdigit():
        return False
    try:
        info = os.fstat(2)
    except OSError:
        return False
    return info.st_dev == int(device) and info.st_ino == int(inode)


# syslog priorities that journald reads from a "<N>" prefix on each line of a service's stderr
_JOURNAL_PRIORITIES = ((logging.CRITICAL, 2), (logging.ERROR, 3), (logging.WARNING, 4), (logging.INFO, 6))


class JournalFormatter(logging.Formatter):
    """Prefixes every line with its syslog priority, so `journalctl -p warning` filters npumon's log."""

    def format(self, record: logging.LogRecord) -> str:
        priority = next((value for level, value in _JOURNAL_PRIORITIES if record.levelno >= level), 7)
        prefix = "<{}>".format(priority)
        # every line of a multi-line record (a traceback) is a journal entry of its own
        return "\n".join(prefix + line for line in super().format(record).split("\n"))


def set_log_level(level: str) -> None:
    """Also used when a reloaded config changes log_level."""
    logging.getLogger().setLevel(getattr(logging, level.upper()))
    # APScheduler logs every job run at INFO: that is noise in a journal, its warnings still show.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, logging.getLogger().level))
