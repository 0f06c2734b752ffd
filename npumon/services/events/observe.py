"""What an evaluation means for the event history, without touching it: the chips a Snapshot shows, the
events between them and what the history last knew, and the event for each rule transition.

Pure functions, so the writer thread (service.py) only stores what these return.
"""

from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from .store import KnownChip
from ...model import Finding, Snapshot
from ...rules.engine import FIRED
from ...sources.npusmi.source import TABLE_SOURCE, query_source_name

HEALTH_SOURCE = query_source_name("health")
HEALTH_SEVERITY = {"OK": "info", "Warning": "warning", "Alarm": "critical", "Critical": "critical",
                   "UNKNOWN": "warning"}


class Change(NamedTuple):
    """An event to record."""

    kind: str
    subject: str
    severity: Optional[str]
    message: str
    details: Dict[str, Any]


class SeenChip(NamedTuple):
    """One chip in one snapshot; None where this snapshot does not tell."""

    name: Optional[str]
    bus_id: Optional[str]
    health: Optional[str]
    error_codes: Optional[Tuple[str, ...]]


def observe_chips(snapshot: Snapshot) -> Optional[Dict[str, SeenChip]]:
    """What the snapshot says about each chip, or None when the main table was not read (then a missing
    chip means nothing). Error codes count only while the health query is fresh: stale values are dropped
    from chips, and that empty list must not read as "the codes went away"."""
    table = snapshot.sources.get(TABLE_SOURCE)
    if table is None or not table.ok:
        return None
    health = snapshot.sources.get(HEALTH_SOURCE)
    codes_known = health is not None and health.ok and not health.unsupported
    return {chip.subject: SeenChip(chip.name, chip.bus_id, chip.health,
                                   tuple(chip.error_codes) if codes_known else None)
            for chip in snapshot.chips}


def chip_changes(known: Dict[str, KnownChip], seen: Dict[str, SeenChip]
                 ) -> Tuple[List[Change], Dict[str, KnownChip]]:
    """The events between what the history knew and what was seen now, and what it knows afterwards.
    A value not seen now (None) keeps the known one."""
    changes: List[Change] = []
    after: Dict[str, KnownChip] = {}
    for subject, now in seen.items():
        before = known.get(subject) or KnownChip(subject)
        chip = KnownChip(subject=subject, name=_newer(now.name, before.name), bus_id=_newer(now.bus_id, before.bus_id),
                         health=_newer(now.health, before.health),
                         error_codes=_newer(now.error_codes, before.error_codes))
        after[subject] = chip
        if subject not in known:
            changes.append(Change("chip_appeared", subject, "info", "{} appeared: {} at {}, health {}".format(
                subject, chip.name or "?", chip.bus_id or "?", chip.health or "?"),
                {"name": chip.name, "bus_id": chip.bus_id, "health": chip.health}))
        elif now.health is not None and before.health is not None and now.health != before.health:
            changes.append(Change("health_changed", subject, HEALTH_SEVERITY.get(now.health, "warning"),
                                  "health {} (was {})".format(now.health, before.health),
                                  {"health": now.health, "previous": before.health}))
        for code in chip.error_codes:
            if code not in before.error_codes:
                changes.append(Change("error_code_new", subject, HEALTH_SEVERITY.get(chip.health or "", "warning"),
                                      "new error code {} (health {})".format(code, chip.health or "?"),
                                      {"code": code, "error_codes": list(chip.error_codes), "health": chip.health}))
    for subject, before in sorted(known.items()):
        if subject not in seen:
            changes.append(Change("chip_disappeared", subject, "warning",
                                  "{} ({} at {}) is no longer listed by npu-smi".format(
                                      subject, before.name or "?", before.bus_id or "?"),
                                  {"name": before.name, "bus_id": before.bus_id, "health": before.health}))
    return changes, after


def _newer(now: Any, before: Any) -> Any:
    return before if now is None else now


def transition_change(kind: str, finding: Finding, reason: Optional[str] = None) -> Change:
    """The event for a rule transition. Resolved events are `info`: the trouble is over."""
    shadow = " [shadow]" if finding.shadow else ""
    details = dict(finding.to_json())
    if kind == FIRED:
        return Change("finding_fired", finding.subject, finding.severity,
                      "{}{}: {}".format(finding.rule, shadow, finding.summary), details)
    if reason:
        details["reason"] = reason
    return Change("finding_resolved", finding.subject, "info",
                  "{}{} resolved{}".format(finding.rule, shadow, " ({})".format(reason) if reason else ""), details)
