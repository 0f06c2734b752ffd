"""Prometheus view of the daemon's latest Snapshot and active Findings.

A scrape only renders what is in memory: the daemon polls on its own timer and hands us an ExporterView.
`render_families()` is a pure function from that view to metric families; SnapshotCollector wraps it for
prometheus_client. Every sample is a gauge without a timestamp; a `None` in the Snapshot means no sample.

With `npu_exporter_compat` the families Huawei's npu-exporter serves (`npu_chip_info_*`, `machine_*`) are
rendered too (outputs/npu_exporter.py), with its names, label sets and units (MB, percent), so dashboards
built on it keep working.
"""

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from .. import __version__
from ..config.schema import ExporterConfig
from ..model import HEALTH_STATES, ChipSample, Finding, ProcessSample, Snapshot, SourceStatus
from ..sources import registry
from ..rules.verdict import STATES, HostVerdict, chip_key
from . import npu_exporter
from .encode import LineCache, encode_rows
from .exposition import ExpositionRegistry
from .families import Families, MetricSpec
from .link_metrics import LINK_METRICS, add_links
from .report import processes_by_memory, verdict_of


@dataclass
class ExporterView:
    snapshot: Optional[Snapshot]  # None before the first poll
    findings: List[Finding]  # active findings
    driver_version: Optional[str] = None
    verdict: Optional[HostVerdict] = None  # the daemon's guarded verdicts; by default the snapshot's own


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
    MetricSpec("npumon_chip_info", CHIP + ("name", "bus_id", "driver_version", "device_id", "phy_id", "vdie_id"),
               "Chip identity, value 1: device_id is the logical id (/dev/davinciN), phy_id the physical id, "
               "vdie_id the die id as npu-exporter prints it (empty where npu-smi does not tell)."),
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
    MetricSpec("npumon_chip_process_memory_bytes", CHIP + ("pid", "name"),
               "Chip memory a process holds, as npu-smi's process table lists it; only the chip's largest "
               "exporter.process_series_per_chip processes get a series."),
    MetricSpec("npumon_chip_process_memory_other_bytes", CHIP,
               "Chip memory held by the chip's processes beyond the largest exporter.process_series_per_chip "
               "(0 when every process has its own series); only on chips with processes."),
    MetricSpec("npumon_finding_active", ("rule", "severity", "subject"),
               "1 for each active finding of a rule that notifies."),
    MetricSpec("npumon_finding_shadow", ("rule", "severity", "subject"),
               "1 for each active finding of a rule in shadow mode (recorded, never notified)."),
    MetricSpec("npumon_chip_verdict", ("npu", "chip", "state"),
               "1 for the chip's verdict (healthy, degraded, out_of_service), 0 for the other two."),
    MetricSpec("npumon_host_verdict", ("state",),
               "1 for the host's verdict (healthy, degraded, out_of_service), 0 for the other two."),
    MetricSpec("npumon_finding_repair_info", ("rule", "subject", "repair_action", "level"),
               "1 for each active finding of a driver fault: what repairs it, and the fault code's handling level."),
) + LINK_METRICS  # the chips' interconnect links (link_metrics.py)

# Every npumon_* family: the core ones and those the listed sources declare.
NATIVE_METRICS = CORE_METRICS + tuple(metric for source in registry.SOURCES for metric in source.metrics)

# npu-exporter's families (outputs/npu_exporter.py), with or without the `node` label.
COMPAT_METRICS = npu_exporter.BASE_METRICS
_SPECS = {spec.name: spec for spec in NATIVE_METRICS + COMPAT_METRICS}
_NODE_SPECS = dict(_SPECS, **{spec.name: spec for spec in npu_exporter.with_node_label(COMPAT_METRICS)})


def _specs(node: Optional[str] = None) -> Dict[str, MetricSpec]:
    """Every family by name, with those of sources registered after import (tests add their own)."""
    specs = _SPECS if node is None else _NODE_SPECS
    extra = {metric.name: metric for source in registry.SOURCES for metric in source.metrics
             if metric.name not in specs}
    return dict(specs, **extra) if extra else specs


