"""Host facts source (npumon.sources.host) and the fake host trees (npumon.sim.hostroot)."""

import dataclasses
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Dict, List

import pytest

from npumon.model import DeviceFile, HostSample
from npumon.sim.hostroot import HostRootSpec, SimLink, advance_cpu, write_host_root
from npumon.sim.scenario import load_scenario
from npumon.rules.compat import check_versions, parse_version, version_in_ranges
from npumon.sources.host.parse import HostParseError, parse_cpulist
from npumon.sources.host.reader import HostReader
from paths import FIXTURES

FIXTURES = Path(FIXTURES)
GIB = 2**30


def write(root: Path, host_path: str, content) -> Path:
    path = root / host_path.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


def write_required_proc(root: Path) -> None:
    """The files every Linux host has; with them a bare tree collects without errors."""
    write(root, "/proc/stat", "cpu  10 0 0 90 0 0 0 0 0 0\ncpu0 10 0 0 90 0 0 0 0 0 0\n")
    write(root, "/proc/meminfo", "MemTotal:       1000 kB\nMemAvailable:    600 kB\n")
    write(root, "/proc/loadavg", "0.50 0.40 0.30 1/100 123\n")
    write(root, "/proc/sys/vm/max_map_count", "65530\n")


def capture_body(name: str) -> List[str]:
    """The captured output of a reference file: the lines after its '# ---' header."""
    lines = (FIXTURES / name).read_text().splitlines()
    return lines[lines.index("# ---") + 1:]


def capture_files(name: str) -> Dict[str, str]:
    """The files a version-files capture shows: after each 'cat <path>' line, up to the first blank line."""
    files: Dict[str, str] = {}
    current = None
    for line in capture_body(name):
        command = re.match(r"^(?:# )?cat (/\S+)$", line)
        if command:
            current = command.group(1)
            files[current] = ""
        elif not line.strip():
            current = None
        elif current is not None:
            files[current] += line + "\n"
    return files


def tree_from_capture(root: Path, name: str) -> None:
    for host_path, content in capture_files(name).items():
        write(root, host_path, content)


# --- the simulator's tree ---------------------------------------------------------------------


