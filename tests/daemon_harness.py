"""Run `npumon run` as a real subprocess for the daemon tests: read its log as it comes, find its port,
talk to it over HTTP, stop it, and find processes it may have left behind."""

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

import requests

from npumon.daemon.daemon import STOP_GRACE_SECONDS
from npumon.sim.npusmi import HANG_PIDS_FILE

PORT_LINE = re.compile(r"serving on port (\d+)")
# A bound on SIGTERM-to-exit for tests that stop a daemon along the way: twice the daemon's own stop budget, so a
# loaded machine does not fail them (the 5 s promise itself is test_daemon_process's slow test).
STOP_BOUND_SECONDS = 2 * STOP_GRACE_SECONDS


class DaemonProcess:
    """`python -m npumon.cli.main run ARGS` with stderr collected line by line."""

    def __init__(self, args: Sequence[str], env: Optional[Dict[str, str]] = None):
        self.argv = [sys.executable, "-m", "npumon.cli.main", "run"] + list(args)
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, env=dict(os.environ, **(env or {})),
                                     start_new_session=True)
        self._lines: List[str] = []
        self._changed = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.port: Optional[int] = None

    def _read(self) -> None:
        for raw in self.proc.stderr:
            with self._changed:
                self._lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def lines(self) -> List[str]:
        with self._changed:
            return list(self._lines)

    def wait_for_line(self, pattern: str, timeout: float = 10.0, start: int = 0) -> "re.Match":
        """The first log line from index `start` on that matches; fails with the log if none comes."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self._lines[start:]:
                    match = regex.search(line)
                    if match:
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError("no log line matching {!r} within {}s; log:\n{}".format(
                        pattern, timeout, "\n".join(self._lines)))
                self._changed.wait(min(left, 0.1))

    def wait_serving(self, timeout: float = 15.0) -> int:
        self.port = int(self.wait_for_line(PORT_LINE.pattern, timeout).group(1))
        return self.port

    def url(self, path: str) -> str:
        return "http://127.0.0.1:{}{}".format(self.port, path)

    def get(self, path: str, timeout: float = 5.0) -> requests.Response:
        return requests.get(self.url(path), timeout=timeout)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, timeout: float = 10.0) -> float:
        """SIGTERM; returns the seconds until the process exited."""
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout)
        elapsed = time.monotonic() - started
        self._reader.join(5)
        return elapsed

    def close(self) -> None:
        """Test cleanup: stop it if it still runs (SIGTERM first, so it removes its temporary files)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._reader.join(5)


def wait_until(condition, timeout: float = 10.0, *, interval: float = 0.05, what: str = "condition"):
    """Poll `condition()` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("{} not reached within {}s".format(what, timeout))
        time.sleep(interval)


def sample(metrics_text: str, name: str, **labels: str) -> Optional[float]:
    """The value of one series in a text exposition, or None when the series is not there."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(metrics_text):
        for item in family.samples:
            if item.name == name and all(item.labels.get(key) == value for key, value in labels.items()):
                return item.value
    return None


def _orphaned_zombie(pid: str) -> bool:
    try:
        with open("/proc/{}/stat".format(pid), "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return fields[0] == b"Z" and fields[1] == b"1"


def processes_of_simulation(state_dir: str) -> List[int]:
    """Live processes started for this simulation: the simulator's environment names its state directory.
    Zombies count: an unreaped child is a leak too, but not one that init has yet to reap (a killed call's
    orphan: how soon init reaps is the machine's, not npumon's)."""
    marker = ("NPUMON_SIM_STATE=" + os.path.abspath(state_dir)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/{}/environ".format(entry), "rb") as handle:
                environ = handle.read().split(b"\0")
        except OSError:
            continue
        if marker in environ and not _orphaned_zombie(entry):
            found.append(int(entry))
    return found + [pid for pid in live_hang_pids(state_dir) if pid not in found and not _orphaned_zombie(str(pid))]


def hang_pids(state_dir: str) -> List[int]:
    """Every process the simulator's hang behaviour started (the npu-smi stand-in and its sleeping child)."""
    try:
        with open(os.path.join(state_dir, HANG_PIDS_FILE), encoding="utf-8") as handle:
            return [int(pid) for line in handle for pid in line.split()]
    except FileNotFoundError:
        return []


def live_hang_pids(state_dir: str) -> List[int]:
    """The processes of hung simulator calls that still exist (zombies included)."""
    return [pid for pid in hang_pids(state_dir) if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        with open("/proc/{}/stat".format(pid), encoding="utf-8") as handle:
            return handle.read().split(")")[-1].split()[0] != "X"
    except OSError:
        return False


def kill_leftovers(state_dir: str) -> None:
    """Test cleanup: whatever a failed test left behind must not outlive it."""
    for pid in processes_of_simulation(state_dir):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class WatchdogListener:
    """A systemd notify socket for an in-process daemon: binds one in `directory`, points NOTIFY_SOCKET at it
    and asks for a watchdog ping every 0.1 s (WATCHDOG_USEC 200000). received(seconds): the messages of that
    long."""

    def __init__(self, directory: str, monkeypatch):
        address = os.path.join(str(directory), "notify.sock")
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(address)
        self.socket.settimeout(0.05)
        monkeypatch.setenv("NOTIFY_SOCKET", address)
        monkeypatch.setenv("WATCHDOG_USEC", "200000")

    def received(self, seconds: float) -> List[str]:
        messages, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                messages.append(self.socket.recv(4096).decode())
            except socket.timeout:
                pass
        return messages

    def close(self) -> None:
        self.socket.close()


def one_error_line(daemon: "DaemonProcess") -> str:
    """What a failed start printed: exactly one line, no traceback, exit status 2."""
    daemon.proc.wait(15)
    daemon.close()
    assert daemon.proc.returncode == 2, daemon.lines
    assert len(daemon.lines) == 1 and "Traceback" not in daemon.lines[0], daemon.lines
    return daemon.lines[0]
