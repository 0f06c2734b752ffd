"""The fan governor (npumon.services.control.policy): pure rules first, then hypothesis properties over whole runs of
the control loop (ControlService with a fake driver and a fake clock) - the floor, the safe state on stale
data within one tick, and the change-rate limit hold for any sequence of temperatures, staleness and
driver failures."""

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npumon.services.control.drivers import DriverResult, FanReading, Probe
from npumon.services.control.policy import (CURVE, GO_SAFE, HOLD, HOLD_TIME, MISSING, RATE_LIMIT, RATE_WINDOW_SECONDS,
                                   SAFE, SET_DUTY, STARTING, Decision, FanPolicy, GovernorState, Inputs, Reading,
                                   after_action, curve_duty, decide, inputs_from_snapshot, manual_duty_problem,
                                   wanted_duty)
from npumon.services.control.service import ControlService
from npumon.services.control.settings import AmbientConfig, ControlConfig, FanConfig
from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus

CURVE_POINTS = ((45.0, 30.0), (60.0, 45.0), (70.0, 65.0), (80.0, 85.0), (85.0, 100.0))


def policy(**changes):
    values = dict(curve=CURVE_POINTS, floor_percent=30.0, hysteresis_celsius=3.0, min_hold_seconds=30.0,
                  max_changes_per_minute=4, stale_after_seconds=45.0, retry_after_failure_seconds=60.0,
                  ambient_threshold_celsius=35.0, ambient_min_duty_percent=60.0)
    values.update(changes)
    return FanPolicy(**values)


def fresh(chip, now, ambient=None):
    return Inputs(Reading(chip, now), None if ambient is None else Reading(ambient, now))


# -- the curve and the wanted duty -----------------------------------------------------------------------------


def test_the_curve_interpolates_between_points_and_holds_the_end_values_outside():
    assert curve_duty(CURVE_POINTS, 20) == 30
    assert curve_duty(CURVE_POINTS, 52.5) == pytest.approx(37.5)
    assert curve_duty(CURVE_POINTS, 75) == pytest.approx(75)
    assert curve_duty(CURVE_POINTS, 120) == 100


def test_wanted_duty_rounds_up_to_the_step_and_respects_the_floor_and_the_ambient_rule():
    assert wanted_duty(policy(), 52.5, None) == 40  # 37.5 rounded up to 5
    assert wanted_duty(policy(), 65, None) == 55
    assert wanted_duty(policy(floor_percent=50), 40, None) == 50
    assert wanted_duty(policy(floor_percent=33), 40, None) == 33  # the floor itself, not rounded
    assert wanted_duty(policy(), 50, 35.0) == 35  # at the threshold the ambient rule does not act
    assert wanted_duty(policy(), 50, 35.5) == 60  # above it: at least 60%
    assert wanted_duty(policy(), 82, 40.0) == 95  # the curve wins when it asks for more


# -- decisions -------------------------------------------------------------------------------------------------


def test_the_first_fresh_reading_takes_the_fans_over():
    decision = decide(policy(), GovernorState(started_at=0.0), fresh(65, 10.0), 10.0)
    assert (decision.action, decision.duty) == (SET_DUTY, 55)
    assert "chips 65 C -> 55%" in decision.reason


def test_missing_or_stale_temperatures_send_the_fans_to_the_safe_state():
    running = GovernorState(CURVE, 55, 0.0, (0.0,))
    assert decide(policy(), running, Inputs(MISSING), 10.0).action == GO_SAFE
    stale = decide(policy(), running, fresh(65, 100.0), 146.0)
    assert stale.action == GO_SAFE and "46s old (limit 45s)" in stale.reason
    ambient_missing = decide(policy(), running, Inputs(Reading(65, 10.0), MISSING), 10.0)
    assert ambient_missing.action == GO_SAFE and "no ambient temperature" in ambient_missing.reason
    confirmed = after_action(running, Decision(GO_SAFE, "x"), True, 146.0)
    assert decide(policy(), confirmed, fresh(65, 100.0), 150.0).action == HOLD


def test_at_the_start_the_first_readings_get_the_staleness_limit_to_arrive():
    starting = GovernorState(started_at=0.0)
    assert decide(policy(), starting, Inputs(MISSING), 45.0).action == HOLD
    assert decide(policy(), starting, Inputs(MISSING), 46.0).action == GO_SAFE


