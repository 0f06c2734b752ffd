"""The fan watchdog: a separate process that puts the fans in the safe state when npumon no longer can.

The control service starts it (`python -m npumon.services.control.watchdog`) once it drives the fans, and talks
to it over the child's stdin:

    {"driver": {...}, "safe_state": "auto", "heartbeat_timeout_seconds": 55}   first line: what to do
    beat                                                                      every control tick
    disarm                                                                    npumon handed the fans back

The watchdog applies the safe state and exits with ACTED when stdin closes without `disarm` (npumon was
killed, even with kill -9, or crashed), when no `beat` came for the heartbeat timeout (the control loop is
stuck), or on SIGTERM. It retries a failed attempt a few times. The spec travels over the pipe, never on
the command line, so a BMC password in a fan command does not show in `ps`.

Not covered: the watchdog killed too (kill -9 of both, an OOM kill of the pair, systemd's final SIGKILL of
the unit's cgroup before it finished). systemd's ExecStopPost=npumon control fan --safe covers those
under systemd; see docs/control.md.
"""

import json
import os
import select
import signal
import subprocess
import sys
import time
from typing import Any, Dict, Optional

from ...childenv import child_environment
from .drivers import apply_safe_state, driver_from_spec

DISARMED = 0
ACTED = 3  # the watchdog applied the safe state
FAILED = 4  # it tried and the driver failed every time
BAD_SPEC = 5
ATTEMPTS = 3
RETRY_PAUSE_SECONDS = 1.0


class _Terminated(Exception):
    pass


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C meant for npumon: npumon hands the fans back

    def terminate(*_ignored):
        raise _Terminated()

    signal.signal(signal.SIGTERM, terminate)
    reader = _LineReader(sys.stdin.fileno())
    try:
        spec = json.loads(reader.next_line(None) or "")
        driver = driver_from_spec(spec["driver"])
        safe_state = spec["safe_state"]
        timeout = float(spec["heartbeat_timeout_seconds"])
    except (ValueError, KeyError, TypeError) as exc:
        _say("bad spec from npumon ({}); exiting".format(type(exc).__name__))
        return BAD_SPEC
    except _Terminated:  # before it knew the fans: nothing it could do
        return DISARMED
    try:
        reason = _watch(reader, timeout)
    except _Terminated:
        reason = "terminated"
    if reason is None:
        return DISARMED
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # finish the safe state whatever comes now
    result = apply_safe_state(driver, safe_state)
    for _ in range(ATTEMPTS - 1):
        if result.ok:
            break
        time.sleep(RETRY_PAUSE_SECONDS)
        result = apply_safe_state(driver, safe_state)
    if result.ok:
        _say("{}; fans put in the safe state ({}): {}".format(reason, safe_state, result.message))
        return ACTED
    _say("{}; could NOT put the fans in the safe state ({}): {}".format(reason, safe_state, result.message))
    return FAILED


def _watch(reader: "_LineReader", timeout: float) -> Optional[str]:
    """None when disarmed; otherwise why the fans must go to the safe state."""
    while True:
        line = reader.next_line(timeout)
        if line is None:
            return "npumon's control loop sent no heartbeat for {:g}s".format(timeout)
        if line == "":
            return "npumon exited without handing the fans back"
        if line.strip() == "disarm":
            return None


class _LineReader:
    """Lines from a file descriptor with a timeout (select + os.read, no buffering that hides data)."""

    def __init__(self, fd: int):
        self.fd = fd
        self._buffer = b""
        self._eof = False

    def next_line(self, timeout: Optional[float]) -> Optional[str]:
        """The next line; "" at end of file; None when `timeout` seconds pass without a whole line."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self._eof:
                return ""
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.fd], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(self.fd, 4096)
            if not chunk:
                self._eof = True
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode("utf-8", errors="replace") + "\n"


def _say(message: str) -> None:
    print("npumon control watchdog: " + message, file=sys.stderr, flush=True)


class WatchdogProcess:
    """The daemon's end: start the watchdog, beat, disarm. Every method is safe to call at any time."""

    def __init__(self, driver_spec: Dict[str, Any], safe_state: str, heartbeat_timeout_seconds: float):
        self._spec = {"driver": driver_spec, "safe_state": safe_state,
                      "heartbeat_timeout_seconds": heartbeat_timeout_seconds}
        self._process: Optional["subprocess.Popen[bytes]"] = None

    def start(self) -> None:
        # its own session: a terminal's Ctrl-C or a kill of npumon's process group does not reach it
        self._process = subprocess.Popen([sys.executable, "-m", "npumon.services.control.watchdog"], stdin=subprocess.PIPE,
                                         start_new_session=True, env=child_environment())
        self._send(json.dumps(self._spec))

    @property
    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.pid

    def exit_status(self) -> Optional[int]:
        """None while it runs (or was never started); its exit status once it has ended."""
        return None if self._process is None else self._process.poll()

    def beat(self) -> bool:
        return self._send("beat")

    def disarm(self, wait_seconds: float = 2.0) -> None:
        """Tell it npumon handed the fans back, and let it go."""
        if self._process is None:
            return
        self._send("disarm")
        self._close(wait_seconds)

    def abandon(self, wait_seconds: float = 0.0) -> None:
        """Close the pipe without disarming: the watchdog applies the safe state itself."""
        if self._process is not None:
            self._close(wait_seconds)

    def _close(self, wait_seconds: float) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.close()
        except OSError:
            pass
        try:
            process.wait(timeout=wait_seconds)
        except subprocess.TimeoutExpired:
            pass  # it finishes on its own; init reaps it

    def _send(self, line: str) -> bool:
        process = self._process
        if process is None or process.stdin is None or process.poll() is not None:
            return False
        try:
            process.stdin.write((line + "\n").encode("utf-8"))
            process.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False


if __name__ == "__main__":
    sys.exit(main())
