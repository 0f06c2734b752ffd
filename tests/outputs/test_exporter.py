"""The exporter renders exactly what the Snapshot holds; the textfile writer replaces its file atomically."""

import errno
import os
import shutil
import stat
import subprocess

import pytest
from prometheus_client import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from npumon import __version__
from npumon.sources.dcmi.read import UB_COUNTERS
from npumon.outputs.exporter import (
    COMPAT_METRICS,
    NATIVE_METRICS,
    ExporterView,
    SnapshotCollector,
    build_registry,
    render_families,
)
from npumon.outputs.npu_exporter import chip_id as compat_chip_id
from npumon.model import (
    MIB,
    ChipSample,
    DeviceFile,
    Finding,
    HostSample,
    NumaNode,
    PcieLink,
    ProbeSample,
    ProcessSample,
    Snapshot,
    SourceStatus,
)
from npumon.outputs.textfile import TextfileError, write_textfile

NOW = 1767225600.0
B_CODES = ["A4025021", "8C03A000", "not-hex", "1", "2", "3", "4", "5", "6", "7", "8", "9"]


# one entry of the kmsg source's fault book, as it puts them on a chip (or the host)
DRIVER_FAULT = {"fault_class": "heartbeat_lost", "kind": "device", "repair_action": "reset_npu", "level": "RestartNPU",
                "summary": "heartbeat lost", "bus": None, "code": "40F84E00", "count": 3, "suppressed": 0,
                "first_seen": NOW, "last_seen": NOW, "last_line": "Heartbeat lost!", "window_start": NOW,
                "window_count": 3}


