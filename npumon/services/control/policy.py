"""The safety governor for the fans: a pure function from what is known now to one decision.

Inputs: the hottest relevant chip's temperature and the inlet/board ("ambient") temperature, each with the
time it was read; what the driver did last time (kept in GovernorState); the clock. Output: a Decision to
set a duty, go to the safe state, or hold. The service carries it out and feeds the result back through
`after_action`, so every rule here can be tested without hardware or time passing.

The rules, in order:
1. Missing or stale temperatures, or a failed driver call less than `retry_after_failure_seconds` ago:
   the safe state, at once (never rate limited, never held back). Only at the start, before npumon has
   touched the fans, the first readings get `stale_after_seconds` to arrive.
2. Wanted duty = the fan curve at the chip temperature (interpolated, rounded up to DUTY_STEP), at least
   `ambient_min_duty_percent` while the ambient temperature is above its threshold, never below the floor.
3. Up at once when more air is wanted; down only when the duty wanted at temperatures `hysteresis_celsius`
   higher is lower (so a temperature hovering at a curve point does not flap the fan) and the current duty
   has been held `min_hold_seconds`.
4. At most `max_changes_per_minute` duty changes in any 60 s; the change that would exceed it waits.
"""

import math
from dataclasses import dataclass, replace
from typing import List, Optional, Sequence, Tuple

from ...model import Snapshot
from ...sources.npusmi.source import TABLE_SOURCE
from ...sources.ambient import AMBIENT_SOURCE_NAME
from .settings import ControlConfig

DUTY_STEP = 5  # percent: the curve's duty is rounded up to this, so a slow rise does not move the fan each poll
RATE_WINDOW_SECONDS = 60.0

# GovernorState.mode
STARTING = "starting"  # nothing done yet
CURVE = "curve"  # npumon runs the fans at `duty`
SAFE = "safe"  # the fans are (or are being put) in the safe state

# Decision.action
SET_DUTY = "set_duty"
GO_SAFE = "safe"
HOLD = "hold"


@dataclass(frozen=True)
class FanPolicy:
    curve: Tuple[Tuple[float, float], ...]
    floor_percent: float
    hysteresis_celsius: float
    min_hold_seconds: float
    max_changes_per_minute: int
    stale_after_seconds: float
    retry_after_failure_seconds: float
    ambient_threshold_celsius: float
    ambient_min_duty_percent: float

    @classmethod
    def from_config(cls, control: ControlConfig) -> "FanPolicy":
        fan = control.fan
        return cls(curve=tuple((float(t), float(d)) for t, d in fan.curve), floor_percent=fan.floor_percent,
                   hysteresis_celsius=fan.hysteresis_celsius, min_hold_seconds=fan.min_hold_seconds,
                   max_changes_per_minute=fan.max_changes_per_minute,
                   stale_after_seconds=control.stale_after_seconds,
                   retry_after_failure_seconds=control.retry_after_failure_seconds,
                   ambient_threshold_celsius=control.ambient.threshold_celsius,
                   ambient_min_duty_percent=control.ambient.min_duty_percent)


@dataclass(frozen=True)
class Reading:
    celsius: Optional[float]  # None: not known
    time: Optional[float]  # unix time it was read


MISSING = Reading(None, None)


@dataclass(frozen=True)
class Inputs:
    chips: Reading  # the hottest relevant chip; missing when any relevant chip has no temperature
    ambient: Optional[Reading] = None  # None when no ambient source is configured


@dataclass(frozen=True)
class GovernorState:
    mode: str = STARTING
    duty: Optional[int] = None  # in CURVE mode: the duty npumon set
    changed_at: Optional[float] = None  # when that duty was set
    change_times: Tuple[float, ...] = ()  # duty changes (attempted) in the last RATE_WINDOW_SECONDS
    safe_confirmed: bool = False  # in SAFE mode: the safe state was applied successfully
    failed_at: Optional[float] = None  # the last failed driver call
    started_at: Optional[float] = None  # when the governor started (a first reading gets stale_after to arrive)


