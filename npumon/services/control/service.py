"""The control service: the governor driving the fans inside `npumon run` (a daemon.Service).

* on_evaluation() keeps the governor's inputs from each new Snapshot (hottest relevant chip, ambient).
* The `control` job, every control.interval_seconds: beat the watchdog process, probe the driver (again
  every REPROBE_SECONDS while it is unavailable), ask the governor, carry the decision out, and every
  verify_seconds read the fans back and re-assert the policy when something else changed them (for
  example `npumon control fan` by hand). A driver call that fails sends the fans to the safe state in
  the same tick. Any exception in this code does too: a bug must not leave the fans at a low duty.
* close() (daemon stop or reload) kills a driver call in flight and applies the safe state.
* Every action and refusal is logged and recorded in the event history with its reason (audit.py); the
  metrics are npumon_control_actions_total{knob,result} and the duty/mode gauges (metrics.py).

While it drives the fans it writes <state_dir>/control.json (its pid and what it did last; statefile.py),
which `npumon control` reads to warn that a daemon will put its own duty back.
"""

import logging
import os
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ...model import Finding, Snapshot, SourceStatus
from .audit import ACTION, REFUSED, ControlAudit, RecordEvent, describe
from .drivers import (AUTO, FULL_SPEED, MANUAL, FanDriver, FanReading, Probe, apply_safe_state, build_fan_driver,
                      driver_from_spec)
from .metrics import ControlMetrics
from .policy import (CURVE, GO_SAFE, HOLD, MISSING, RATE_LIMIT, SAFE, SET_DUTY, STARTING, Decision, FanPolicy,
                     GovernorState, Inputs, after_action, after_failure, after_outside_safe, decide,
                     inputs_from_snapshot)
from .settings import ControlConfig
from .statefile import StateFile
from .watchdog import ACTED, WatchdogProcess

if TYPE_CHECKING:
    from ..context import ServiceContext

log = logging.getLogger(__name__)

REPROBE_SECONDS = 300.0


def control_services(context: "ServiceContext") -> List["ControlService"]:
    """The control service when the config turns control on (daemon.build_services calls this)."""
    config, target = context.config, context.target
    if not config.control.enabled:
        return []
    driver = build_fan_driver(config.control, target.npu_smi_argv, target.env, target.root,
                              config.npu_smi_timeout_seconds, npu_smi=context.npu_smi)
    if driver is None:  # fan.driver: none - power profiles only, and those are `npumon control power`
        return []
    return [ControlService(config.control, driver, context.record_event, state_dir=config.state_dir,
                           driver_timeout=_driver_timeout(config), clock=context.clock)]


def _driver_timeout(config) -> float:
    fan = config.control.fan
    return fan.command_timeout_seconds if fan.driver == "command" else config.npu_smi_timeout_seconds


def heartbeat_timeout(control: ControlConfig, driver_timeout: float) -> float:
    """How long the watchdog waits for a beat: a tick may make five driver calls (set mode, set duty, and
    after a failure the safe state, plus a read-back of two), and one tick may be coalesced."""
    return 2 * control.interval_seconds + 5 * driver_timeout + 5


def fans_as_expected(state: GovernorState, safe_state: str, reading: FanReading) -> bool:
    """Whether the fans read back are where the governor put them."""
    if state.mode == CURVE and state.duty is not None:
        return reading.mode == MANUAL and reading.duty_percent is not None \
            and abs(reading.duty_percent - state.duty) <= 1  # hwmon's 0..255 scale rounds
    if safe_state == AUTO:
        return reading.mode == AUTO
    return reading.mode == FULL_SPEED or (reading.mode == MANUAL and (reading.duty_percent or 0) >= 99)