def rich_snapshot(pods=False):
    """Four chips covering a full 910B chip, a 310P-like chip, an A3 die with nothing known and a chip
    without any id, plus a host with NUMA, device files and version files, and three kinds of sources.
    `pods`: the last chip also carries what the Kubernetes source adds (sources/k8s), one pod."""
    chip_a = ChipSample(
        npu=0, chip=0, name="910B3", health="OK", bus_id="0000:C1:00.0", device_id=0,
        temperature_celsius=41.0, power_watts=93.5,
        aicore_ratio=0.29, aivector_ratio=0.07, aicpu_ratio=0.0, ctrlcpu_ratio=0.03, aicube_ratio=0.31,
        npu_util_ratio=0.3, hbm_bandwidth_ratio=0.12, ddr_bandwidth_ratio=0.0,
        memory_used_bytes=0, memory_total_bytes=0, hbm_used_bytes=3338 * MIB, hbm_total_bytes=65536 * MIB,
        ecc={"hbm": {"single": 4, "double": 1, "isolated_pages": 2}},
        ecc_counters={"hbm": {"aggregate_single": 9, "aggregate_double": 1, "isolated_single": 2,
                              "isolated_double": 0}},
        error_codes=["A4025021"],
        driver_version="23.0.7",
        vdie_id="42C711D4-20B03704-4A10C8D4-14CC040A-D2102003", model_name="910B3-Ascend-V1",
        hbm_usage_ratio=0.05, hbm_temperature_celsius=44.0, aicore_freq_mhz=1800.0, voltage_volts=0.8,
        serial_number="1025C9048791",
        # the interconnect links (sources/npusmi/links.py): link 3 down to 2 lanes, the chip's HCCS NOK
        hccs={"health": "NOK", "first_error_lane": 3, "links": [
            {"link": n, "lane_mode": 2 if n == 3 else 4, "lanes": "1100" if n == 3 else "1111",
             "speed_gbps": 112 if n == 3 else 224, "tx_packets": 1000 * n, "rx_packets": 990 * n,
             "retries": 5 if n == 3 else 0, "crc_errors": 40 if n == 3 else 0} for n in range(1, 8)]},
        hccs_bandwidth={"total_tx_gbps": 78.0, "total_rx_gbps": 77.5, "links": [
            {"link": n, "tx_gbps": 6.0 if n == 3 else 12.0, "rx_gbps": 5.5 if n == 3 else 12.0} for n in range(1, 8)]},
        sio={"tx_errors": 3, "rx_errors": 1},
        # UB ports as DCMI reads them on a 950 (sources/dcmi/read.py read_ub): port 5 on part of its lanes
        ub={"link_status": "linked", "ports": [
            {"udie": 0, "port": port, "status": "partial_lanes" if port == 5 else "full",
             "counters": {name: 100 + index for index, (_, name) in enumerate(UB_COUNTERS)}} for port in (4, 5, 6)]},
        ub_bandwidth={"ports": [{"udie": 0, "port": 4, "tx_mbps": 12000, "rx_mbps": 11500}]},
        processes=[
            ProcessSample(npu=0, chip=0, pid=935440, name="python", memory_bytes=141 * MIB),
            ProcessSample(npu=0, chip=0, pid=935441, name="", memory_bytes=None),
        ],
        pcie=PcieLink(current_speed_gts=16.0, max_speed_gts=32.0, current_width=16, max_width=16),
        probe=ProbeSample(state="failed", time=NOW - 60, kind="acl", device_id=0, first_run=False,
                          duration_seconds=0.5, baseline_seconds=0.4,
                          stage_seconds={"init": 0.3, "memcpy": 0.2}, failed_stage="memcpy", error_code=507053),
        extra={"driver_faults": [dict(DRIVER_FAULT, device=0)],
               # what the DCMI backend reads beyond npu-smi (sources/dcmi/metrics.py)
               "board_id": 0x28, "slot_id": 0, "npu_name": "", "pcie_vendor_id": "0x19e5",
               "pcie_device_id": "0xd802", "pcie_subvendor_id": "0x0200", "pcie_subdevice_id": "0x0100",
               "aicore_count": 20, "aicore_rated_freq_mhz": 1800.0, "hbm_freq_mhz": 1600},
    )
    # the ACL runtime's own view, as the probe source (sources/probe/runtime_view.py) leaves it
    chip_a.extra["runtime"] = {"time": NOW - 60, "device_id": 0, "values": {
        name: {"value": value, "source": "acl.x", "status": "ok"} for name, value in (
            ("device_count", 8), ("soc_name", "Ascend910B3"), ("acl_version", "1.0.0"), ("driver_version", "23.0.7"),
            ("hbm_free_bytes", 62198 * MIB), ("hbm_total_bytes", 65536 * MIB), ("cube_ratio", 0.31),
            ("vector_ratio", 0.07), ("aicpu_ratio", 0.0), ("memory_ratio", 0.05))}}
    # its processes' CPU use and none stuck in D state, as the processes source (sources/procs) leaves them
    chip_a.extra["process_activity"] = {"cpu_seconds_per_minute": 51.0, "blocked": []}
    # its RoCE port, as the hccn source (sources/hccn) leaves it, with every value known
    chip_a.extra["network"] = {
        "phy_id": 0, "link_status": "UP", "link_up_count": 2, "link_down_count": 1, "link_changes_in_window": 0,
        "link_changes": [{"time": "2025-10-05T10:13:51+00:00", "state": "UP"},
                         {"time": "2025-10-05T10:13:50+00:00", "state": "DOWN"}],
        "net_health": "Socket failed", "speed_mbps": 200000,
        "bandwidth_tx_bytes_per_second": 1200000000, "bandwidth_rx_bytes_per_second": 266840000,
        "counters": {"roce_rx_err_pkt_num": 3, "nic_rx_all_oct_num": 482237805},
        "optical_present": True, "optical_temperature_celsius": 47.0, "optical_vcc_volts": 3.2629,
        "rx_power_mw": [1.0189, 0.0054, 0.9907, 1.0213], "tx_power_mw": [4.4035, 1.3968, 1.414, 1.4988],
        "tx_bias_ma": [7.936, 7.928, 7.936, 7.924],
        "optical_flags": {"tx_los": 0, "rx_los": 255, "tx_lol": 0, "rx_lol": 255},
        "optical_thresholds": {"tx_power_low_mw": 0.2818, "tx_power_high_mw": 3.5481, "rx_power_low_mw": 0.1445,
                               "rx_power_high_mw": 3.5481, "temp_low_celsius": 0.0, "temp_high_celsius": 70.0},
        "ip_addresses": [{"address": "192.161.200.10", "netmask": "255.255.255.0"}], "gateway": None,
        "gateway_configured": False,
    }
    chip_b = ChipSample(
        npu=1, chip=0, name="310P3", health="Alarm", bus_id="0000:01:00.0", device_id=5,
        temperature_celsius=55.0, aicore_ratio=0.5, vectorcore_ratio=0.25, aicpu_ratio=0.01,
        memory_used_bytes=1024 * MIB, memory_total_bytes=21527 * MIB, ddr_bandwidth_ratio=0.4,
        ecc={"ddr": {"single": 0, "double": None, "isolated_pages": None}},
        error_codes=list(B_CODES),
        pcie=PcieLink(current_speed_gts=16.0, max_speed_gts=16.0),
    )
    chip_c = ChipSample(npu=2, chip=1, phy_id=3)
    chip_d = ChipSample(npu=3, chip=0, name="910B3", health="UNKNOWN", temperature_celsius=40.0)
    if pods:  # with what the container families read: HBM and AI Core utilisation
        chip_d.hbm_total_bytes, chip_d.hbm_used_bytes, chip_d.aicore_ratio = 65536 * MIB, 1024 * MIB, 0.5
        chip_d.extra.update(pods=[{"namespace": "ns", "pod": "p", "container": "c", "resource": "huawei.com/Ascend910",
                                   "device_ids": ["Ascend910-3"]}], kubelet_allocatable=True,
                            process_containers=[{"pid": 7, "container_id": "a" * 64, "pod_uid": None, "namespace": "ns",
                                                 "pod": "p", "container": "c"}])
    host = HostSample(
        hostname="atlas-01", cpu_ratio=0.25, memory_total_bytes=512 * 1024 ** 3,
        memory_available_bytes=400 * 1024 ** 3,
        numa_nodes=[NumaNode(node=0, cpus=[0, 1], cpu_ratio=0.5), NumaNode(node=1, cpus=[2, 3])],
        numa_balancing=1, max_map_count=65530, driver_version="23.0.7", firmware_version="7.1.0.5.220",
        device_files=[
            DeviceFile(path="/dev/davinci0", exists=True, accessible=True),
            DeviceFile(path="/dev/davinci_manager", exists=True, accessible=False),
        ],
        serving_queue_depth=3.0,
        extra={"driver_faults": [dict(DRIVER_FAULT, device=None, place="host")],
               "kmsg": {"records": 120, "matched": 4, "lost": 2, "suppressed": 1, "reboots": 0},
               "chip_count": {"expected": 2, "listed": 2, "pci_expected": 2, "pci": 2, "unlisted": [], "missing": 0,
                              "unreadable": 0, "problem": "none"},
               "serving": {"engine": "vllm", "running_requests": 24.0, "batch_size": 24.0,
                           "request_latency_seconds": 2.5, "time_to_first_token_seconds": 0.3,
                           "requests_per_second": 2.0, "generation_tokens_per_second": 400.0,
                           "model_load_seconds": 95.0}},
    )
    sources = {
        "npusmi_info": SourceStatus(ok=True, duration_seconds=0.42, last_success=NOW - 1),
        "npusmi_usages": SourceStatus(ok=False, error="stale: timed out", duration_seconds=10.0,
                                      last_success=NOW - 300),
        "npusmi_power": SourceStatus(ok=False, error="not supported", unsupported=True),
    }
    return Snapshot(time=NOW, host=host, chips=[chip_a, chip_b, chip_c, chip_d], sources=sources,
                    tool_version="23.0.7", driver_version="23.0.6")


