"""The host source: the host facts (reader.py) as a source, with the rule facts and metric families they add.
"""

import dataclasses
import time
from typing import Optional, Sequence

from ...model import ChipSample, DeviceFile, HostSample, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Facts, Parts, SingleTierSource, SourceContext, SourceSpec, Tier
from .reader import HostReader, HostResult

HOST_SOURCE = "host"


class HostSource(SingleTierSource[HostResult]):
    """Host facts as a source: one tier, `host`. Its HostSample is the host part of every Snapshot (the
    sources after it in the list add their host fields to a copy); each chip gets its PCIe link and NUMA node."""

    name = HOST_SOURCE

    def __init__(self, reader: HostReader, interval: float, max_age: float, clock=time.time):
        super().__init__(interval, max_age, clock)
        self.reader = reader

    def tiers(self) -> Sequence[Tier]:
        return [Tier(self.name, self.interval, first_run=min(self.interval, 1.0))]

    def read(self, chips: Sequence[ChipSample]) -> HostResult:
        return self.reader.collect([chip.bus_id for chip in chips if chip.bus_id])

    def warning(self, value: HostResult) -> Optional[str]:
        # Host facts are many independent files: a few unreadable ones do not make the source down.
        return "; ".join(value.errors) if value.errors else None

    def contribute(self, parts: Parts, now: float) -> Parts:
        result = self.reading.value(now)
        if result is None:
            return parts
        chips = tuple(dataclasses.replace(chip, pcie=result.pcie.get(chip.bus_id), numa_node=result.numa_node.get(
            chip.bus_id)) if chip.bus_id else chip for chip in parts.chips)
        return dataclasses.replace(parts, host=dataclasses.replace(result.sample), chips=chips)


def build(context: SourceContext) -> Optional[HostSource]:
    config = context.config
    if config.poll.host_seconds <= 0:
        return None
    return HostSource(HostReader(root=context.target.root, ascend_dir=config.ascend_dir),
                      config.poll.host_seconds, config.max_age_seconds, context.clock)


# -- rule facts --------------------------------------------------------------------------------


def _ratio(used: Optional[float], total: Optional[float]) -> Optional[float]:
    return None if used is None or not total else used / total


def chip_facts(chip: ChipSample, host: HostSample) -> Facts:
    """The chip's PCIe link, and the CPU load of the NUMA node it hangs off (where its feeding processes should
    run); the whole host's CPU ratio where sysfs does not say which node that is."""
    link = chip.pcie
    node_id = chip.numa_node
    node = next((n for n in host.numa_nodes if n.node == node_id), None) if node_id is not None else None
    return {
        "pcie_degraded": None if link is None else link.degraded,
        "pcie_current_speed_gts": None if link is None else link.current_speed_gts,
        "pcie_max_speed_gts": None if link is None else link.max_speed_gts,
        "pcie_current_width": None if link is None else link.current_width,
        "pcie_max_width": None if link is None else link.max_width,
        "numa_node": node_id,
        "numa_cpu_ratio": node.cpu_ratio if node is not None and node.cpu_ratio is not None else host.cpu_ratio,
    }


# 310B SoC boards (Atlas 200I/500 A2) have no devmm_svm or hisi_hdc: their absence there is normal
# (shared/reference/npu-smi/FORMATS.md section 9).
_NOT_ON_SOC_BOARDS = frozenset(("/dev/devmm_svm", "/dev/hisi_hdc"))


def host_facts(snapshot: Snapshot) -> Facts:
    host, chips = snapshot.host, snapshot.chips
    ratios = [node.cpu_ratio for node in host.numa_nodes if node.cpu_ratio is not None]
    soc_board = bool(chips) and all((chip.name or "").startswith("310B") for chip in chips)
    missing = [f.path for f in host.device_files
               if not f.exists and not (soc_board and f.path in _NOT_ON_SOC_BOARDS)]
    inaccessible = [f for f in host.device_files if f.exists and not f.accessible]
    return {
        "memory_available_ratio": _ratio(host.memory_available_bytes, host.memory_total_bytes),
        "numa_node_count": len(host.numa_nodes) if host.numa_nodes else None,
        "numa_cpu_max_ratio": max(ratios) if ratios else None,
        "numa_cpu_min_ratio": min(ratios) if ratios else None,
        "device_file_count": len(host.device_files),
        "missing_device_files": missing,
        "missing_device_file_text": ", ".join(missing) if missing else "none",
        "inaccessible_device_files": [f.path for f in inaccessible],
        "inaccessible_device_file_text": ", ".join(_describe_device_file(f) for f in inaccessible) or "none",
        # as root npumon opens any file: it judges by the mode bits for the users that are not root
        "device_files_checked_for": "non-root users (npumon runs as root: judged by the file modes)"
        if any(f.by_mode for f in host.device_files) else "npumon",
    }


