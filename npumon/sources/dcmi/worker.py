"""The process libdcmi.so runs in, and the daemon's handle on it.

A DCMI call can hang in the driver for minutes, and a struct the library disagrees with can crash the process
that made the call: neither may happen to the daemon. So the library is only ever loaded here, in a child
process (`python -m npumon.sources.dcmi.worker`) that speaks JSON lines over its stdin/stdout. The daemon's
side (Worker) gives every request a deadline; on a timeout the child's whole call (its process group and every
process carrying its call marker) is killed and reaped, on a crash it is reaped, and either way the next start
waits a backoff (1 s doubling to 60 s, back to 1 s after a good sweep). Nothing of a worker outlives npumon: the
daemon kills it at close, and a worker whose parent is gone (npumon killed with SIGKILL) exits by itself, even
while its main thread is stuck in a driver call.

Requests: {"op": "open", "library": path, "owner_uid": n, "sticky_dirs": bool} -> {"ok", "api", "versions"};
{"op": "sweep", "unsupported": [[npu, chip, metric]], "static": bool, "only": [metric] or absent} -> read.sweep's
answer. Every answer
carries "ok" and, when false, "error" (one line).
"""

import json
import os
import select
import subprocess
import sys
import threading
import time
from typing import Any, Dict, Optional

REINIT_BURST = 3  # init-type errors in one sweep that make the worker call dcmi_init again
PARENT_CHECK_SECONDS = 0.5
MAX_REPLY_BYTES = 8 * 1024 * 1024
BACKOFF_FIRST_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 60.0


# -- the child ------------------------------------------------------------------------------------------

def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(PARENT_CHECK_SECONDS)
        if os.getppid() != parent:
            os._exit(0)


def _serve() -> None:
    from . import read
    from .library import LibraryRefused, check_path, load
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True, name="parent-watch").start()
    api = None
    out = sys.stdout
    for line in sys.stdin:
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "open":
                # Checked again here, just before loading: the file may have changed since the daemon looked.
                path = check_path(request["library"], request.get("owner_uid", 0),
                                  sticky_dirs=bool(request.get("sticky_dirs")))
                library = load(path)
                chosen, tried = library.initialise()
                if chosen is None:
                    reply = {"ok": False, "error": "init failed: " + "; ".join(tried)}
                else:
                    api = read.Api(library)
                    reply = {"ok": True, "api": chosen, "versions": read.versions(library)}
            elif op == "sweep":
                if api is None:
                    reply = {"ok": False, "error": "library not open"}
                else:
                    unsupported = {tuple(item) for item in request.get("unsupported", [])}
                    only = request.get("only")
                    reply = dict(read.sweep(api, unsupported, static=bool(request.get("static", True)),
                                            only=None if only is None else set(only),
                                            links=set(request.get("links", []))), ok=True, reinitialised=False)
                    if reply["init_type_errors"] >= REINIT_BURST:
                        chosen, tried = api.library.initialise()
                        reply["reinitialised"] = chosen is not None
            else:
                reply = {"ok": False, "error": "unknown request {!r}".format(op)}
        except LibraryRefused as exc:
            reply = {"ok": False, "error": str(exc)}
        except read.CallFailed as exc:
            reply = {"ok": False, "error": str(exc)}
        except OSError as exc:
            reply = {"ok": False, "error": "cannot load the library: {}".format(exc)}
        except Exception as exc:  # noqa: BLE001 - the daemon gets one line, never a traceback
            reply = {"ok": False, "error": "{}: {}".format(type(exc).__name__, exc)}
        out.write(json.dumps(reply) + "\n")
        out.flush()


# -- the daemon's side -------------------------------------------------------------------------------------

class WorkerDown(Exception):
    """The worker did not answer: timed out (killed), died, or is waiting out its backoff. One line."""