RATE_LIMIT = "rate limit"
HOLD_TIME = "hold time"


@dataclass(frozen=True)
class Decision:
    action: str  # SET_DUTY | GO_SAFE | HOLD
    reason: str
    duty: Optional[int] = None  # for SET_DUTY
    blocked_by: Optional[str] = None  # HOLD although a change was wanted: RATE_LIMIT or HOLD_TIME


def curve_duty(curve: Sequence[Tuple[float, float]], celsius: float) -> float:
    """The curve's duty at a temperature: linear between points, the nearest point's duty outside them."""
    if celsius <= curve[0][0]:
        return curve[0][1]
    for (low_t, low_d), (high_t, high_d) in zip(curve, curve[1:]):
        if celsius <= high_t:
            return low_d + (high_d - low_d) * (celsius - low_t) / (high_t - low_t)
    return curve[-1][1]


def wanted_duty(policy: FanPolicy, chip_celsius: float, ambient_celsius: Optional[float]) -> int:
    """The duty the policy asks for at these temperatures (whole percent, within floor..100)."""
    duty = min(100.0, math.ceil(curve_duty(policy.curve, chip_celsius) / DUTY_STEP - 1e-9) * DUTY_STEP)
    if ambient_celsius is not None and ambient_celsius > policy.ambient_threshold_celsius:
        duty = max(duty, policy.ambient_min_duty_percent)
    return int(min(100, math.ceil(max(duty, policy.floor_percent))))


def input_problem(policy: FanPolicy, inputs: Inputs, now: float) -> Optional[str]:
    """Why the temperatures cannot be trusted now, or None."""
    named = [("chip", inputs.chips)] + ([("ambient", inputs.ambient)] if inputs.ambient is not None else [])
    for name, reading in named:
        if reading.celsius is None or reading.time is None or not math.isfinite(reading.celsius):
            return "no {} temperature".format(name)
        age = now - reading.time
        if age > policy.stale_after_seconds:
            return "{} temperature is {:.0f}s old (limit {:g}s)".format(name, age, policy.stale_after_seconds)
    return None


def decide(policy: FanPolicy, state: GovernorState, inputs: Inputs, now: float) -> Decision:
    """The one decision for now (the rules in the module docstring, in their order)."""
    problem = input_problem(policy, inputs, now)
    if problem is None and state.failed_at is not None and now - state.failed_at < policy.retry_after_failure_seconds:
        problem = "a driver call failed {:.0f}s ago (retry after {:g}s)".format(
            now - state.failed_at, policy.retry_after_failure_seconds)
    if problem is not None:
        if state.mode == SAFE and state.safe_confirmed:
            return Decision(HOLD, "safe state: " + problem)
        if state.mode == STARTING and state.failed_at is None and state.started_at is not None \
                and now - state.started_at <= policy.stale_after_seconds:
            # npumon has not touched the fans yet: the first readings may take a poll or two to arrive
            return Decision(HOLD, "waiting for the first readings: " + problem)
        return Decision(GO_SAFE, problem)
    chip = float(inputs.chips.celsius)  # type: ignore[arg-type]  # input_problem checked it
    ambient = None if inputs.ambient is None else inputs.ambient.celsius
    up = wanted_duty(policy, chip, ambient)
    why = _explain(chip, ambient, up)
    if state.mode != CURVE or state.duty is None:
        return _change(policy, state, now, up, "taking over the fans: " + why)
    if up > state.duty:
        return _change(policy, state, now, up, "raising: " + why)
    hysteresis = policy.hysteresis_celsius
    down = wanted_duty(policy, chip + hysteresis, None if ambient is None else ambient + hysteresis)
    if down < state.duty:
        held = now - (state.changed_at if state.changed_at is not None else now)
        if held < policy.min_hold_seconds:
            return Decision(HOLD, "keeping {}% for {:g}s after the last change ({:.0f}s so far)".format(
                state.duty, policy.min_hold_seconds, held), blocked_by=HOLD_TIME)
        return _change(policy, state, now, down, "lowering: " + _explain(chip, ambient, down))
    return Decision(HOLD, "{}% fits: {}".format(state.duty, why))