FINDINGS = [
    Finding(rule="numa_balancing_on", severity="warning", subject="host", summary="s", hint="h", since=NOW),
    Finding(rule="chip_health", severity="critical", subject="npu1/chip0", summary="s", hint="h", since=NOW,
            repair_action="reset_npu", level="RestartNPU"),
    Finding(rule="chip_health", severity="critical", subject="npu1/chip0", summary="again", hint="h", since=NOW,
            repair_action="reset_npu", level="RestartNPU"),
    Finding(rule="new_rule", severity="info", subject="npu0/chip0", summary="s", hint="h", since=NOW, shadow=True),
]


def test_driver_faults_of_the_kernel_log_are_exported_per_chip_and_for_the_host():
    found = samples(render(ExporterView(snapshot=rich_snapshot(), findings=[])))
    assert series(found, "npumon_driver_fault_lines") == {
        labels(npu="0", chip="0", **{"class": "heartbeat_lost"}, kind="device", repair_action="reset_npu"): 3.0,
        labels(npu="", chip="", **{"class": "heartbeat_lost"}, kind="device", repair_action="reset_npu"): 3.0}
    assert series(found, "npumon_kmsg_records_lost") == {labels(): 2.0}


def test_driver_fault_findings_export_their_repair_action_and_level():
    found = series(samples(render(ExporterView(snapshot=rich_snapshot(), findings=FINDINGS))),
                   "npumon_finding_repair_info")
    assert found == {frozenset({"rule": "chip_health", "subject": "npu1/chip0", "repair_action": "reset_npu",
                                "level": "RestartNPU"}.items()): 1.0}


