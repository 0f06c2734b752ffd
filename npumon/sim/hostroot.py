"""Writes a fake host tree that npumon.sources.host.reader.HostReader reads (used by tests and the simulator).

The tree mirrors a real Atlas host under a root directory: procfs and sysfs files, the Ascend version
files in the formats of real captures, and the /dev entries. Device nodes are plain files with mode
0o660 (0o000 for the spec's inaccessible ones) because creating character devices needs privileges
tests do not have.

CPU time: the exact, fractional jiffies of every CPU are kept in a small JSON file beside the tree
(<root>/.sim/) and /proc/stat is rendered from them rounded to whole jiffies, so many small
advance_cpu() steps add up exactly instead of each losing its fraction of a jiffy.
"""

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

from ..sources.host.reader import MANAGEMENT_DEVICE_FILES, PCI_LINK_FILES

USER_HZ = 100  # jiffies per second in /proc/stat
BOOT_SECONDS = 3600.0  # a fresh tree looks as if it had been up an hour at the spec's CPU ratios
DEVICE_FILE_MODE = 0o660
# A device file npumon's user cannot open (on a real host: left root-owned with mode 0600 after a driver
# reinstall). The tree belongs to whoever writes it, so the simulator takes every permission away, the
# owner's too; root opens it all the same.
INACCESSIBLE_DEVICE_FILE_MODE = 0o000
_SIM_DIR = ".sim"
_CPU_STATE = "cpu_jiffies.json"
_CPU_LOCK = "cpu.lock"


@dataclass
class SimLink:
    bus_id: str  # as npu-smi prints it, e.g. "0000:C1:00.0"
    current_speed: str  # sysfs text, e.g. "16.0 GT/s PCIe", "8 GT/s", "Unknown"
    max_speed: str
    current_width: int
    max_width: int
    numa_node: int = -1  # as sysfs prints it; -1 = unknown
    pci_device_id: Optional[int] = None  # the NPU's PCI device id (vendor 0x19e5) in sysfs; None: no such files


@dataclass
class HostRootSpec:
    hostname: str = "sim-host"
    cpus_per_node: int = 4
    numa_nodes: int = 2
    cpu_busy_ratio: List[float] = field(default_factory=lambda: [0.2, 0.2])  # one per NUMA node, 0..1
    memory_total_bytes: int = 512 * 2**30
    memory_available_bytes: int = 400 * 2**30
    numa_balancing: int = 0
    max_map_count: int = 262144
    driver_version: str = "25.5.1"
    firmware_version: str = "7.7.0.1.231"
    cann_version: str = "8.1.RC1"
    driver_compatible_firmware: str = "[7.0.0,7.7.99]"
    firmware_compatible_driver: str = "[23.0.0,25.5.99]"
    device_count: int = 8
    missing_device_files: List[str] = field(default_factory=list)  # e.g. ["/dev/devmm_svm"]
    inaccessible_device_files: List[str] = field(default_factory=list)  # written with INACCESSIBLE_DEVICE_FILE_MODE
    links: List[SimLink] = field(default_factory=list)


def write_host_root(root: str, spec: HostRootSpec) -> None:
    """Creates or overwrites the fake host tree under `root`.

    Entries an earlier spec wrote and this one does not want (device files, NUMA nodes, PCIe devices)
    are removed. CPU counters carry on from an earlier tree with the same CPU count, as a real host's
    never go backwards; otherwise they start at BOOT_SECONDS of uptime at the spec's ratios.
    """
    _check_spec(spec)
    if os.path.realpath(root) == os.path.realpath("/"):
        raise ValueError("refusing to write a fake host tree over the real root directory")
    _write_proc(root, spec)
    _write_numa(root, spec)
    _write_versions(root, spec)
    _write_device_files(root, spec)
    _write_links(root, spec)
    os.makedirs(os.path.join(root, _SIM_DIR), exist_ok=True)
    with _cpu_lock(root):
        jiffies = _load_cpu_jiffies(root)
        if jiffies is None or len(jiffies) != _cpu_count(spec):
            jiffies = [[0.0, 0.0] for _ in range(_cpu_count(spec))]
            _add_cpu_time(jiffies, spec, BOOT_SECONDS)
        _save_cpu_jiffies(root, jiffies)


