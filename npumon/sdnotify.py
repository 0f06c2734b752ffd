"""systemd's notify protocol with the standard library: READY=1, STATUS=..., WATCHDOG=1, STOPPING=1.

A datagram to the unix socket named by $NOTIFY_SOCKET ('@' means the abstract namespace). Outside
systemd the variable is unset and every call is a no-op.
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
        if not usec or not usec.isdigit() or (pid and pid != str(os.getpid())):
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
        return self.send("STOPPING=1")

    def reloading(self) -> bool:
        return self.send("RELOADING=1")