def test_up_at_once_down_only_past_the_hysteresis_and_the_hold_time():
    state = GovernorState(CURVE, 55, 0.0, (0.0,))
    assert decide(policy(), state, fresh(72, 1.0), 1.0).duty == 70  # up at once
    # 60 C alone would want 45%, but at 60 + 3 C the curve still wants 55%: hold
    assert decide(policy(), state, fresh(60, 100.0), 100.0).action == HOLD
    # 58 C: at 61 C the curve wants 50%, so down - once the duty was held 30 s
    held = decide(policy(), state, fresh(58, 20.0), 20.0)
    assert (held.action, held.blocked_by) == (HOLD, HOLD_TIME)
    assert decide(policy(), state, fresh(58, 31.0), 31.0).duty == 50


def test_the_rate_limit_holds_a_change_back_until_the_window_frees():
    state = GovernorState(CURVE, 40, 58.0, (0.0, 20.0, 40.0, 58.0))
    blocked = decide(policy(), state, fresh(75, 59.0), 59.0)
    assert (blocked.action, blocked.blocked_by) == (HOLD, RATE_LIMIT)
    assert decide(policy(), state, fresh(75, 60.0), 60.0).action == SET_DUTY  # the change at 0 s left the window


def test_a_failed_driver_call_means_the_safe_state_then_a_retry_after_the_pause():
    state = GovernorState(CURVE, 55, 0.0, (0.0,))
    failed = after_action(state, Decision(SET_DUTY, "x", duty=70), False, 10.0)
    assert failed.mode == SAFE and not failed.safe_confirmed
    assert decide(policy(), failed, fresh(72, 10.0), 10.0).action == GO_SAFE
    safe = after_action(failed, Decision(GO_SAFE, "x"), True, 10.0)
    assert decide(policy(), safe, fresh(72, 50.0), 50.0).action == HOLD
    assert decide(policy(), safe, fresh(72, 71.0), 71.0).duty == 70


def test_a_manual_duty_below_the_floor_is_refused():
    assert "below the floor of 30%" in manual_duty_problem(policy(), 20)
    assert manual_duty_problem(policy(), 30) is None
    assert "outside 0..100" in manual_duty_problem(policy(), 101)


def test_inputs_come_from_the_hottest_relevant_chip_stamped_with_the_table_read():
    chips = [ChipSample(npu=0, chip=0, temperature_celsius=50.0), ChipSample(npu=1, chip=0, temperature_celsius=70.0)]
    sources = {"npu-smi": SourceStatus(ok=True, last_success=90.0), "ambient": SourceStatus(ok=True, last_success=80.0)}
    snapshot = Snapshot(time=100.0, host=HostSample(ambient_temperature_celsius=33.0), chips=chips, sources=sources)
    assert inputs_from_snapshot(snapshot, [], True) == Inputs(Reading(70.0, 90.0), Reading(33.0, 80.0))
    assert inputs_from_snapshot(snapshot, [0], False) == Inputs(Reading(50.0, 90.0), None)
    chips[0].temperature_celsius = None  # one chip without a temperature: nothing to trust
    assert inputs_from_snapshot(snapshot, [], False).chips == MISSING


# -- properties of whole runs ----------------------------------------------------------------------------------


class FakeFans:
    """A fan driver that fails when told to and remembers every call with the clock's time."""

    name = "fake"
    can_read = True

    def __init__(self, clock):
        self.clock = clock
        self.fail_next = False
        self.calls = []  # (time, "duty"|"auto", percent)
        self.mode, self.duty = "auto", 40

    def probe(self):
        return Probe(True, "fake fans")

    def read(self):
        if self.fail_next:
            return None, "read failed"
        return FanReading(self.mode, self.duty), None

    def set_duty(self, percent):
        self.calls.append((self.clock(), "duty", percent))
        if self.fail_next:
            return DriverResult(False, "injected failure")
        self.mode, self.duty = "manual", percent
        return DriverResult(True, "ok")

    def set_auto(self):
        self.calls.append((self.clock(), "auto", None))
        if self.fail_next:
            return DriverResult(False, "injected failure")
        self.mode = "auto"
        return DriverResult(True, "ok")

    def spec(self):
        return {}

    def abort(self):
        pass


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


STALE_AFTER = 30.0
FLOOR = 35.0
MAX_CHANGES = 3

anything = st.tuples(
    st.floats(min_value=0.5, max_value=40.0),  # seconds until this tick
    st.one_of(st.none(), st.floats(min_value=20.0, max_value=110.0)),  # chip temperature (None: missing)
    st.floats(min_value=0.0, max_value=60.0),  # age of the reading at the tick
    st.one_of(st.none(), st.floats(min_value=15.0, max_value=50.0)),  # ambient temperature
    st.booleans(),  # the driver fails during this tick
)
# quick ticks with fresh data and a working driver: where the rate limit and the hold time are tested
normal = st.tuples(st.floats(min_value=0.5, max_value=6.0), st.floats(min_value=20.0, max_value=110.0),
                   st.floats(min_value=0.0, max_value=10.0), st.floats(min_value=15.0, max_value=50.0),
                   st.just(False))
