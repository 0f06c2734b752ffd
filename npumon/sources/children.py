"""What a killed call leaves behind: find every process of one call, kill it, and let the call's child die with
npumon.

Killing a call's process group is not enough: a helper that calls setsid() leaves the group, and a group kill
misses it. Every call's environment carries a marker of its own (CALL_MARKER_ENV), which its descendants
inherit; when a call is killed, every process with that marker, and every descendant of the call's process
still in the process tree, is killed by pid. A helper that also clears its environment and whose parent has
exited is out of reach outside systemd; under systemd the unit's KillMode=mixed and the service cgroup kill it
at stop.

npumon does not make itself a child subreaper (PR_SET_CHILD_SUBREAPER): orphans of every child (the probe's,
the fan watchdog's) would become npumon's to reap, and reaping a pid that is not its own Popen's (waitpid on
any child) would steal the exit status that another part of npumon waits for. Orphans stay init's to reap.

`kill -9` of npumon itself cannot run any of this. So each direct child gets PR_SET_PDEATHSIG=SIGKILL: the
kernel kills it when the thread that started it ends. The runner starts a child and waits for it in the same
thread, so that thread outlives the child. It is set in a preexec_fn, which subprocess warns is unsafe with
threads (the child could deadlock before exec). Here the child has already started its own session, and the
function only calls prctl through a ctypes function looked up before the fork: it takes no lock and imports
nothing. If it ever deadlocks, the call's deadline kills that child like a hung npu-smi. A set-user-ID
npu-smi would drop the setting at exec (the kernel clears it); npu-smi is not set-user-ID. The cost: with a
preexec_fn subprocess forks rather than vforks, about 3 ms more per call, against npu-smi's 0.5-2 s. The
alternatives cost more: an exec wrapper in Python starts an interpreter per call, and an external one
(util-linux's `setpriv --pdeathsig`) is one more program to find on the host and to allow in the unit.
"""

import ctypes
import itertools
import os
import signal
import sys
import threading
from typing import Callable, Dict, Iterable, Optional, Set

CALL_MARKER_ENV = "NPUMON_CALL"
PR_SET_PDEATHSIG = 1
# A call's processes may still fork while they are being killed: look this many times at most.
KILL_ROUNDS = 3

_sequence = itertools.count(1)
_sequence_lock = threading.Lock()


def call_marker() -> str:
    """A marker no other call of any npumon process carries: pid and sequence number."""
    with _sequence_lock:
        number = next(_sequence)
    return "{}.{}".format(os.getpid(), number)


def _load_prctl() -> Optional[Callable[..., int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


_PRCTL = _load_prctl()


def die_with_parent() -> Optional[Callable[[], None]]:
    """A preexec_fn that makes the child die of SIGKILL when its parent thread ends; None where there is no
    prctl (not Linux)."""
    prctl = _PRCTL
    if prctl is None:
        return None
    parent = os.getpid()

    def preexec() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect: nobody waits for this call
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


def call_processes(root_pid: int, marker: str) -> Set[int]:
    """Live processes of one call: those with its marker in their environment, and the descendants of its
    process (`root_pid`), which may have cleared their environment. npumon's own pid never counts."""
    parents: Dict[int, int] = {}
    marked: Set[int] = set()
    needle = "{}={}".format(CALL_MARKER_ENV, marker).encode()
    for pid in _pids():
        parent = _parent_of(pid)
        if parent is None:
            continue  # gone, or a zombie: nothing left to kill
        parents[pid] = parent
        if _has_in_environment(pid, needle):
            marked.add(pid)
    found = marked | _descendants(root_pid, parents)
    found.discard(os.getpid())
    return found


def kill_call(root_pid: int, marker: str) -> int:
    """SIGKILL to the call's process group and to every process of the call; how many processes outside the
    group were found (setsid() helpers and the like)."""
    _kill_group(root_pid)
    escaped: Set[int] = set()
    for _ in range(KILL_ROUNDS):
        found = call_processes(root_pid, marker) - {root_pid} - escaped
        if not found:
            break
        _kill_each(found)
        escaped |= found
    return len(escaped)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_each(pids: Iterable[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def _pids() -> Iterable[int]:
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    return [int(entry) for entry in entries if entry.isdigit()]


def _parent_of(pid: int) -> Optional[int]:
    """The parent pid from /proc/PID/stat; None for a process that is gone or a zombie."""
    try:
        with open("/proc/{}/stat".format(pid), "rb") as handle:
            stat = handle.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # the command name may hold spaces and parentheses
    if len(fields) < 2 or fields[0] in (b"Z", b"X"):
        return None
    try:
        return int(fields[1])
    except ValueError:
        return None


def _has_in_environment(pid: int, needle: bytes) -> bool:
    try:
        with open("/proc/{}/environ".format(pid), "rb") as handle:
            return needle in handle.read().split(b"\0")
    except OSError:
        return False  # another user's process, or gone


def _descendants(root: int, parents: Dict[int, int]) -> Set[int]:
    children: Dict[int, list] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    found: Set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found