UTILIZATION_ENGINES = (
    ("aicore", "aicore_ratio"),
    ("aivector", "aivector_ratio"),
    ("aicpu", "aicpu_ratio"),
    ("ctrlcpu", "ctrlcpu_ratio"),
    ("aicube", "aicube_ratio"),
    ("vectorcore", "vectorcore_ratio"),
    ("npu", "npu_util_ratio"),
)


# exporter.process_series_per_chip: a chip's processes with a series of their own (the largest by memory); the
# pid and name labels come and go with workloads, so this bounds the series a busy host adds per chip.
DEFAULT_PROCESS_SERIES_PER_CHIP = ExporterConfig.process_series_per_chip


def render_families(view: ExporterView, npu_exporter_compat: bool = False, node: Optional[str] = None,
                    only_npu_exporter: bool = False,
                    process_series_per_chip: int = DEFAULT_PROCESS_SERIES_PER_CHIP) -> List[Metric]:
    """The metric families for one scrape, built from the view alone. `node`: a `node` label on npu-exporter's
    families; `only_npu_exporter`: those families alone, as npu-exporter's own /metrics serves them;
    `process_series_per_chip`: how many of a chip's processes get a memory series of their own."""
    return render_rows(view, npu_exporter_compat, node, only_npu_exporter, process_series_per_chip).families()


def render_rows(view: ExporterView, npu_exporter_compat: bool = False, node: Optional[str] = None,
                only_npu_exporter: bool = False,
                process_series_per_chip: int = DEFAULT_PROCESS_SERIES_PER_CHIP) -> Families:
    """render_families' samples as Families rows, which /metrics writes without prometheus_client's objects."""
    out = Families(_specs(node))
    snapshot = view.snapshot
    if not only_npu_exporter:
        _add_native(out, view, process_series_per_chip)
    if (npu_exporter_compat or only_npu_exporter) and snapshot is not None:
        npu_exporter.render(out, snapshot, node=node, driver_version=view.driver_version)
    return out


def _add_native(out: Families, view: ExporterView, process_series_per_chip: int) -> None:
    out.add("npumon_build_info", 1, (__version__,))
    snapshot = view.snapshot
    if snapshot is not None:
        out.add("npumon_snapshot_timestamp_seconds", snapshot.time)
        _add_sources(out, snapshot.sources)
        driver_version = view.driver_version or snapshot.driver_version or snapshot.host.driver_version
        for chip in snapshot.chips:
            _add_chip(out, chip, driver_version)
            _add_processes(out, chip, process_series_per_chip)
        for spec in registry.SOURCES:  # each source's own families (host facts, PCIe links, probes, ...)
            if spec.export is not None:
                spec.export(snapshot, out)
        _add_verdict(out, view.verdict or verdict_of(snapshot, view.findings))
    _add_findings(out, view.findings)


def _add_verdict(out: Families, verdict: HostVerdict) -> None:
    for state in STATES:
        out.add("npumon_host_verdict", int(verdict.state == state), (state,))
    for chip in verdict.chips:
        key = chip_key(chip.subject)
        if key is not None:
            for state in STATES:
                out.add("npumon_chip_verdict", int(chip.state == state), (key[0], key[1], state))


def _add_sources(out: Families, sources: Dict[str, SourceStatus]) -> None:
    for name, status in sorted(sources.items()):
        out.add("npumon_source_up", 1 if status.ok else 0, (name,))
        out.add("npumon_source_unsupported", 1 if status.unsupported else 0, (name,))
        out.add("npumon_source_degraded", 1 if status.degraded else 0, (name,))
        out.add("npumon_source_duration_seconds", status.duration_seconds, (name,))
        out.add("npumon_source_last_success_timestamp_seconds", status.last_success, (name,))


def _add_chip(out: Families, chip: ChipSample, driver_version: Optional[str]) -> None:
    ids = (chip.npu, chip.chip)
    out.add("npumon_chip_info", 1, ids + (chip.name, chip.bus_id, chip.driver_version or driver_version,
                                          chip.device_id, chip.phy_id, chip.vdie_id))
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
    add_links(out, chip)


def largest_processes(processes: Sequence[ProcessSample], limit: int) -> Tuple[List[ProcessSample],
                                                                              List[ProcessSample]]:
    """(the `limit` largest by memory, the rest), in report.processes_by_memory's stable order."""
    ordered = processes_by_memory(processes)
    return ordered[:max(0, limit)], ordered[max(0, limit):]


