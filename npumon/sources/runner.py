"""Run an external tool safely: argv lists, a deadline, a cap on its output, the whole call killed on timeout.

npu-smi is known to hang when the driver is wedged; a hung call must never stall the daemon or leave a
process behind. Each call runs in its own session (process group), so a timeout kills the tool *and*
anything it started (children.py also finds the helpers that left the group), and the child is always reaped.

Output is read as it comes, in chunks, up to `max_output_bytes` for stdout and stderr together: past it the
call is killed and fails with "output over N bytes", so one runaway answer costs at most that much memory
(npu-smi's largest real answers are some kilobytes: the 8-card main table is about 5 KB). Output that is not
text (a NUL byte anywhere, or a first chunk that is not UTF-8) is refused as it comes, with the call killed:
"binary output (not text)", never decoded or parsed. An answer is held as bytes while it is read, then as
one str (the bytes dropped as soon as it is decoded): about twice its size at the peak.

A call that npumon's own stop or reload ended (killed by terminate_all, or refused once it ran) is marked
`stopped`: it says nothing of the tool, so sources record it as no failure and log it at debug only.
"""

import codecs
import dataclasses
import heapq
import itertools
import logging
import math
import os
import re
import select
import selectors
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..childenv import child_environment
from . import launch
from .budget import CallBudget
from .children import CALL_MARKER_ENV, call_marker, kill_call
from .pool import CallPool

log = logging.getLogger(__name__)

# Cap on one call's stdout and stderr together (config: npu_smi_max_output_bytes). About 800 times the 8-card
# main table, room for a busy host's process rows (about 100 bytes each); with 3 calls at a time and the text
# and its lines held while parsing (about 4.6 times the output), at most about 60 MiB under the unit's 256M.
MAX_OUTPUT_BYTES = 4 * 1024 * 1024
READ_CHUNK_BYTES = 64 * 1024
# Without a time budget, a call waits at most this many of its deadlines for a free slot: every call in a slot
# has a deadline of its own, so a longer wait means the slots are taken by calls that keep coming.
SLOT_WAIT_DEADLINES = 6
# A call cut short by its caller's budget to less than this share of its own deadline tells nothing of npu-smi.
CUT_OFF_SHARE = 0.9
# Buckets of npumon_npu_smi_call_duration_seconds: a healthy call takes 0.1-1.5 s on real hardware.
DURATION_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


@dataclass(frozen=True)
class CommandResult:
    argv: List[str]
    returncode: Optional[int]  # None when the process never ran or was killed
    stdout: str
    stderr: str
    duration_seconds: float
    timed_out: bool = False
    error: Optional[str] = None  # could not start, no free slot, or output over the cap (then killed)
    started: bool = True  # False: no process was started (no free slot, shutting down, no time left)
    queue_seconds: float = 0.0  # how long the call waited for a free slot (not part of duration_seconds)
    cut_off: bool = False  # timed out at the caller's budget before its own deadline: it says nothing of npu-smi
    stopped: bool = False  # killed or refused by npumon's own stop or reload (terminate_all): no failure of the tool

    @property
    def output(self) -> str:
        """npu-smi prints some errors on stdout and some on stderr; parsers look at both."""
        if _blank(self.stdout) and not _blank(self.stderr):
            return self.stderr
        return self.stdout

    @property
    def killed_by_signal(self) -> bool:
        """The tool died of a signal other than our timeout kill (a crash, the OOM killer, an operator's kill,
        our kill at shutdown): its output may stop anywhere, even at a line end, so it is not an answer."""
        return self.returncode is not None and self.returncode < 0

    def describe_failure(self) -> str:
        if self.stopped and not self.error:
            return "stopped by npumon's own stop or reload"
        if self.error:
            return self.error
        if self.timed_out:
            return "timed out after {:.1f}s (process group killed)".format(self.duration_seconds)
        if self.killed_by_signal:
            return "killed by {} before it finished".format(_signal_name(-self.returncode))
        first = _first_line(self.stderr) or _first_line(self.stdout)
        return "exit status {}{}".format(self.returncode, ": " + first if first else "")


# spawn(argv, env, timeout_seconds) -> CommandResult: runs one command in place of a subprocess
Spawn = Callable[[List[str], Dict[str, str], float], CommandResult]


