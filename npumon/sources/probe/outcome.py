"""The probe child's output -> ProbeOutcome, on the daemon's side. Pure: reads a CommandResult.

A child that was killed at the deadline or died without a report still says something: the stage lines
it wrote on stderr tell which stage it was in and how long the stages before took. A child that never
started a stage (it could not start, or Python failed before the probe began) is a problem of the probe's
setup, not of the chip: ProbeLaunchError.

A child probes one chip or several in turn (read_outcomes): the chips with a report line have their outcome,
the chip whose probe was under way when the child ended fails in the stage it was in (timeout, when its
watchdog or the deadline ended the child; crash otherwise), and the chips it never reached have none (they
were not probed). A child of one chip that prints no device line (an older one) reads the same way.
"""

import json
import signal
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from ..runner import CommandResult
from .protocol import CRASH, DEVICE_START, FAILED, SCHEMA, STAGE_DONE, STAGE_START, STATES, TIMEOUT, WATCHDOG_LINE
from .runtime_facts import ERROR as ERROR_FACT, FACT_NAMES, OK as OK_FACT, UNSUPPORTED as UNSUPPORTED_FACT

FACT_STATUSES = (OK_FACT, UNSUPPORTED_FACT, ERROR_FACT)


class ProbeLaunchError(RuntimeError):
    """The probe child did not run, or said nothing npumon understands."""


@dataclass(frozen=True)
class ProbeOutcome:
    state: str  # protocol.OK | FAILED | UNAVAILABLE
    stage_seconds: Dict[str, float] = field(default_factory=dict)
    failed_stage: Optional[str] = None
    error_code: Optional[int] = None
    reason: Optional[str] = None  # protocol.ACL_ERROR, WRONG_DATA, ..., TIMEOUT, CRASH
    message: Optional[str] = None
    soc_name: Optional[str] = None
    memory_free_bytes: Optional[int] = None
    memory_total_bytes: Optional[int] = None
    # the runtime's own facts (runtime_facts.py): name -> {"value", "source", "status"[, "error"]}
    runtime: Dict[str, Dict[str, Any]] = field(default_factory=dict)


@dataclass
class _Section:
    """The stderr lines of one chip's probe (device None: before the first device line)."""

    device: Optional[int]
    finished: Dict[str, float] = field(default_factory=dict)
    current: Optional[str] = None
    watchdog: bool = False


def read_outcomes(result: CommandResult, devices: Sequence[int], device_timeout: float) -> Dict[int, ProbeOutcome]:
    """Outcome per device of a child asked to probe `devices` in turn, for those it probed (see the module's
    text). `device_timeout`: the child's --device-timeout, for the words of a watchdog's timeout."""
    if result.error:  # could not start, or no free slot
        raise ProbeLaunchError(result.error)
    sections = _sections(result.stderr)
    outcomes: Dict[int, ProbeOutcome] = {}
    for report in _report_lines(result.stdout):
        device = report.get("device")
        if isinstance(device, int) and device in devices and device not in outcomes:
            outcomes[device] = _outcome(report)
    if not outcomes and not any(section.current for section in sections):
        if result.returncode == 0 and len(sections) == 1:  # it started no chip: none could end by --not-after
            return outcomes
        if result.timed_out:
            raise ProbeLaunchError("the probe process started no stage within {:.1f} s".format(
                result.duration_seconds))
        last_line = _last_line(result.stderr)
        raise ProbeLaunchError("the probe process {} before its first stage{}".format(
            _exit_text(result.returncode), ": " + last_line if last_line else ""))
    last = sections[-1]
    device = last.device if last.device is not None or len(devices) != 1 else devices[0]
    if last.current is not None and device in devices and device not in outcomes:
        if result.timed_out:
            message = "no answer within {:.1f} s in stage {}: the probe's process group was killed".format(
                result.duration_seconds, last.current)
        elif last.watchdog:
            message = "no answer within {:g} s in stage {}: the probe's watchdog ended its process".format(
                device_timeout, last.current)
        else:
            outcomes[device] = ProbeOutcome(FAILED, last.finished, failed_stage=last.current, reason=CRASH,
                                            message="the probe process {} in stage {} without a report".format(
                                                _exit_text(result.returncode), last.current))
            return outcomes
        outcomes[device] = ProbeOutcome(FAILED, last.finished, failed_stage=last.current, reason=TIMEOUT,
                                        message=message)
    return outcomes


