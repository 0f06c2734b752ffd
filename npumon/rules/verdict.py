"""One verdict per chip and per host, taken from a pass's findings: the one thing the cluster hand-off acts on.

A chip is HEALTHY, DEGRADED (keep serving, watch it) or OUT_OF_SERVICE (take it out of scheduling, and why);
the host likewise. The verdict comes from the findings' repair actions and levels, never from a rule of its own.

What takes a chip out of service follows MindCluster's level table (cluster-handoff.md 1.7): the levels that
isolate or reset the chip (FreeRestartNPU, RestartNPU, PreSeparateNPU, SeparateNPU, ManuallySeparateNPU) carry
the repair actions reset_npu, inspect_hardware and replace_hardware (faults/actions.yaml), and those, with
reboot_host, mean OUT_OF_SERVICE. restart_workload (RestartRequest, RestartBusiness: "the chip stays in
service") and "none" (NotHandleFault, SubHealthFault) never take a chip out: at most DEGRADED. A finding with no
repair action is judged by its severity: critical -> OUT_OF_SERVICE, warning -> DEGRADED, info -> HEALTHY.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from ..faults.levels import level_rank
from ..model import Finding

HEALTHY = "healthy"
DEGRADED = "degraded"
OUT_OF_SERVICE = "out_of_service"
STATES = (HEALTHY, DEGRADED, OUT_OF_SERVICE)  # mildest first

OUT_OF_SERVICE_ACTIONS = ("reset_npu", "reboot_host", "inspect_hardware", "replace_hardware")
IN_SERVICE_ACTIONS = ("none", "restart_workload")  # the chip keeps serving whatever the severity
JOB_RULES = ("job-fault",)  # one fault on several chips of one job: the job's, never a chip's
SEVERITY_STATE = {"critical": OUT_OF_SERVICE, "warning": DEGRADED, "info": HEALTHY}
SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}
HOST = "host"


@dataclass(frozen=True)
class Reason:
    """One finding behind a verdict."""

    rule: str
    severity: str
    summary: str
    repair_action: str = "none"  # one of faults.levels.REPAIR_ACTIONS
    level: Optional[str] = None  # the fault code's handling level, where the finding has one
    state: str = HEALTHY  # what this finding alone would make of its chip
    since: float = 0.0  # unix time the finding's condition started to hold (Finding.since)

    def to_json(self) -> Dict[str, Any]:
        return self.__dict__.copy()


@dataclass(frozen=True)
class ChipVerdict:
    subject: str  # "npu<N>/chip<C>", as Finding.subject
    state: str  # one of STATES
    reasons: Tuple[Reason, ...] = ()  # strongest first: the first one decided the state, the rest are context
    since: float = 0.0  # unix time the chip entered this state
    note: str = ""  # why a guard rail holds the state the findings alone would change (VerdictTracker)

    @property
    def repair_action(self) -> str:
        """The one recommendation for the chip: the deciding reason's."""
        return self.reasons[0].repair_action if self.reasons else "none"

    def to_json(self) -> Dict[str, Any]:
        return {"subject": self.subject, "state": self.state, "since": self.since,
                "repair_action": self.repair_action, "note": self.note,
                "reasons": [reason.to_json() for reason in self.reasons]}


@dataclass(frozen=True)
class HostVerdict:
    state: str  # one of STATES: the host's own findings, and OUT_OF_SERVICE only for a host-wide cause
    reasons: Tuple[Reason, ...] = ()
    chips: Tuple[ChipVerdict, ...] = field(default_factory=tuple)
    since: float = 0.0
    note: str = ""

    def chip(self, subject: str) -> ChipVerdict:
        for verdict in self.chips:
            if verdict.subject == subject:
                return verdict
        return ChipVerdict(subject, HEALTHY)

    def to_json(self) -> Dict[str, Any]:
        return {"state": self.state, "since": self.since, "note": self.note,
                "reasons": [reason.to_json() for reason in self.reasons],
                "chips": [chip.to_json() for chip in self.chips]}


