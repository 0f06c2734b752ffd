"""What the daemon's readers see and the pure judgements about it: DaemonState, health, the status line,
and the checks made before anything starts."""

import dataclasses
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from ..config.schema import ExporterConfig
from ..model import Finding, Snapshot
from ..outputs.report import overall_status
from ..rules.loader import load_rules
from ..rules.verdict import HostVerdict
from ..settings import Config

PROGRESS_SLACK_SECONDS = 5.0  # time a primary job may spend on rules and services beyond its npu-smi call


class StartupError(Exception):
    """A one-line reason the daemon cannot start (port in use, unwritable state_dir, bad TLS files, ...)."""


@dataclass
class DaemonState:
    """What the readers see. Replaced as a whole under the lock; never mutated in place."""

    snapshot: Optional[Snapshot] = None
    findings: List[Finding] = field(default_factory=list)
    acknowledged: List[Finding] = field(default_factory=list)  # acknowledged while their condition holds
    last_progress: Optional[float] = None  # monotonic time the primary job last finished
    started: float = field(default_factory=time.monotonic)
    polls: int = 0  # primary jobs finished since start
    primary_answered: bool = False  # the primary source succeeded at least once since the start (kept on reload)
    verdict: Optional[HostVerdict] = None  # the guarded verdicts of the latest pass (rules/verdict_tracker.py)


# -- pure helpers ------------------------------------------------------------------------------------------

def progress_deadline(config: Config) -> float:
    """How long the primary job may go without finishing before the daemon counts as stuck: two intervals
    (one run may be coalesced) plus the longest an npu-smi call may take, plus slack for rules and services."""
    return 2 * config.poll.table_seconds + config.npu_smi_timeout_seconds + PROGRESS_SLACK_SECONDS


def judge_health(state: DaemonState, now: float, deadline: float) -> Tuple[bool, str]:
    """(healthy, reason) of the poll loop: healthy while the primary job keeps finishing, whatever npu-smi
    answered (a failing npu-smi shows in npumon_source_up, not as a dead daemon)."""
    if state.last_progress is None:
        waited = now - state.started
        if waited <= deadline:
            return True, "starting: the first poll has not finished yet"
        return False, "no poll has finished since the start {:.0f}s ago".format(waited)
    age = now - state.last_progress
    if age > deadline:
        return False, "poll loop stuck: the last poll finished {:.0f}s ago (limit {:.0f}s)".format(age, deadline)
    return True, "ok"


def judge_healthz(state: DaemonState, primary: str, now: float, deadline: float) -> Tuple[bool, str]:
    """(healthy, reason) for /healthz: the poll loop's health, and more. A daemon whose primary source (the
    main table) has not answered once since the start watches nothing -- no npu-smi on the host, a wrong path,
    a wedged driver -- so after the same grace as the first poll it is not healthy either, and says why."""
    healthy, reason = judge_health(state, now, deadline)
    if not healthy or state.last_progress is None or state.primary_answered:
        return healthy, reason
    status = state.snapshot.sources.get(primary) if state.snapshot is not None else None
    why = (status.error if status is not None else None) or "no answer yet"
    waited = now - state.started
    if waited <= deadline:
        return True, "starting: {} has not answered yet: {}".format(primary, why)
    return False, "{} has not answered once since the start {:.0f}s ago: {}".format(primary, waited, why)


def judge_all(*judgements: Tuple[bool, str]) -> Tuple[bool, str]:
    """Healthy only when every judgement is: the reasons of those that are not, else the first one's reason."""
    failing = [reason for healthy, reason in judgements if not healthy]
    if failing:
        return False, "; ".join(failing)
    return judgements[0]


def status_line(snapshot: Snapshot, findings: Sequence[Finding], primary: str,
                acknowledged: Sequence[Finding] = ()) -> str:
    """One line for `systemctl status`; `primary`: the source whose failure means no chips at all."""
    status = snapshot.sources.get(primary)
    if status is None or not status.ok:
        return "{} failing: {}".format(primary, (status.error if status else None) or "no answer yet")
    active = [finding for finding in findings if not finding.shadow]
    line = "{} chips, status {}, {} active finding{}".format(
        len(snapshot.chips), overall_status(snapshot, findings), len(active), "" if len(active) == 1 else "s")
    return line + (", {} acknowledged".format(len(acknowledged)) if acknowledged else "")


def collection_settings(config: Config) -> Config:
    """The config without what only the rules, the log and the HTTP server read. A reload that leaves this
    unchanged keeps the sources, so no value goes missing until its tier polls again."""
    return dataclasses.replace(config, thresholds={}, rule_files=[], log_level="info", exporter=ExporterConfig(),
                               source="")


def ensure_state_dir(config: Config) -> None:
    """Create state_dir if needed and prove it is writable now, rather than when the first event is stored."""
    path = config.state_dir
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=path, prefix=".npumon-write-test-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise StartupError("{}: state_dir: {} is not a writable directory: {}".format(
            config.source, path, exc.strerror or exc)) from None


def load_rule_set(config: Config):
    """(rules, parameters) for the config; RuleError names the rule file, line and key."""
    return load_rules(config.rule_files, params=config.thresholds)