def _sections(stderr: str) -> List[_Section]:
    sections = [_Section(None)]
    for line in stderr.splitlines():
        if line.startswith(DEVICE_START):
            try:
                sections.append(_Section(int(line[len(DEVICE_START):])))
            except ValueError:
                continue
        elif line.startswith(WATCHDOG_LINE):
            sections[-1].watchdog = True
        else:
            _stage_line(line, sections[-1])
    return sections


def _stage_line(line: str, section: _Section) -> None:
    if line.startswith(STAGE_START):
        section.current = line[len(STAGE_START):].strip() or None
    elif line.startswith(STAGE_DONE):
        name, _, seconds = line[len(STAGE_DONE):].rpartition(" ")
        try:
            section.finished[name] = float(seconds)
        except ValueError:
            pass


def _report_lines(stdout: str) -> List[Dict[str, Any]]:
    """The report lines among whatever else the runtime printed, in order."""
    reports = []
    for line in stdout.splitlines():
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("schema") == SCHEMA:
                reports.append(data)
    return reports


def _outcome(report: Dict[str, Any]) -> ProbeOutcome:
    state = report.get("state")
    stages = report.get("stages")
    if state not in STATES or not isinstance(stages, dict) or not all(
            isinstance(name, str) and _is_number(seconds) for name, seconds in stages.items()):
        raise ProbeLaunchError("the probe's report is not understood: {}".format(json.dumps(report)[:300]))
    return ProbeOutcome(
        state=state,
        stage_seconds={name: float(seconds) for name, seconds in stages.items()},
        failed_stage=_text(report.get("failed_stage")),
        error_code=report.get("error_code") if isinstance(report.get("error_code"), int) else None,
        reason=_text(report.get("reason")),
        message=_text(report.get("message")),
        soc_name=_text(report.get("soc_name")),
        memory_free_bytes=_count(report.get("memory_free_bytes")),
        memory_total_bytes=_count(report.get("memory_total_bytes")),
        runtime=runtime_entries(report.get("runtime")),
    )


def runtime_entries(data: Any) -> Dict[str, Dict[str, Any]]:
    """The report's runtime facts, keeping only known names and well-formed entries (a fact the child got
    wrong is dropped, not trusted)."""
    if not isinstance(data, dict):
        return {}
    entries = {}
    for name in FACT_NAMES:
        entry = data.get(name)
        if not isinstance(entry, dict) or entry.get("status") not in FACT_STATUSES \
                or not isinstance(entry.get("source"), str):
            continue
        value = entry.get("value")
        if isinstance(value, bool) or not isinstance(value, (int, float, str, type(None))):
            continue
        clean = {"value": value if entry["status"] == OK_FACT else None, "source": entry["source"][:200],
                 "status": entry["status"]}
        if isinstance(entry.get("error"), str):
            clean["error"] = entry["error"][:300]
        entries[name] = clean
    return entries


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _text(value: Any) -> Optional[str]:
    return value if isinstance(value, str) else None


def _count(value: Any) -> Optional[int]:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _exit_text(returncode: Optional[int]) -> str:
    if returncode is not None and returncode < 0:
        try:
            return "was killed by {}".format(signal.Signals(-returncode).name)
        except ValueError:
            return "was killed by signal {}".format(-returncode)
    return "exited with status {}".format(returncode)


def _last_line(text: str) -> str:
    lines: List[str] = [line for line in text.strip().splitlines()
                        if not line.startswith((STAGE_START, STAGE_DONE))]
    return lines[-1][:300] if lines else ""
