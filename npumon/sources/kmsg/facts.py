"""The rule facts and metrics of the kernel-log faults: per kind (hardware, device, transient) the fault
classes, a text for summaries, the most severe repair action and level. Pure.

Faults of a chip in npu-smi's table are the chip's (ChipSample.extra["driver_faults"]); the others are the
host's. Of those, only the faults of a device id the table does not list (a card that dropped off the bus)
make the host's `driver_*` facts, which the rules read as a missing card; a fault the source could tie to no
device (no id in the line and no chip reporting its code, or a PCI address that is no NPU's) is an
unattributed note (`driver_unattributed_*`), which never suggests a missing card or a separation.
"""

from typing import Any, Dict, List, Optional, Sequence

from ...faults.levels import REPAIR_ACTIONS, level_rank
from ...faults.patterns import KINDS
from ...model import ChipSample, HostSample, Snapshot

EXTRA_KEY = "driver_faults"  # a list of fault dicts (the book's entries, as source.py puts them)
STATS_KEY = "kmsg"  # host.extra: the reader's counters
JOB_FAULTS_KEY = "job_faults"  # host.extra: the same fault on several chips of one job (source.py, jobs.py)
MAX_TEXT_FAULTS = 5


def fault_facts(faults: Optional[Sequence[Dict[str, Any]]], with_place: bool = False) -> Dict[str, Any]:
    """Every key, None where the source gave nothing (off, or never read)."""
    facts: Dict[str, Any] = {}
    for kind in KINDS:
        mine = None if faults is None else [fault for fault in faults if fault["kind"] == kind]
        facts["driver_{}_faults".format(kind)] = None if mine is None else sorted({f["fault_class"] for f in mine})
        facts["driver_{}_fault_text".format(kind)] = None if mine is None else _text(mine, with_place)
        facts["driver_{}_repair_action".format(kind)] = _worst_action(mine)
        facts["driver_{}_level".format(kind)] = _worst_level(mine)
    facts.update(_repeat_facts(faults))
    return facts


def _repeat_facts(faults: Optional[Sequence[Dict[str, Any]]]) -> Dict[str, Any]:
    """The fault class logged most often within faults.repeat_window_seconds, for the escalation rules."""
    if faults is None:
        return {"driver_fault_repeats": None, "driver_fault_repeat_class": None, "driver_fault_repeat_code": None}
    top = max(faults, key=lambda fault: fault.get("repeats", 0), default=None)
    if top is None:
        return {"driver_fault_repeats": 0, "driver_fault_repeat_class": "none", "driver_fault_repeat_code": "none"}
    return {"driver_fault_repeats": top.get("repeats", 0), "driver_fault_repeat_class": top["fault_class"],
            "driver_fault_repeat_code": top.get("code") or "none"}


def _text(faults: List[Dict[str, Any]], with_place: bool) -> str:
    if not faults:
        return "none"
    parts = []
    for fault in faults[:MAX_TEXT_FAULTS]:
        place = "{}: ".format(fault.get("place")) if with_place and fault.get("place") else ""
        code = " ({} {})".format(fault["code"], fault["level"]) if fault.get("code") and fault.get("level") else ""
        suppressed = "; {} more lines not shown (rate limit)".format(fault["suppressed"]) if fault["suppressed"] else ""
        parts.append("{}{} x{}{}: {}; last line: {}{}".format(place, fault["fault_class"], fault["count"], code,
                                                             fault["summary"], fault["last_line"], suppressed))
    if len(faults) > MAX_TEXT_FAULTS:
        parts.append("and {} more".format(len(faults) - MAX_TEXT_FAULTS))
    return " | ".join(parts)


def _worst_action(faults: Optional[List[Dict[str, Any]]]) -> Optional[str]:
    if not faults:
        return None
    return max((fault["repair_action"] for fault in faults), key=REPAIR_ACTIONS.index)


def _worst_level(faults: Optional[List[Dict[str, Any]]]) -> Optional[str]:
    known = [fault["level"] for fault in faults or () if fault.get("level")]
    return max(known, key=level_rank) if known else None


def chip_facts(chip: ChipSample, host: HostSample) -> Dict[str, Any]:
    faults = chip.extra.get(EXTRA_KEY)
    # a job's fault is not the chip's: it counts toward no repeat rule or level of the chip; nor, yet, one that
    # waits for the job window to pass
    return fault_facts(None if faults is None else [fault for fault in faults
                                                    if not fault.get("job") and not fault.get("job_window")])


def job_facts(job_faults: Optional[Sequence[Dict[str, Any]]]) -> Dict[str, Any]:
    if job_faults is None:
        return {"job_fault_count": None, "job_fault_jobs": None, "job_fault_chips": None, "job_fault_text": None}
    parts = []
    for fault in job_faults[:MAX_TEXT_FAULTS]:
        code = " ({} {})".format(fault["code"], fault["level"] or "not in the catalogue") if fault["code"] else ""
        parts.append("{}: {}{} on {} within {:.1f} s ({} lines): {}; last line: {}".format(
            fault["job"], fault["fault_class"], code, ", ".join(fault["chips"]), fault["seconds"], fault["lines"],
            fault["summary"], fault["last_line"]))
    if len(job_faults) > MAX_TEXT_FAULTS:
        parts.append("and {} more".format(len(job_faults) - MAX_TEXT_FAULTS))
    return {"job_fault_count": len(job_faults),
            "job_fault_jobs": ", ".join(sorted({fault["job"] for fault in job_faults})) or "none",
            "job_fault_chips": ", ".join(sorted({chip for fault in job_faults for chip in fault["chips"]})) or "none",
            "job_fault_text": " | ".join(parts) or "none"}


def host_facts(snapshot: Snapshot) -> Dict[str, Any]:
    faults = snapshot.host.extra.get(EXTRA_KEY)
    unlisted = None if faults is None else [fault for fault in faults if fault.get("attribution") == "unlisted"]
    notes = None if faults is None else [fault for fault in faults if fault.get("attribution") != "unlisted"]
    facts = fault_facts(unlisted, with_place=True)
    facts["driver_unattributed_faults"] = None if notes is None else sorted({f["fault_class"] for f in notes})
    facts["driver_unattributed_fault_text"] = None if notes is None else _text(notes, True)
    facts.update(job_facts(snapshot.host.extra.get(JOB_FAULTS_KEY)))
    stats = snapshot.host.extra.get(STATS_KEY) or {}
    facts["kmsg_lost_records"] = stats.get("lost")
    facts["kmsg_suppressed_lines"] = stats.get("suppressed")
    window = stats.get("repeat_window_seconds")
    facts["driver_fault_repeat_window_hours"] = None if window is None else window / 3600.0
    return facts