def render(view, compat=False):
    return generate_latest(build_registry(lambda: view, npu_exporter_compat=compat)).decode("utf-8")


def samples(text):
    """{(name, frozenset(labels)): value} of every sample, checking no series appears twice."""
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, "duplicate series {}".format(key)
            out[key] = sample.value
    return out


def series(all_samples, name):
    """{frozenset(labels): value} for one metric name."""
    return {labels: value for (sample_name, labels), value in all_samples.items() if sample_name == name}


def labels(**kwargs):
    return frozenset((key, str(value)) for key, value in kwargs.items())


@pytest.fixture
def rich():
    return samples(render(ExporterView(snapshot=rich_snapshot(), findings=FINDINGS), compat=True))


def test_before_the_first_poll_only_build_info_and_findings_are_served():
    assert samples(render(ExporterView(snapshot=None, findings=[]))) == {
        ("npumon_build_info", labels(version=__version__)): 1.0,
    }
    found = samples(render(ExporterView(snapshot=None, findings=FINDINGS[:1]), compat=True))
    assert set(name for name, _ in found) == {"npumon_build_info", "npumon_finding_active"}


def test_chip_values_in_base_units(rich):
    a = dict(npu=0, chip=0)
    assert series(rich, "npumon_chip_temperature_celsius")[labels(**a)] == 41.0
    assert series(rich, "npumon_chip_power_watts") == {labels(**a): 93.5}
    assert series(rich, "npumon_chip_utilization_ratio") == {
        labels(engine="aicore", **a): 0.29, labels(engine="aivector", **a): 0.07,
        labels(engine="aicpu", **a): 0.0, labels(engine="ctrlcpu", **a): 0.03,
        labels(engine="aicube", **a): 0.31, labels(engine="npu", **a): 0.3,
        labels(npu=1, chip=0, engine="aicore"): 0.5, labels(npu=1, chip=0, engine="vectorcore"): 0.25,
        labels(npu=1, chip=0, engine="aicpu"): 0.01,
    }
    assert series(rich, "npumon_chip_memory_used_bytes") == {
        labels(memory="hbm", **a): 3338 * MIB, labels(memory="ddr", **a): 0.0,
        labels(npu=1, chip=0, memory="ddr"): 1024 * MIB,
    }
    assert series(rich, "npumon_chip_memory_total_bytes")[labels(memory="hbm", **a)] == 65536 * MIB
    assert series(rich, "npumon_chip_memory_bandwidth_ratio") == {
        labels(memory="hbm", **a): 0.12, labels(memory="ddr", **a): 0.0,
        labels(npu=1, chip=0, memory="ddr"): 0.4,
    }
    assert series(rich, "npumon_chip_processes") == {
        labels(**a): 2.0, labels(npu=1, chip=0): 0.0, labels(npu=2, chip=1): 0.0, labels(npu=3, chip=0): 0.0,
    }


