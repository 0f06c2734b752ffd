"""What a rule can see: a Snapshot flattened into one dict of facts per subject.

Subjects are `host` and one `npu<N>/chip<C>` per chip (ChipSample.subject). A chip's facts are its scalar
ChipSample fields by name, some derived facts, and a copy of every host fact under `host.`. Every fact
function below always returns all of its keys (None where unknown), so the names a rule may use can be
listed from a blank Snapshot: see CHIP_FACTS and HOST_FACTS.

A source adds its own facts through its SourceSpec (sources/registry.py): the host source its PCIe, NUMA,
memory and device-file facts, the probe its probe_* facts. To add a fact of the chip record itself, add it
to one of the small `_..._facts` functions below. Pure functions; no I/O.
"""

import dataclasses
import typing
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..faults import catalogue as fault_catalogue
from ..faults import levels as fault_levels
from ..model import ChipSample, HostSample, Snapshot, SourceStatus
from ..sources import registry
from .compat import check_versions as _check_versions
from .links import link_facts

Facts = Dict[str, Any]
VersionCheck = Callable[[HostSample], Tuple[Optional[bool], str]]

HOST_SUBJECT = "host"
HOST_PREFIX = "host."
# AI Core at or above this counts a chip as doing real work (busy_chip_count and friends).
BUSY_AICORE_RATIO = 0.1
# Host facts named per source: source_up.<name> and source_age_seconds.<name>.
SOURCE_FACT_PREFIXES = ("source_up.", "source_age_seconds.")



def _scalar_fields(cls: type) -> Tuple[str, ...]:
    """Fields of plain values (numbers, strings, booleans) are facts by name; lists, dicts and nested records
    are exposed through derived facts instead."""
    plain = (int, float, str, bool, type(None))

    def is_plain(hint: Any) -> bool:
        if typing.get_origin(hint) is typing.Union:  # Optional[X]
            return all(arg in plain for arg in typing.get_args(hint))
        return hint in plain

    hints = typing.get_type_hints(cls)
    return tuple(f.name for f in dataclasses.fields(cls) if is_plain(hints[f.name]))


CHIP_SCALAR_FIELDS = _scalar_fields(ChipSample)
HOST_SCALAR_FIELDS = _scalar_fields(HostSample)


def snapshot_facts(snapshot: Snapshot, check_versions: Optional[VersionCheck] = None) -> Dict[str, Facts]:
    """subject -> facts, `host` first, then the chips in Snapshot order.

    `check_versions` defaults to rules/compat.py's judgement of the version files.
    """
    host = host_facts(snapshot, check_versions)
    prefixed_host = {HOST_PREFIX + name: value for name, value in host.items()}
    result = {HOST_SUBJECT: host}
    for chip in snapshot.chips:
        result[chip.subject] = chip_facts(chip, snapshot.host, prefixed_host)
    return result


# --------------------------------------------------------------------------------------------- chips

def chip_facts(chip: ChipSample, host: HostSample, prefixed_host: Facts) -> Facts:
    values = vars(chip)
    facts = {name: values[name] for name in CHIP_SCALAR_FIELDS}
    facts["subject"] = chip.subject
    facts.update(_chip_error_facts(chip))
    facts.update(_chip_process_facts(chip))
    facts.update(_chip_memory_facts(chip))
    facts.update(link_facts(chip))
    for spec in registry.SOURCES:
        if spec.chip_facts is not None:
            facts.update(spec.chip_facts(chip, host))
    facts.update(prefixed_host)
    return facts


