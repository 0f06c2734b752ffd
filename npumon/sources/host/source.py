"""The host source: CPU and NUMA load, memory, kernel knobs, the PCIe links of the chips, driver / firmware /
CANN versions and the Ascend device files.

Every path is read under a root prefix so tests and the simulator can point the collector at a fake
tree (npumon.sim.hostroot writes one). Parsing is in parse.py; HostCollector does the reading and turns every
bad or missing file into an error line; HostSource is the source contract around it.
"""

import dataclasses
import glob
import grp
import os
import pwd
import re
import socket
import stat
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar

from ...model import ChipSample, DeviceFile, HostSample, NumaNode, PcieLink, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Facts, Parts, SingleTierSource, SourceContext, SourceSpec, Tier
from ..npusmi.common import is_null
from .parse import (CpuJiffies, HostParseError, busy_ratio, parse_cpulist, parse_install_info, parse_int, parse_key_values,
                    parse_link_speed, parse_loadavg, parse_meminfo, parse_proc_stat, parse_version_cfg,
                    ranges_from, sum_jiffies, version_from)

MANAGEMENT_DEVICE_FILES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# sysfs files of a PCI device, in the field order of PcieLink
PCI_LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")

T = TypeVar("T")
HOST_SOURCE = "host"


# ---------------------------------------------------------------------------------------------
# Collection


@dataclass
class HostResult:
    sample: HostSample
    pcie: Dict[str, PcieLink] = field(default_factory=dict)  # keyed by the bus id as given
    numa_node: Dict[str, int] = field(default_factory=dict)  # bus id -> NUMA node (absent: unknown / -1)
    errors: List[str] = field(default_factory=list)  # one line each: what could not be read and why


class _TreeReader:
    """Reads text files under the root prefix; every failure becomes one line in `errors`."""

    def __init__(self, root: str, errors: List[str]):
        self.root = root
        self.errors = errors

    def path(self, host_path: str) -> str:
        return os.path.join(self.root, host_path.lstrip("/"))

    def text(self, path: str, required: bool) -> Optional[str]:
        try:
            # errors="replace": binary junk must end up as a parse error, not a UnicodeDecodeError
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except FileNotFoundError:
            if required:
                self.errors.append("{}: missing".format(path))
            return None
        except OSError as exc:
            self.errors.append("{}: cannot read: {}".format(path, exc.strerror or exc))
            return None

    def parsed(self, path: str, parser: Callable[[str], T], required: bool) -> Optional[T]:
        text = self.text(path, required)
        if text is None:
            return None
        try:
            return parser(text)
        except HostParseError as exc:
            self.errors.append("{}: {}".format(path, exc))
            return None


def _numbered(pattern: str, name_regex: str) -> List[Tuple[int, str]]:
    """Paths matching a glob whose base name matches `name_regex` (one number group), sorted by number."""
    found = []
    for path in glob.glob(pattern):
        match = re.match(name_regex, os.path.basename(path))
        if match:
            found.append((int(match.group(1)), path))
    return sorted(found)


def _name_or_id(lookup: Callable[[int], str], number: int) -> str:
    try:
        return lookup(number)
    except KeyError:
        return str(number)