class ControlService:
    name = "control"

    def __init__(self, control: ControlConfig, driver: FanDriver, record_event: RecordEvent,
                 state_dir: Optional[str] = None, driver_timeout: float = 10.0, clock: Callable[[], float] = time.time,
                 driver_factory: Callable[[Dict[str, Any]], FanDriver] = driver_from_spec,
                 watchdog_factory: Callable[..., WatchdogProcess] = WatchdogProcess):
        self.control = control
        self.policy = FanPolicy.from_config(control)
        self.driver = driver
        self.audit = ControlAudit(record_event, control.safe_state, log)
        self.clock = clock
        self._driver_factory = driver_factory  # a fresh driver for close(): the loop's runner is aborted
        self._watchdog_factory = watchdog_factory
        self._heartbeat_timeout = heartbeat_timeout(control, driver_timeout)
        self._state_file = None if state_dir is None else StateFile(state_dir)
        self._ambient = control.ambient.sensor != "none"
        self._inputs_lock = threading.Lock()
        self._inputs = Inputs(MISSING, MISSING if self._ambient else None)
        self._lock = threading.RLock()  # one tick or close() at a time
        self._closed = False
        self.state = GovernorState(started_at=clock())
        self.probe: Optional[Probe] = None
        self._probed_at: Optional[float] = None
        self._took_over = False  # npumon has set the fans at least once
        self._verified_at: Optional[float] = None
        self.last_reading: Optional[FanReading] = None
        self.last_decision: Optional[Decision] = None
        self._last_block: Optional[str] = None
        self._crash_logged = False
        self._watchdog: Optional[WatchdogProcess] = None

    # -- daemon.Service -------------------------------------------------------------------------------------

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]:
        return [("control", self.control.interval_seconds, self.tick)]

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None:
        inputs = inputs_from_snapshot(snapshot, self.control.fan.npus, self._ambient)
        with self._inputs_lock:
            self._inputs = inputs

    def collectors(self) -> List[object]:
        return [ControlMetrics(self)]

    def statuses(self) -> Dict[str, SourceStatus]:
        return {}  # the fans' state is in npumon_control_* and the event history, not a source

    def close(self) -> None:
        """Fans to the safe state (npumon stops or reloads), then let the watchdog go."""
        self._closed = True  # a tick that starts from now on does nothing
        self.driver.abort()  # a call in flight ends now, so the lock is free at once
        with self._lock:
            watchdog, self._watchdog = self._watchdog, None
            if self._took_over:
                driver = self._driver_factory(self.driver.spec())
                result = apply_safe_state(driver, self.control.safe_state)
                self.audit.record_result(self.audit.safe_knob(), describe(None, self.control.safe_state),
                                         "npumon is stopping", result, "info")
                if watchdog is not None:
                    if result.ok:
                        watchdog.disarm()
                    else:
                        watchdog.abandon()  # it tries too, and retries
            elif self.control.dry_run and self.probe is not None and self.probe.available:
                log.info("dry run: would put the fans in the safe state (%s): npumon is stopping",
                         self.control.safe_state)
            if self._state_file is not None:
                self._state_file.remove()

    # -- the control loop -----------------------------------------------------------------------------------

    def tick(self) -> None:
        with self._lock:
            if self._closed:
                return
            try:
                self._tick(self.clock())
                self._crash_logged = False
            except Exception as exc:  # noqa: BLE001 - a bug here must leave the fans safe, not at a low duty
                if not self._crash_logged:
                    log.exception("the control loop failed; putting the fans in the safe state")
                    self._crash_logged = True
                self._fail_safe("the control loop failed ({})".format(type(exc).__name__))
            self._write_state_file()

    def current_inputs(self) -> Inputs:
        with self._inputs_lock:
            return self._inputs

    def _tick(self, now: float) -> None:
        self._check_watchdog()
        if not self._ensure_probed(now):
            return
        inputs = self.current_inputs()
        decision = decide(self.policy, self.state, inputs, now)
        self._carry_out(decision, now)
        if decision.action == SET_DUTY and self.state.mode == SAFE:  # the driver failed: safe state now
            self._carry_out(decide(self.policy, self.state, inputs, now), now)
        self._verify(now)

    def _fail_safe(self, reason: str) -> None:
        """After an exception in the loop: the safe state, unless it is known to be applied already."""
        if self.probe is None or not self.probe.available:
            return
        if self.state.mode == SAFE and self.state.safe_confirmed:
            return
        try:
            self._carry_out(Decision(GO_SAFE, reason), self.clock())
        except Exception:  # noqa: BLE001 - the watchdog process is the last line now
            log.exception("could not put the fans in the safe state after a control loop failure")

    def _check_watchdog(self) -> None:
        watchdog = self._watchdog
        if watchdog is None:
            return
        status = watchdog.exit_status()
        if status is None:
            watchdog.beat()
            return
        if status == ACTED:
            self.state = after_outside_safe(self.state)
            self.audit.record(ACTION, "the fan watchdog put the fans in the safe state ({}): npumon's control loop "
                                      "had stalled".format(self.control.safe_state), "warning",
                              {"knob": self.audit.safe_knob()})
        else:
            self.audit.record(ACTION, "the fan watchdog process ended (exit status {}); starting a new one".format(
                status), "warning", {"knob": self.audit.safe_knob()})
        self._start_watchdog()

    def _start_watchdog(self) -> None:
        watchdog = self._watchdog_factory(self.driver.spec(), self.control.safe_state, self._heartbeat_timeout)
        try:
            watchdog.start()
        except OSError as exc:
            log.warning("cannot start the fan watchdog process (%s): if npumon is killed, the fans stay as they "
                        "are until `npumon control fan --safe` runs", exc.strerror or exc)
            self._watchdog = None
            return
        self._watchdog = watchdog

    def _ensure_probed(self, now: float) -> bool:
        if self.probe is not None and self.probe.available:
            return True
        if self._probed_at is not None and now - self._probed_at < REPROBE_SECONDS:
            return False
        probe = self.driver.probe()
        self._probed_at = now
        changed = self.probe is None or probe.detail != self.probe.detail
        self.probe = probe
        if not probe.available:
            if changed:
                self.audit.count("fan_duty", "refused")
                self.audit.record(REFUSED, "fan control unavailable: " + probe.detail, "warning",
                                  {"knob": "fan_duty", "driver": self.driver.name})
            return False
        log.info("fan control ready: %s%s", probe.detail, " (dry run: nothing will be changed)"
                 if self.control.dry_run else "")
        if self.control.watchdog and not self.control.dry_run:
            self._start_watchdog()
        return True

    def _carry_out(self, decision: Decision, now: float) -> None:
        self.last_decision = decision
        if decision.action == HOLD:
            if decision.blocked_by == RATE_LIMIT and self._last_block != RATE_LIMIT:
                self.audit.count("fan_duty", "refused")
                self.audit.record(REFUSED, "fan: " + decision.reason, "info",
                                  {"knob": "fan_duty", "reason": decision.reason})
            else:
                log.debug("fan: %s", decision.reason)
            self._last_block = decision.blocked_by
            return
        self._last_block = None
        knob = "fan_duty" if decision.action == SET_DUTY else self.audit.safe_knob()
        if self.control.dry_run:
            self.audit.count(knob, "dry_run")
            self.audit.record(ACTION, "dry run: would {} ({})".format(describe(decision, self.control.safe_state),
                                                                      decision.reason),
                              "info", {"knob": knob, "duty": decision.duty, "dry_run": True, "reason": decision.reason})
            self.state = after_action(self.state, decision, True, now)
            return
        self._took_over = True
        if decision.action == SET_DUTY:
            result = self.driver.set_duty(int(decision.duty or 0))
        else:
            result = apply_safe_state(self.driver, self.control.safe_state)
        self.state = after_action(self.state, decision, result.ok, now)
        # a duty is routine; the safe state means something is wrong (stale data, a failure)
        self.audit.record_result(knob, describe(decision, self.control.safe_state), decision.reason, result,
                                 "info" if decision.action == SET_DUTY else "warning", decision.duty)

    def _verify(self, now: float) -> None:
        """Read the fans back now and then; put them back where the governor wants them if they moved."""
        if self.control.dry_run or not self.driver.can_read or self.control.verify_seconds <= 0:
            return
        if self.state.mode == STARTING or (self.state.mode == SAFE and not self.state.safe_confirmed):
            return
        if self._verified_at is None:  # the first check one period after the fans were settled
            self._verified_at = now
        if now - self._verified_at < self.control.verify_seconds:
            return
        self._verified_at = now
        reading, error = self.driver.read()
        if error is not None or reading is None:
            self.audit.record(ACTION, "reading the fans back failed ({}); putting them in the safe state".format(
                error), "warning", {"knob": self.audit.safe_knob(), "result": error})
            self.state = after_failure(self.state, now)
            self._carry_out(decide(self.policy, self.state, self.current_inputs(), now), now)
            return
        self.last_reading = reading
        if fans_as_expected(self.state, self.control.safe_state, reading):
            return
        found = "{} {}%".format(reading.mode, "?" if reading.duty_percent is None else reading.duty_percent)
        if self.state.mode == CURVE and self.state.duty is not None:
            duty = self.state.duty
            reason = "fans changed outside npumon (found {}); re-asserting {}%".format(found, duty)
            result = self.driver.set_duty(duty)
            self.audit.record_result("fan_duty", "set the fan duty to {}%".format(duty), reason, result, "warning",
                                     duty)
            if not result.ok:
                self.state = after_failure(self.state, now)
                self._carry_out(decide(self.policy, self.state, self.current_inputs(), now), now)
        else:
            reason = "fans changed outside npumon (found {}); back to the safe state".format(found)
            result = apply_safe_state(self.driver, self.control.safe_state)
            self.state = after_action(self.state, Decision(GO_SAFE, reason), result.ok, now)
            self.audit.record_result(self.audit.safe_knob(), describe(None, self.control.safe_state), reason,
                                     result, "warning")

    # -- what it is doing: for control.json and the metrics ----------------------------------------------

    def status(self) -> Dict[str, Any]:
        """What the daemon is doing, for control.json and the metrics."""
        decision = self.last_decision
        state = self.state
        return {
            "pid": os.getpid(),
            "driver": self.driver.name,
            "available": None if self.probe is None else self.probe.available,
            "detail": None if self.probe is None else self.probe.detail,
            "dry_run": self.control.dry_run,
            "mode": state.mode,
            "duty_percent": state.duty,
            "safe_state": self.control.safe_state,
            "decision": None if decision is None else decision.reason,
            "watchdog_pid": None if self._watchdog is None else self._watchdog.pid,
        }

    def _write_state_file(self) -> None:
        if self._state_file is not None and self._took_over:
            self._state_file.write(self.status(), self.clock())