class Slots:
    """Call slots taken earliest deadline first, and in the order they were asked for among equal deadlines.

    A caller's deadline is when its tier's poll must end (a minute tier's within 30 s, a sweep of what hardly
    changes within minutes): on a busy A3 a background sweep that held a slot for every call it made left a
    minute tier's calls out at its deadline, where the sweep had minutes to spare. Callers without a deadline
    come after those with one. And the order is kept: a threading.Semaphore lets a thread that releases a slot
    take it again before the waiter it woke runs (a tier that streams 16 calls through the pool kept both
    slots, and a single call of another tier waited out its whole minute on a busy A3)."""

    def __init__(self, count: int) -> None:
        self._free = count
        self._waiting: List[Tuple[float, int]] = []  # heap of tickets: (deadline or inf, number asked)
        self._asked = itertools.count()
        self._cond = threading.Condition()

    def acquire(self, timeout: float, deadline: Optional[float] = None) -> bool:
        """A slot within `timeout` seconds, after every waiting caller with an earlier deadline (or the same one,
        asked before); False when none came."""
        with self._cond:
            if self._free and not self._waiting:
                self._free -= 1
                return True
            ticket = (math.inf if deadline is None else deadline, next(self._asked))
            heapq.heappush(self._waiting, ticket)
            until = time.monotonic() + timeout
            while not (self._free and self._waiting[0] == ticket):
                left = until - time.monotonic()
                if left <= 0:
                    self._waiting.remove(ticket)
                    heapq.heapify(self._waiting)
                    self._cond.notify_all()  # the next in line may be first now
                    return False
                self._cond.wait(left)
            heapq.heappop(self._waiting)
            self._free -= 1
            if self._free and self._waiting:
                self._cond.notify_all()
            return True

    def release(self) -> None:
        with self._cond:
            self._free += 1
            self._cond.notify_all()