def test_chip_info_labels_and_driver_version_fallback(rich):
    assert series(rich, "npumon_chip_info") == {
        # chip A's own driver version wins over the snapshot's title-line version
        labels(npu=0, chip=0, name="910B3", bus_id="0000:C1:00.0", driver_version="23.0.7", device_id=0,
               phy_id="", vdie_id="42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"): 1.0,
        labels(npu=1, chip=0, name="310P3", bus_id="0000:01:00.0", driver_version="23.0.6", device_id=5,
               phy_id="", vdie_id=""): 1.0,
        labels(npu=2, chip=1, name="", bus_id="", driver_version="23.0.6", device_id="", phy_id=3, vdie_id=""): 1.0,
        labels(npu=3, chip=0, name="910B3", bus_id="", driver_version="23.0.6", device_id="", phy_id="",
               vdie_id=""): 1.0,
    }
    snapshot = rich_snapshot()
    snapshot.driver_version = None
    view = ExporterView(snapshot=snapshot, findings=[], driver_version="24.1.rc2")
    versions = {dict(key)["npu"]: dict(key)["driver_version"]
                for key in series(samples(render(view)), "npumon_chip_info")}
    assert versions == {"0": "23.0.7", "1": "24.1.rc2", "2": "24.1.rc2", "3": "24.1.rc2"}
    view.driver_version = None
    versions = {dict(key)["npu"]: dict(key)["driver_version"]
                for key in series(samples(render(view)), "npumon_chip_info")}
    assert versions["1"] == "23.0.7"  # from the host's version file


def test_unknown_values_give_no_series_and_never_nan():
    text = render(ExporterView(snapshot=rich_snapshot(), findings=[]), compat=True)
    assert "NaN" not in text
    c = labels(npu=2, chip=1)
    per_chip = {name for (name, key) in samples(text) if {("npu", "2"), ("chip", "1")} <= key}
    assert per_chip == {"npumon_chip_info", "npumon_chip_processes", "npumon_chip_verdict"}  # a verdict always
    assert c in series(samples(text), "npumon_chip_processes")
    snapshot = rich_snapshot()
    snapshot.chips[0].temperature_celsius = float("nan")
    snapshot.chips[0].power_watts = float("inf")
    found = samples(render(ExporterView(snapshot=snapshot, findings=[])))
    assert labels(npu=0, chip=0) not in series(found, "npumon_chip_temperature_celsius")
    assert series(found, "npumon_chip_power_watts") == {}


def test_health_is_a_complete_state_set_when_known(rich):
    health = series(rich, "npumon_chip_health")
    states = ("OK", "Warning", "Alarm", "Critical", "UNKNOWN")
    for npu, current in ((0, "OK"), (1, "Alarm"), (3, "UNKNOWN")):
        for state in states:
            assert health[labels(npu=npu, chip=0, state=state)] == (1.0 if state == current else 0.0)
    assert len(health) == 15  # chip npu2/chip1 has no health: no series at all
    snapshot = rich_snapshot()
    snapshot.chips = [ChipSample(npu=0, chip=0, health="Degraded?")]
    odd = series(samples(render(ExporterView(snapshot=snapshot, findings=[]))), "npumon_chip_health")
    assert {dict(key)["state"]: value for key, value in odd.items()} == {
        "OK": 0.0, "Warning": 0.0, "Alarm": 0.0, "Critical": 0.0, "UNKNOWN": 1.0,
    }


def test_error_codes_and_ecc(rich):
    codes = series(rich, "npumon_chip_error_code_info")
    assert codes[labels(npu=0, chip=0, code="A4025021")] == 1.0
    assert {dict(key)["code"] for key in codes if dict(key)["npu"] == "1"} == set(B_CODES)
    assert series(rich, "npumon_chip_ecc_errors") == {
        labels(npu=0, chip=0, memory="hbm", bit="single"): 4.0,
        labels(npu=0, chip=0, memory="hbm", bit="double"): 1.0,
        labels(npu=1, chip=0, memory="ddr", bit="single"): 0.0,
    }
    assert series(rich, "npumon_chip_ecc_isolated_pages") == {labels(npu=0, chip=0, memory="hbm"): 2.0}


def test_pcie_link(rich):
    assert series(rich, "npumon_chip_pcie_link_degraded") == {
        labels(npu=0, chip=0): 1.0, labels(npu=1, chip=0): 0.0,
    }
    assert series(rich, "npumon_chip_pcie_link_speed_gts") == {
        labels(npu=0, chip=0, kind="current"): 16.0, labels(npu=0, chip=0, kind="max"): 32.0,
        labels(npu=1, chip=0, kind="current"): 16.0, labels(npu=1, chip=0, kind="max"): 16.0,
    }
    assert series(rich, "npumon_chip_pcie_link_width_lanes") == {
        labels(npu=0, chip=0, kind="current"): 16.0, labels(npu=0, chip=0, kind="max"): 16.0,
    }


