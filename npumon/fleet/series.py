"""A host's npumon_* series back into what the rules see: the inverse of the exporter, for finding hints.

`npumon_finding_active` carries only rule, severity and subject; the summary and hint templates need the
facts of the subject. They are rebuilt here from the host's series in Prometheus: temperatures, power,
utilisation, memory, ECC, error codes, host CPU and sources. What Prometheus does not hold (error
information text, process names) becomes None, which the templates print as `n/a`; `npumon check` on
the host, or its /status, gives the full text.

Also here: how a series names its host and its chip, which the fleet view reads the same way.
"""

import time
from collections import defaultdict
from typing import Any, Dict, Iterable, Optional, Tuple

from ..model import ChipSample, HostSample, NumaNode, PcieLink, Snapshot, SourceStatus
from .client import Labels, Sample


def host_of(labels: Labels, host_label: str) -> str:
    """The host of a series: its host label (`--host-label`), or its instance where it has none."""
    return labels.get(host_label) or labels.get("instance") or "?"


def chip_key(labels: Labels) -> Optional[Tuple[int, int]]:
    """(npu, chip) of a chip series; None for a series of no chip or with ids that are not numbers."""
    try:
        return int(labels["npu"]), int(labels["chip"])
    except (KeyError, ValueError):
        return None


def snapshot_from_series(series: Iterable[Sample]) -> Tuple[Snapshot, Dict[Tuple[int, int], float]]:
    """A partial Snapshot of one host rebuilt from its npumon_* series (the inverse of exporter.py for the
    fields rules use), and the chips' process counts (series carry the count, not the processes)."""
    from ..outputs.exporter import UTILIZATION_ENGINES

    engine_fields = dict(UTILIZATION_ENGINES)
    chips: Dict[Tuple[int, int], ChipSample] = {}
    process_counts: Dict[Tuple[int, int], float] = {}
    host = HostSample()
    numa: Dict[int, NumaNode] = {}
    sources: Dict[str, Dict[str, float]] = defaultdict(dict)
    snapshot_time = time.time()

    for labels, value in series:
        name = labels.get("__name__", "")
        key = chip_key(labels)
        if name.startswith("npumon_chip_") and key is not None:
            chip = chips.setdefault(key, ChipSample(npu=key[0], chip=key[1]))
            _set_chip_value(chip, name, labels, value, engine_fields, process_counts)
        elif name.startswith("npumon_host_"):
            _set_host_value(host, numa, name, labels, value)
        elif name.startswith("npumon_source_"):
            sources[labels.get("source", "?")][name] = value
        elif name == "npumon_snapshot_timestamp_seconds":
            snapshot_time = value
    host.numa_nodes = [numa[node] for node in sorted(numa)]
    for chip in chips.values():
        _chip_totals(chip)
    statuses = {source: SourceStatus(ok=values.get("npumon_source_up") == 1,
                                     duration_seconds=values.get("npumon_source_duration_seconds"),
                                     last_success=values.get("npumon_source_last_success_timestamp_seconds"),
                                     unsupported=values.get("npumon_source_unsupported") == 1)
                for source, values in sources.items()}
    snapshot = Snapshot(time=snapshot_time, host=host, chips=[chips[k] for k in sorted(chips)], sources=statuses)
    return snapshot, process_counts


