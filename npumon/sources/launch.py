"""Start one call's process: its own session, stdin from /dev/null, stdout and stderr into pipes of our own.

subprocess.Popen does this in about 0.2 ms of the daemon's CPU per call, most of it Python: encoding the
environment variable by variable, building the list of places to look for the program, wrapping the pipes
in buffered files and reading its error pipe. os.posix_spawn does the same in C (glibc starts the child
with vfork and execs it at once), for about a third of that, and npumon runs 1-3 tool calls a second on a
16-chip host. It is used wherever it gives the child exactly what Popen would:

- Popen (close_fds) closes every descriptor above 2 in the child; posix_spawn leaves open the ones that are
  inheritable. Python opens every descriptor non-inheritable, so there normally are none; when there are
  (passed in by whoever started npumon, or made so on purpose), the call goes through Popen.
- Popen looks a bare program name up on the child's PATH, posix_spawnp on the daemon's: a child
  environment with a PATH of its own goes through Popen.
- A pipe end that lands on 0, 1 or 2 (npumon started with one of them closed) goes through Popen, which
  copes with it.

Both give back an object with the Popen attributes the runner uses: pid, stdout, stderr (files with fileno()
and close()), returncode and wait().
"""

import os
import signal
import subprocess
from typing import Dict, List, Optional, Union

# Python ignores these, and Popen's restore_signals gives the child their defaults back (SIGXFZ is not Linux's).
_DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFZ", "SIGXFSZ") if hasattr(signal, name))
_FD_DIR = "/proc/self/fd"


class Spawned(object):
    """A child started with posix_spawn, with the part of Popen's interface the runner uses."""

    def __init__(self, pid: int, stdout: int, stderr: int) -> None:
        self.pid = pid
        self.stdout = open(stdout, "rb", buffering=0)
        self.stderr = open(stderr, "rb", buffering=0)
        self.returncode: Optional[int] = None

    def wait(self) -> int:
        """Reap the child (it has exited or was killed): its exit status, or minus the signal that ended it."""
        if self.returncode is None:
            try:
                _, status = os.waitpid(self.pid, 0)
            except ChildProcessError:  # reaped elsewhere: as Popen, take it as a clean exit
                status = 0
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


Child = Union[Spawned, "subprocess.Popen[bytes]"]


def start(argv: List[str], env: Dict[str, str]) -> Child:
    """Start argv with exactly env as its environment. Raises OSError (or SubprocessError) when it cannot run."""
    if not _spawns_alike(argv, env):
        return _popen(argv, env)
    out_read, out_write = os.pipe()
    err_read, err_write = os.pipe()
    if min(out_read, out_write, err_read, err_write) <= 2:
        for fd in (out_read, out_write, err_read, err_write):
            os.close(fd)
        return _popen(argv, env)
    try:
        spawn = os.posix_spawn if os.sep in argv[0] else os.posix_spawnp
        pid = spawn(argv[0], argv, env, setsid=True, setsigdef=_DEFAULT_SIGNALS,
                    file_actions=[(os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                                  (os.POSIX_SPAWN_DUP2, out_write, 1), (os.POSIX_SPAWN_DUP2, err_write, 2)])
    except BaseException:
        os.close(out_read)
        os.close(err_read)
        raise
    finally:
        os.close(out_write)
        os.close(err_write)
    return Spawned(pid, out_read, err_read)


def _popen(argv: List[str], env: Dict[str, str]) -> "subprocess.Popen[bytes]":
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, env=env)


def _spawns_alike(argv: List[str], env: Dict[str, str]) -> bool:
    """Whether posix_spawn gives this child what Popen would (see the module's docstring)."""
    if not argv or (os.sep not in argv[0] and env.get("PATH") != os.environ.get("PATH")):
        return False
    return not _has_inheritable_descriptors()


def _has_inheritable_descriptors() -> bool:
    """Whether this process has an inheritable descriptor above 2 (True when it cannot tell)."""
    try:
        names = os.listdir(_FD_DIR)
    except OSError:
        return True
    for name in names:
        fd = int(name)
        if fd > 2:
            try:
                if os.get_inheritable(fd):
                    return True
            except OSError:  # closed since (the listing's own descriptor among them)
                continue
    return False
