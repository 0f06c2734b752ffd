"""What a rule can see: a Snapshot flattened into one dict of facts per subject.

Subjects are `host` and one `npu<N>/chip<C>` per chip (ChipSample.subject). A chip's facts are its scalar
ChipSample fields by name, some derived facts, and a copy of every host fact under `host.`. Every fact
function below always returns all of its keys (None where unknown), so the names a rule may use can be
listed from a blank Snapshot: see CHIP_FACTS and HOST_FACTS.

To add a fact: add it to one of the small `_..._facts` functions (or write a new one and call it from
chip_facts / host_facts). Pure functions; no I/O.
"""

import dataclasses
from typing import Any, Callable, Dict, FrozenSet, List, Optional, Sequence, Tuple

from ..model import ChipSample, DeviceFile, HostSample, Snapshot, SourceStatus

Facts = Dict[str, Any]
VersionCheck = Callable[[HostSample], Tuple[Optional[bool], str]]

HOST_SUBJECT = "host"
HOST_PREFIX = "host."
# AI Core at or above this counts a chip as doing real work (busy_chip_count and friends).
BUSY_AICORE_RATIO = 0.1
# Host facts named per source: source_up.<name> and source_age_seconds.<name>.
SOURCE_FACT_PREFIXES = ("source_up.", "source_age_seconds.")

# Fields that are lists, dicts or nested records: exposed through derived facts instead.
_STRUCTURED_CHIP_FIELDS = frozenset(("ecc", "error_codes", "error_information", "processes", "pcie", "probe"))
_STRUCTURED_HOST_FIELDS = frozenset(("numa_nodes", "device_files"))
CHIP_SCALAR_FIELDS = tuple(f.name for f in dataclasses.fields(ChipSample) if f.name not in _STRUCTURED_CHIP_FIELDS)
HOST_SCALAR_FIELDS = tuple(f.name for f in dataclasses.fields(HostSample) if f.name not in _STRUCTURED_HOST_FIELDS)


def snapshot_facts(snapshot: Snapshot, check_versions: Optional[VersionCheck] = None) -> Dict[str, Facts]:
    """subject -> facts, `host` first, then the chips in Snapshot order.

    `check_versions` defaults to npumon.sources.host.check_versions (versions_* facts are null without it).
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
    facts.update(_chip_pcie_facts(chip))
    facts.update(_chip_numa_facts(chip, host))
    facts.update(_chip_probe_facts(chip))
    facts.update(prefixed_host)
    return facts


def _chip_error_facts(chip: ChipSample) -> Facts:
    return {
        "error_codes": list(chip.error_codes),
        "error_code_text": ", ".join(chip.error_codes) if chip.error_codes else "none",
        "error_information_text": "; ".join(chip.error_information) if chip.error_information else "none",
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
    }


def _chip_pcie_facts(chip: ChipSample) -> Facts:
    link = chip.pcie
    return {
        "pcie_degraded": None if link is None else link.degraded,
        "pcie_current_speed_gts": None if link is None else link.current_speed_gts,
        "pcie_max_speed_gts": None if link is None else link.max_speed_gts,
        "pcie_current_width": None if link is None else link.current_width,
        "pcie_max_width": None if link is None else link.max_width,
    }


def _chip_numa_facts(chip: ChipSample, host: HostSample) -> Facts:
    """CPU load of the NUMA node the chip hangs off (where its feeding processes should run); the whole
    host's CPU ratio where sysfs does not say which node that is."""
    node_id = chip.numa_node
    node = next((n for n in host.numa_nodes if n.node == node_id), None) if node_id is not None else None
    return {
        "numa_node": node_id,
        "numa_cpu_ratio": node.cpu_ratio if node is not None and node.cpu_ratio is not None else host.cpu_ratio,
    }


def _chip_probe_facts(chip: ChipSample) -> Facts:
    """The latest liveness probe (npumon.sources.probe); all null while the chip has none."""
    probe = chip.probe
    names = ("state", "kind", "device_id", "first_run", "duration_seconds", "baseline_seconds", "failed_stage",
             "error_code", "error_name", "detail", "action")
    return {"probe_" + name: None if probe is None else getattr(probe, name) for name in names}


# --------------------------------------------------------------------------------------------- host

