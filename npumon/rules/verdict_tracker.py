"""The guard rails between a pass's verdicts (verdict.decide) and what the hand-off acts on.

- Out of service only after the deciding finding has held for its rule's `for:` (Finding.since is when its
  condition started to hold); until then the chip is DEGRADED.
- Back from OUT_OF_SERVICE only after the findings have said so for `handoff.healthy_seconds` on end. A sticky
  finding (rule `sticky: true`) stays active until acknowledged (`npumon ack`, POST /v1/ack), so a sticky fault
  needs the acknowledgement first, then the healthy time.
- At most `handoff.max_transitions_per_hour` state changes per chip (and for the host) in any hour. The last
  change of the budget may only make the state stronger, so a flapping chip ends up held out of service, not
  held in service.
"""

import collections
import dataclasses
import time
from dataclasses import dataclass
from typing import Callable, List, Mapping, NamedTuple, Optional, Tuple

from .verdict import DEGRADED, HEALTHY, HOST, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason, state_rank

HOUR = 3600.0
MAX_TRANSITIONS_LIMIT = 1000  # the per-chip history of transitions is bounded by this


@dataclass(frozen=True)
class GuardRails:
    """The verdict guard rails: the first keys of the `handoff:` section (services/handoff/config.py)."""

    healthy_seconds: float = 600.0  # healthy this long on end before a chip comes back in service
    max_transitions_per_hour: int = 6  # flap damping, per chip and for the host


def guard_rail_problems(config: GuardRails) -> List[Tuple[str, str]]:
    """(dotted key, problem) for every setting that cannot work."""
    problems = []
    if not 0 <= config.healthy_seconds <= 7 * 24 * HOUR:
        problems.append(("handoff.healthy_seconds", "must be between 0 and 604800 (a week)"))
    if not 2 <= config.max_transitions_per_hour <= MAX_TRANSITIONS_LIMIT:
        problems.append(("handoff.max_transitions_per_hour",
                         "must be between 2 (out and back) and {}".format(MAX_TRANSITIONS_LIMIT)))
    return problems


class Transition(NamedTuple):
    subject: str  # "host" or "npu<N>/chip<C>"
    old: str
    new: str
    time: float
    reasons: Tuple[Reason, ...]


class _Track:
    __slots__ = ("state", "since", "milder_since", "changes")

    def __init__(self, state: str, since: float) -> None:
        self.state = state
        self.since = since
        self.milder_since = None  # type: Optional[float]  # since when the findings ask for a milder state
        self.changes = collections.deque()  # type: Deque[float]  # times of the transitions of the last hour


class VerdictTracker:
    """Turns each pass's raw verdict into the guarded one. `hold_for` maps a rule id to its `for:` seconds
    (unknown rules: 0); `clock` is injectable for tests."""

    def __init__(self, config: GuardRails, hold_for: Optional[Mapping[str, float]] = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.hold_for = dict(hold_for or {})
        self.clock = clock
        self._tracks = {}  # type: Dict[str, _Track]
        self.transitions = []  # type: List[Transition]  # of the last update()

    def update(self, raw: HostVerdict) -> HostVerdict:
        now = self.clock()
        self.transitions = []
        chips = tuple(self._step(chip, now) for chip in raw.chips)
        seen = {chip.subject for chip in raw.chips} | {HOST}
        for subject in [s for s in self._tracks if s not in seen]:  # a chip gone from the host: forget it
            del self._tracks[subject]
        host = self._step(ChipVerdict(HOST, raw.state, raw.reasons, raw.since), now)
        return HostVerdict(host.state, raw.reasons, chips, host.since, host.note)

    def _step(self, raw: ChipVerdict, now: float) -> ChipVerdict:
        track = self._tracks.get(raw.subject)
        if track is None:
            track = self._tracks[raw.subject] = _Track(HEALTHY, now)
        target, note = raw.state, ""
        if target == OUT_OF_SERVICE and not self._held(raw.reasons, now):
            target, note = DEGRADED, "out of service once its finding has held for its rule's for:"
        if state_rank(target) < state_rank(track.state):
            if track.milder_since is None:
                track.milder_since = now
        else:
            track.milder_since = None
        if track.state == OUT_OF_SERVICE and target != OUT_OF_SERVICE:
            left = self.config.healthy_seconds - (now - track.milder_since)
            if left > 0:
                target = OUT_OF_SERVICE
                note = "back in service after {:.0f} s more without an out-of-service finding".format(left)
        if target != track.state:
            while track.changes and track.changes[0] <= now - HOUR:
                track.changes.popleft()
            budget = self.config.max_transitions_per_hour - len(track.changes)
            stronger = state_rank(target) > state_rank(track.state)
            if budget >= (1 if stronger else 2):
                self.transitions.append(Transition(raw.subject, track.state, target, now, raw.reasons))
                track.changes.append(now)
                track.state, track.since, track.milder_since = target, now, None
            else:
                note = "flap damping: {} changes in the last hour, held {}".format(len(track.changes), track.state)
        return dataclasses.replace(raw, state=track.state, since=track.since, note=note)

    def _held(self, reasons: Tuple[Reason, ...], now: float) -> bool:
        """Whether an out-of-service reason has held for its rule's `for:`."""
        return any(reason.state == OUT_OF_SERVICE and now - reason.since >= self.hold_for.get(reason.rule, 0.0)
                   for reason in reasons)
