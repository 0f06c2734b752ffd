"""The rule facts and metrics of the kernel-log faults: per kind (hardware, device, transient) the fault
classes, a text for summaries, the most severe repair action and level. Pure.

Faults of a chip in npu-smi's table are the chip's (ChipSample.extra["driver_faults"]); the others (no
device id, or a device that is not in the table now: a card that dropped off the bus) are the host's.
"""

from typing import Any, Dict, List, Optional, Sequence

from ...faults.levels import REPAIR_ACTIONS, level_rank
from ...faults.patterns import KINDS
from ...model import ChipSample, HostSample, Snapshot

EXTRA_KEY = "driver_faults"  # a list of fault dicts (the book's entries, as source.py puts them)
STATS_KEY = "kmsg"  # host.extra: the reader's counters
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
    return fault_facts(chip.extra.get(EXTRA_KEY))


def host_facts(snapshot: Snapshot) -> Dict[str, Any]:
    facts = fault_facts(snapshot.host.extra.get(EXTRA_KEY), with_place=True)
    stats = snapshot.host.extra.get(STATS_KEY) or {}
    facts["kmsg_lost_records"] = stats.get("lost")
    facts["kmsg_suppressed_lines"] = stats.get("suppressed")
    window = stats.get("repeat_window_seconds")
    facts["driver_fault_repeat_window_hours"] = None if window is None else window / 3600.0
    return facts