def host_facts(snapshot: Snapshot, check_versions: Optional[VersionCheck] = None) -> Facts:
    values = vars(snapshot.host)
    facts = {name: values[name] for name in HOST_SCALAR_FIELDS}
    facts.update(_host_memory_facts(snapshot.host))
    facts.update(_host_numa_facts(snapshot.host))
    facts.update(_host_device_file_facts(snapshot.host, snapshot.chips))
    facts.update(_host_version_facts(snapshot.host, check_versions or _version_checker()))
    facts.update(_chip_aggregate_facts(snapshot.chips))
    facts.update(_source_facts(snapshot))
    return facts


def _host_memory_facts(host: HostSample) -> Facts:
    return {"memory_available_ratio": _ratio(host.memory_available_bytes, host.memory_total_bytes)}


def _host_numa_facts(host: HostSample) -> Facts:
    ratios = [node.cpu_ratio for node in host.numa_nodes if node.cpu_ratio is not None]
    return {
        "numa_node_count": len(host.numa_nodes) if host.numa_nodes else None,
        "numa_cpu_max_ratio": max(ratios) if ratios else None,
        "numa_cpu_min_ratio": min(ratios) if ratios else None,
    }


# 310B SoC boards (Atlas 200I/500 A2) have no devmm_svm or hisi_hdc: their absence there is normal
# (shared/reference/npu-smi/FORMATS.md section 9).
_NOT_ON_SOC_BOARDS = frozenset(("/dev/devmm_svm", "/dev/hisi_hdc"))


def _host_device_file_facts(host: HostSample, chips: List[ChipSample]) -> Facts:
    soc_board = bool(chips) and all((chip.name or "").startswith("310B") for chip in chips)
    missing = [f.path for f in host.device_files
               if not f.exists and not (soc_board and f.path in _NOT_ON_SOC_BOARDS)]
    inaccessible = [f.path for f in host.device_files if f.exists and not f.accessible]
    return {
        "device_file_count": len(host.device_files),
        "missing_device_files": missing,
        "missing_device_file_text": ", ".join(missing) if missing else "none",
        "inaccessible_device_files": inaccessible,
        "inaccessible_device_file_text": ", ".join(
            _describe_device_file(f) for f in host.device_files if f.exists and not f.accessible) or "none",
    }


def _describe_device_file(device_file: DeviceFile) -> str:
    details = [part for part in (device_file.mode, device_file.owner, device_file.group) if part]
    return "{} ({})".format(device_file.path, " ".join(details)) if details else device_file.path


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
        # A query the product does not support at all is not "down": nothing will ever come from it.
        if not status.ok and not status.unsupported:
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


_check_versions: Optional[VersionCheck] = None
_check_versions_looked_up = False


def _version_checker() -> Optional[VersionCheck]:
    """npumon.sources.host.check_versions, imported on first use (None while that module lacks it)."""
    global _check_versions, _check_versions_looked_up
    if not _check_versions_looked_up:
        _check_versions_looked_up = True
        try:
            from ..sources.host import check_versions
        except ImportError:
            check_versions = None
        _check_versions = check_versions
    return _check_versions


def _host_version_facts(host: HostSample, check: Optional[VersionCheck]) -> Facts:
    if check is None:
        return {"versions_compatible": None, "versions_reason": None}
    compatible, reason = check(host)
    return {"versions_compatible": compatible, "versions_reason": reason}


# --------------------------------------------------------------------------------------------- names

def _blank_facts() -> Tuple[FrozenSet[str], FrozenSet[str]]:
    blank = Snapshot(time=0.0, host=HostSample(), chips=[ChipSample(npu=0, chip=0)], sources={})
    facts = snapshot_facts(blank, check_versions=lambda host: (None, ""))
    return frozenset(facts["npu0/chip0"]), frozenset(facts[HOST_SUBJECT])


CHIP_FACTS, HOST_FACTS = _blank_facts()


def is_known_fact(subject_kind: str, name: str) -> bool:
    """Whether a rule of `subject_kind` ("chip" or "host") can read fact `name`."""
    if subject_kind == "chip":
        if name in CHIP_FACTS:
            return True
        if not name.startswith(HOST_PREFIX):
            return False
        name = name[len(HOST_PREFIX):]
    return name in HOST_FACTS or any(name.startswith(p) and len(name) > len(p) for p in SOURCE_FACT_PREFIXES)