def _add_processes(out: Families, chip: ChipSample, limit: int) -> None:
    if not chip.processes:
        return
    ids = (chip.npu, chip.chip)
    shown, rest = largest_processes(chip.processes, limit)
    for process in shown:
        out.add("npumon_chip_process_memory_bytes", process.memory_bytes, ids + (process.pid, process.name or ""))
    out.add("npumon_chip_process_memory_other_bytes", sum(p.memory_bytes or 0 for p in rest), ids)


def _add_findings(out: Families, findings: Iterable[Finding]) -> None:
    # Shadow findings get their own name so that an alert on npumon_finding_active can never page for a
    # rule that is still on trial, while dashboards can still show what it would have said.
    for finding in findings:
        name = "npumon_finding_shadow" if finding.shadow else "npumon_finding_active"
        out.add(name, 1, (finding.rule, finding.severity, finding.subject))
        if finding.repair_action is not None:
            out.add("npumon_finding_repair_info", 1,
                    (finding.rule, finding.subject, finding.repair_action, finding.level or ""))


# --- prometheus_client glue -----------------------------------------------------------------------------


class _ViewState:
    """What a render of the view depends on, compared by identity: the daemon publishes a new Snapshot and
    findings list rather than changing them in place, so the same objects mean the same exposition."""

    def __init__(self, view: ExporterView) -> None:
        self.view = view
        self._parts = ((view.snapshot, view.driver_version, view.verdict) + tuple(view.findings)
                       + tuple(registry.SOURCES))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _ViewState) or len(other._parts) != len(self._parts):
            return False
        return all(mine is theirs for mine, theirs in zip(self._parts, other._parts))

    __hash__ = None  # type: ignore  # mutable identity, never a dict key


class SnapshotCollector(Collector):
    """A custom collector: each scrape renders the view `get_view()` returns at that moment, or (through
    ExpositionRegistry) reuses the render of the same view."""

    def __init__(self, get_view: Callable[[], ExporterView], npu_exporter_compat: bool = False,
                 node: Optional[str] = None, only_npu_exporter: bool = False,
                 process_series_per_chip: int = DEFAULT_PROCESS_SERIES_PER_CHIP) -> None:
        self._get_view = get_view
        self._npu_exporter_compat = npu_exporter_compat
        self._node = node
        self._only_npu_exporter = only_npu_exporter
        self._process_series_per_chip = process_series_per_chip
        self._lines = LineCache()  # only ExpositionRegistry's render uses it, under its lock

    def collect(self) -> Iterator[Metric]:
        return self.collect_state(self.render_state())

    def render_state(self) -> _ViewState:
        return _ViewState(self._get_view())

    def collect_state(self, state: _ViewState) -> Iterator[Metric]:
        return iter(render_families(state.view, self._npu_exporter_compat, self._node, self._only_npu_exporter,
                                    self._process_series_per_chip))

    def encode_state(self, state: _ViewState, encoder: Callable[[object], bytes], openmetrics: bool) -> bytes:
        """collect_state's families in `encoder`'s format (without OpenMetrics' `# EOF`), written from the rows
        with the lines of the previous render reused where they are the same."""
        rows = render_rows(state.view, self._npu_exporter_compat, self._node, self._only_npu_exporter,
                           self._process_series_per_chip)
        return encode_rows(rows, encoder, openmetrics, self._lines)


def build_registry(get_view: Callable[[], ExporterView], npu_exporter_compat: bool = False,
                   node: Optional[str] = None, only_npu_exporter: bool = False,
                   process_series_per_chip: int = DEFAULT_PROCESS_SERIES_PER_CHIP) -> ExpositionRegistry:
    """A registry holding only npumon's collector, whose render /metrics serves from memory until the view
    changes (exposition.py). No process_/python_ collectors: the same registry feeds the textfile, and
    node_exporter rejects a textfile whose process_* series clash with its own."""
    exposition = ExpositionRegistry()
    exposition.register(SnapshotCollector(get_view, npu_exporter_compat, node, only_npu_exporter,
                                          process_series_per_chip))
    return exposition