class CommandRunner:
    """Runs `prefix + args` with a deadline and at most `max_concurrent` processes at a time.

    With `priority_slots`, `priority` calls (the main table) have that many slots of their own on top: however
    many ordinary calls hang, a priority call never waits for one of them.

    `pool` has a thread per ordinary slot: a caller with many calls to make side by side (a tier that asks every
    card or chip) runs them there, so that the threads follow the slots, not the number of chips or tiers.

    `spawn` replaces the subprocess for each call (the simulator answering in-process in tests); slots, the
    deadline and shutdown refusal still apply. It must return by the deadline it is given.

    At debug level every call logs one line: its argv, outcome and duration -- never the environment, and
    with `log_arguments=False` (commands written in the config, which may carry a password) only the program.
    """

    def __init__(self, prefix: Sequence[str], timeout_seconds: float, max_concurrent: int = 2,
                 env: Optional[Dict[str, str]] = None, priority_slots: int = 0, spawn: Optional[Spawn] = None,
                 log_arguments: bool = True, max_output_bytes: int = MAX_OUTPUT_BYTES):
        self.prefix = list(prefix)
        self.stats = CallStats()
        self.not_after: Optional[float] = None  # time.monotonic() after which no call runs (None: no such end)
        self.log_arguments = log_arguments
        self._spawn = spawn
        self.timeout_seconds = timeout_seconds
        self.max_output_bytes = max_output_bytes
        self.max_concurrent = max_concurrent
        self._slots = Slots(max_concurrent)
        self.budget = CallBudget(max_concurrent)  # the time the shared slots were held: the tiers' stretch
        self.pool = CallPool(max_concurrent)
        self._priority_slots = Slots(priority_slots) if priority_slots else self._slots
        self._extra_env = dict(env or {})
        self._live_lock = threading.Lock()
        self._live: Dict[launch.Child, str] = {}  # running child -> its call marker
        self._closed = False

    def run(self, args: Sequence[str], timeout_seconds: Optional[float] = None,
            priority: bool = False, not_after: Optional[float] = None, label: str = "",
            program: Optional[Sequence[str]] = None) -> CommandResult:
        """Run one call. Its deadline (timeout_seconds, default the runner's) covers the call, not the wait for a
        free slot: waiting is no failure. `not_after` (time.monotonic()) is the caller's budget: the call waits
        for a slot until then and is cut off then. `label` names the caller in the call statistics.
        `program` runs another driver tool (hccn_tool) in place of the prefix, under the same slots, deadline
        and output cap: the driver serialises its tools' calls, so they share one bound."""
        argv = (self.prefix if program is None else list(program)) + list(args)
        result = self._run(argv, timeout_seconds, priority, not_after, label)
        if log.isEnabledFor(logging.DEBUG):
            shown = shlex.join(argv) if self.log_arguments else "{} (arguments not logged)".format(
                shlex.quote(argv[0]) if argv else "nothing")
            log.debug("ran %s: %s in %.3fs", shown,
                      "exit status 0" if result.returncode == 0 else result.describe_failure(),
                      result.duration_seconds)
        return result

    def _run(self, argv: List[str], timeout_seconds: Optional[float], priority: bool, not_after: Optional[float],
             label: str) -> CommandResult:
        if self._closed:
            return _refused(argv)
        if self.not_after is not None:  # the whole runner's budget (a one-shot check under --timeout)
            not_after = self.not_after if not_after is None else min(not_after, self.not_after)
        deadline = self.timeout_seconds if timeout_seconds is None else timeout_seconds
        waited_from = time.monotonic()
        wait = SLOT_WAIT_DEADLINES * deadline if not_after is None else max(0.0, not_after - waited_from)
        slots = self._priority_slots if priority else self._slots
        if not slots.acquire(timeout=wait, deadline=not_after):
            result = CommandResult(argv, None, "", "", 0.0, queue_seconds=time.monotonic() - waited_from,
                                   error="not run: no free npu-smi slot within {:.1f}s ({} calls running)".format(
                                       wait, self.max_concurrent), started=False)
            self.stats.record(label, result)
            return result
        try:
            started = time.monotonic()
            own_deadline = deadline
            if not_after is not None:
                deadline = min(deadline, not_after - started)
            if self._closed:  # terminate_all() ran while this call waited for its slot
                result = _refused(argv, started - waited_from)
            elif deadline <= 0:  # the slot came free just as the caller's budget ran out
                result = CommandResult(argv, None, "", "", 0.0, queue_seconds=started - waited_from, started=False,
                                       error="not run: the caller's time budget ran out while it waited for a slot")
            else:
                result = self._run_in_slot(argv, started, deadline)
                # A call that got most of its own deadline and still timed out did hang: that is npu-smi's failure.
                result = dataclasses.replace(result, queue_seconds=started - waited_from,
                                             cut_off=result.timed_out and deadline < CUT_OFF_SHARE * own_deadline)
        finally:
            slots.release()
            if slots is self._slots:
                self.budget.spent(time.monotonic() - started)
        self.stats.record(label, result)
        return result

    def _run_in_slot(self, argv: List[str], started: float, deadline: float) -> CommandResult:
        # Built per call: a reload may have named more secret variables since this runner was made.
        env = child_environment(self._extra_env)
        # A spawn may answer only some programs (the in-process simulator: its own); the others run for real.
        if self._spawn is not None and getattr(self._spawn, "handles", lambda argv: True)(argv):
            result = self._spawn(argv, env, deadline)
            if _binary_text(result.stdout) or _binary_text(result.stderr):
                return dataclasses.replace(result, returncode=None, stdout="", stderr="", error=BINARY_OUTPUT)
            return result
        marker = call_marker()
        env[CALL_MARKER_ENV] = marker  # child_environment made this dict for this call alone
        try:
            proc = launch.start(argv, env)
        except (OSError, subprocess.SubprocessError) as exc:
            return CommandResult(argv, None, "", "", time.monotonic() - started,
                                 error="cannot run {}: {}".format(argv[0], getattr(exc, "strerror", None) or exc))
        with self._live_lock:
            self._live[proc] = marker
            closed = self._closed
        if closed:  # terminate_all() ran while this call was starting
            kill_call(proc.pid, marker)
        try:
            outcome, out, err = _read_bounded(proc, started + deadline, self.max_output_bytes)
            if outcome == _ENDED and not _exited(proc, started + deadline):
                outcome = _TIMED_OUT  # it closed its output and went on running
            if outcome == _ENDED:
                _kill_group(proc.pid)  # what it left running in its group; its pid is not free before the wait
            else:
                kill_call(proc.pid, marker)
            _reap(proc)
        except BaseException:  # never leave the call running behind an error
            kill_call(proc.pid, marker)
            _reap(proc)
            raise
        finally:
            with self._live_lock:
                self._live.pop(proc, None)
        duration = time.monotonic() - started
        if self._closed and (outcome != _ENDED or proc.returncode < 0):
            # killed by terminate_all(): npumon stopped it, whatever the tool was doing
            return CommandResult(argv, proc.returncode, "", "", duration, stopped=True)
        if outcome == _OVER_CAP:
            return CommandResult(argv, None, "", "", duration, error="output over {} bytes: stopped reading, "
                                 "process group killed".format(self.max_output_bytes))
        if outcome == _BINARY:
            return CommandResult(argv, None, "", "", duration, error=BINARY_OUTPUT)
        timed_out = outcome == _TIMED_OUT
        stdout = _decode(out)
        del out[:]  # the bytes go as soon as they are text: the answer is never held three times
        stderr = _decode(err)
        return CommandResult(argv, None if timed_out else proc.returncode, stdout, stderr, duration,
                             timed_out=timed_out)

    def terminate_all(self) -> None:
        """On shutdown: kill the calls still running (their threads then reap them) and refuse new calls, so
        no npu-smi outlives the daemon."""
        with self._live_lock:
            self._closed = True
            live = list(self._live.items())
        for proc, marker in live:
            kill_call(proc.pid, marker)
        self.pool.close()


