"""What a killed call leaves behind: find every process of one call and kill it, and kill the calls that a
killed npumon left running.

Killing a call's process group is not enough: a helper that calls setsid() leaves the group, and a group kill
misses it. Every call's environment carries a marker of its own (CALL_MARKER_ENV), which its descendants
inherit; when a call is killed, every process with that marker, and every descendant of the call's process
still in the process tree, is killed by pid. A helper that also clears its environment and whose parent has
exited is out of reach outside systemd; under systemd the unit's KillMode=mixed and the service cgroup kill it
at stop.

npumon does not make itself a child subreaper (PR_SET_CHILD_SUBREAPER): orphans of every child (the probe's,
the fan watchdog's) would become npumon's to reap, and reaping a pid that is not its own Popen's (waitpid on
any child) would steal the exit status that another part of npumon waits for. Orphans stay init's to reap.

`kill -9` of npumon itself cannot run any of this, and a call it was waiting for may hang on. A restarted
npumon kills those (kill_orphaned_calls): a marker names the npumon process that made the call, and a call
whose npumon is gone has nobody left to wait for it. The marker also names the npumon instance, by its state
directory (set_call_owner): a restarted instance kills what its own killed predecessor left, never the calls of
another instance on the host whose process died (a second daemon, a `check` of another config). Under systemd the unit's KillMode=mixed kills them at
once, with the service cgroup. (PR_SET_PDEATHSIG would end them with npumon, but only from a preexec_fn: it
makes subprocess run Python's fork handlers around every call, from many threads, and one of them, the
thread pools' shutdown lock, was seen released under a pool that held it.)
"""

import hashlib
import itertools
import os
import signal
import threading
from typing import Dict, Iterable, List, Optional, Set, Tuple

CALL_MARKER_ENV = "NPUMON_CALL"
# A call's processes may still fork while they are being killed: look this many times at most.
KILL_ROUNDS = 3

_sequence = itertools.count(1)
_sequence_lock = threading.Lock()
_owner = ""  # the instance this process's calls belong to (set_call_owner); "" until one is set


def set_call_owner(state_dir: Optional[str]) -> None:
    """This process's calls from now on belong to the npumon instance that keeps `state_dir`."""
    global _owner
    _owner = "" if not state_dir else hashlib.sha256(os.path.abspath(state_dir).encode()).hexdigest()[:12]


def call_marker() -> str:
    """A marker no other call of any npumon process carries: pid, sequence number and instance."""
    with _sequence_lock:
        number = next(_sequence)
    return "{}.{}.{}".format(os.getpid(), number, _owner)


def kill_orphaned_calls() -> int:
    """SIGKILL to every process left by a call of this instance's npumon process that is gone (killed with
    SIGKILL, or crashed); how many were found. A call of a running npumon (a check next to the daemon), or of
    another instance, is never touched."""
    prefix = (CALL_MARKER_ENV + "=").encode()
    orphans = set()
    for pid in _pids():
        maker = _call_maker(pid, prefix)
        if maker is not None and maker[1] == _owner and maker[0] != os.getpid() and not _alive(maker[0]):
            orphans.add(pid)
    _kill_each(orphans)
    return len(orphans)


def _call_maker(pid: int, prefix: bytes) -> Optional[Tuple[int, str]]:
    """(pid, instance) of the npumon that made the call this process belongs to, from its marker; None if
    unmarked."""
    for variable in _environment(pid):
        if variable.startswith(prefix):
            maker, _, rest = variable[len(prefix):].partition(b".")
            owner = rest.partition(b".")[2].decode("ascii", "replace")
            return (int(maker), owner) if maker.isdigit() else None
    return None


def _alive(pid: int) -> bool:
    return _parent_of(pid) is not None


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
    return needle in _environment(pid)


def _environment(pid: int) -> List[bytes]:
    """A process's environment as `NAME=value` entries; empty for another user's process, or one gone."""
    try:
        with open("/proc/{}/environ".format(pid), "rb") as handle:
            return handle.read().split(b"\0")
    except OSError:
        return []


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