def state_rank(state: str) -> int:
    return STATES.index(state)


def finding_state(finding: Finding) -> str:
    """What one finding alone makes of its subject (see the module's docstring)."""
    action = finding.repair_action
    if action in OUT_OF_SERVICE_ACTIONS:
        return OUT_OF_SERVICE
    state = SEVERITY_STATE.get(finding.severity, DEGRADED)
    if action in IN_SERVICE_ACTIONS and state == OUT_OF_SERVICE:
        return DEGRADED
    return state


def reason_of(finding: Finding) -> Reason:
    return Reason(finding.rule, finding.severity, finding.summary, finding.repair_action or "none",
                  finding.level, finding_state(finding), finding.since)


def _strength(reason: Reason) -> Tuple[int, int, int, float]:
    # the state first, then the fault level, then the severity; among equals the oldest
    return (state_rank(reason.state), level_rank(reason.level or ""), SEVERITY_RANK.get(reason.severity, 1),
            -reason.since)


def strongest_first(reasons: Iterable[Reason]) -> Tuple[Reason, ...]:
    return tuple(sorted(reasons, key=_strength, reverse=True))


def _verdict_state(reasons: Sequence[Reason]) -> Tuple[str, float]:
    """The state the strongest reason makes, and since when the reasons of that state hold."""
    if not reasons:
        return HEALTHY, 0.0
    state = reasons[0].state
    return state, (min(r.since for r in reasons if r.state == state) if state != HEALTHY else 0.0)


def decide(findings: Sequence[Finding], chips: Iterable[str]) -> HostVerdict:
    """The verdicts of one pass: every chip in `chips` (subjects "npu<N>/chip<C>") and every chip a finding
    names. Shadow findings count for nothing; a job-wide fault (JOB_RULES) is the host's, never a chip's; a host
    finding that names its chips (a `group: host` rule) counts for each of them. The host is at least DEGRADED
    while a chip is not healthy, and OUT_OF_SERVICE only from a host finding of its own."""
    per_chip = {subject: [] for subject in chips}  # type: Dict[str, List[Reason]]
    host = []  # type: List[Reason]
    for finding in findings:
        if finding.shadow:
            continue
        reason = reason_of(finding)
        if finding.subject == HOST and (finding.rule in JOB_RULES or not finding.chips):
            if finding.rule in JOB_RULES and reason.state == OUT_OF_SERVICE:  # however its rule is configured
                reason = dataclasses.replace(reason, state=DEGRADED)
            host.append(reason)
            continue
        for subject in (finding.chips if finding.subject == HOST else [finding.subject]):
            per_chip.setdefault(subject, []).append(reason)
    chip_verdicts = []
    for subject in sorted(per_chip, key=_subject_order):
        reasons = strongest_first(per_chip[subject])
        state, since = _verdict_state(reasons)
        chip_verdicts.append(ChipVerdict(subject, state, reasons, since))
    host_reasons = strongest_first(host)
    state, since = _verdict_state(host_reasons)
    if state == HEALTHY and any(chip.state != HEALTHY for chip in chip_verdicts):
        state = DEGRADED
        since = min(chip.since for chip in chip_verdicts if chip.state != HEALTHY)
    return HostVerdict(state, host_reasons, tuple(chip_verdicts), since)


def chip_key(subject: str) -> Optional[Tuple[int, int]]:
    """(npu, chip) of "npu<N>/chip<C>"; None for anything else."""
    npu, _, chip = subject.partition("/")
    if npu.startswith("npu") and chip.startswith("chip") and npu[3:].isdigit() and chip[4:].isdigit():
        return int(npu[3:]), int(chip[4:])
    return None


def _subject_order(subject: str) -> Tuple[int, int, str]:
    """npu0/chip1 before npu10/chip0; anything else after, by name."""
    key = chip_key(subject)
    return (1 << 30, 0, subject) if key is None else (key[0], key[1], "")