_ENDED, _TIMED_OUT, _OVER_CAP, _BINARY = "ended", "timed out", "over the cap", "binary"
BINARY_OUTPUT = "binary output (not text): not parsed"


def _refused(argv: List[str], queue_seconds: float = 0.0) -> CommandResult:
    return CommandResult(argv, None, "", "", 0.0, error="not run: npumon is shutting down", started=False,
                         queue_seconds=queue_seconds, stopped=True)


def _read_bounded(proc: launch.Child, until: float,
                  limit: int) -> Tuple[str, bytearray, bytearray]:
    """Read stdout and stderr as they come until both end, `until` (time.monotonic()) passes, more than
    `limit` bytes came, or a stream is not text: (_ENDED, _TIMED_OUT, _OVER_CAP or _BINARY, stdout, stderr).
    Past the cap, and on binary output, nothing is kept."""
    out, err = bytearray(), bytearray()
    buffers = {proc.stdout.fileno(): out, proc.stderr.fileno(): err}  # type: ignore[union-attr]
    total = 0
    with selectors.DefaultSelector() as selector:
        for fd in buffers:
            selector.register(fd, selectors.EVENT_READ)
        while selector.get_map():
            left = until - time.monotonic()
            if left <= 0:
                return _TIMED_OUT, out, err
            for key, _ in selector.select(left):
                chunk = os.read(key.fd, READ_CHUNK_BYTES)
                if not chunk:
                    selector.unregister(key.fd)
                    continue
                total += len(chunk)
                if total > limit:
                    return _OVER_CAP, bytearray(), bytearray()
                buffer = buffers[key.fd]
                if _binary(chunk, first=not buffer):
                    return _BINARY, bytearray(), bytearray()
                buffer += chunk
    return _ENDED, out, err


def _exited(proc: launch.Child, until: float) -> bool:
    """Whether the child exits by `until`, without reaping it: until it is reaped its pid (and so its process
    group id) cannot be reused, so the group can still be killed safely. A child that closed its output is
    usually still exiting: waited for on a pidfd (Linux 5.3) in one poll, not by waking up every half
    millisecond to look, which cost 15-55 us more of the daemon's CPU per call."""
    if _exited_now(proc.pid):
        return True
    try:
        pidfd = os.pidfd_open(proc.pid)  # type: ignore[attr-defined]  # Linux, Python 3.9+
    except (AttributeError, OSError):  # older kernel or no such call: look again and again
        return _exited_polling(proc.pid, until)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        while True:  # readable once the process has exited
            left = until - time.monotonic()
            if left <= 0:
                return False
            if poller.poll(left * 1000):
                return True
    finally:
        os.close(pidfd)