def _set_chip_value(chip: ChipSample, name: str, labels: Labels, value: float, engine_fields: Dict[str, str],
                    process_counts: Dict[Tuple[int, int], float]) -> None:
    """One npumon_chip_* series back into the ChipSample field the exporter took it from."""
    memory = labels.get("memory")
    if name == "npumon_chip_info":
        chip.name = labels.get("name") or None
        chip.bus_id = labels.get("bus_id") or None
        chip.driver_version = labels.get("driver_version") or None
    elif name == "npumon_chip_health" and value == 1:
        chip.health = labels.get("state")
    elif name == "npumon_chip_error_code_info":
        chip.error_codes = sorted(set(chip.error_codes) | {labels.get("code", "?")})
    elif name == "npumon_chip_temperature_celsius":
        chip.temperature_celsius = value
    elif name == "npumon_chip_power_watts":
        chip.power_watts = value
    elif name == "npumon_chip_utilization_ratio" and labels.get("engine") in engine_fields:
        setattr(chip, engine_fields[labels["engine"]], value)
    elif name in ("npumon_chip_memory_used_bytes", "npumon_chip_memory_total_bytes") and memory in ("hbm", "ddr"):
        prefix = "hbm" if memory == "hbm" else "memory"
        setattr(chip, "{}_{}_bytes".format(prefix, "used" if "used" in name else "total"), int(value))
    elif name == "npumon_chip_memory_bandwidth_ratio" and memory in ("hbm", "ddr"):
        setattr(chip, "{}_bandwidth_ratio".format(memory), value)
    elif name == "npumon_chip_ecc_errors" and memory:
        chip.ecc = chip.ecc or {}
        chip.ecc.setdefault(memory, {})[labels.get("bit", "?")] = int(value)
    elif name == "npumon_chip_ecc_isolated_pages" and memory:
        chip.ecc = chip.ecc or {}
        chip.ecc.setdefault(memory, {})["isolated_pages"] = int(value)
    elif name == "npumon_chip_processes":
        process_counts[chip.key] = value
    elif name.startswith("npumon_chip_pcie_link_"):
        link = chip.pcie = chip.pcie or PcieLink()
        kind = labels.get("kind")
        if name == "npumon_chip_pcie_link_speed_gts" and kind in ("current", "max"):
            setattr(link, "{}_speed_gts".format(kind), value)
        elif name == "npumon_chip_pcie_link_width_lanes" and kind in ("current", "max"):
            setattr(link, "{}_width".format(kind), int(value))


def _chip_totals(chip: ChipSample) -> None:
    """The chip-wide ECC counts the rules read, summed over the memories like the collector does."""
    if not chip.ecc:
        return
    for attribute, key in (("ecc_single_bit_errors", "single"), ("ecc_double_bit_errors", "double"),
                           ("ecc_isolated_pages", "isolated_pages")):
        counts = [memory[key] for memory in chip.ecc.values() if memory.get(key) is not None]
        setattr(chip, attribute, sum(counts) if counts else None)


def _set_host_value(host: HostSample, numa: Dict[int, NumaNode], name: str, labels: Labels, value: float) -> None:
    """One npumon_host_* series back into the HostSample (or NUMA node) field the exporter took it from."""
    simple = {
        "npumon_host_cpu_ratio": "cpu_ratio",
        "npumon_host_memory_total_bytes": "memory_total_bytes",
        "npumon_host_memory_available_bytes": "memory_available_bytes",
        "npumon_host_numa_balancing": "numa_balancing",
        "npumon_host_max_map_areas": "max_map_count",
        "npumon_host_serving_queue_depth": "serving_queue_depth",
    }
    if name in simple:
        integer = simple[name] in ("memory_total_bytes", "memory_available_bytes", "numa_balancing", "max_map_count")
        setattr(host, simple[name], int(value) if integer else value)
    elif name == "npumon_host_numa_cpu_ratio":
        try:
            node = int(labels.get("node", ""))
        except ValueError:
            return
        numa.setdefault(node, NumaNode(node=node)).cpu_ratio = value
    elif name == "npumon_host_info":
        host.driver_version = labels.get("driver_version") or None
        host.firmware_version = labels.get("firmware_version") or None
        host.cann_version = labels.get("cann_version") or None


# Facts that the series cannot give: unknown (n/a) rather than a wrong "none"; the texts a hint reads out say
# where to find them instead.
UNKNOWN_FROM_PROMETHEUS = ("process_signature", "process_memory_bytes")
ON_THE_HOST = {
    "error_information_text": "the driver's text is not in Prometheus (npumon check on the host shows it)",
    "process_names": "see npumon check on the host",
}


def subject_facts(series: Iterable[Sample]) -> Dict[str, Dict[str, Any]]:
    """subject -> facts, as the rules engine would see them, from one host's series."""
    from ..rules.facts import snapshot_facts

    snapshot, process_counts = snapshot_from_series(series)
    facts = snapshot_facts(snapshot)
    for chip in snapshot.chips:
        chip_facts = facts[chip.subject]
        chip_facts["process_count"] = int(process_counts[chip.key]) if chip.key in process_counts else None
        for name in UNKNOWN_FROM_PROMETHEUS:
            chip_facts[name] = None
        chip_facts.update(ON_THE_HOST)
    return facts