def test_host_series(rich):
    assert series(rich, "npumon_host_cpu_ratio") == {frozenset(): 0.25}
    assert series(rich, "npumon_host_numa_cpu_ratio") == {labels(node=0): 0.5}
    assert series(rich, "npumon_host_memory_total_bytes") == {frozenset(): 512.0 * 1024 ** 3}
    assert series(rich, "npumon_host_memory_available_bytes") == {frozenset(): 400.0 * 1024 ** 3}
    assert series(rich, "npumon_host_numa_balancing") == {frozenset(): 1.0}
    assert series(rich, "npumon_host_max_map_areas") == {frozenset(): 65530.0}
    assert series(rich, "npumon_host_device_file_accessible") == {
        labels(path="/dev/davinci0"): 1.0, labels(path="/dev/davinci_manager"): 0.0,
    }
    assert series(rich, "npumon_host_serving_queue_depth") == {frozenset(): 3.0}
    assert series(rich, "npumon_host_serving_time_to_first_token_seconds") == {frozenset(): 0.3}
    assert series(rich, "npumon_host_info") == {
        labels(driver_version="23.0.7", firmware_version="7.1.0.5.220", cann_version=""): 1.0,
    }
    assert series(rich, "npumon_snapshot_timestamp_seconds") == {frozenset(): NOW}
    assert series(rich, "npumon_build_info") == {labels(version=__version__): 1.0}


def test_source_series(rich):
    assert series(rich, "npumon_source_up") == {
        labels(source="npusmi_info"): 1.0, labels(source="npusmi_usages"): 0.0, labels(source="npusmi_power"): 0.0,
    }
    assert series(rich, "npumon_source_unsupported") == {
        labels(source="npusmi_info"): 0.0, labels(source="npusmi_usages"): 0.0, labels(source="npusmi_power"): 1.0,
    }
    assert series(rich, "npumon_source_duration_seconds") == {
        labels(source="npusmi_info"): 0.42, labels(source="npusmi_usages"): 10.0,
    }
    assert series(rich, "npumon_source_last_success_timestamp_seconds") == {
        labels(source="npusmi_info"): NOW - 1, labels(source="npusmi_usages"): NOW - 300,
    }


def test_findings_active_and_shadow_apart_without_duplicates(rich):
    assert series(rich, "npumon_finding_active") == {
        labels(rule="numa_balancing_on", severity="warning", subject="host"): 1.0,
        labels(rule="chip_health", severity="critical", subject="npu1/chip0"): 1.0,
    }
    assert series(rich, "npumon_finding_shadow") == {
        labels(rule="new_rule", severity="info", subject="npu0/chip0"): 1.0,
    }


def test_repeated_chip_keeps_its_first_values():
    snapshot = rich_snapshot()
    snapshot.chips = [ChipSample(npu=0, chip=0, temperature_celsius=40.0),
                      ChipSample(npu=0, chip=0, temperature_celsius=90.0)]
    found = samples(render(ExporterView(snapshot=snapshot, findings=[])))  # samples() rejects duplicates
    assert series(found, "npumon_chip_temperature_celsius") == {labels(npu=0, chip=0): 40.0}


def compat_labels(chip_id, model_name, bus="", vdie_id=""):
    return labels(id=chip_id, model_name=model_name, vdie_id=vdie_id, pcie_bus_info=bus, namespace="",
                  pod_name="", container_name="")


A_VDIE = "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"


