"""Host facts of an NPU host: CPU and NUMA load, memory, kernel knobs, the PCIe links of the chips,
driver / firmware / CANN versions and the Ascend device files.

Every path is read under a root prefix so tests and the simulator can point the collector at a fake
tree (npumon.sim.hostroot writes one). The first half of this module is pure parsing (text in, values
out); HostCollector does the reading and turns every bad or missing file into an error line.

CPU time comes from /proc/stat directly rather than psutil: psutil only reads another procfs through
the process-global psutil.PROCFS_PATH, and the per-CPU counters needed for NUMA nodes are one line each.
"""

import glob
import grp
import os
import pwd
import re
import socket
import stat
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple, TypeVar

from ..model import DeviceFile, HostSample, NumaNode, PcieLink
from .npusmi.common import is_null

KIB = 1024
MANAGEMENT_DEVICE_FILES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
# sysfs files of a PCI device, in the field order of PcieLink
PCI_LINK_FILES = ("current_link_speed", "max_link_speed", "current_link_width", "max_link_width")

T = TypeVar("T")


class HostParseError(ValueError):
    """A host file holds something the parsers cannot read; the message says what."""


# ---------------------------------------------------------------------------------------------
# procfs and sysfs parsing


class CpuJiffies(NamedTuple):
    busy: int
    total: int


def parse_proc_stat(text: str) -> Tuple[CpuJiffies, Dict[int, CpuJiffies]]:
    """/proc/stat -> (whole host from the `cpu` line, {cpu number: counters} from the `cpuN` lines)."""
    host = None
    per_cpu: Dict[int, CpuJiffies] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields or not fields[0].startswith("cpu"):
            continue
        label = fields[0][3:]
        if label == "":
            host = _cpu_jiffies(fields)
        elif label.isdigit():
            per_cpu[int(label)] = _cpu_jiffies(fields)
        else:
            raise HostParseError("unexpected line {!r}".format(line.strip()))
    if host is None:
        raise HostParseError("no aggregate 'cpu' line")
    return host, per_cpu


def _cpu_jiffies(fields: List[str]) -> CpuJiffies:
    # Columns: user nice system idle iowait irq softirq steal guest guest_nice. guest and guest_nice
    # are already counted inside user and nice, so only the first eight make up the total; time
    # waiting for I/O counts as idle (as top and psutil count it).
    try:
        numbers = [int(value) for value in fields[1:9]]
    except ValueError:
        raise HostParseError("non-numeric counters in {!r}".format(" ".join(fields))) from None
    if len(numbers) < 4 or any(number < 0 for number in numbers):
        raise HostParseError("bad counters in {!r}".format(" ".join(fields)))
    idle = sum(numbers[3:5])
    total = sum(numbers)
    return CpuJiffies(busy=total - idle, total=total)


def sum_jiffies(readings: Iterable[CpuJiffies]) -> CpuJiffies:
    busy = total = 0
    for reading in readings:
        busy += reading.busy
        total += reading.total
    return CpuJiffies(busy, total)


def busy_ratio(now: CpuJiffies, before: Optional[CpuJiffies]) -> Optional[float]:
    """Share of CPU time spent busy since `before`, 0..1.

    Without a usable earlier reading (first call, or counters that did not move forward because no
    jiffy passed or a CPU came back from offline) the counters as they stand are used, which is the
    ratio since boot.
    """
    if before is not None and now.total > before.total:
        busy, total = now.busy - before.busy, now.total - before.total
    else:
        busy, total = now.busy, now.total
    if total <= 0:
        return None
    return min(1.0, max(0.0, busy / total))


