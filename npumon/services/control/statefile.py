"""<state_dir>/control.json: what a running daemon that drives the fans last did, with its pid.

The daemon's control service writes it (only once it has set the fans, and only when something changed),
and removes it when it stops; `npumon control` reads it to warn that a daemon will put its own duty back.
"""

import json
import logging
import os
import tempfile
from typing import Any, Dict, Optional

STATE_FILE = "control.json"

log = logging.getLogger(__name__)


class StateFile:
    def __init__(self, state_dir: str):
        self.path = os.path.join(state_dir, STATE_FILE)
        self._written: Optional[Dict[str, Any]] = None  # what the file says now
        self._tried = False

    def write(self, status: Dict[str, Any], now: float) -> None:
        """Replace the file atomically with `status` (stamped `written`), unless it already says that.
        A failed write is tried again next time; only the first attempt's failure is logged."""
        if status == self._written:
            return
        first, self._tried = not self._tried, True
        try:
            handle, temp_path = tempfile.mkstemp(dir=os.path.dirname(self.path), prefix=".control-")
            with os.fdopen(handle, "w", encoding="utf-8") as temp:
                json.dump(dict(status, written=now), temp, indent=1, sort_keys=True)
            os.replace(temp_path, self.path)
        except OSError as exc:
            if first:
                log.warning("cannot write %s (%s): `npumon control` will not see this daemon",
                            self.path, exc.strerror or exc)
            return
        self._written = status

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass


def running_daemon(state_dir: str) -> Optional[Dict[str, Any]]:
    """What a running `npumon run` with control enabled last wrote to <state_dir>/control.json, or None."""
    import psutil  # here: the daemon imports this module for StateFile alone, and psutil cost its start 8 ms

    try:
        with open(os.path.join(state_dir, STATE_FILE), encoding="utf-8") as handle:
            state = json.load(handle)
        process = psutil.Process(int(state["pid"]))
        if process.pid == os.getpid() or not any("npumon" in word for word in process.cmdline()):
            return None  # a stale file whose pid now belongs to something else
    except (OSError, ValueError, KeyError, TypeError, psutil.Error):
        return None
    return state