def _describe_device_file(device_file: DeviceFile) -> str:
    details = [part for part in (device_file.mode, device_file.owner, device_file.group) if part]
    return "{} ({})".format(device_file.path, " ".join(details)) if details else device_file.path


# -- metrics -----------------------------------------------------------------------------------

CHIP = ("npu", "chip")
METRICS = (
    MetricSpec("npumon_host_info", ("driver_version", "firmware_version", "cann_version"),
               "Ascend software versions read from the host's version files, value 1."),
    MetricSpec("npumon_host_cpu_ratio", (), "Whole-host CPU utilisation, 0..1."),
    MetricSpec("npumon_host_numa_cpu_ratio", ("node",), "CPU utilisation of the CPUs of one NUMA node, 0..1."),
    MetricSpec("npumon_host_memory_total_bytes", (), "Host memory size."),
    MetricSpec("npumon_host_memory_available_bytes", (), "Host memory available for new work."),
    MetricSpec("npumon_host_numa_balancing", (), "kernel.numa_balancing (0 is recommended on NPU hosts)."),
    # Not "_max_map_count": promtool reserves the _count suffix for histograms and summaries.
    MetricSpec("npumon_host_max_map_areas", (), "vm.max_map_count: memory map areas a process may have."),
    MetricSpec("npumon_host_device_file_accessible", ("path",),
               "1 if this process can read and write the device file, else 0."),
    MetricSpec("npumon_chip_pcie_link_degraded", CHIP,
               "1 if the PCIe link trained below its maximum speed or width, else 0."),
    MetricSpec("npumon_chip_pcie_link_speed_gts", CHIP + ("kind",), "PCIe link speed in GT/s (current, max)."),
    MetricSpec("npumon_chip_pcie_link_width_lanes", CHIP + ("kind",), "PCIe link width in lanes (current, max)."),
)


def export(snapshot: Snapshot, out: Families) -> None:
    host = snapshot.host
    versions = (host.driver_version, host.firmware_version, host.cann_version)
    if any(version is not None for version in versions):
        out.add("npumon_host_info", 1, versions)
    out.add("npumon_host_cpu_ratio", host.cpu_ratio)
    for node in host.numa_nodes:
        out.add("npumon_host_numa_cpu_ratio", node.cpu_ratio, (node.node,))
    out.add("npumon_host_memory_total_bytes", host.memory_total_bytes)
    out.add("npumon_host_memory_available_bytes", host.memory_available_bytes)
    out.add("npumon_host_numa_balancing", host.numa_balancing)
    out.add("npumon_host_max_map_areas", host.max_map_count)
    for device in host.device_files:
        out.add("npumon_host_device_file_accessible", 1 if device.accessible else 0, (device.path,))
    for chip in snapshot.chips:
        link = chip.pcie
        if link is None:
            continue
        ids = (chip.npu, chip.chip)
        degraded = link.degraded
        out.add("npumon_chip_pcie_link_degraded", None if degraded is None else int(degraded), ids)
        out.add("npumon_chip_pcie_link_speed_gts", link.current_speed_gts, ids + ("current",))
        out.add("npumon_chip_pcie_link_speed_gts", link.max_speed_gts, ids + ("max",))
        out.add("npumon_chip_pcie_link_width_lanes", link.current_width, ids + ("current",))
        out.add("npumon_chip_pcie_link_width_lanes", link.max_width, ids + ("max",))


SPEC = SourceSpec(HOST_SOURCE, build, chip_facts=chip_facts, host_facts=host_facts, metrics=METRICS, export=export)
