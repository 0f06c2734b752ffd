"""The probe child's output -> ProbeOutcome, on the daemon's side. Pure: reads a CommandResult.

A child that was killed at the deadline or died without a report still says something: the stage lines
it wrote on stderr tell which stage it was in and how long the stages before took. A child that never
started a stage (it could not start, or Python failed before the probe began) is a problem of the probe's
setup, not of the chip: ProbeLaunchError.
"""

import json
import signal
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from ..runner import CommandResult
from .protocol import CRASH, FAILED, SCHEMA, STAGE_DONE, STAGE_START, STATES, TIMEOUT
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


def read_outcome(result: CommandResult) -> ProbeOutcome:
    if result.error:  # could not start, or no free slot
        raise ProbeLaunchError(result.error)
    finished, current = stage_progress(result.stderr)
    if result.timed_out:
        if current is None:
            raise ProbeLaunchError("the probe process started no stage within {:.1f} s".format(result.duration_seconds))
        return ProbeOutcome(FAILED, finished, failed_stage=current, reason=TIMEOUT,
                            message="no answer within {:.1f} s in stage {}: the probe's process group was killed"
                            .format(result.duration_seconds, current))
    report = _report_line(result.stdout)
    if report is None:
        exit_text = _exit_text(result.returncode)
        last_line = _last_line(result.stderr)
        if current is None:
            raise ProbeLaunchError("the probe process {} before its first stage{}".format(
                exit_text, ": " + last_line if last_line else ""))
        return ProbeOutcome(FAILED, finished, failed_stage=current, reason=CRASH,
                            message="the probe process {} in stage {} without a report".format(exit_text, current))
    return _outcome(report)


def stage_progress(stderr: str) -> Tuple[Dict[str, float], Optional[str]]:
    """(seconds of each finished stage, the stage started last) from the child's stage lines."""
    finished: Dict[str, float] = {}
    current = None
    for line in stderr.splitlines():
        if line.startswith(STAGE_START):
            current = line[len(STAGE_START):].strip() or None
        elif line.startswith(STAGE_DONE):
            name, _, seconds = line[len(STAGE_DONE):].rpartition(" ")
            try:
                finished[name] = float(seconds)
            except ValueError:
                continue
    return finished, current


def _report_line(stdout: str) -> Optional[Dict[str, Any]]:
    # The runtime may log on stdout too (ASCEND_SLOG_PRINT_TO_STDOUT=1): the report is the last JSON line.
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            if isinstance(data, dict) and data.get("schema") == SCHEMA:
                return data
    return None


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
