"""Reading the host facts: CPU and NUMA load, memory, kernel knobs, the PCIe links of the chips, driver /
firmware / CANN versions and the Ascend device files.

Every path is read under a root prefix so tests and the simulator can point the reader at a fake
tree (npumon.sim.hostroot writes one). Parsing is in parse.py; HostReader does the reading and turns every
bad or missing file into an error line.
"""

import glob
import grp
import os
import pwd
import re
import socket
import stat
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple, TypeVar

from ...model import DeviceFile, HostSample, NumaNode, PcieLink
from ..npusmi.common import is_null
from .parse import (CpuJiffies, HostParseError, busy_ratio, parse_cpulist, parse_install_info, parse_int, parse_key_values,
                    parse_link_speed, parse_loadavg, parse_meminfo, parse_proc_stat, parse_version_cfg,
                    ranges_from, sum_jiffies, version_from)

MANAGEMENT_DEVICE_FILES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# sysfs files of a PCI device, in the field order of PcieLink
PCI_LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")

T = TypeVar("T")


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
            # read as bytes and decoded whole: a third cheaper than a text file's decoder, for about 80 files a
            # pass; errors="replace": binary junk must end up as a parse error, not a UnicodeDecodeError
            with open(path, "rb") as handle:
                return handle.read().decode("utf-8", errors="replace")
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


class HostReader:
    """Collects HostSample facts under `root`.

    Required facts (present on every Linux host, so a missing file is an error): /proc/stat,
    /proc/meminfo (MemTotal), /proc/loadavg, /proc/sys/vm/max_map_count. Everything else is optional
    and simply left as None / absent when its file is missing: NUMA nodes (non-NUMA kernels), node
    meminfo, numa_balancing (kernels without automatic NUMA balancing), MemAvailable (old kernels),
    the hostname file, the Ascend version files (containers mount only parts of the install, and a
    host may run CANN only in containers), PCIe sysfs entries (containers and SoC boards lack them).
    Device files are always listed with `exists` saying whether they are there.

    The reader keeps the last /proc/stat counters, so CPU ratios are deltas between consecutive
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
        return [HostReader._device_file(reader, host_path) for host_path in host_paths]

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
        as_root = os.geteuid() == 0
        return DeviceFile(
            path=host_path,
            exists=True,
            accessible=_open_to_others(info) if as_root else os.access(path, os.R_OK | os.W_OK),
            by_mode=as_root,
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


def _open_to_others(info: os.stat_result) -> bool:
    """Whether a user other than root can read and write the file, by its mode: the workloads (HwHiAiUser, a
    container's user) and a non-root npumon need the group's or others' rw bits, or to own it with rw."""
    mode = info.st_mode
    return (mode & 0o060 == 0o060 or mode & 0o006 == 0o006
            or (mode & 0o600 == 0o600 and info.st_uid != 0))