def advance_cpu(root: str, spec: HostRootSpec, elapsed_seconds: float) -> None:
    """Adds `elapsed_seconds` of CPU time to <root>/proc/stat, each NUMA node's CPUs busy at
    spec.cpu_busy_ratio. Cheap, and safe when several processes call it at once: the update is done
    under an exclusive lock and files are replaced whole, so readers never see half a file."""
    _check_spec(spec)
    if elapsed_seconds < 0:
        raise ValueError("elapsed_seconds must not be negative, got {}".format(elapsed_seconds))
    with _cpu_lock(root):
        jiffies = _load_cpu_jiffies(root)
        if jiffies is None or len(jiffies) != _cpu_count(spec):
            raise ValueError("{} holds no CPU counters for this spec; call write_host_root first".format(root))
        _add_cpu_time(jiffies, spec, elapsed_seconds)
        _save_cpu_jiffies(root, jiffies)


def _check_spec(spec: HostRootSpec) -> None:
    if spec.numa_nodes < 1 or spec.cpus_per_node < 1 or spec.device_count < 0:
        raise ValueError("numa_nodes and cpus_per_node must be at least 1, device_count at least 0")
    if len(spec.cpu_busy_ratio) != spec.numa_nodes:
        raise ValueError("cpu_busy_ratio needs one value per NUMA node ({}), got {}".format(
            spec.numa_nodes, len(spec.cpu_busy_ratio)))
    if any(not 0.0 <= ratio <= 1.0 for ratio in spec.cpu_busy_ratio):
        raise ValueError("cpu_busy_ratio values must be within 0..1, got {}".format(spec.cpu_busy_ratio))


def _cpu_count(spec: HostRootSpec) -> int:
    return spec.numa_nodes * spec.cpus_per_node


def _node_cpus(spec: HostRootSpec, node: int) -> range:
    return range(node * spec.cpus_per_node, (node + 1) * spec.cpus_per_node)


def _write_text(path: str, text: str, mode: int = 0o644) -> None:
    """Replaces `path` whole (temp file + rename) so a concurrent reader sees the old or the new file."""
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    handle, temp_path = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as temp:
            temp.write(text)
        os.chmod(temp_path, mode)
        os.replace(temp_path, path)
    except BaseException:
        os.unlink(temp_path)
        raise


def _remove_entries(directory: str, names: List[str], files: List[str]) -> None:
    """Removes the given `files` inside each named subdirectory, then the subdirectory if it is empty."""
    for name in names:
        subdirectory = os.path.join(directory, name)
        for file_name in files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(subdirectory, file_name))
        with contextlib.suppress(OSError):
            os.rmdir(subdirectory)


def _listdir(directory: str) -> List[str]:
    try:
        return os.listdir(directory)
    except FileNotFoundError:
        return []


def _kib(number_of_bytes: int) -> int:
    return number_of_bytes // 1024


def _write_proc(root: str, spec: HostRootSpec) -> None:
    proc = os.path.join(root, "proc")
    _write_text(os.path.join(proc, "sys", "kernel", "hostname"), spec.hostname + "\n")
    _write_text(os.path.join(proc, "sys", "kernel", "numa_balancing"), "{}\n".format(spec.numa_balancing))
    _write_text(os.path.join(proc, "sys", "vm", "max_map_count"), "{}\n".format(spec.max_map_count))
    meminfo = [("MemTotal", spec.memory_total_bytes), ("MemFree", spec.memory_available_bytes),
               ("MemAvailable", spec.memory_available_bytes), ("Buffers", 0), ("Cached", 0)]
    _write_text(os.path.join(proc, "meminfo"),
                "".join("{:<16}{:>8} kB\n".format(key + ":", _kib(value)) for key, value in meminfo))
    # Runnable tasks about equal to the busy CPUs, as on a host without a run queue backlog.
    load = sum(ratio * spec.cpus_per_node for ratio in spec.cpu_busy_ratio)
    _write_text(os.path.join(proc, "loadavg"), "{0:.2f} {0:.2f} {0:.2f} 1/200 4242\n".format(load))