class Worker:
    """One worker process, started on demand; `request` never blocks past its deadline."""

    def __init__(self, env: Optional[Dict[str, str]] = None, clock=time.monotonic):
        self._env = env
        self._clock = clock
        self._lock = threading.Lock()
        self._proc: Optional[subprocess.Popen] = None
        self._marker: Optional[str] = None
        self._buffer = b""
        self._backoff = BACKOFF_FIRST_SECONDS
        self._not_before = 0.0
        self.last_failure: Optional[str] = None
        self.restarts = 0  # workers started after the first
        self._started_once = False
        self._closed = False

    @property
    def pid(self) -> Optional[int]:
        return None if self._proc is None else self._proc.pid

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def _start(self) -> None:
        from ...childenv import child_environment
        from ..children import CALL_MARKER_ENV, call_marker
        if self._closed:
            raise WorkerDown("not started: npumon is shutting down")
        wait = self._not_before - self._clock()
        if wait > 0:
            raise WorkerDown("worker restarts in {:.0f}s; last failure: {}".format(wait, self.last_failure))
        package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
        inherited = child_environment(self._env)
        path = inherited.get("PYTHONPATH")
        self._marker = call_marker()
        env = dict(inherited, PYTHONPATH=package_root + (os.pathsep + path if path else ""),
                   **{CALL_MARKER_ENV: self._marker})
        self._proc = subprocess.Popen([sys.executable, "-m", "npumon.sources.dcmi.worker"], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd="/", env=env,
                                      start_new_session=True, close_fds=True)
        self._buffer = b""
        if self._started_once:
            self.restarts += 1
        self._started_once = True

    def request(self, message: Dict[str, Any], deadline_seconds: float) -> Dict[str, Any]:
        with self._lock:
            if self._proc is None:
                self._start()
            try:
                return self._exchange(message, deadline_seconds)
            except WorkerDown as exc:
                self._failed(str(exc))
                raise

    def succeeded(self) -> None:
        """A good sweep: the next failure's backoff starts small again."""
        self._backoff = BACKOFF_FIRST_SECONDS

    def _exchange(self, message: Dict[str, Any], deadline_seconds: float) -> Dict[str, Any]:
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        until = time.monotonic() + deadline_seconds
        try:
            proc.stdin.write((json.dumps(message) + "\n").encode())
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDown(self._death("before the request")) from None
        fd = proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = until - time.monotonic()
            if left <= 0:
                raise WorkerDown("no answer within {:.1f}s (a DCMI call hangs): worker killed".format(deadline_seconds))
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise WorkerDown(self._death("mid-request"))
            self._buffer += chunk
            if len(self._buffer) > MAX_REPLY_BYTES:
                raise WorkerDown("answer over {} bytes: worker killed".format(MAX_REPLY_BYTES))
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            reply = json.loads(line.decode("utf-8", "replace"))
        except ValueError:
            raise WorkerDown("unreadable answer from the worker: worker killed") from None
        if not isinstance(reply, dict):
            raise WorkerDown("unreadable answer from the worker: worker killed")
        return reply

    def _death(self, when: str) -> str:
        proc = self._proc
        try:
            code = proc.wait(timeout=2.0) if proc is not None else None
        except subprocess.TimeoutExpired:
            code = None
        if code is not None and code < 0:
            import signal
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = "signal {}".format(-code)
            return "worker died {} (killed by {})".format(when, name)
        return "worker exited {} (status {})".format(when, code)

    def _failed(self, reason: str) -> None:
        self.last_failure = reason
        self._stop()
        self._not_before = self._clock() + self._backoff
        self._backoff = min(self._backoff * 2, BACKOFF_MAX_SECONDS)

    def _stop(self) -> None:
        from ..children import kill_call
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            kill_call(proc.pid, self._marker or "")
        for pipe in (proc.stdin, proc.stdout):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        proc.wait()

    def close(self) -> None:
        """Kill the worker and start no other. The kill comes first, outside the lock: a poll waiting on a hung
        call then sees the worker die at once rather than holding the stop up until its deadline."""
        from ..children import kill_call
        self._closed = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            kill_call(proc.pid, self._marker or "")
        with self._lock:
            self._stop()


if __name__ == "__main__":
    _serve()