def _change(policy: FanPolicy, state: GovernorState, now: float, duty: int, reason: str) -> Decision:
    recent = _recent(state.change_times, now)
    if len(recent) >= policy.max_changes_per_minute:
        return Decision(HOLD, "rate limit: {} changes in the last minute; {} waits".format(len(recent), reason),
                        blocked_by=RATE_LIMIT)
    return Decision(SET_DUTY, reason, duty=duty)


def _recent(times: Sequence[float], now: float) -> Tuple[float, ...]:
    return tuple(t for t in times if now - t < RATE_WINDOW_SECONDS)


def _explain(chip: float, ambient: Optional[float], duty: int) -> str:
    text = "chips {:g} C".format(chip)
    if ambient is not None:
        text += ", ambient {:g} C".format(ambient)
    return "{} -> {}%".format(text, duty)


def after_action(state: GovernorState, decision: Decision, succeeded: bool, now: float) -> GovernorState:
    """The state after the service carried a decision out (succeeded: the driver said so, or dry run)."""
    if decision.action == SET_DUTY:
        times = _recent(state.change_times, now) + (now,)
        if succeeded:
            return replace(state, mode=CURVE, duty=decision.duty, changed_at=now, change_times=times,
                           safe_confirmed=False, failed_at=None)
        return replace(state, mode=SAFE, duty=None, change_times=times, safe_confirmed=False, failed_at=now)
    if decision.action == GO_SAFE:
        return replace(state, mode=SAFE, duty=None, safe_confirmed=succeeded,
                       failed_at=state.failed_at if succeeded else now)
    return state


def after_failure(state: GovernorState, now: float) -> GovernorState:
    """A driver call outside a decision failed (reading the fans back): trust nothing, go safe."""
    return replace(state, mode=SAFE, duty=None, safe_confirmed=False, failed_at=now)


def after_outside_safe(state: GovernorState) -> GovernorState:
    """Something else (the watchdog process) put the fans in the safe state."""
    return replace(state, mode=SAFE, duty=None, safe_confirmed=True)


def manual_duty_problem(policy: FanPolicy, duty: int) -> Optional[str]:
    """Why a duty asked for by hand is refused, or None."""
    if not 0 <= duty <= 100:
        return "duty {}% is outside 0..100".format(duty)
    if duty < policy.floor_percent:
        return "duty {}% is below the floor of {:g}% (control.fan.floor_percent)".format(duty, policy.floor_percent)
    return None


def inputs_from_snapshot(snapshot: Snapshot, npus: Sequence[int], ambient_configured: bool) -> Inputs:
    """The governor's inputs from a Snapshot: the hottest chip of the relevant cards, stamped with the main
    table's last successful read, and the ambient temperature stamped with its source's."""
    chips = [chip for chip in snapshot.chips if not npus or chip.npu in npus]
    table = snapshot.sources.get(TABLE_SOURCE)
    temperatures: List[Optional[float]] = [chip.temperature_celsius for chip in chips]
    if not chips or any(value is None for value in temperatures) or table is None:
        chip_reading = MISSING
    else:
        chip_reading = Reading(max(value for value in temperatures if value is not None), table.last_success)
    ambient_reading = None
    if ambient_configured:
        status = snapshot.sources.get(AMBIENT_SOURCE_NAME)
        celsius = snapshot.host.ambient_temperature_celsius
        ambient_reading = MISSING if status is None or celsius is None else Reading(celsius, status.last_success)
    return Inputs(chips=chip_reading, ambient=ambient_reading)