class HostCollector:
    """Collects HostSample facts under `root`.

    Required facts (present on every Linux host, so a missing file is an error): /proc/stat,
    /proc/meminfo (MemTotal), /proc/loadavg, /proc/sys/vm/max_map_count. Everything else is optional
    and simply left as None / absent when its file is missing: NUMA nodes (non-NUMA kernels), node
    meminfo, numa_balancing (kernels without automatic NUMA balancing), MemAvailable (old kernels),
    the hostname file, the Ascend version files (containers mount only parts of the install, and a
    host may run CANN only in containers), PCIe sysfs entries (containers and SoC boards lack them).
    Device files are always listed with `exists` saying whether they are there.

    The collector keeps the last /proc/stat counters, so CPU ratios are deltas between consecutive
    collect() calls of the same object.
    """

    def __init__(self, root: str = "/", ascend_dir: str = "/usr/local/Ascend"):
        self.root = root
        self.ascend_dir = ascend_dir
        self._previous_host: Optional[CpuJiffies] = None
        self._previous_cpus: Dict[int, CpuJiffies] = {}

    def collect(self, bus_ids: Iterable[str] = ()) -> HostResult:
        """Reads every fact; never raises for bad or missing files (they become `errors`)."""
        result = HostResult(sample=HostSample())
        reader = _TreeReader(self.root, result.errors)
        sample = result.sample
        sample.hostname = self._hostname(reader)
        self._collect_cpu(reader, sample)
        self._collect_memory(reader, sample)
        sample.numa_balancing = reader.parsed(
            reader.path("/proc/sys/kernel/numa_balancing"), parse_int, required=False)
        sample.max_map_count = reader.parsed(reader.path("/proc/sys/vm/max_map_count"), parse_int, required=True)
        self._collect_versions(reader, sample)
        sample.device_files = self._device_files(reader)
        for bus_id in bus_ids:
            if is_null(bus_id):
                continue
            link = self._pcie_link(reader, bus_id)
            if link is not None:
                result.pcie[bus_id] = link
                node = reader.parsed(reader.path("/sys/bus/pci/devices/{}/numa_node".format(bus_id.strip().lower())),
                                     parse_int, required=False)
                if node is not None and node >= 0:  # -1: the platform does not say
                    result.numa_node[bus_id] = node
        return result

    def _hostname(self, reader: _TreeReader) -> str:
        text = reader.text(reader.path("/proc/sys/kernel/hostname"), required=False)
        name = (text or "").strip()
        return name or socket.gethostname()

    def _collect_cpu(self, reader: _TreeReader, sample: HostSample) -> None:
        counters = reader.parsed(reader.path("/proc/stat"), parse_proc_stat, required=True)
        host_now, cpus_now = counters if counters is not None else (None, {})
        if host_now is not None:
            sample.cpu_ratio = busy_ratio(host_now, self._previous_host)
            sample.cpu_count = len(cpus_now) or None  # online CPUs: /proc/stat has a cpuN line for each

        node_dirs = _numbered(reader.path("/sys/devices/system/node/node*"), r"^node(\d+)$")
        for number, node_dir in node_dirs:
            node = NumaNode(node=number)
            cpus = reader.parsed(os.path.join(node_dir, "cpulist"), parse_cpulist, required=True)
            node.cpus = cpus or []
            online = [cpu for cpu in node.cpus if cpu in cpus_now]
            if online:
                before = None
                if all(cpu in self._previous_cpus for cpu in online):
                    before = sum_jiffies(self._previous_cpus[cpu] for cpu in online)
                node.cpu_ratio = busy_ratio(sum_jiffies(cpus_now[cpu] for cpu in online), before)
            memory = reader.parsed(os.path.join(node_dir, "meminfo"), parse_meminfo, required=False)
            if memory is not None:
                node.memory_total_bytes = memory.get("MemTotal")
                node.memory_free_bytes = memory.get("MemFree")
            sample.numa_nodes.append(node)

        # A failed read keeps the older counters, so the next good read still yields a delta.
        if host_now is not None:
            self._previous_host, self._previous_cpus = host_now, cpus_now

    def _collect_memory(self, reader: _TreeReader, sample: HostSample) -> None:
        path = reader.path("/proc/meminfo")
        memory = reader.parsed(path, parse_meminfo, required=True)
        if memory is not None:
            sample.memory_total_bytes = memory.get("MemTotal")
            sample.memory_available_bytes = memory.get("MemAvailable")
            if sample.memory_total_bytes is None:
                reader.errors.append("{}: no MemTotal line".format(path))
        sample.load1 = reader.parsed(reader.path("/proc/loadavg"), parse_loadavg, required=True)

    def _collect_versions(self, reader: _TreeReader, sample: HostSample) -> None:
        ascend = reader.path(self.ascend_dir)
        driver_path = os.path.join(ascend, "driver", "version.info")
        driver = reader.parsed(driver_path, parse_key_values, required=False)
        if driver is not None:
            sample.driver_version = self._field(reader, driver_path, version_from, driver)
            sample.driver_compatible_firmware = self._field(
                reader, driver_path, ranges_from, driver, "compatible_version_fw")
        firmware_path = os.path.join(ascend, "firmware", "version.info")
        firmware = reader.parsed(firmware_path, parse_key_values, required=False)
        if firmware is not None:
            sample.firmware_version = self._field(reader, firmware_path, version_from, firmware)
            sample.firmware_compatible_driver = self._field(
                reader, firmware_path, ranges_from, firmware, "compatible_version_drv")
        sample.cann_version = self._cann_version(reader, ascend)

    @staticmethod
    def _field(reader: _TreeReader, path: str, extract: Callable[..., Optional[str]], *args) -> Optional[str]:
        try:
            return extract(*args)
        except HostParseError as exc:
            reader.errors.append("{}: {}".format(path, exc))
            return None

    @staticmethod
    def _cann_version(reader: _TreeReader, ascend: str) -> Optional[str]:
        # First readable source wins: the toolkit's version.cfg, its install.info (layout up to CANN
        # 8.3), the CANN 8.5+ layout under cann/, then the runtime-only nnae package. A broken file is
        # reported and the next source is tried.
        candidates = [(os.path.join(ascend, "ascend-toolkit", "latest", "version.cfg"), parse_version_cfg)]
        for pattern in ("ascend-toolkit/latest/*-linux/ascend_toolkit_install.info",
                        "cann/*-linux/ascend_toolkit_install.info",
                        "nnae/latest/ascend_nnae_install.info"):
            candidates.extend((path, parse_install_info) for path in sorted(glob.glob(os.path.join(ascend, pattern))))
        for path, parser in candidates:
            version = reader.parsed(path, parser, required=False)
            if version is not None:
                return version
        return None

    @staticmethod
    def _device_files(reader: _TreeReader) -> List[DeviceFile]:
        chips = _numbered(reader.path("/dev/davinci*"), r"^davinci(\d+)$")
        host_paths = ["/dev/davinci{}".format(number) for number, _ in chips] + list(MANAGEMENT_DEVICE_FILES)
        return [HostCollector._device_file(reader, host_path) for host_path in host_paths]

    @staticmethod
    def _device_file(reader: _TreeReader, host_path: str) -> DeviceFile:
        path = reader.path(host_path)
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return DeviceFile(path=host_path, exists=False, accessible=False)
        except OSError as exc:
            reader.errors.append("{}: cannot stat: {}".format(path, exc.strerror or exc))
            return DeviceFile(path=host_path, exists=False, accessible=False)
        return DeviceFile(
            path=host_path,
            exists=True,
            accessible=os.access(path, os.R_OK | os.W_OK),
            mode=stat.filemode(info.st_mode),
            owner=_name_or_id(lambda uid: pwd.getpwuid(uid).pw_name, info.st_uid),
            group=_name_or_id(lambda gid: grp.getgrgid(gid).gr_name, info.st_gid),
        )

    @staticmethod
    def _pcie_link(reader: _TreeReader, bus_id: str) -> Optional[PcieLink]:
        address = bus_id.strip().lower()  # npu-smi prints 0000:C1:00.0, sysfs names it 0000:c1:00.0
        if not re.match(r"^[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$", address):
            reader.errors.append("bus id {!r}: not a PCI address".format(bus_id))
            return None
        device_dir = reader.path("/sys/bus/pci/devices/" + address)
        if not os.path.isdir(device_dir):
            return None
        parsers = (parse_link_speed, parse_link_speed, parse_int, parse_int)
        values = [reader.parsed(os.path.join(device_dir, name), parser, required=False)
                  for name, parser in zip(PCI_LINK_FILES, parsers)]
        return PcieLink(*values)


# ---------------------------------------------------------------------------------------------
# The source contract


class HostSource(SingleTierSource[HostResult]):
    """Host facts as a source: one tier, `host`. Its HostSample is the host part of every Snapshot (the
    sources after it in the list add their host fields to a copy); each chip gets its PCIe link and NUMA node."""

    name = HOST_SOURCE

    def __init__(self, collector: HostCollector, interval: float, max_age: float, clock=time.time):
        super().__init__(interval, max_age, clock)
        self.collector = collector

    def tiers(self) -> Sequence[Tier]:
        return [Tier(self.name, self.interval, first_run=min(self.interval, 1.0))]

    def read(self, chips: Sequence[ChipSample]) -> HostResult:
        return self.collector.collect([chip.bus_id for chip in chips if chip.bus_id])

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
    return HostSource(HostCollector(root=context.target.root, ascend_dir=config.ascend_dir),
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