def _write_numa(root: str, spec: HostRootSpec) -> None:
    nodes_dir = os.path.join(root, "sys", "devices", "system", "node")
    stale = [name for name in _listdir(nodes_dir)
             if re.match(r"^node(\d+)$", name) and int(name[4:]) >= spec.numa_nodes]
    _remove_entries(nodes_dir, stale, ["cpulist", "meminfo"])
    for node in range(spec.numa_nodes):
        node_dir = os.path.join(nodes_dir, "node{}".format(node))
        cpus = _node_cpus(spec, node)
        _write_text(os.path.join(node_dir, "cpulist"), "{}-{}\n".format(cpus[0], cpus[-1]))
        total = spec.memory_total_bytes // spec.numa_nodes
        free = spec.memory_available_bytes // spec.numa_nodes
        lines = [("MemTotal", total), ("MemFree", free), ("MemUsed", total - free)]
        _write_text(os.path.join(node_dir, "meminfo"), "".join(
            "Node {} {:<15} {:>8} kB\n".format(node, key + ":", _kib(value)) for key, value in lines))


def _write_versions(root: str, spec: HostRootSpec) -> None:
    # Same keys and order as the real version-files captures; lines npumon does not read and
    # whose values the simulator cannot know (Innerversion, compatible_version) are left out.
    ascend = os.path.join(root, "usr", "local", "Ascend")
    _write_text(os.path.join(ascend, "driver", "version.info"), "".join(line + "\n" for line in (
        "Version=" + spec.driver_version,
        "ascendhal_version=7.35.23",
        "aicpu_version=1.0",
        "tdt_version=1.0",
        "log_version=1.0",
        "prof_version=2.0",
        "dvppkernels_version=1.1",
        "tsfw_version=1.0",
        "compatible_version_fw=" + spec.driver_compatible_firmware,
        "package_version=" + spec.driver_version,
    )))
    _write_text(os.path.join(ascend, "firmware", "version.info"), "".join(line + "\n" for line in (
        "Version=" + spec.firmware_version,
        "firmware_version=1.0",
        "package_version=" + spec.driver_version,  # driver and firmware come from one package here
        "compatible_version_drv=" + spec.firmware_compatible_driver,
    )))
    # version.cfg pairs an inner build number with the CANN version: [<inner>:<cann>]. The simulator
    # has no inner build number and repeats the CANN version there; readers use the part after ':'.
    components = ("runtime", "compiler", "hccl", "opp", "toolkit")
    _write_text(os.path.join(ascend, "ascend-toolkit", "latest", "version.cfg"), "# version: 1.0\n" + "".join(
        "{}_{}_version=[{}:{}]\n".format(component, kind, spec.cann_version, spec.cann_version)
        for kind in ("running", "upgrade", "installed") for component in components))


def _write_device_files(root: str, spec: HostRootSpec) -> None:
    dev = os.path.join(root, "dev")
    wanted = ["/dev/davinci{}".format(number) for number in range(spec.device_count)] + list(MANAGEMENT_DEVICE_FILES)
    wanted = [path for path in wanted if path not in spec.missing_device_files]
    managed = re.compile(r"^(davinci\d+|{})$".format("|".join(os.path.basename(p) for p in MANAGEMENT_DEVICE_FILES)))
    for name in _listdir(dev):
        if managed.match(name) and "/dev/" + name not in wanted:
            os.unlink(os.path.join(dev, name))
    os.makedirs(dev, exist_ok=True)
    for host_path in wanted:
        path = os.path.join(dev, os.path.basename(host_path))
        if not os.path.exists(path):  # opening an existing one would fail if an earlier spec closed it
            with open(path, "a"):
                pass
        inaccessible = host_path in spec.inaccessible_device_files
        os.chmod(path, INACCESSIBLE_DEVICE_FILE_MODE if inaccessible else DEVICE_FILE_MODE)


