"""The call budget: the query tiers' intervals stretched to what the shared call slots can give.

npu-smi and hccn_tool calls share a few slots (`npu_smi_max_concurrent`, 2 by default; the main table has one
of its own). On a 16-chip A3 read over npu-smi a call takes about 2 s, and the tiers at their configured
intervals ask for more slot time than two slots have (health alone, 16 chip calls a minute, takes 28 s of
it): calls queue, tiers leave calls out and go stale, and `source-down` fires on a healthy host. Asking more
often than the slots allow reads nothing sooner; it only costs the host more processes.

So the runner counts the seconds its shared slots were held, and every BUDGET_WINDOW_SECONDS (the first time
after FIRST_WINDOW_SECONDS) compares them with what the slots had. Above BUSY_HIGH the tiers that call through
them (npu-smi's query tiers, hccn_tool's) poll at their intervals times a stretch chosen to bring the slots to
BUSY_TARGET; below BUSY_LOW the stretch comes back down towards 1 (the configured intervals). A tier's values
stay fresh for its stretched interval, so a stretched tier is slower, never stale. The main table is not
stretched: it has a slot of its own.

A host whose tools answer in a fraction of a second (an A2 over npu-smi, anything over DCMI) never reaches
BUSY_HIGH and polls at the configured intervals. `npumon_call_slots_busy_ratio` and
`npumon_poll_interval_stretch` show the figures; the log says when the stretch changes.
"""

import dataclasses
import logging
import threading
import time
from typing import Callable, Dict, Optional

log = logging.getLogger(__name__)

BUDGET_WINDOW_SECONDS = 120.0
# The first window is short: at start every tier polls at once, and a host whose slots cannot carry the
# configured intervals would otherwise queue its calls for two minutes before the stretch takes effect.
FIRST_WINDOW_SECONDS = 30.0
BUSY_HIGH = 0.75  # above this share of the slots' time, stretch
BUSY_TARGET = 0.6  # the share a new stretch aims at
BUSY_LOW = 0.45  # below this, come back towards the configured intervals
MOST_STRETCH = 4.0  # at most this many times the configured interval (health: every 4 minutes)


def next_stretch(stretch: float, busy_share: float) -> float:
    """The stretch for the next window, from this window's stretch and the share of the slots' time its calls
    held. The demand scales with 1/stretch, so stretch * busy / target brings it to the target in one step when
    the slots were not full, and in a few when they were (a full window hides how far over it was)."""
    if BUSY_LOW <= busy_share <= BUSY_HIGH or (busy_share < BUSY_LOW and stretch <= 1.0):
        return stretch
    return min(MOST_STRETCH, max(1.0, round(stretch * busy_share / BUSY_TARGET, 2)))


@dataclasses.dataclass(frozen=True)
class BudgetState:
    busy_share: float  # share of the shared slots' time held by calls in the last whole window
    stretch: float  # the query tiers poll at their intervals times this


class CallBudget:
    """Slot time spent by a runner's shared slots, and the stretch it sets. Thread-safe."""

    def __init__(self, slots: int, clock: Callable[[], float] = time.monotonic,
                 window_seconds: float = BUDGET_WINDOW_SECONDS,
                 first_window_seconds: float = FIRST_WINDOW_SECONDS) -> None:
        self._slots = slots
        self._clock = clock
        self._window = min(first_window_seconds, window_seconds)  # then window_seconds
        self._window_length = window_seconds
        self._lock = threading.Lock()
        self._window_start = clock()
        self._spent = 0.0  # slot-seconds held in the current window
        self._state = BudgetState(busy_share=0.0, stretch=1.0)
        self._previous_stretch = 1.0  # the window before's: values read under it must stay fresh as long
        self._paced: Dict[str, float] = {}  # tier -> the stretch its next run was paced with

    def spent(self, seconds: float) -> None:
        """A call held a shared slot this long (counted in the window it ended in)."""
        self._roll()
        with self._lock:
            self._spent += seconds

    def state(self) -> BudgetState:
        self._roll()
        return self._state

    def stretch(self, tier: Optional[str] = None) -> float:
        """Times the configured interval that a tier calling through the shared slots polls at now. With `tier`:
        that tier's next run is paced with it, and its values stay fresh at least as long (freshness_stretch)."""
        stretch = self.state().stretch
        if tier is not None:
            with self._lock:
                self._paced[tier] = stretch
        return stretch

    def freshness_stretch(self, tier: Optional[str] = None) -> float:
        """Times the configured interval that a value read through the shared slots stays fresh: the largest of
        this window's stretch, the last one's and the one `tier`'s next run was paced with, so that a stretch
        coming down stales nothing polled under it (a tier paced at 2.3 times its 2 minutes polls again after
        more than two windows)."""
        state = self.state()
        with self._lock:
            paced = self._paced.get(tier, 1.0) if tier is not None else 1.0
        return max(state.stretch, self._previous_stretch, paced)

    def _roll(self) -> None:
        now = self._clock()
        with self._lock:
            elapsed = now - self._window_start
            if elapsed < self._window:
                return
            busy = min(1.0, self._spent / (self._slots * elapsed)) if self._slots else 0.0
            before = self._state.stretch
            after = next_stretch(before, busy)
            self._previous_stretch = before
            self._state = BudgetState(busy_share=round(busy, 3), stretch=after)
            self._window_start, self._spent, self._window = now, 0.0, self._window_length
        if after != before:
            log.info("call slots %.0f%% busy over the last %.0f s: npu-smi's query tiers and hccn_tool's poll at "
                     "%s their configured intervals%s", 100 * busy, elapsed,
                     "{:g} times".format(after) if after > 1 else "again",
                     " (more slots: npu_smi_max_concurrent; fewer calls: longer poll.*_seconds, "
                     "network.*_seconds)" if after > before else "")