def test_sim_tree_yields_every_fact(tmp_path):
    spec = HostRootSpec(
        hostname="atlas-07", cpus_per_node=3, numa_nodes=2, cpu_busy_ratio=[0.25, 0.75],
        memory_total_bytes=64 * GIB, memory_available_bytes=48 * GIB, numa_balancing=1,
        max_map_count=1048576, driver_version="24.1.rc3", firmware_version="7.5.0.1.129",
        cann_version="8.0.RC3", driver_compatible_firmware="[7.0.0,7.5.99]",
        firmware_compatible_driver="[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]", device_count=4,
        missing_device_files=["/dev/devmm_svm", "/dev/hisi_hdc"],
        links=[SimLink("0000:C1:00.0", "16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16),
               SimLink("0000:01:00.0", "8.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16)],
    )
    write_host_root(str(tmp_path), spec)
    result = HostReader(str(tmp_path)).collect(["0000:C1:00.0", "0000:01:00.0"])
    host = result.sample

    assert result.errors == []
    assert host.hostname == "atlas-07"
    assert host.cpu_count == 6
    assert host.cpu_ratio == pytest.approx(0.5, abs=0.01)  # first call: since boot
    assert [(node.node, node.cpus) for node in host.numa_nodes] == [(0, [0, 1, 2]), (1, [3, 4, 5])]
    assert [node.cpu_ratio for node in host.numa_nodes] == [pytest.approx(0.25, abs=0.01),
                                                              pytest.approx(0.75, abs=0.01)]
    assert [node.memory_total_bytes for node in host.numa_nodes] == [32 * GIB, 32 * GIB]
    assert [node.memory_free_bytes for node in host.numa_nodes] == [24 * GIB, 24 * GIB]
    assert host.memory_total_bytes == 64 * GIB
    assert host.memory_available_bytes == 48 * GIB
    assert host.load1 == pytest.approx(0.25 * 3 + 0.75 * 3)
    assert host.numa_balancing == 1
    assert host.max_map_count == 1048576
    assert host.driver_version == "24.1.rc3"
    assert host.firmware_version == "7.5.0.1.129"
    assert host.cann_version == "8.0.RC3"
    assert host.driver_compatible_firmware == "[7.0.0,7.5.99]"
    assert host.firmware_compatible_driver == "[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]"
    assert check_versions(host)[0] is True
    assert [(f.path, f.exists) for f in host.device_files] == [
        ("/dev/davinci0", True), ("/dev/davinci1", True), ("/dev/davinci2", True), ("/dev/davinci3", True),
        ("/dev/davinci_manager", True), ("/dev/devmm_svm", False), ("/dev/hisi_hdc", False)]
    present = [f for f in host.device_files if f.exists]
    assert {f.mode for f in present} == {"-rw-rw----"}  # plain files standing in for crw-rw----
    assert set(result.pcie) == {"0000:C1:00.0", "0000:01:00.0"}
    assert result.pcie["0000:C1:00.0"].degraded is False
    assert dataclasses.astuple(result.pcie["0000:01:00.0"]) == (8.0, 16.0, 16, 16)
    assert result.pcie["0000:01:00.0"].degraded is True


def test_cpu_deltas_follow_the_spec_after_advance(tmp_path):
    spec = HostRootSpec(cpus_per_node=4, numa_nodes=2, cpu_busy_ratio=[0.2, 0.2])
    write_host_root(str(tmp_path), spec)
    collector = HostReader(str(tmp_path))
    collector.collect()
    # Ratios far from the boot-time 0.2, so a since-boot answer would fail the asserts.
    spec.cpu_busy_ratio = [0.9, 0.05]
    advance_cpu(str(tmp_path), spec, 30.0)
    host = collector.collect().sample
    assert host.numa_nodes[0].cpu_ratio == pytest.approx(0.9, abs=0.01)
    assert host.numa_nodes[1].cpu_ratio == pytest.approx(0.05, abs=0.01)
    assert host.cpu_ratio == pytest.approx((0.9 + 0.05) / 2, abs=0.01)


def test_many_small_advances_add_up(tmp_path):
    spec = HostRootSpec(numa_nodes=1, cpus_per_node=2, cpu_busy_ratio=[0.3])
    write_host_root(str(tmp_path), spec)
    collector = HostReader(str(tmp_path))
    collector.collect()
    spec.cpu_busy_ratio = [0.7]
    for _ in range(300):  # 3 ms steps: each well under one jiffy (10 ms)
        advance_cpu(str(tmp_path), spec, 0.003)
    host = collector.collect().sample
    assert host.cpu_ratio == pytest.approx(0.7, abs=0.01)


def proc_stat_totals(root: Path) -> List[int]:
    lines = (root / "proc" / "stat").read_text().splitlines()
    return [sum(int(value) for value in line.split()[1:]) for line in lines if line.startswith("cpu")]


def test_concurrent_advances_lose_no_time(tmp_path):
    spec = HostRootSpec(numa_nodes=2, cpus_per_node=2, cpu_busy_ratio=[0.5, 0.1])
    write_host_root(str(tmp_path), spec)
    before = proc_stat_totals(tmp_path)

    def advance_many():
        for _ in range(40):
            advance_cpu(str(tmp_path), spec, 0.5)

    workers = [threading.Thread(target=advance_many) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    after = proc_stat_totals(tmp_path)
    # 4 workers x 40 steps x 0.5 s = 80 s = 8000 jiffies per CPU, four CPUs in the aggregate line
    assert [now - then for now, then in zip(after, before)] == [32000, 8000, 8000, 8000, 8000]


def test_rewrite_removes_what_the_new_spec_does_not_want(tmp_path):
    root = str(tmp_path)
    write_host_root(root, HostRootSpec(numa_nodes=3, cpu_busy_ratio=[0.1, 0.2, 0.3], device_count=8,
                                       links=[SimLink("0000:C1:00.0", "16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16),
                                              SimLink("0000:C2:00.0", "16.0 GT/s PCIe", "16.0 GT/s PCIe", 16, 16)]))
    write_host_root(root, HostRootSpec(numa_nodes=1, cpu_busy_ratio=[0.5], device_count=2,
                                       missing_device_files=["/dev/davinci_manager"],
                                       links=[SimLink("0000:C2:00.0", "8 GT/s", "16.0 GT/s PCIe", 16, 16)]))
    result = HostReader(root).collect(["0000:C1:00.0", "0000:C2:00.0"])
    host = result.sample
    assert result.errors == []
    assert [node.node for node in host.numa_nodes] == [0]
    assert host.cpu_count == 4
    assert host.cpu_ratio == pytest.approx(0.5, abs=0.01)  # new CPU count: counters started afresh
    assert [(f.path, f.exists) for f in host.device_files] == [
        ("/dev/davinci0", True), ("/dev/davinci1", True), ("/dev/davinci_manager", False),
        ("/dev/devmm_svm", True), ("/dev/hisi_hdc", True)]
    assert list(result.pcie) == ["0000:C2:00.0"]
    assert result.pcie["0000:C2:00.0"].current_speed_gts == 8.0


def test_rewrite_with_the_same_cpus_keeps_counters_moving_forward(tmp_path):
    spec = HostRootSpec()
    write_host_root(str(tmp_path), spec)
    advance_cpu(str(tmp_path), spec, 100.0)
    before = proc_stat_totals(tmp_path)
    write_host_root(str(tmp_path), spec)
    assert proc_stat_totals(tmp_path) == before


def test_hostroot_rejects_bad_specs_and_missing_trees(tmp_path):
    with pytest.raises(ValueError, match="one value per NUMA node"):
        write_host_root(str(tmp_path), HostRootSpec(numa_nodes=2, cpu_busy_ratio=[0.1]))
    with pytest.raises(ValueError, match="within 0..1"):
        write_host_root(str(tmp_path), HostRootSpec(cpu_busy_ratio=[0.1, 1.5]))
    with pytest.raises(ValueError, match="write_host_root first"):
        advance_cpu(str(tmp_path), HostRootSpec(), 1.0)
    write_host_root(str(tmp_path), HostRootSpec())
    with pytest.raises(ValueError, match="write_host_root first"):
        advance_cpu(str(tmp_path), HostRootSpec(numa_nodes=1, cpu_busy_ratio=[0.1]), 1.0)


# --- CPU and NUMA from hand-written files -------------------------------------------------------

# cpu3 differs between the readings only in steal time, which counts as busy; guest (9th column)
# is already inside user and must not count twice; iowait counts as idle.
PROC_STAT_1 = """\
cpu  400 0 100 1400 100 0 0 0 30 0
cpu0 100 0 0 400 0 0 0 0 0 0
cpu1 100 0 100 300 0 0 0 0 30 0
cpu2 100 0 0 300 100 0 0 0 0 0
cpu3 100 0 0 400 0 0 0 0 0 0
intr 12345 0 0
ctxt 999
btime 1700000000
"""
PROC_STAT_2 = """\
cpu  540 0 100 1510 150 0 0 100 80 0
cpu0 190 0 0 410 0 0 0 0 0 0
cpu1 100 0 100 400 0 0 0 0 80 0
cpu2 150 0 0 300 150 0 0 0 0 0
cpu3 100 0 0 400 0 0 0 100 0 0
intr 12399 0 0
"""


def test_cpu_ratios_from_hand_written_proc_stat(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/proc/stat", PROC_STAT_1)
    write(tmp_path, "/sys/devices/system/node/node0/cpulist", "0,2\n")
    write(tmp_path, "/sys/devices/system/node/node1/cpulist", "1,3\n")
    write(tmp_path, "/sys/devices/system/node/node1/meminfo",
          "Node 1 MemTotal:       65861848 kB\nNode 1 MemFree:        60000000 kB\nNode 1 HugePages_Total:     0\n")
    collector = HostReader(str(tmp_path))
    first = collector.collect()
    assert first.errors == []
    # since boot: host 500 busy / 2000; node0 (cpu0+cpu2) 200 / 1000; node1 (cpu1+cpu3) 300 / 1000
    assert first.sample.cpu_ratio == pytest.approx(0.25)
    assert [node.cpu_ratio for node in first.sample.numa_nodes] == [pytest.approx(0.2), pytest.approx(0.3)]
    assert first.sample.cpu_count == 4
    node0, node1 = first.sample.numa_nodes
    assert (node0.memory_total_bytes, node0.memory_free_bytes) == (None, None)  # node0 has no meminfo
    assert (node1.memory_total_bytes, node1.memory_free_bytes) == (65861848 * 1024, 60000000 * 1024)

    write(tmp_path, "/proc/stat", PROC_STAT_2)
    second = collector.collect().sample
    # deltas: host 240 busy / 400; node0 (90 + 50) / 200; node1 (0 + 100) / 200
    assert second.cpu_ratio == pytest.approx(0.6)
    assert [node.cpu_ratio for node in second.numa_nodes] == [pytest.approx(0.7), pytest.approx(0.5)]


def test_cpu_counters_that_went_backwards_give_the_since_boot_ratio(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/proc/stat", PROC_STAT_2)
    collector = HostReader(str(tmp_path))
    collector.collect()
    write(tmp_path, "/proc/stat", PROC_STAT_1)
    assert collector.collect().sample.cpu_ratio == pytest.approx(0.25)


def test_a_failed_proc_stat_read_keeps_the_earlier_counters(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/proc/stat", PROC_STAT_1)
    collector = HostReader(str(tmp_path))
    collector.collect()
    write(tmp_path, "/proc/stat", "cpu garbage\n")
    broken = collector.collect()
    assert broken.sample.cpu_ratio is None
    assert len(broken.errors) == 1 and "proc/stat" in broken.errors[0]
    write(tmp_path, "/proc/stat", PROC_STAT_2)
    assert collector.collect().sample.cpu_ratio == pytest.approx(0.6)


def test_parse_cpulist():
    assert parse_cpulist("0-3,8-11\n") == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parse_cpulist("5\n") == [5]
    assert parse_cpulist("\n") == []
    for garbage in ("zero-three", "3-1", "0-3;4"):
        with pytest.raises(HostParseError):
            parse_cpulist(garbage)


# --- PCIe links ---------------------------------------------------------------------------------


def write_link(root: Path, address: str, current_speed: str, max_speed: str, current_width: str,
               max_width: str) -> None:
    for name, value in (("current_link_speed", current_speed), ("max_link_speed", max_speed),
                        ("current_link_width", current_width), ("max_link_width", max_width)):
        write(root, "/sys/bus/pci/devices/{}/{}".format(address, name), value + "\n")


@pytest.mark.parametrize("files, link, degraded", [
    (("16.0 GT/s PCIe", "16.0 GT/s PCIe", "16", "16"), (16.0, 16.0, 16, 16), False),
    (("8.0 GT/s PCIe", "16.0 GT/s PCIe", "16", "16"), (8.0, 16.0, 16, 16), True),
    (("16.0 GT/s PCIe", "16.0 GT/s PCIe", "8", "16"), (16.0, 16.0, 8, 16), True),
    (("8 GT/s", "8 GT/s", "16", "16"), (8.0, 8.0, 16, 16), False),  # older kernels
    (("2.5 GT/s", "8 GT/s", "16", "16"), (2.5, 8.0, 16, 16), True),
    (("Unknown", "16.0 GT/s PCIe", "0", "16"), (None, 16.0, 0, 16), True),  # link down
    (("Unknown", "Unknown", "16", "16"), (None, None, 16, 16), False),
])
def test_pcie_link(tmp_path, files, link, degraded):
    write_required_proc(tmp_path)
    write_link(tmp_path, "0000:c1:00.0", *files)
    result = HostReader(str(tmp_path)).collect(["0000:C1:00.0"])
    assert result.errors == []
    assert list(result.pcie) == ["0000:C1:00.0"]  # keyed as npu-smi prints it
    assert dataclasses.astuple(result.pcie["0000:C1:00.0"]) == link
    assert result.pcie["0000:C1:00.0"].degraded is degraded


def test_pcie_missing_and_broken_entries(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/sys/bus/pci/devices/0000:c3:00.0/current_link_speed", "fast\n")
    write(tmp_path, "/sys/bus/pci/devices/0000:c3:00.0/max_link_speed", "16.0 GT/s PCIe\n")
    write(tmp_path, "/sys/bus/pci/devices/0000:c3:00.0/current_link_width", "16\n")
    result = HostReader(str(tmp_path)).collect(["0000:C2:00.0", "NA", "../../etc", "0000:C3:00.0"])
    # C2 has no sysfs entry (as in containers): absent, not an error. C3 lacks max_link_width: None.
    assert list(result.pcie) == ["0000:C3:00.0"]
    assert dataclasses.astuple(result.pcie["0000:C3:00.0"]) == (None, 16.0, 16, None)
    assert len(result.errors) == 2
    assert "'../../etc': not a PCI address" in result.errors[0]
    assert "0000:c3:00.0/current_link_speed" in result.errors[1] and "'fast'" in result.errors[1]


# --- missing, unreadable and garbage files ------------------------------------------------------


def test_empty_root_reports_only_the_required_facts(tmp_path):
    result = HostReader(str(tmp_path)).collect(["0000:C1:00.0"])
    host = result.sample
    assert sorted(result.errors) == sorted("{}: missing".format(tmp_path / path) for path in (
        "proc/stat", "proc/meminfo", "proc/loadavg", "proc/sys/vm/max_map_count"))
    assert host.hostname == socket.gethostname()
    assert (host.cpu_ratio, host.cpu_count, host.load1, host.memory_total_bytes) == (None, None, None, None)
    assert host.numa_nodes == [] and host.numa_balancing is None and host.max_map_count is None
    assert (host.driver_version, host.firmware_version, host.cann_version) == (None, None, None)
    assert [(f.path, f.exists, f.accessible) for f in host.device_files] == [
        ("/dev/davinci_manager", False, False), ("/dev/devmm_svm", False, False), ("/dev/hisi_hdc", False, False)]
    assert result.pcie == {}


def test_unreadable_and_garbage_proc_files_become_errors(tmp_path):
    (tmp_path / "proc" / "stat").mkdir(parents=True)  # reading a directory fails even for root
    write(tmp_path, "/proc/meminfo", b"\x00\xff\xfe\x80 not meminfo\n")
    write(tmp_path, "/proc/loadavg", "high\n")
    write(tmp_path, "/proc/sys/vm/max_map_count", "lots\n")
    write(tmp_path, "/proc/sys/kernel/numa_balancing", "\n")
    write(tmp_path, "/sys/devices/system/node/node0/cpulist", "zero-three\n")
    write(tmp_path, "/sys/devices/system/node/node0/meminfo", "nothing useful\n")
    (tmp_path / "sys/devices/system/node/node1").mkdir()  # a node dir without its cpulist
    write(tmp_path, "/proc/sys/kernel/hostname", "  \n")
    result = HostReader(str(tmp_path)).collect()
    failing = sorted(re.sub(r":.*", "", error)[len(str(tmp_path)):] for error in result.errors)
    assert failing == sorted([
        "/proc/stat", "/proc/meminfo", "/proc/loadavg", "/proc/sys/vm/max_map_count",
        "/proc/sys/kernel/numa_balancing", "/sys/devices/system/node/node0/cpulist",
        "/sys/devices/system/node/node0/meminfo", "/sys/devices/system/node/node1/cpulist"])
    assert "cannot read" in next(e for e in result.errors if "/proc/stat" in e)
    assert result.sample.hostname == socket.gethostname()
    assert [(node.node, node.cpus, node.cpu_ratio) for node in result.sample.numa_nodes] == [
        (0, [], None), (1, [], None)]


def test_meminfo_without_memtotal_is_an_error(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/proc/meminfo", "MemFree:  100 kB\n")
    result = HostReader(str(tmp_path)).collect()
    assert result.errors == ["{}: no MemTotal line".format(tmp_path / "proc" / "meminfo")]
    assert (result.sample.memory_total_bytes, result.sample.memory_available_bytes) == (None, None)


def test_garbage_version_files_become_errors(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/usr/local/Ascend/driver/version.info", b"\x7fELF\x02\x01\x01\x00\xff\xfe\n")
    write(tmp_path, "/usr/local/Ascend/firmware/version.info",
          "Version=7.1.0.11.220\ncompatible_version_drv=23.0.0 to 23.0.9\n")
    write(tmp_path, "/usr/local/Ascend/ascend-toolkit/latest/version.cfg", "runtime_running_version=8.0.0\n")
    write(tmp_path, "/usr/local/Ascend/nnae/latest/ascend_nnae_install.info", "version=#!?\n")
    result = HostReader(str(tmp_path)).collect()
    host = result.sample
    assert host.driver_version is None and host.driver_compatible_firmware is None
    assert host.firmware_version == "7.1.0.11.220"  # a bad range line does not cost the version
    assert host.firmware_compatible_driver is None
    assert host.cann_version is None
    assert len(result.errors) == 4
    driver, firmware, version_cfg, nnae = result.errors
    assert "driver/version.info: no version= line" in driver
    assert "firmware/version.info: compatible_version_drv= holds '23.0.0 to 23.0.9'" in firmware
    assert "version.cfg: no runtime_running_version" in version_cfg
    assert "ascend_nnae_install.info: version= holds '#!?', not a version" in nnae


# --- version files of real captures -------------------------------------------------------------


def test_versions_from_the_driver_firmware_toolkit_nnae_capture(tmp_path):
    write_required_proc(tmp_path)
    tree_from_capture(tmp_path, "version-files_driver-firmware-toolkit-nnae_v23.0.7.txt")
    result = HostReader(str(tmp_path)).collect()
    host = result.sample
    assert result.errors == []
    assert host.driver_version == "23.0.7"
    assert host.driver_compatible_firmware == "[7.0.0,7.1.99]"
    assert host.firmware_version == "7.1.0.11.220"
    assert host.firmware_compatible_driver == "[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]"
    assert host.cann_version == "7.0.T10"  # the toolkit's install.info wins over nnae
    assert check_versions(host) == (True, (
        "firmware 7.1.0.11.220 is within the driver's compatible range [7.0.0,7.1.99]; "
        "driver 23.0.7 is within the firmware's compatible range [23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]"))

    shutil.rmtree(str(tmp_path / "usr/local/Ascend/ascend-toolkit"))
    assert HostReader(str(tmp_path)).collect().sample.cann_version == "8.0.RC3"  # from nnae


def test_versions_from_the_cann_version_cfg_capture(tmp_path):
    write_required_proc(tmp_path)
    tree_from_capture(tmp_path, "version-files_cann-version.cfg_driver-24.1.rc2.2_mindie.txt")
    result = HostReader(str(tmp_path)).collect()
    host = result.sample
    assert result.errors == []
    assert host.cann_version == "8.0.T63"
    assert host.driver_version == "24.1.rc2.2"
    assert host.driver_compatible_firmware == "[7.0.0,7.2.99]"
    assert (host.firmware_version, host.firmware_compatible_driver) == (None, None)  # not captured
    assert check_versions(host) == (None, "cannot tell: firmware version unknown; "
                                          "the firmware lists no compatible driver versions")


def test_cann_new_layout_and_a_custom_ascend_dir(tmp_path):
    write_required_proc(tmp_path)
    write(tmp_path, "/opt/Ascend/cann/aarch64-linux/ascend_toolkit_install.info",
          "package_name=Ascend-cann-toolkit\nversion=8.5.0\ninnerversion=V100R001C25SPC001B212\n")
    assert HostReader(str(tmp_path)).collect().sample.cann_version is None
    result = HostReader(str(tmp_path), ascend_dir="/opt/Ascend").collect()
    assert result.errors == []
    assert result.sample.cann_version == "8.5.0"


# --- version comparison -------------------------------------------------------------------------


def test_version_order_puts_release_candidates_before_releases():
    ordered = ["23.0.rc2", "23.0.rc3", "23.0.0", "23.0.7", "24.1.rc2", "24.1.rc2.2", "24.1.RC3", "24.1.0",
               "25.5.1"]
    assert sorted(ordered, key=parse_version) == ordered
    with pytest.raises(HostParseError, match="T63"):
        parse_version("8.0.T63")


@pytest.mark.parametrize("version, ranges, inside", [
    ("7.1.0.11.220", "[7.0.0,7.2.99]", True),
    ("7.2.99.5", "[7.0.0,7.2.99]", True),
    ("7.3.0.1.1", "[7.0.0,7.2.99]", False),
    ("6.4.2.1.1", "[6.4.0,6.4.99],[7.0.0,7.7.99]", True),
    ("6.3.0", "[6.4.0,6.4.99],[7.0.0,7.7.99]", False),
    ("23.0.rc3.1", "[23.0.rc3,23.0.rc3.]", True),
    ("23.0.rc2", "[23.0.rc3,23.0.rc3.]", False),
    ("23.0.7", "[23.0.0,23.0.0.]", True),
    ("23.1.0", "[23.0.0,23.0.0.]", False),
    ("24.1.rc3", "[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]", True),
    ("22.0.4", "[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.]", False),
    ("25.5.1", "[25.5.1]", True),
    ("23.0.5", "[23.0.0.]", True),
])
def test_version_in_ranges(version, ranges, inside):
    assert version_in_ranges(version, ranges) is inside


@pytest.mark.parametrize("host, verdict, words", [
    # driver/firmware pair of one 25.0.rc1.1 package, from a public environment dump
    (HostSample(driver_version="25.0.rc1.1", driver_compatible_firmware="[7.0.0,7.7.99]",
                firmware_version="7.7.0.1.231",
                firmware_compatible_driver="[23.0.0,23.0.0.],[24.0,24.0.],[24.1,24.1.],[25.0,25.0.]"),
     True, ["within the driver's", "within the firmware's"]),
    (HostSample(driver_version="25.5.1", driver_compatible_firmware="[7.0.0,7.7.99]",
                firmware_version="7.8.0.1.100", firmware_compatible_driver="[23.0.0,25.5.99]"),
     False, ["firmware 7.8.0.1.100 is outside the driver's compatible range [7.0.0,7.7.99]"]),
    (HostSample(driver_version="23.0.rc2", driver_compatible_firmware="[7.0.0,7.1.99]",
                firmware_version="7.1.0.11.220", firmware_compatible_driver="[23.0.rc3,23.0.rc3.],[23.0.0,23.0.0.]"),
     False, ["driver 23.0.rc2 is outside the firmware's"]),
    (HostSample(driver_version="25.5.1", firmware_version="7.7.0.1.231", firmware_compatible_driver="[23.0.0,25.5.99]"),
     True, ["driver 25.5.1 is within", "not checked: the driver lists no compatible firmware versions"]),
    (HostSample(driver_version="25.5.1", driver_compatible_firmware="[7.0.0,7.7.99]"),
     None, ["firmware version unknown", "the firmware lists no compatible driver versions"]),
    (HostSample(driver_version="8.0.T63", firmware_version="7.7.0.1.231",
                firmware_compatible_driver="[23.0.0,25.5.99]"),
     None, ["cannot compare version '8.0.T63'"]),
    (HostSample(), None, ["firmware version unknown", "driver version unknown"]),
])
def test_check_versions(host, verdict, words):
    compatible, reason = check_versions(host)
    assert compatible is verdict
    for expected in words:
        assert expected in reason


# --- device files -------------------------------------------------------------------------------


def permission_bits(mode_string: str) -> int:
    """'rw-rw----' -> 0o660."""
    return int("".join("0" if char == "-" else "1" for char in mode_string), 2)


def dev_tree_from_listing(root: Path, name: str) -> Dict[str, str]:
    """Creates plain files for the /dev entries a listing capture shows; returns {name: mode} of the
    character devices whose mode the listing prints."""
    modes = {}
    names = set()
    for line in capture_body(name):
        if line.startswith("$"):
            continue  # a command line
        long_entry = re.match(r"^(c[rwx-]{9})\s.*\s(\S+)$", line)
        if long_entry:
            entry = os.path.basename(long_entry.group(2))
            modes[entry] = long_entry.group(1)
            names.add(entry)
        else:
            names.update(os.path.basename(token) for token in line.split() if token.startswith("/dev/"))
    for entry in names:
        path = write(root, "/dev/" + entry, "")
        path.chmod(permission_bits(modes.get(entry, "crw-rw----")[1:]))
    return modes


def test_device_files_of_a_910b_host_listing(tmp_path):
    write_required_proc(tmp_path)
    modes = dev_tree_from_listing(tmp_path, "dev-davinci_ls_910b1.txt")
    files = HostReader(str(tmp_path)).collect().sample.device_files
    assert [(f.path, f.exists) for f in files] == (
        [("/dev/davinci{}".format(n), True) for n in range(8)]
        + [("/dev/davinci_manager", True), ("/dev/devmm_svm", True), ("/dev/hisi_hdc", True)])
    by_path = {f.path: f for f in files}
    for entry in ("hisi_hdc", "devmm_svm"):
        assert by_path["/dev/" + entry].mode[1:] == modes[entry][1:] == "rw-rw----"


def test_device_files_of_a_310b_board_container_listing(tmp_path):
    write_required_proc(tmp_path)
    dev_tree_from_listing(tmp_path, "dev-ls_310b-devboard_container.txt")
    assert (tmp_path / "dev" / "svm0").exists()  # the board's own nodes are there but not reported
    files = HostReader(str(tmp_path)).collect().sample.device_files
    assert [(f.path, f.exists) for f in files] == [
        ("/dev/davinci0", True), ("/dev/davinci_manager", True), ("/dev/devmm_svm", False), ("/dev/hisi_hdc", False)]


def test_device_file_mode_and_numeric_owner_fallback(tmp_path):
    write_required_proc(tmp_path)
    closed = write(tmp_path, "/dev/davinci0", "")
    closed.chmod(0o000)
    owned = write(tmp_path, "/dev/davinci_manager", "")
    owned.chmod(0o660)
    files = {f.path: f for f in HostReader(str(tmp_path)).collect().sample.device_files}
    assert files["/dev/davinci0"].mode == "----------"
    assert files["/dev/davinci_manager"].mode == "-rw-rw----"
    me = pwd.getpwuid(os.geteuid()).pw_name
    assert files["/dev/davinci_manager"].owner == me

    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    unused_id = next(n for n in range(54321, 60000) if not _has_passwd_entry(n))
    os.chown(str(owned), unused_id, unused_id)
    files = {f.path: f for f in HostReader(str(tmp_path)).collect().sample.device_files}
    assert (files["/dev/davinci_manager"].owner, files["/dev/davinci_manager"].group) == (
        str(unused_id), str(unused_id))


def _has_passwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
        return True
    except KeyError:
        return False


def _device_files_as(root: str, user: pwd.struct_passwd) -> List[DeviceFile]:
    """Collects device files in a forked child that has dropped root for `user` (os.access ignores
    file modes for root, so accessibility can only be seen as an ordinary user)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read_end)
            os.setgroups([])
            os.setgid(user.pw_gid)
            os.setuid(user.pw_uid)
            files = HostReader(root).collect().sample.device_files
            os.write(write_end, json.dumps([dataclasses.asdict(f) for f in files]).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as reader:
        output = reader.read()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "child collection failed"
    return [DeviceFile(**data) for data in json.loads(output.decode())]


def test_device_file_accessibility_for_an_ordinary_user():
    # Not tmp_path: pytest's base directory is closed to other users, and this tree must be
    # reachable by the unprivileged user the check runs as.
    root = tempfile.mkdtemp(prefix="npumon-devtest-")
    try:
        os.chmod(root, 0o755)
        for name, mode in (("davinci0", 0o000), ("davinci1", 0o666), ("davinci_manager", 0o660)):
            path = write(Path(root), "/dev/" + name, "")
            path.chmod(mode)
        os.chmod(os.path.join(root, "dev"), 0o755)
        if os.geteuid() == 0:
            files = _device_files_as(root, pwd.getpwnam("nobody"))
        else:
            files = HostReader(root).collect().sample.device_files
        accessible = {f.path: f.accessible for f in files if f.exists}
        # davinci_manager is owned by the test's user, so it is open to it unless that is nobody
        assert accessible == {"/dev/davinci0": False, "/dev/davinci1": True,
                              "/dev/davinci_manager": os.geteuid() != 0}
    finally:
        shutil.rmtree(root)


# --- the device-permissions scenario: what `npumon check` shows without the privilege to open them ---------


CHECK_TIMEOUT = 120


def test_sim_tree_closes_the_inaccessible_device_files_and_rewrites_them(tmp_path):
    def modes():
        dev = tmp_path / "dev"
        return {name: os.stat(str(dev / name)).st_mode & 0o777 for name in ("davinci3", "davinci4", "davinci_manager")}

    write_host_root(str(tmp_path), HostRootSpec(inaccessible_device_files=["/dev/davinci3", "/dev/davinci_manager"]))
    assert modes() == {"davinci3": 0o000, "davinci4": 0o660, "davinci_manager": 0o000}
    write_host_root(str(tmp_path), HostRootSpec())  # the same tree with the modes put right
    assert modes() == {"davinci3": 0o660, "davinci4": 0o660, "davinci_manager": 0o660}


def _check_without_file_privileges(scenario: str, workdir: str) -> subprocess.CompletedProcess:
    """`npumon check --json --simulate=SCENARIO` as a user that file modes apply to.

    Not root: as the test's user. Root: as nobody, in `workdir` (nobody's own, also its TMPDIR for the
    simulation's state). If this Python cannot even start as nobody (its installation lies under root's
    private home, say), root runs it without the two capabilities that let it ignore file modes, as a
    unit without CAP_DAC_OVERRIDE would.
    """
    argv = [sys.executable, "-m", "npumon.cli.main", "check", "--json", "--simulate=" + scenario]
    env = dict(os.environ, TMPDIR=workdir)
    options = dict(env=env, cwd=workdir, capture_output=True, text=True, timeout=CHECK_TIMEOUT)
    if os.geteuid() != 0:
        return subprocess.run(argv, **options)
    nobody = pwd.getpwnam("nobody")
    as_nobody = dict(user=nobody.pw_uid, group=nobody.pw_gid, extra_groups=[])
    os.chown(workdir, nobody.pw_uid, nobody.pw_gid)
    try:
        starts = subprocess.run([sys.executable, "-c", "import psutil, yaml, npumon.cli.main"], **options, **as_nobody)
    except PermissionError:  # the interpreter itself is out of nobody's reach
        starts = None
    if starts is not None and starts.returncode == 0:
        return subprocess.run(argv, **options, **as_nobody)
    os.chown(workdir, 0, 0)
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("{} cannot run as nobody, and dropping root's file capabilities needs setpriv "
                    "(util-linux)".format(sys.executable))
    return subprocess.run([setpriv, "--bounding-set", "-dac_override,-dac_read_search"] + argv, **options)


def test_device_permissions_scenario_warns_when_npumon_cannot_open_the_files():
    workdir = tempfile.mkdtemp(prefix="npumon-devperm-")
    try:
        proc = _check_without_file_privileges("device-permissions", workdir)
    finally:
        shutil.rmtree(workdir)
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    doc = json.loads(proc.stdout)
    assert doc["status"] == "warning"
    assert [finding["rule"] for finding in doc["findings"]] == ["device-files-inaccessible"]
    named = re.findall(r"(/dev/\S+) \(", doc["findings"][0]["summary"])
    assert sorted(named) == sorted(load_scenario("device-permissions")["host"]["inaccessible_device_files"])
    assert "Traceback" not in proc.stderr


def test_device_permissions_scenario_as_root_judges_the_modes_for_the_users_that_are_not_root(cli):
    if os.geteuid() != 0:
        pytest.skip("needs root: root opens every file, so its own access says nothing about the workloads'")
    # in this process (root, as the test is): no interpreter start per check
    proc = cli("check", "--json", "--simulate=device-permissions")
    assert proc.returncode == 1, (proc.stdout[-2000:], proc.stderr[-2000:])
    finding, = json.loads(proc.stdout)["findings"]
    assert finding["rule"] == "device-files-inaccessible"
    assert finding["summary"].startswith("device files not accessible to non-root users (npumon runs as root: "
                                         "judged by the file modes): /dev/davinci3 (---------- ")
    healthy = cli("check", "--json", "--simulate")
    assert healthy.returncode == 0 and json.loads(healthy.stdout)["findings"] == []  # rw-rw---- is open to a group