def _chip_error_facts(chip: ChipSample) -> Facts:
    faults = [fault_catalogue.lookup(code) for code in chip.error_codes]
    worst = fault_catalogue.worst(faults)
    action = None if worst is None else worst.context()
    repair = None if worst is None else worst.repair_action
    return {
        "error_codes": list(chip.error_codes),
        "error_code_text": ", ".join(chip.error_codes) if chip.error_codes else "none",
        "error_information_text": "; ".join(chip.error_information) if chip.error_information else "none",
        # the fault catalogue's view of the codes (npumon/faults): the most severe handling level and its action
        "fault_level": None if worst is None else worst.level,
        "fault_repair_action": repair,
        # what the health reading and the codes call for together: Critical health ("probably unusable") needs
        # at least a reset, whatever milder level its codes carry
        "health_repair_action": fault_levels.stronger_repair(repair, "reset_npu") if chip.health == "Critical"
        else repair,
        "fault_codes_text": "; ".join(fault.describe() for fault in faults) if faults else "none",
        # the codes' family: context for a hint, never a recommendation ("" keeps "n/a" out of the hint)
        "fault_action": action or "",
    }


def _chip_process_facts(chip: ChipSample) -> Facts:
    pids = sorted(process.pid for process in chip.processes)
    known_memory = [p.memory_bytes for p in chip.processes if p.memory_bytes is not None]
    return {
        "process_count": len(chip.processes),
        "process_memory_bytes": sum(known_memory) if known_memory else None,
        # One string per set of processes: `changes(process_signature, 3h) == 0` means "the same processes".
        "process_signature": ",".join(str(pid) for pid in pids),
        "process_names": ", ".join(sorted({p.name for p in chip.processes if p.name})) or "none",
    }


def _ratio(used: Optional[float], total: Optional[float]) -> Optional[float]:
    if used is None or not total:
        return None
    return used / total


def _chip_memory_facts(chip: ChipSample) -> Facts:
    return {
        "hbm_used_ratio": _ratio(chip.hbm_used_bytes, chip.hbm_total_bytes),
        "memory_used_ratio": _ratio(chip.memory_used_bytes, chip.memory_total_bytes),
        # the chip's own memory whichever it is (HBM on the 910 family, DDR on the 310 family)
        "device_memory_used_ratio": _ratio(chip.hbm_used_bytes, chip.hbm_total_bytes)
        if chip.hbm_total_bytes else _ratio(chip.memory_used_bytes, chip.memory_total_bytes),
    }


# --------------------------------------------------------------------------------------------- host

def host_facts(snapshot: Snapshot, check_versions: Optional[VersionCheck] = None) -> Facts:
    values = vars(snapshot.host)
    facts = {name: values[name] for name in HOST_SCALAR_FIELDS}
    for spec in registry.SOURCES:
        if spec.host_facts is not None:
            facts.update(spec.host_facts(snapshot))
    facts.update(_host_version_facts(snapshot.host, check_versions or _check_versions))
    facts.update(_chip_aggregate_facts(snapshot.chips))
    facts.update(_source_facts(snapshot))
    return facts


def _chip_aggregate_facts(chips: Sequence[ChipSample]) -> Facts:
    temperatures = [c.temperature_celsius for c in chips if c.temperature_celsius is not None]
    busy = [c for c in chips if c.aicore_ratio is not None and c.aicore_ratio >= BUSY_AICORE_RATIO]
    # Chips running NPU processes: a spread among them is an imbalance, an idle spare chip is not.
    in_use = [c for c in chips if c.processes]
    busiest, idlest = _aicore_extremes(chips)
    busiest_in_use, idlest_in_use = _aicore_extremes(in_use)
    return {
        "chip_count": len(chips),
        "max_chip_temperature_celsius": max(temperatures) if temperatures else None,
        "max_chip_aicore_ratio": _aicore(busiest),
        "min_chip_aicore_ratio": _aicore(idlest),
        "chip_aicore_spread": _aicore_spread(busiest, idlest),
        "busiest_chip": _subject(busiest),
        "idlest_chip": _subject(idlest),
        "busy_chip_count": len(busy),
        "mean_busy_chip_aicore_ratio": sum(c.aicore_ratio for c in busy) / len(busy) if busy else None,
        "in_use_chip_count": len(in_use),
        "in_use_max_aicore_ratio": _aicore(busiest_in_use),
        "in_use_min_aicore_ratio": _aicore(idlest_in_use),
        "in_use_aicore_spread": _aicore_spread(busiest_in_use, idlest_in_use),
        "in_use_busiest_chip": _subject(busiest_in_use),
        "in_use_idlest_chip": _subject(idlest_in_use),
    }