def test_compat_series_use_npu_exporter_names_labels_and_units(rich):
    a = compat_labels(0, "910B3-Ascend-V1", "0000:C1:00.0", A_VDIE)
    b = compat_labels(5, "310P3", "0000:01:00.0")
    c = compat_labels(3, "")
    d = compat_labels(3, "910B3")  # no id known yet: its place in npu-smi's list
    assert series(rich, "machine_npu_nums") == {frozenset(): 4.0}
    assert series(rich, "machine_card_nums") == {frozenset(): 4.0}
    assert series(rich, "machine_healthy_npu_nums") == {frozenset(): 1.0}
    assert series(rich, "machine_unhealthy_npu_nums") == {frozenset(): 1.0}
    assert series(rich, "machine_unknown_npu_nums") == {frozenset(): 2.0}
    assert series(rich, "npu_chip_info_name") == {
        labels(id=0, name="910B3-Ascend-V1", vdie_id=A_VDIE, pcie_bus_info="0000:C1:00.0", namespace="", pod_name="",
               container_name=""): 1.0,
        labels(id=3, name="910B3", vdie_id="", pcie_bus_info="", namespace="", pod_name="", container_name=""): 1.0,
        labels(id=5, name="310P3", vdie_id="", pcie_bus_info="0000:01:00.0", namespace="", pod_name="",
               container_name=""): 1.0,
        labels(id=3, name="", vdie_id="", pcie_bus_info="", namespace="", pod_name="", container_name=""): 1.0,
    }
    assert series(rich, "npu_chip_info_health_status") == {a: 1.0, b: 0.0, d: -1.0}
    assert series(rich, "npu_chip_info_temperature") == {a: 41.0, b: 55.0, d: 40.0}
    assert series(rich, "npu_chip_info_power") == {a: 93.5}
    assert series(rich, "npu_chip_info_utilization") == {a: 29.0, b: 50.0}
    assert series(rich, "npu_chip_info_vector_utilization") == {a: 7.0, b: 25.0}
    assert series(rich, "npu_chip_info_cube_utilization") == {a: 31.0}
    assert series(rich, "npu_chip_info_overall_utilization") == {a: 30.0}
    assert series(rich, "npu_chip_info_hbm_total_memory") == {a: 65536.0}
    assert series(rich, "npu_chip_info_hbm_used_memory") == {a: 3338.0}
    assert series(rich, "npu_chip_info_hbm_utilization") == {a: 5.0}  # -t usages' HBM Usage Rate
    assert series(rich, "npu_chip_info_hbm_bandwidth_utilization") == {a: 12.0}
    # chip A's DDR is npu-smi's "0 / 0": npu-exporter has no DDR group for such chips
    assert series(rich, "npu_chip_info_total_memory") == {b: 21527.0}
    assert series(rich, "npu_chip_info_used_memory") == {b: 1024.0}
    assert series(rich, "npu_chip_info_hbm_ecc_single_bit_error_cnt") == {a: 4.0}
    assert series(rich, "npu_chip_info_hbm_ecc_double_bit_error_cnt") == {a: 1.0}
    assert series(rich, "npu_chip_info_process_info_num") == {a: 2.0, b: 0.0, c: 0.0, d: 0.0}
    assert series(rich, "npu_chip_info_process_info") == {a | labels(process_id=935440, container_id=""): 141.0}
    assert series(rich, "npu_chip_info_error_code") == {a: float(0xA4025021), b: float(0xA4025021)}
    assert series(rich, "npu_chip_info_error_code_1") == {b: float(0x8C03A000)}
    # "not-hex" is skipped; the ten slots then hold 8C03A000 and 1..8, and "9" is the eleventh
    assert series(rich, "npu_chip_info_error_code_2") == {b: 1.0}
    assert series(rich, "npu_chip_info_error_code_9") == {b: 8.0}


def test_compat_id_is_the_physical_id_else_the_logical_id_else_the_place_in_the_list():
    assert compat_chip_id(ChipSample(npu=0, chip=1, phy_id=3, device_id=1), 7) == 3
    assert compat_chip_id(ChipSample(npu=0, chip=1, device_id=1), 7) == 1
    assert compat_chip_id(ChipSample(npu=0, chip=1), 7) == 7


def test_compat_is_off_by_default():
    names = {name for name, _ in samples(render(ExporterView(snapshot=rich_snapshot(), findings=FINDINGS)))}
    assert all(name.startswith("npumon_") for name in names)


def test_every_declared_metric_is_rendered_by_the_rich_snapshot():
    rich = samples(render(ExporterView(snapshot=rich_snapshot(pods=True), findings=FINDINGS), compat=True))
    rendered = {name for name, _ in rich}
    declared = {spec.name for spec in NATIVE_METRICS + COMPAT_METRICS}
    assert declared - rendered == set()
    assert rendered - declared == set()