def parse_cpulist(text: str) -> List[int]:
    """'0-3,8-11' -> [0, 1, 2, 3, 8, 9, 10, 11]; an empty list is a node without CPUs."""
    cpus: List[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        match = re.match(r"^(\d+)(?:-(\d+))?$", part.strip())
        if not match:
            raise HostParseError("expected a CPU list like '0-3,8-11', got {!r}".format(text.strip()))
        first = int(match.group(1))
        last = int(match.group(2)) if match.group(2) else first
        if last < first:
            raise HostParseError("backwards CPU range {!r}".format(part))
        cpus.extend(range(first, last + 1))
    return cpus


_MEMINFO_LINE = re.compile(r"^(?:Node\s+\d+\s+)?([A-Za-z0-9_()]+):\s+(\d+)(\s+kB)?\s*$")


def parse_meminfo(text: str) -> Dict[str, int]:
    """/proc/meminfo or a node's meminfo ('Node 0 MemTotal: ... kB') -> {key: value}, kB as bytes."""
    values = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match:
            number = int(match.group(2))
            values[match.group(1)] = number * KIB if match.group(3) else number
    if not values:
        raise HostParseError("no 'Key: value' lines")
    return values


def parse_loadavg(text: str) -> float:
    """'0.52 0.58 0.59 1/467 12345' -> 0.52 (load over the last minute)."""
    fields = text.split()
    try:
        return float(fields[0])
    except (IndexError, ValueError):
        raise HostParseError("expected a load average, got {!r}".format(text.strip()[:40])) from None


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise HostParseError("expected an integer, got {!r}".format(text.strip()[:40])) from None


def parse_link_speed(text: str) -> Optional[float]:
    """'16.0 GT/s PCIe', '8 GT/s', '2.5 GT/s' -> GT/s; 'Unknown' (link down or unknown) -> None."""
    value = text.strip()
    if value.startswith("Unknown"):
        return None
    match = re.match(r"^(\d+(?:\.\d+)?)\s*GT/s\b", value)
    if not match:
        raise HostParseError("expected a link speed like '16.0 GT/s PCIe', got {!r}".format(value[:40]))
    return float(match.group(1))


# ---------------------------------------------------------------------------------------------
# Ascend version files

# Driver, firmware and CANN versions: digits first, then dot-separated parts such as rc2 or T63.
_VERSION_TEXT = re.compile(r"^\d+(?:\.[0-9A-Za-z]+)+$")
# One or more bracketed ranges: "[7.0.0,7.2.99]" or "[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]".
_RANGES_TEXT = re.compile(r"^\[[^\[\]]+\](?:\s*,\s*\[[^\[\]]+\])*$")
_VERSION_CFG_RUNTIME = re.compile(r"^runtime_running_version=\[([^:\]]*):([^\]]+)\]\s*$", re.MULTILINE)


def parse_key_values(text: str) -> Dict[str, str]:
    """'key=value' lines -> {lower-cased key: value}. Keys are lower-cased because driver files
    write 'Version=' and other files 'version='."""
    values = {}
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        values[key.strip().lower()] = value.strip()
    return values


def version_from(values: Dict[str, str], key: str = "version") -> str:
    value = values.get(key)
    if value is None:
        raise HostParseError("no {}= line".format(key))
    if not _VERSION_TEXT.match(value):
        raise HostParseError("{}= holds {!r}, not a version".format(key, value[:40]))
    return value


def ranges_from(values: Dict[str, str], key: str) -> Optional[str]:
    """The raw compatible-range text under `key` (None when the file has no such line)."""
    value = values.get(key)
    if value is None:
        return None
    if not _RANGES_TEXT.match(value):
        raise HostParseError("{}= holds {!r}, not a list of [low,high] ranges".format(key, value[:60]))
    return value


def parse_version_cfg(text: str) -> str:
    """ascend-toolkit/latest/version.cfg -> the CANN version after ':' in runtime_running_version."""
    match = _VERSION_CFG_RUNTIME.search(text)
    if not match:
        raise HostParseError("no runtime_running_version=[<inner>:<cann>] line")
    return version_from({"version": match.group(2).strip()})


def parse_install_info(text: str) -> str:
    """ascend_toolkit_install.info / ascend_nnae_install.info -> the 'version=' value."""
    return version_from(parse_key_values(text))


# Version comparison. Each dot-separated part becomes (rank, number): a plain number n is (1, n)
# and a release candidate rcN (any case) is (0, N), so at one position every rc sorts before every
# release: 23.0.rc3 < 23.0.0 < 23.0.7 and 24.1.rc2 < 24.1.rc2.2 < 24.1.rc3 < 24.1.0. Other parts,
# such as the T63 of test builds, have no known order and make the version uncomparable.
VersionKey = Tuple[Tuple[int, int], ...]
_RELEASE_ZERO = (1, 0)


def parse_version(text: str) -> VersionKey:
    """'24.1.rc2.2' -> ((1, 24), (1, 1), (0, 2), (1, 2))."""
    parts = []
    for part in text.strip().split("."):
        rc = re.match(r"^rc(\d+)$", part, re.IGNORECASE)
        if part.isdigit():
            parts.append((1, int(part)))
        elif rc:
            parts.append((0, int(rc.group(1))))
        else:
            raise HostParseError("cannot compare version {!r} (part {!r})".format(text, part))
    return tuple(parts)


def _leading(key: VersionKey, length: int) -> VersionKey:
    """The first `length` parts of a version, missing parts counted as 0."""
    return key[:length] + (_RELEASE_ZERO,) * (length - len(key))


def _parse_bound(text: str) -> VersionKey:
    # A high bound ending in '.' leaves its last listed part open: "23.0.0." admits every 23.0.x and
    # "24.1." every 24.x. This reading is inferred from real files, where firmware of package 23.0.7
    # lists [23.0.0,23.0.0.] beside driver 23.0.7, and 24.1.rc3 / 25.0.rc1.1 firmware list
    # [24.1,24.1.] / [25.0,25.0.] beside drivers 24.1.rc3 / 25.0.rc1.1.
    text = text.strip()
    if text.endswith("."):
        return parse_version(text[:-1])[:-1]
    return parse_version(text)


def parse_ranges(text: str) -> List[Tuple[VersionKey, VersionKey]]:
    """'[7.0.0,7.2.99],[6.4.0,6.4.99]' -> [(low, high), ...]; '[x]' alone means [x,x]."""
    if not _RANGES_TEXT.match(text.strip()):
        raise HostParseError("not a list of [low,high] ranges: {!r}".format(text))
    ranges = []
    for body in re.findall(r"\[([^\[\]]+)\]", text):
        bounds = body.split(",")
        if len(bounds) > 2:
            raise HostParseError("range [{}] has more than two bounds".format(body))
        ranges.append((parse_version(bounds[0].rstrip(".")), _parse_bound(bounds[-1])))
    return ranges


def version_in_ranges(version: str, ranges: str) -> bool:
    """Whether `version` lies in any of the bracketed ranges.

    Each bound is compared over as many parts as it lists, so [7.0.0,7.2.99] holds 7.1.0.11.220 and
    7.2.99.5; see _parse_bound for bounds ending in '.'. Raises HostParseError when a version or a
    range cannot be compared.
    """
    key = parse_version(version)
    return any(
        _leading(key, len(low)) >= low and _leading(key, len(high)) <= high
        for low, high in parse_ranges(ranges)
    )


def check_versions(host: HostSample) -> Tuple[Optional[bool], str]:
    """Are the installed driver and firmware compatible with each other?

    Both directions are checked: the firmware version against the driver's compatible_version_fw and
    the driver version against the firmware's compatible_version_drv. False when either says no,
    True when at least one says yes and none says no, None when neither can be checked; the text
    says which ranges were used and what could not be checked.
    """
    directions = (
        ("firmware", host.firmware_version, "driver", host.driver_compatible_firmware),
        ("driver", host.driver_version, "firmware", host.firmware_compatible_driver),
    )
    inside, outside, unknown = [], [], []
    for subject, version, lister, ranges in directions:
        if version is None:
            unknown.append("{} version unknown".format(subject))
            continue
        if ranges is None:
            unknown.append("the {} lists no compatible {} versions".format(lister, subject))
            continue
        try:
            holds = version_in_ranges(version, ranges)
        except HostParseError as exc:
            unknown.append(str(exc))
            continue
        verdict = "{} {} is {} the {}'s compatible range {}".format(
            subject, version, "within" if holds else "outside", lister, ranges)
        (inside if holds else outside).append(verdict)
    if outside:
        return False, "; ".join(outside)
    if inside:
        return True, "; ".join(inside + ["not checked: " + reason for reason in unknown])
    return None, "cannot tell: " + "; ".join(unknown)


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