def _write_links(root: str, spec: HostRootSpec) -> None:
    devices = os.path.join(root, "sys", "bus", "pci", "devices")
    addresses = {link.bus_id.lower(): link for link in spec.links}
    _remove_entries(devices, [name for name in _listdir(devices) if name not in addresses],
                    list(PCI_LINK_FILES) + ["numa_node", "vendor", "device"])
    for address, link in addresses.items():
        values = (link.current_speed, link.max_speed, link.current_width, link.max_width)
        for name, value in zip(PCI_LINK_FILES, values):
            _write_text(os.path.join(devices, address, name), "{}\n".format(value))
        _write_text(os.path.join(devices, address, "numa_node"), "{}\n".format(link.numa_node))
        if link.pci_device_id is not None:  # sysfs prints both ids as 0x%04x
            _write_text(os.path.join(devices, address, "vendor"), "0x19e5\n")
            _write_text(os.path.join(devices, address, "device"), "0x{:04x}\n".format(link.pci_device_id))


@contextlib.contextmanager
def _cpu_lock(root: str) -> Iterator[None]:
    # flock locks belong to an open file description, so they exclude other processes and other
    # threads of this process alike; closing the file releases the lock.
    path = os.path.join(root, _SIM_DIR, _CPU_LOCK)
    try:
        handle = open(path, "a")
    except FileNotFoundError:
        raise ValueError("{} is not a host tree; call write_host_root first".format(root)) from None
    with handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        yield


def _load_cpu_jiffies(root: str) -> Optional[List[List[float]]]:
    """Per CPU [busy, idle] jiffies as floats, or None for a tree without (valid) counters."""
    try:
        with open(os.path.join(root, _SIM_DIR, _CPU_STATE), encoding="utf-8") as handle:
            jiffies = json.load(handle)
    except (FileNotFoundError, ValueError):
        return None
    return jiffies if isinstance(jiffies, list) else None


def _add_cpu_time(jiffies: List[List[float]], spec: HostRootSpec, seconds: float) -> None:
    for node, ratio in enumerate(spec.cpu_busy_ratio):
        for cpu in _node_cpus(spec, node):
            jiffies[cpu][0] += seconds * USER_HZ * ratio
            jiffies[cpu][1] += seconds * USER_HZ * (1.0 - ratio)


def _save_cpu_jiffies(root: str, jiffies: List[List[float]]) -> None:
    _write_text(os.path.join(root, _SIM_DIR, _CPU_STATE), json.dumps(jiffies))
    _write_text(os.path.join(root, "proc", "stat"), _render_proc_stat(jiffies))


def _render_proc_stat(jiffies: List[List[float]]) -> str:
    # Columns: user nice system idle iowait irq softirq steal guest guest_nice; busy time is all
    # "user" and the aggregate line is the sum of the CPU lines, as the kernel prints it.
    per_cpu = [(round(busy), round(idle)) for busy, idle in jiffies]
    total_busy = sum(busy for busy, _ in per_cpu)
    total_idle = sum(idle for _, idle in per_cpu)
    lines = ["cpu  {} 0 0 {} 0 0 0 0 0 0".format(total_busy, total_idle)]
    lines.extend("cpu{} {} 0 0 {} 0 0 0 0 0 0".format(cpu, busy, idle) for cpu, (busy, idle) in enumerate(per_cpu))
    lines.extend(("ctxt 0", "btime 1700000000", "processes 1", "procs_running 1", "procs_blocked 0"))
    return "\n".join(lines) + "\n"


def write_process_environments(root: str, environments: Dict[int, Dict[str, str]]) -> None:
    """<root>/proc/<pid>/environ for each process, NUL-separated NAME=value as the kernel shows it; the process
    directories of an earlier scenario's processes are removed."""
    proc = os.path.join(root, "proc")
    for name in os.listdir(proc) if os.path.isdir(proc) else ():
        if name.isdigit() and int(name) not in environments:
            shutil.rmtree(os.path.join(proc, name), ignore_errors=True)
    for pid, variables in environments.items():
        _write_text(os.path.join(root, "proc", str(pid), "environ"),
                    "".join("{}={}\0".format(name, value) for name, value in sorted(variables.items())))