def _exited_now(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is not None
    except ChildProcessError:
        return True  # reaped elsewhere; proc.wait() copes


def _exited_polling(pid: int, until: float) -> bool:
    pause = 0.0005
    while not _exited_now(pid):
        left = until - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(pause, left))
        pause = min(pause * 2, 0.05)
    return True


def _reap(proc: launch.Child) -> None:
    """Close our ends of the pipes (whatever still holds the other ends is dead or was not ours to find) and
    wait for the child, which has exited or was sent SIGKILL."""
    for pipe in (proc.stdout, proc.stderr):
        if pipe is not None:
            pipe.close()
    proc.wait()


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return "signal {}".format(number)


def _decode(data: Optional[bytes]) -> str:
    return (data or b"").decode("utf-8", errors="replace")


def _binary(chunk: bytes, first: bool) -> bool:
    """Whether a chunk of a stream shows the stream is not text: a NUL byte (no text tool prints one), or, in
    its first chunk, bytes that are not UTF-8 (a sequence cut at the chunk's end is not counted). A stray
    undecodable byte later in real text is only replaced when the answer is decoded."""
    if b"\0" in chunk:
        return True
    if first:
        try:
            codecs.getincrementaldecoder("utf-8")().decode(chunk, final=False)
        except UnicodeDecodeError:
            return True
    return False


def _binary_text(text: str) -> bool:
    """The same judgement for an answer that came already decoded (a `spawn` in place of the subprocess): a NUL,
    or an undecodable byte (replaced by U+FFFD) within its first chunk."""
    return "\0" in text or "\ufffd" in text[:READ_CHUNK_BYTES]


def _blank(text: str) -> bool:
    return not text or text.isspace()  # no stripped copy of a large answer


_NON_SPACE = re.compile(r"\S")
_LINE_END = re.compile(r"[\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")
FIRST_LINE_CHARS = 200


def _first_line(text: str) -> str:
    """The first non-blank line, at most FIRST_LINE_CHARS of it, without splitting (or copying) the whole text."""
    found = _NON_SPACE.search(text)
    if found is None:
        return ""
    head = text[found.start():found.start() + FIRST_LINE_CHARS]
    end = _LINE_END.search(head)
    return (head if end is None else head[:end.start()]).rstrip()


class CallStats:
    """Counts of the calls a runner made, per label (the source tier that asked): for self-metrics."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_label: Dict[str, "LabelStats"] = {}

    def record(self, label: str, result: CommandResult) -> None:
        with self._lock:
            stats = self._by_label.setdefault(label, LabelStats())
            stats.add(result)

    def overran(self, label: str) -> None:
        """The label's poll left calls out: it could not finish within its time budget."""
        with self._lock:
            self._by_label.setdefault(label, LabelStats()).overruns += 1

    def snapshot(self) -> Dict[str, "LabelStats"]:
        with self._lock:
            return {label: dataclasses.replace(stats, buckets=list(stats.buckets))
                    for label, stats in self._by_label.items()}


@dataclass
class LabelStats:
    calls: int = 0  # calls that ran
    failures: int = 0  # calls that ran and did not answer normally (timeouts included)
    timeouts: int = 0
    not_started: int = 0  # calls that found no free slot in time (or no time left)
    overruns: int = 0  # polls that left calls out
    queue_seconds: float = 0.0
    duration_sum: float = 0.0
    buckets: List[int] = dataclasses.field(default_factory=lambda: [0] * len(DURATION_BUCKETS))

    def add(self, result: CommandResult) -> None:
        if result.stopped:
            return  # npumon's own stop or reload ended it: it tells nothing of the tool
        self.queue_seconds += result.queue_seconds
        if not result.started:
            self.not_started += 1
            return
        self.calls += 1
        self.duration_sum += result.duration_seconds
        for index, bound in enumerate(DURATION_BUCKETS):
            if result.duration_seconds <= bound:
                self.buckets[index] += 1
        if result.timed_out:
            self.timeouts += 1
        if result.timed_out or result.error or result.returncode != 0:
            self.failures += 1
