"""Prometheus view of the daemon's latest Snapshot and active Findings.

A scrape only renders what is in memory: the daemon polls on its own timer and hands us an ExporterView.
`render_families()` is a pure function from that view to metric families; SnapshotCollector wraps it for
prometheus_client. Every sample is a gauge without a timestamp; a `None` in the Snapshot means no sample.

With `npu_exporter_compat` the families Huawei's npu-exporter serves (`npu_chip_info_*`, `machine_*`) are
rendered too, with its names, label sets and units (MB, percent), so dashboards built on it keep working.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from .. import __version__
from ..model import HEALTH_STATES, MIB, ChipSample, Finding, Snapshot, SourceStatus
from ..sources import registry
from .families import Families, MetricSpec


@dataclass
class ExporterView:
    snapshot: Optional[Snapshot]  # None before the first poll
    findings: List[Finding]  # active findings
    driver_version: Optional[str] = None


CHIP = ("npu", "chip")

CORE_METRICS = (  # the chip records and the daemon itself; each source declares its own in its SourceSpec
    MetricSpec("npumon_build_info", ("version",), "npumon build, value 1."),
    MetricSpec("npumon_snapshot_timestamp_seconds", (),
               "Unix time the served snapshot was assembled; values come from the daemon's last polls, "
               "not from the scrape."),
    MetricSpec("npumon_source_up", ("source",), "1 if the source's last poll succeeded, else 0."),
    MetricSpec("npumon_source_unsupported", ("source",),
               "1 if the product does not support this source's query at all (its up is then 0 for good)."),
    MetricSpec("npumon_source_degraded", ("source",),
               "1 if the source is up but left part of its answer out as unreadable (e.g. one chip's row)."),
    MetricSpec("npumon_source_duration_seconds", ("source",), "Duration of the source's last poll."),
    MetricSpec("npumon_source_last_success_timestamp_seconds", ("source",),
               "Unix time of the source's last successful poll."),
    MetricSpec("npumon_chip_info", CHIP + ("name", "bus_id", "driver_version"), "Chip identity, value 1."),
    MetricSpec("npumon_chip_health", CHIP + ("state",),
               "1 for the chip's health state as npu-smi prints it, 0 for the other states."),
    MetricSpec("npumon_chip_error_code_info", CHIP + ("code",), "An error code the chip reports now, value 1."),
    MetricSpec("npumon_chip_temperature_celsius", CHIP, "Chip temperature."),
    MetricSpec("npumon_chip_power_watts", CHIP, "Chip power draw."),
    MetricSpec("npumon_chip_utilization_ratio", CHIP + ("engine",), "Utilisation of one engine of the chip, 0..1."),
    MetricSpec("npumon_chip_memory_used_bytes", CHIP + ("memory",), "Chip memory in use (hbm, ddr)."),
    MetricSpec("npumon_chip_memory_total_bytes", CHIP + ("memory",), "Chip memory size (hbm, ddr)."),
    MetricSpec("npumon_chip_memory_bandwidth_ratio", CHIP + ("memory",), "Chip memory bandwidth in use, 0..1."),
    MetricSpec("npumon_chip_ecc_errors", CHIP + ("memory", "bit"),
               "ECC errors counted by the driver (a gauge: npu-smi can clear the count)."),
    MetricSpec("npumon_chip_ecc_isolated_pages", CHIP + ("memory",), "Memory pages isolated after ECC errors."),
    MetricSpec("npumon_chip_processes", CHIP, "Processes npu-smi lists on the chip."),
    MetricSpec("npumon_finding_active", ("rule", "severity", "subject"),
               "1 for each active finding of a rule that notifies."),
    MetricSpec("npumon_finding_shadow", ("rule", "severity", "subject"),
               "1 for each active finding of a rule in shadow mode (recorded, never notified)."),
)

# Every npumon_* family: the core ones and those the listed sources declare.
NATIVE_METRICS = CORE_METRICS + tuple(metric for source in registry.SOURCES for metric in source.metrics)

# npu-exporter's chip label set ("L1"): `id` is the chip's physical id; the container labels stay empty
# because npumon does no container attribution.
COMPAT_CHIP = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
COMPAT_NAME = ("id", "name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
COMPAT_PROCESS = COMPAT_CHIP + ("process_id", "container_id")
COMPAT_ERROR_CODE_SLOTS = 10  # npu-exporter exports the first 10 codes: _error_code, _error_code_1 .. _9


def _compat_error_code_name(slot: int) -> str:
    return "npu_chip_info_error_code" if slot == 0 else "npu_chip_info_error_code_{}".format(slot)


COMPAT_METRICS = (
    MetricSpec("machine_npu_nums", (), "npu-exporter compatible: number of NPU chips."),
    MetricSpec("machine_card_nums", (), "npu-exporter compatible: number of NPU cards."),
    MetricSpec("machine_healthy_npu_nums", (), "npu-exporter compatible: chips whose health is OK."),
    MetricSpec("machine_unhealthy_npu_nums", (),
               "npu-exporter compatible: chips whose health is Warning, Alarm or Critical."),
    MetricSpec("machine_unknown_npu_nums", (), "npu-exporter compatible: chips whose health is unknown."),
    MetricSpec("npu_chip_info_name", COMPAT_NAME, "npu-exporter compatible: chip name, value 1."),
    MetricSpec("npu_chip_info_health_status", COMPAT_CHIP,
               "npu-exporter compatible: 1 healthy, 0 unhealthy, -1 unknown."),
) + tuple(
    MetricSpec(_compat_error_code_name(slot), COMPAT_CHIP,
               "npu-exporter compatible: error code number {} of the chip, as a number.".format(slot + 1))
    for slot in range(COMPAT_ERROR_CODE_SLOTS)
) + (
    MetricSpec("npu_chip_info_temperature", COMPAT_CHIP, "npu-exporter compatible: chip temperature in Celsius."),
    MetricSpec("npu_chip_info_power", COMPAT_CHIP, "npu-exporter compatible: chip power in W."),
    MetricSpec("npu_chip_info_process_info_num", COMPAT_CHIP, "npu-exporter compatible: processes on the chip."),
    MetricSpec("npu_chip_info_process_info", COMPAT_PROCESS,
               "npu-exporter compatible: memory of one process on the chip, unit is 'MB'."),
    MetricSpec("npu_chip_info_utilization", COMPAT_CHIP, "npu-exporter compatible: AI Core utilization in %."),
    MetricSpec("npu_chip_info_vector_utilization", COMPAT_CHIP,
               "npu-exporter compatible: vector utilization in %."),
    MetricSpec("npu_chip_info_cube_utilization", COMPAT_CHIP, "npu-exporter compatible: cube utilization in %."),
    MetricSpec("npu_chip_info_overall_utilization", COMPAT_CHIP,
               "npu-exporter compatible: overall NPU utilization in %."),
    MetricSpec("npu_chip_info_total_memory", COMPAT_CHIP, "npu-exporter compatible: DDR size in MB."),
    MetricSpec("npu_chip_info_used_memory", COMPAT_CHIP, "npu-exporter compatible: DDR in use in MB."),
    MetricSpec("npu_chip_info_hbm_total_memory", COMPAT_CHIP, "npu-exporter compatible: HBM size in MB."),
    MetricSpec("npu_chip_info_hbm_used_memory", COMPAT_CHIP, "npu-exporter compatible: HBM in use in MB."),
    MetricSpec("npu_chip_info_hbm_utilization", COMPAT_CHIP,
               "npu-exporter compatible: HBM capacity in use in %."),
    MetricSpec("npu_chip_info_hbm_bandwidth_utilization", COMPAT_CHIP,
               "npu-exporter compatible: HBM bandwidth in use in %."),
    MetricSpec("npu_chip_info_hbm_ecc_single_bit_error_cnt", COMPAT_CHIP,
               "npu-exporter compatible: HBM single-bit ECC errors."),
    MetricSpec("npu_chip_info_hbm_ecc_double_bit_error_cnt", COMPAT_CHIP,
               "npu-exporter compatible: HBM double-bit ECC errors."),
)

_SPECS = {spec.name: spec for spec in NATIVE_METRICS + COMPAT_METRICS}


def _specs() -> Dict[str, MetricSpec]:
    """Every family by name, with those of sources registered after import (tests add their own)."""
    extra = {metric.name: metric for source in registry.SOURCES for metric in source.metrics
             if metric.name not in _SPECS}
    return dict(_SPECS, **extra) if extra else _SPECS

UTILIZATION_ENGINES = (
    ("aicore", "aicore_ratio"),
    ("aivector", "aivector_ratio"),
    ("aicpu", "aicpu_ratio"),
    ("ctrlcpu", "ctrlcpu_ratio"),
    ("aicube", "aicube_ratio"),
    ("vectorcore", "vectorcore_ratio"),
    ("npu", "npu_util_ratio"),
)
UNHEALTHY_STATES = ("Warning", "Alarm", "Critical")


def render_families(view: ExporterView, npu_exporter_compat: bool = False) -> List[Metric]:
    """The metric families for one scrape, built from the view alone."""
    out = Families(_specs())
    out.add("npumon_build_info", 1, (__version__,))
    snapshot = view.snapshot
    if snapshot is not None:
        out.add("npumon_snapshot_timestamp_seconds", snapshot.time)
        _add_sources(out, snapshot.sources)
        driver_version = view.driver_version or snapshot.driver_version or snapshot.host.driver_version
        for chip in snapshot.chips:
            _add_chip(out, chip, driver_version)
        for spec in registry.SOURCES:  # each source's own families (host facts, PCIe links, probes, ...)
            if spec.export is not None:
                spec.export(snapshot, out)
    _add_findings(out, view.findings)
    if npu_exporter_compat and snapshot is not None:
        _add_npu_exporter_compat(out, snapshot.chips)
    return out.families()


def _add_sources(out: Families, sources: Dict[str, SourceStatus]) -> None:
    for name, status in sorted(sources.items()):
        out.add("npumon_source_up", 1 if status.ok else 0, (name,))
        out.add("npumon_source_unsupported", 1 if status.unsupported else 0, (name,))
        out.add("npumon_source_degraded", 1 if status.degraded else 0, (name,))
        out.add("npumon_source_duration_seconds", status.duration_seconds, (name,))
        out.add("npumon_source_last_success_timestamp_seconds", status.last_success, (name,))


def _add_chip(out: Families, chip: ChipSample, driver_version: Optional[str]) -> None:
    ids = (chip.npu, chip.chip)
    out.add("npumon_chip_info", 1, ids + (chip.name, chip.bus_id, chip.driver_version or driver_version))
    if chip.health is not None:
        # An unexpected string still gives a complete state set; /status shows the raw text.
        current = chip.health if chip.health in HEALTH_STATES else "UNKNOWN"
        for state in HEALTH_STATES:
            out.add("npumon_chip_health", 1 if state == current else 0, ids + (state,))
    for code in chip.error_codes:
        out.add("npumon_chip_error_code_info", 1, ids + (code,))
    out.add("npumon_chip_temperature_celsius", chip.temperature_celsius, ids)
    out.add("npumon_chip_power_watts", chip.power_watts, ids)
    for engine, attribute in UTILIZATION_ENGINES:
        out.add("npumon_chip_utilization_ratio", getattr(chip, attribute), ids + (engine,))
    for memory, used, total, bandwidth in (
        ("hbm", chip.hbm_used_bytes, chip.hbm_total_bytes, chip.hbm_bandwidth_ratio),
        ("ddr", chip.memory_used_bytes, chip.memory_total_bytes, chip.ddr_bandwidth_ratio),
    ):
        out.add("npumon_chip_memory_used_bytes", used, ids + (memory,))
        out.add("npumon_chip_memory_total_bytes", total, ids + (memory,))
        out.add("npumon_chip_memory_bandwidth_ratio", bandwidth, ids + (memory,))
    for memory, counts in sorted((chip.ecc or {}).items()):
        for bit in ("single", "double"):
            out.add("npumon_chip_ecc_errors", counts.get(bit), ids + (memory, bit))
        out.add("npumon_chip_ecc_isolated_pages", counts.get("isolated_pages"), ids + (memory,))
    out.add("npumon_chip_processes", len(chip.processes), ids)


def _add_findings(out: Families, findings: Iterable[Finding]) -> None:
    # Shadow findings get their own name so that an alert on npumon_finding_active can never page for a
    # rule that is still on trial, while dashboards can still show what it would have said.
    for finding in findings:
        name = "npumon_finding_shadow" if finding.shadow else "npumon_finding_active"
        out.add(name, 1, (finding.rule, finding.severity, finding.subject))


# --- npu-exporter compatibility -------------------------------------------------------------------------


def compat_chip_id(chip: ChipSample) -> Optional[int]:
    """npu-exporter's `id` label is the chip's physical id. npu-smi prints it on A3 (Phy-ID); elsewhere
    the logical id (`Device` column, or `npu-smi info -m`) stands in. None: the chip gets no series."""
    return chip.phy_id if chip.phy_id is not None else chip.device_id


def _percent(ratio: Optional[float]) -> Optional[float]:
    # Rounding undoes the float noise of the /100 done at parse time (29 -> 0.29 -> 28.999999999999996).
    return None if ratio is None else round(ratio * 100.0, 6)


def _mib(size: Optional[int]) -> Optional[float]:
    return None if size is None else size / MIB


def _compat_health(health: Optional[str]) -> Optional[int]:
    if health is None:
        return None
    if health == "OK":
        return 1
    return 0 if health in UNHEALTHY_STATES else -1


def _hex_code(code: str) -> Optional[int]:
    try:
        return int(code, 16)
    except ValueError:
        return None


def _add_npu_exporter_compat(out: Families, chips: Sequence[ChipSample]) -> None:
    healths = [_compat_health(chip.health) for chip in chips]
    out.add("machine_npu_nums", len(chips))
    out.add("machine_card_nums", len({chip.npu for chip in chips}))
    out.add("machine_healthy_npu_nums", healths.count(1))
    out.add("machine_unhealthy_npu_nums", healths.count(0))
    out.add("machine_unknown_npu_nums", len(chips) - healths.count(1) - healths.count(0))
    for chip in chips:
        chip_id = compat_chip_id(chip)
        if chip_id is not None:
            _add_compat_chip(out, chip, chip_id)


def _add_compat_chip(out: Families, chip: ChipSample, chip_id: int) -> None:
    labels = (chip_id, chip.name, "", chip.bus_id, "", "", "")
    out.add("npu_chip_info_name", 1, labels)
    out.add("npu_chip_info_health_status", _compat_health(chip.health), labels)
    codes = [number for number in map(_hex_code, chip.error_codes) if number is not None]
    for slot, number in enumerate(codes[:COMPAT_ERROR_CODE_SLOTS]):
        out.add(_compat_error_code_name(slot), number, labels)
    out.add("npu_chip_info_temperature", chip.temperature_celsius, labels)
    out.add("npu_chip_info_power", chip.power_watts, labels)
    out.add("npu_chip_info_process_info_num", len(chip.processes), labels)
    for process in chip.processes:
        out.add("npu_chip_info_process_info", _mib(process.memory_bytes), labels + (process.pid, ""))
    out.add("npu_chip_info_utilization", _percent(chip.aicore_ratio), labels)
    # npu-exporter reads "vector" from aiv_util on 910B/A3 and from Vector Core (type 12) on 310P.
    vector = chip.aivector_ratio if chip.aivector_ratio is not None else chip.vectorcore_ratio
    out.add("npu_chip_info_vector_utilization", _percent(vector), labels)
    out.add("npu_chip_info_cube_utilization", _percent(chip.aicube_ratio), labels)
    out.add("npu_chip_info_overall_utilization", _percent(chip.npu_util_ratio), labels)
    # 910B/A3/950 print DDR as "0 / 0"; npu-exporter has no DDR group for them, so a zero size is skipped.
    if chip.memory_total_bytes:
        out.add("npu_chip_info_total_memory", _mib(chip.memory_total_bytes), labels)
        out.add("npu_chip_info_used_memory", _mib(chip.memory_used_bytes), labels)
    out.add("npu_chip_info_hbm_total_memory", _mib(chip.hbm_total_bytes), labels)
    out.add("npu_chip_info_hbm_used_memory", _mib(chip.hbm_used_bytes), labels)
    if chip.hbm_total_bytes and chip.hbm_used_bytes is not None:
        out.add("npu_chip_info_hbm_utilization", round(100.0 * chip.hbm_used_bytes / chip.hbm_total_bytes, 6),
                labels)
    out.add("npu_chip_info_hbm_bandwidth_utilization", _percent(chip.hbm_bandwidth_ratio), labels)
    hbm_ecc = (chip.ecc or {}).get("hbm") or {}
    out.add("npu_chip_info_hbm_ecc_single_bit_error_cnt", hbm_ecc.get("single"), labels)
    out.add("npu_chip_info_hbm_ecc_double_bit_error_cnt", hbm_ecc.get("double"), labels)


# --- prometheus_client glue -----------------------------------------------------------------------------


class SnapshotCollector(Collector):
    """A custom collector: each scrape renders the view `get_view()` returns at that moment."""

    def __init__(self, get_view: Callable[[], ExporterView], npu_exporter_compat: bool = False) -> None:
        self._get_view = get_view
        self._npu_exporter_compat = npu_exporter_compat

    def collect(self) -> Iterator[Metric]:
        return iter(render_families(self._get_view(), self._npu_exporter_compat))


def build_registry(get_view: Callable[[], ExporterView], npu_exporter_compat: bool = False) -> CollectorRegistry:
    """A registry holding only npumon's collector. No process_/python_ collectors: the same registry feeds
    the textfile, and node_exporter rejects a textfile whose process_* series clash with its own."""
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(get_view, npu_exporter_compat))
    return registry
