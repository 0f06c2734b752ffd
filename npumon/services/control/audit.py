"""The control service's account of what it did: every action and refusal counted (for
npumon_control_actions_total), logged, and recorded in the event history with its reason."""

import logging
from typing import Any, Callable, Dict, Optional, Tuple

from .drivers import AUTO, DriverResult
from .policy import SET_DUTY, Decision

ACTION = "control_action"
REFUSED = "control_refused"
SUBJECT = "host"  # the event history's subjects are "host" or a chip; the knob is in the details
KNOBS = ("fan_duty", "fan_mode")
RESULTS = ("ok", "failed", "refused", "dry_run")
_LOG_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "critical": logging.ERROR}

RecordEvent = Callable[[str, str, str, Optional[str], Optional[dict]], None]


class ControlAudit:
    def __init__(self, record_event: RecordEvent, safe_state: str, log: logging.Logger):
        """`log` is the service's logger, so that the journal names the service that acted."""
        self.record_event = record_event
        self.safe_state = safe_state
        self._log = log
        self._actions: Dict[Tuple[str, str], int] = {(knob, result): 0 for knob in KNOBS for result in RESULTS}

    def safe_knob(self) -> str:
        """The knob the safe state turns: the mode for automatic control, else the duty (full)."""
        return "fan_mode" if self.safe_state == AUTO else "fan_duty"

    def count(self, knob: str, result: str) -> None:
        self._actions[(knob, result)] = self._actions.get((knob, result), 0) + 1

    def counts(self) -> Dict[Tuple[str, str], int]:
        return dict(self._actions)

    def record(self, kind: str, message: str, severity: str, details: Dict[str, Any]) -> None:
        self._log.log(_LOG_LEVELS[severity], "%s", message)
        self.record_event(kind, SUBJECT, message, severity, details)

    def record_result(self, knob: str, action: str, reason: str, result: DriverResult, severity: str,
                      duty: Optional[int] = None) -> None:
        """Count, log and record one driver action; a failed one is critical (the fans may be wrong)."""
        self.count(knob, "ok" if result.ok else "failed")
        details = {"knob": knob, "reason": reason, "result": result.message, "duty": duty}
        if result.ok:
            self.record(ACTION, "{} ({})".format(action, reason), severity, details)
        else:
            self.record(ACTION, "could not {} ({}): {}".format(action, reason, result.message), "critical", details)


def describe(decision: Optional[Decision], safe_state: str) -> str:
    """What a decision does to the fans, for messages; None means the safe state."""
    if decision is not None and decision.action == SET_DUTY:
        return "set the fan duty to {}%".format(decision.duty)
    return "put the fans in the safe state ({})".format("automatic control" if safe_state == AUTO else "full duty")
