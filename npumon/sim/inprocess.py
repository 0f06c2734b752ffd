"""The simulated npu-smi (and hccn_tool) answering inside the calling process: a CommandRunner `spawn` for tests.

Forking `python -m npumon.sim.npusmi` costs a Python start per npu-smi call (a `check` makes about 20).
`run_in_process` answers the same calls with the same code (npusmi.begin_call / Call.answer) and returns
the CommandResult the real subprocess path would: the same stdout, stderr and exit status, after the same
wait (real npu-smi's time for the call, latency.py, plus the scenario's delay); a hang, or a wait past the
deadline, waits out the deadline and times out without an answer.

`InProcessNpuSmi(clock=..., sleep=...)` runs on a test's own clock: scenario time follows `clock`, and the
waits (latency, delays, hangs) go through `sleep`, so a fake clock can pass them without waiting. `rng`
draws each call's latency (a seeded one makes them repeat).
"""

import random
import sys
import time
from typing import Callable, Dict, List, Optional

from ..sources.runner import CommandResult
from . import hccn
from .npusmi import EXIT_SIMULATOR_MISUSE, begin_call, misuse_message
from .state import STATE_ENV, SimStateError

MODULE = "npumon.sim.npusmi"
ARGV_PREFIX = [sys.executable, "-m", MODULE]  # what prepare_simulation tells callers to run


class InProcessNpuSmi:
    """spawn(argv, env, timeout_seconds) -> CommandResult for the simulator's argv (ARGV_PREFIX + args)."""

    def __init__(self, clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep,
                 rng: Optional[random.Random] = None):
        self.clock = clock
        self.sleep = sleep
        self.rng = rng or random.Random()

    @staticmethod
    def handles(argv: List[str]) -> bool:
        """Whether this argv is one of the simulators' (any other program, e.g. a configured tool, runs for real)."""
        return MODULE in argv[:3] or hccn.MODULE in argv[:3]

    def __call__(self, argv: List[str], env: Optional[Dict[str, str]], timeout_seconds: float) -> CommandResult:
        if hccn.MODULE in argv[:3]:
            return self._hccn(argv, env, timeout_seconds)
        args = _simulator_args(argv)
        started = self.clock()
        try:
            call = begin_call(args, (env or {}).get(STATE_ENV), started, self.rng)
        except (SimStateError, OSError, ValueError) as exc:
            return CommandResult(list(argv), EXIT_SIMULATOR_MISUSE, "", misuse_message(exc),
                                 self.clock() - started)
        wait = timeout_seconds if call.hangs else call.wait_seconds
        if wait >= timeout_seconds:  # killed at the deadline before it printed anything
            self.sleep(max(0.0, timeout_seconds))
            return CommandResult(list(argv), None, "", "", self.clock() - started, timed_out=True)
        if wait:
            self.sleep(wait)
        text, status = call.answer()
        return CommandResult(list(argv), status, text, "", self.clock() - started)


    def _hccn(self, argv: List[str], env: Optional[Dict[str, str]], timeout_seconds: float) -> CommandResult:
        """The simulated hccn_tool (sim/hccn.py), answered alike: a blocking chip waits out the deadline."""
        started = self.clock()
        try:
            call = hccn.begin_call(argv[argv.index(hccn.MODULE) + 1:], (env or {}).get(STATE_ENV), started, self.rng)
        except (SimStateError, OSError, ValueError) as exc:
            return CommandResult(list(argv), EXIT_SIMULATOR_MISUSE, "", "hccn-tool-sim: {}\n".format(exc),
                                 self.clock() - started)
        wait = call.wait_seconds
        if wait >= timeout_seconds:
            self.sleep(max(0.0, timeout_seconds))
            return CommandResult(list(argv), None, "", "", self.clock() - started, timed_out=True)
        if wait:
            self.sleep(wait)
        out, err, status = call.answer()
        return CommandResult(list(argv), status, out, err, self.clock() - started)


def _simulator_args(argv: List[str]) -> List[str]:
    """The npu-smi arguments after the simulator's own command; anything else is not ours to answer."""
    if MODULE in argv[:3]:
        return list(argv[argv.index(MODULE) + 1:])
    raise ValueError("not the simulated npu-smi: {!r} (expected {!r} + arguments)".format(argv, ARGV_PREFIX))


run_in_process = InProcessNpuSmi()