def test_collector_reads_the_view_at_each_scrape_and_registry_holds_nothing_else():
    views = [ExporterView(snapshot=None, findings=[]), ExporterView(snapshot=rich_snapshot(), findings=[])]
    registry = build_registry(lambda: views[0])
    assert set(name for name, _ in samples(generate_latest(registry).decode())) == {"npumon_build_info"}
    views.pop(0)
    assert ("npumon_snapshot_timestamp_seconds", frozenset()) in samples(generate_latest(registry).decode())
    assert [family.name for family in SnapshotCollector(lambda: views[0]).collect()] == \
        [family.name for family in render_families(views[0])]


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not on PATH (Debian: apt-get install prometheus)")
def test_promtool_check_metrics_prints_nothing():
    text = render(ExporterView(snapshot=rich_snapshot(), findings=FINDINGS))
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    # With compat on, promtool's only remarks are on npu-exporter's own camelCase label names and its UB `_sum`
    # counters, kept as they are because dashboards select on them (exporterVersion, driverVersion, crc_error_sum).
    text = render(ExporterView(snapshot=rich_snapshot(), findings=FINDINGS), compat=True)
    result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
    remarks = set(result.stderr.decode().splitlines())
    assert (result.stdout, remarks) == (b"", {
        "node_base_info label names should be written in 'snake_case' not 'camelCase'",
        "npu_exporter_version_info label names should be written in 'snake_case' not 'camelCase'"} | {
        'npu_chip_info_{} non-histogram and non-summary metrics should not have "_sum" suffix'.format(name)
        for name in ("crc_error_sum", "retry_ack_sum", "retry_req_sum")})


# --- textfile ---------------------------------------------------------------------------------------------


def rich_registry():
    return build_registry(lambda: ExporterView(snapshot=rich_snapshot(), findings=FINDINGS))


def test_textfile_is_written_world_readable_without_leftovers(tmp_path):
    old_umask = os.umask(0o077)
    try:
        path = write_textfile(str(tmp_path), rich_registry())
    finally:
        os.umask(old_umask)
    assert path == str(tmp_path / "npumon.prom")
    assert os.listdir(str(tmp_path)) == ["npumon.prom"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    with open(path, encoding="utf-8") as handle:
        written = samples(handle.read())
    assert written[("npumon_snapshot_timestamp_seconds", frozenset())] == NOW


def test_textfile_replaces_the_previous_file(tmp_path):
    views = [ExporterView(snapshot=rich_snapshot(), findings=[])]
    registry = build_registry(lambda: views[0])
    write_textfile(str(tmp_path), registry, filename="ascend.prom")
    views[0] = ExporterView(snapshot=None, findings=[])
    path = write_textfile(str(tmp_path), registry, filename="ascend.prom")
    with open(path, encoding="utf-8") as handle:
        assert set(name for name, _ in samples(handle.read())) == {"npumon_build_info"}
    assert os.listdir(str(tmp_path)) == ["ascend.prom"]


def test_textfile_missing_directory_is_a_one_line_error(tmp_path):
    missing = str(tmp_path / "nope")
    with pytest.raises(TextfileError) as caught:
        write_textfile(missing, rich_registry())
    message = str(caught.value)
    assert "\n" not in message
    assert message == "cannot write {}/npumon.prom: No such file or directory".format(missing)


def test_textfile_directory_that_is_a_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(TextfileError, match="Not a directory"):
        write_textfile(str(blocker), rich_registry())


def test_textfile_full_disk_leaves_no_temporary_file(tmp_path, monkeypatch):
    def no_space(source, target):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(TextfileError, match="No space left on device"):
        write_textfile(str(tmp_path), rich_registry())
    assert os.listdir(str(tmp_path)) == []


@pytest.mark.parametrize("name", ["npumon.txt", "sub/npumon.prom", "../npumon.prom"])
def test_textfile_name_must_be_a_plain_prom_file(tmp_path, name):
    with pytest.raises(TextfileError, match="must be a plain file name ending in .prom"):
        write_textfile(str(tmp_path), rich_registry(), filename=name)


def test_openmetrics_rendering_parses():
    """Prometheus asks for OpenMetrics first; the same families must survive that encoder too."""
    registry = build_registry(lambda: ExporterView(snapshot=rich_snapshot(pods=True), findings=FINDINGS), True)
    text = generate_openmetrics(registry).decode("utf-8")
    assert {family.name for family in parse_openmetrics(text)} == \
        {spec.name for spec in NATIVE_METRICS + COMPAT_METRICS}
