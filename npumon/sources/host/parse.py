"""Host facts, pure parsing: text of /proc, /sys and the Ascend version files in, values out.

CPU time comes from /proc/stat directly rather than psutil: psutil only reads another procfs through
the process-global psutil.PROCFS_PATH, and the per-CPU counters needed for NUMA nodes are one line each.
"""

import re
from typing import Dict, Iterable, List, NamedTuple, Optional, Tuple

KIB = 1024



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