def _aicore_extremes(chips: Sequence[ChipSample]) -> Tuple[Optional[ChipSample], Optional[ChipSample]]:
    """The chips with the highest and the lowest AI Core ratio (None, None when none is known)."""
    known = [c for c in chips if c.aicore_ratio is not None]
    if not known:
        return None, None
    return max(known, key=lambda c: c.aicore_ratio), min(known, key=lambda c: c.aicore_ratio)


def _aicore(chip: Optional[ChipSample]) -> Optional[float]:
    return None if chip is None else chip.aicore_ratio


def _subject(chip: Optional[ChipSample]) -> Optional[str]:
    return None if chip is None else chip.subject


def _aicore_spread(busiest: Optional[ChipSample], idlest: Optional[ChipSample]) -> Optional[float]:
    if busiest is None or idlest is None:
        return None
    return busiest.aicore_ratio - idlest.aicore_ratio


def _source_facts(snapshot: Snapshot) -> Facts:
    facts: Facts = {}
    down: List[Tuple[str, Any]] = []
    for name, status in snapshot.sources.items():
        facts["source_up." + name] = 1 if status.ok else 0
        age = None if status.last_success is None else max(0.0, snapshot.time - status.last_success)
        facts["source_age_seconds." + name] = age
        # Not "down" (SourceStatus.failing, as the journal says): a query the product does not support at all
        # (nothing will ever come from it), a tier waiting for its first poll, or one waiting for another source
        # within its grace (hccn for npu-smi's chips: npu-smi's own status says what is wrong, if anything).
        if status.failing:
            down.append((name, status))
    ages = [snapshot.time - status.last_success for _, status in down if status.last_success is not None]
    facts.update({
        "down_source_count": len(down),
        "down_sources": [name for name, _ in down],
        "down_source_text": "; ".join(_describe_down_source(name, status, snapshot.time)
                                      for name, status in down) or "none",
        # How old the newest data of the longest-failing source is; null if none ever succeeded.
        "max_down_source_age_seconds": max(ages) if ages else None,
    })
    return facts


def _describe_down_source(name: str, status: SourceStatus, now: float) -> str:
    if status.last_success is None:
        since = "no success since start"
    else:
        since = "last success {:.0f} s ago".format(max(0.0, now - status.last_success))
    return "{} ({}; {})".format(name, status.error or "failed", since)


def _host_version_facts(host: HostSample, check: VersionCheck) -> Facts:
    compatible, reason = check(host)
    return {"versions_compatible": compatible, "versions_reason": reason}


# --------------------------------------------------------------------------------------------- names

def _blank_facts() -> Tuple[FrozenSet[str], FrozenSet[str]]:
    blank = Snapshot(time=0.0, host=HostSample(), chips=[ChipSample(npu=0, chip=0)], sources={})
    facts = snapshot_facts(blank, check_versions=lambda host: (None, ""))
    return frozenset(facts["npu0/chip0"]), frozenset(facts[HOST_SUBJECT])


CHIP_FACTS, HOST_FACTS = _blank_facts()
# The facts of the source list they were found for (tests register sources of their own), matched by identity:
# hashing the list hashes every SourceSpec, which was half the cost of loading the rules.
_known = (registry.SOURCES, (CHIP_FACTS, HOST_FACTS))


def is_known_fact(subject_kind: str, name: str) -> bool:
    """Whether a rule of `subject_kind` ("chip" or "host") can read fact `name`."""
    global _known
    if _known[0] is not registry.SOURCES:
        _known = (registry.SOURCES, _blank_facts())
    chip_facts_known, host_facts_known = _known[1]
    if subject_kind == "chip":
        if name in chip_facts_known:
            return True
        if not name.startswith(HOST_PREFIX):
            return False
        name = name[len(HOST_PREFIX):]
    return name in host_facts_known or any(name.startswith(p) and len(name) > len(p) for p in SOURCE_FACT_PREFIXES)
