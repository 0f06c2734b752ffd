"""The CPU a simulated host spends inside the process of the npumon that reads it.

Most of the simulator runs in processes of its own (npu-smi, hccn_tool, the probe's child), but some of its work
runs in npumon's process: loading itself at start, writing its NPU processes' /proc entries and its kernel log
lines just before each read (a real host's kernel makes those at no cost to the reader), and answering the
serving source from a thread (a real inference engine is a process of its own). Each piece is timed here with
its thread's CPU clock, so that benchmarks/bench_cost.py can tell npumon's own CPU from the simulator's: a
`--simulate --sim-state DIR` command writes the totals to DIR/IN_PROCESS_FILE when it ends.
"""

import functools
import json
import os
import threading
import time
from typing import Callable, Dict, TypeVar

IN_PROCESS_FILE = "in-process-cpu.json"

T = TypeVar("T")


class InProcessCpu:
    """Seconds of thread CPU per part of the simulator's in-process work. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds: Dict[str, float] = {}

    def add(self, part: str, seconds: float) -> None:
        with self._lock:
            self._seconds[part] = self._seconds.get(part, 0.0) + seconds

    def timed(self, part: str, func: Callable[..., T]) -> Callable[..., T]:
        """`func`, its calls' CPU added to `part`."""
        @functools.wraps(func)
        def timed_call(*args, **kwargs) -> T:
            started = time.thread_time()
            try:
                return func(*args, **kwargs)
            finally:
                self.add(part, time.thread_time() - started)
        return timed_call

    def totals(self) -> Dict[str, float]:
        with self._lock:
            return dict(self._seconds)

    def save(self, directory: str) -> None:
        """The totals as JSON in directory/IN_PROCESS_FILE (written whole: a reader sees all or nothing)."""
        path = os.path.join(directory, IN_PROCESS_FILE)
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(self.totals(), handle, sort_keys=True)
        os.replace(path + ".tmp", path)


# This process's: every simulated host it runs adds to it.
IN_PROCESS_CPU = InProcessCpu()