step = st.one_of(normal, anything)


def run_loop(steps, safe_state="auto", verify_seconds=20.0):
    clock = Clock()
    fans = FakeFans(clock)
    control = ControlConfig(enabled=True, safe_state=safe_state, interval_seconds=5.0,
                            stale_after_seconds=STALE_AFTER, retry_after_failure_seconds=20.0,
                            verify_seconds=verify_seconds, watchdog=False,
                            fan=FanConfig(floor_percent=FLOOR, max_changes_per_minute=MAX_CHANGES,
                                          min_hold_seconds=10.0),
                            ambient=AmbientConfig(sensor="hwmon", hwmon_name="x"))
    service = ControlService(control, fans, lambda *args: None, clock=clock)
    ticks = []
    for delay, chip, age, ambient, fail in steps:
        clock.now += delay
        read_at = clock.now - age
        chips = [] if chip is None else [ChipSample(npu=0, chip=0, temperature_celsius=chip)]
        sources = {"npu-smi": SourceStatus(ok=True, last_success=read_at),
                   "ambient": SourceStatus(ok=ambient is not None, last_success=read_at)}
        service.on_evaluation(Snapshot(time=clock.now, host=HostSample(ambient_temperature_celsius=ambient),
                                       chips=chips, sources=sources), [], [])
        fans.fail_next = fail
        calls_before, state_before = len(fans.calls), service.state
        service.tick()
        trustworthy = chip is not None and ambient is not None and age <= STALE_AFTER
        # only at the start, before npumon touched the fans, may the first readings take stale_after to come
        waiting = state_before.mode == STARTING and clock.now - state_before.started_at <= STALE_AFTER
        ticks.append((trustworthy, waiting, fail, fans.calls[calls_before:], service.state))
    return fans, ticks


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(step, min_size=1, max_size=40), st.sampled_from(["auto", "full"]))
def test_no_sequence_of_temperatures_staleness_and_failures_breaks_the_governor(steps, safe_state):
    fans, ticks = run_loop(steps, safe_state)
    safe_duty = 100 if safe_state == "full" else None
    for _, _, percent in (call for call in fans.calls if call[1] == "duty"):
        assert percent >= FLOOR  # never below the floor
    for trustworthy, waiting, fail, calls, state in ticks:
        if not trustworthy and not waiting:
            # stale or missing data: the safe state within this very tick (or it was applied before),
            # whether the driver works or not
            assert state.mode == SAFE
            assert state.safe_confirmed or calls, "no attempt to reach the safe state"
            if not fail:
                assert state.safe_confirmed
    # the change-rate limit: governor duty changes in any 60 s window (with safe_state full, the safe
    # state's own 100% calls are not changes of the governor's and are left out)
    changes = [t for t, kind, percent in fans.calls if kind == "duty" and percent != safe_duty]
    for index, moment in enumerate(changes):
        window = [t for t in changes[:index + 1] if moment - t < RATE_WINDOW_SECONDS]
        assert len(window) <= MAX_CHANGES, changes


@settings(max_examples=200, deadline=None)
@given(st.lists(step, min_size=1, max_size=30))
def test_decide_alone_never_asks_for_a_duty_below_the_floor(steps):
    governor = policy(floor_percent=FLOOR, stale_after_seconds=STALE_AFTER)
    state, now = GovernorState(started_at=0.0), 0.0
    for delay, chip, age, ambient, fail in steps:
        now += delay
        inputs = Inputs(Reading(chip, now - age), None if ambient is None else Reading(ambient, now - age))
        decision = decide(governor, state, inputs, now)
        if decision.action == SET_DUTY:
            assert FLOOR <= decision.duty <= 100 and math.isfinite(decision.duty)
        state = after_action(state, decision, not fail, now)


def test_a_tick_that_starts_stale_ends_in_the_safe_state_even_when_the_safe_call_fails_once():
    fans, ticks = run_loop([(5.0, 60.0, 0.0, 30.0, False), (5.0, 60.0, 50.0, 30.0, True),
                            (5.0, 60.0, 55.0, 30.0, False)])
    states = [tick[4] for tick in ticks]
    assert states[0].mode == CURVE
    assert states[1].mode == SAFE and not states[1].safe_confirmed  # tried, the driver failed
    assert states[2].mode == SAFE and states[2].safe_confirmed  # tried again at the next tick
    assert [kind for _, kind, _ in fans.calls] == ["duty", "auto", "auto"]
