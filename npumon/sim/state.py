"""The simulation's state directory: what prepare_simulation decided, and the scenario clock.

Every simulator invocation is a fresh process; the state directory is what makes calls agree with
each other (same scenario, same product, one clock). It holds:

* state.json  - start time, time scale, latency scale, product, the checked scenario, host values, host
                root path;
* cpu.json    - wall time up to which the fake host's CPU counters have been advanced (under cpu.lock).
"""

import contextlib
import fcntl
import json
import os
import tempfile
import threading
from collections import OrderedDict
from typing import Any, Dict, Iterator, Optional, Tuple

STATE_ENV = "NPUMON_SIM_STATE"
STATE_FILE = "state.json"
CPU_CLOCK_FILE = "cpu.json"
CPU_LOCK_FILE = "cpu.lock"
SHARED_STATES = 16  # parsed state files kept by read_state_shared, the most recently used


class SimStateError(RuntimeError):
    """The state directory is missing or unreadable (prepare_simulation was not run for it)."""


def write_state(state_dir: str, state: Dict[str, Any]) -> None:
    os.makedirs(state_dir, exist_ok=True)
    _write_json(os.path.join(state_dir, STATE_FILE), state)
    _write_json(os.path.join(state_dir, CPU_CLOCK_FILE), {"advanced_at": state["start_time"]})


def update_state(state_dir: str, state: Dict[str, Any]) -> None:
    """Replace the state of a running simulation; unlike write_state, the CPU clock keeps running."""
    _write_json(os.path.join(state_dir, STATE_FILE), state)


def read_state(state_dir: Optional[str]) -> Dict[str, Any]:
    if not state_dir:
        raise SimStateError("{} is not set; create a simulation with npumon.sim.simulation.prepare_simulation"
                            .format(STATE_ENV))
    path = os.path.join(state_dir, STATE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise SimStateError("cannot read simulation state {}: {}".format(path, exc)) from None


_shared_lock = threading.Lock()
_shared: "OrderedDict[str, Tuple[Tuple[int, int, int], Dict[str, Any]]]" = OrderedDict()


def read_state_shared(state_dir: Optional[str]) -> Dict[str, Any]:
    """read_state for callers that only read it: the in-process simulator answers hundreds of calls a second,
    and parsing the same file for each was a tenth of a simulated call. The file is replaced by rename whenever
    it changes, so its inode, size and mtime say whether the parse kept is still it. Never mutate the result."""
    if not state_dir:
        return read_state(state_dir)
    path = os.path.join(state_dir, STATE_FILE)
    try:
        status = os.stat(path)
    except OSError:
        return read_state(state_dir)  # its error
    identity = (status.st_ino, status.st_size, status.st_mtime_ns)
    with _shared_lock:
        kept = _shared.get(path)
        if kept is not None and kept[0] == identity:
            _shared.move_to_end(path)
            return kept[1]
    state = read_state(state_dir)
    with _shared_lock:
        _shared[path] = (identity, state)
        _shared.move_to_end(path)
        while len(_shared) > SHARED_STATES:
            _shared.popitem(last=False)
    return state


def scenario_time(state: Dict[str, Any], now: float) -> float:
    """Seconds of scenario time at wall time `now` (time_scale 0 freezes the scenario at t = 0)."""
    return max(0.0, (now - state["start_time"]) * state["time_scale"])


@contextlib.contextmanager
def cpu_clock(state_dir: str) -> Iterator[Dict[str, float]]:
    """Exclusive access to the CPU clock record; changes made to the yielded dict are saved."""
    with open(os.path.join(state_dir, CPU_LOCK_FILE), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        path = os.path.join(state_dir, CPU_CLOCK_FILE)
        with open(path, encoding="utf-8") as handle:
            clock = json.load(handle)
        before = dict(clock)
        yield clock
        if clock != before:
            _write_json(path, clock)


def _write_json(path: str, data: Dict[str, Any]) -> None:
    # temp file + rename: a simulator starting meanwhile reads the old or the new file, never half of one
    handle, temp_path = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as temp:
            json.dump(data, temp, indent=1, sort_keys=True)
        os.replace(temp_path, path)
    except BaseException:
        os.unlink(temp_path)
        raise
