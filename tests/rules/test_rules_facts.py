"""Snapshot -> per-subject facts."""

import dataclasses

import pytest

from npumon.model import (MIB, ChipSample, DeviceFile, HostSample, NumaNode, PcieLink, ProcessSample, Snapshot,
                          SourceStatus)
from npumon.rules.facts import CHIP_FACTS, HOST_FACTS, is_known_fact, snapshot_facts


def no_version_check(host):
    return None, ""


def chip(npu, index, **values):
    return ChipSample(npu=npu, chip=index, **values)


def facts_of(snapshot, check_versions=no_version_check):
    return snapshot_facts(snapshot, check_versions=check_versions)


def test_subjects_are_host_then_chips():
    snapshot = Snapshot(time=10.0, host=HostSample(), chips=[chip(0, 0), chip(0, 1), chip(3, 0)], sources={})
    assert list(facts_of(snapshot)) == ["host", "npu0/chip0", "npu0/chip1", "npu3/chip0"]


def test_chip_facts_scalars_and_derived():
    sample = chip(
        2, 1, name="910B3", health="Alarm", temperature_celsius=71.0, aicore_ratio=0.4,
        hbm_used_bytes=16384 * MIB, hbm_total_bytes=65536 * MIB, memory_used_bytes=0, memory_total_bytes=0,
        error_codes=["A4025021", "8C03A000"], error_information=["first", "second"],
        processes=[ProcessSample(npu=2, chip=1, pid=42, name="python3", memory_bytes=100 * MIB),
                   ProcessSample(npu=2, chip=1, pid=7, name="VLLMEngineCore", memory_bytes=None)],
        pcie=PcieLink(current_speed_gts=8.0, max_speed_gts=16.0, current_width=16, max_width=16),
    )
    host = HostSample(cpu_ratio=0.35, serving_queue_depth=4.0)
    facts = facts_of(Snapshot(time=0.0, host=host, chips=[sample], sources={}))["npu2/chip1"]
    assert facts["npu"] == 2 and facts["chip"] == 1 and facts["subject"] == "npu2/chip1"
    assert facts["health"] == "Alarm" and facts["temperature_celsius"] == 71.0
    assert facts["error_codes"] == ["A4025021", "8C03A000"]
    assert facts["error_code_text"] == "A4025021, 8C03A000"
    assert facts["error_information_text"] == "first; second"
    assert facts["process_count"] == 2
    assert facts["process_memory_bytes"] == 100 * MIB
    assert facts["process_signature"] == "7,42"
    assert facts["process_names"] == "VLLMEngineCore, python3"
    assert facts["hbm_used_ratio"] == 0.25
    assert facts["memory_used_ratio"] is None  # 0 / 0: no DDR reported on 910B
    assert facts["pcie_degraded"] is True
    assert facts["pcie_current_speed_gts"] == 8.0 and facts["pcie_max_width"] == 16
    # no NUMA node known for the chip: the host CPU stands in
    assert facts["numa_node"] is None and facts["numa_cpu_ratio"] == 0.35
    assert facts["host.cpu_ratio"] == 0.35 and facts["host.serving_queue_depth"] == 4.0
    assert facts["host.chip_count"] == 1


def test_numa_cpu_ratio_of_the_chips_node():
    host = HostSample(cpu_ratio=0.2, numa_nodes=[NumaNode(0, cpu_ratio=0.1), NumaNode(1, cpu_ratio=0.9)])
    sample = chip(0, 0)
    # ChipSample has no numa_node field yet (see facts._chip_numa_facts); set it the way a source would
    sample.numa_node = 1
    facts = facts_of(Snapshot(time=0.0, host=host, chips=[sample], sources={}))["npu0/chip0"]
    assert facts["numa_node"] == 1 and facts["numa_cpu_ratio"] == 0.9
    sample.numa_node = 5  # a node the host did not list: the host CPU stands in
    facts = facts_of(Snapshot(time=0.0, host=host, chips=[sample], sources={}))["npu0/chip0"]
    assert facts["numa_cpu_ratio"] == 0.2


def test_chip_without_optional_data():
    facts = facts_of(Snapshot(time=0.0, host=HostSample(), chips=[chip(0, 0)], sources={}))["npu0/chip0"]
    assert facts["error_codes"] == [] and facts["error_code_text"] == "none"
    assert facts["process_count"] == 0 and facts["process_signature"] == ""
    assert facts["pcie_degraded"] is None and facts["hbm_used_ratio"] is None


def test_every_scalar_chip_field_is_a_fact():
    # Lists, dicts and records are facts through derived names; `extra` holds sources' own values, which their
    # SourceSpec turns into facts.
    structured = {"ecc", "ecc_counters", "error_codes", "error_information", "processes", "pcie", "probe", "extra",
                  "hccs", "hccs_bandwidth", "sio", "ub", "ub_bandwidth"}  # the links: rules/links.py
    for field in dataclasses.fields(ChipSample):
        if field.name not in structured:
            assert field.name in CHIP_FACTS, field.name
    for field in dataclasses.fields(HostSample):
        if field.name not in ("numa_nodes", "device_files", "extra"):
            assert field.name in HOST_FACTS and "host." + field.name in CHIP_FACTS, field.name


def test_host_device_files():
    host = HostSample(device_files=[
        DeviceFile("/dev/davinci0", exists=True, accessible=True),
        DeviceFile("/dev/davinci1", exists=False, accessible=False),
        DeviceFile("/dev/davinci_manager", exists=True, accessible=False, mode="crw-rw----",
                   owner="HwHiAiUser", group="HwHiAiUser"),
        DeviceFile("/dev/hisi_hdc", exists=False, accessible=False),
    ])
    facts = facts_of(Snapshot(time=0.0, host=host, chips=[], sources={}))["host"]
    assert facts["missing_device_files"] == ["/dev/davinci1", "/dev/hisi_hdc"]
    assert facts["missing_device_file_text"] == "/dev/davinci1, /dev/hisi_hdc"
    assert facts["inaccessible_device_files"] == ["/dev/davinci_manager"]
    assert facts["inaccessible_device_file_text"] == "/dev/davinci_manager (crw-rw---- HwHiAiUser HwHiAiUser)"
    assert facts["device_file_count"] == 4


def test_host_aggregates_over_chips_skip_missing_values():
    def process(npu):
        return [ProcessSample(npu=npu, chip=0, pid=100 + npu, name="python3", memory_bytes=None)]

    chips = [chip(0, 0, aicore_ratio=0.9, temperature_celsius=70.0, processes=process(0)),
             chip(1, 0, aicore_ratio=0.05, temperature_celsius=None),
             chip(2, 0, aicore_ratio=None, temperature_celsius=75.0, processes=process(2)),
             chip(10, 0, aicore_ratio=0.5, processes=process(10))]
    facts = facts_of(Snapshot(time=0.0, host=HostSample(), chips=chips, sources={}))["host"]
    assert facts["chip_count"] == 4
    assert facts["max_chip_temperature_celsius"] == 75.0
    assert facts["max_chip_aicore_ratio"] == 0.9 and facts["busiest_chip"] == "npu0/chip0"
    assert facts["min_chip_aicore_ratio"] == 0.05 and facts["idlest_chip"] == "npu1/chip0"
    assert facts["chip_aicore_spread"] == pytest.approx(0.85)
    assert facts["busy_chip_count"] == 2  # 0.9 and 0.5; 0.05 is below the busy line
    assert facts["mean_busy_chip_aicore_ratio"] == pytest.approx(0.7)
    # among the chips running processes (npu1 runs none, npu2's AI Core is unknown)
    assert facts["in_use_chip_count"] == 3
    assert facts["in_use_max_aicore_ratio"] == 0.9 and facts["in_use_busiest_chip"] == "npu0/chip0"
    assert facts["in_use_min_aicore_ratio"] == 0.5 and facts["in_use_idlest_chip"] == "npu10/chip0"
    assert facts["in_use_aicore_spread"] == pytest.approx(0.4)


def test_host_aggregates_without_chips():
    facts = facts_of(Snapshot(time=0.0, host=HostSample(), chips=[], sources={}))["host"]
    assert facts["chip_count"] == 0
    assert facts["max_chip_aicore_ratio"] is None and facts["chip_aicore_spread"] is None
    assert facts["busy_chip_count"] == 0 and facts["mean_busy_chip_aicore_ratio"] is None
    assert facts["in_use_chip_count"] == 0 and facts["in_use_aicore_spread"] is None


def test_host_numa_facts():
    host = HostSample(cpu_ratio=0.3, numa_balancing=1,
                      numa_nodes=[NumaNode(0, cpu_ratio=0.6), NumaNode(1, cpu_ratio=None), NumaNode(2, cpu_ratio=0.1)])
    facts = facts_of(Snapshot(time=0.0, host=host, chips=[], sources={}))["host"]
    assert facts["numa_node_count"] == 3
    assert facts["numa_cpu_max_ratio"] == 0.6 and facts["numa_cpu_min_ratio"] == 0.1
    assert facts["numa_balancing"] == 1


def test_source_facts():
    sources = {
        "npu-smi": SourceStatus(ok=True, last_success=990.0),
        "npu-smi:ecc": SourceStatus(ok=False, error="timed out after 10 s", last_success=700.0),
        "npu-smi:board": SourceStatus(ok=False, error="not polled yet"),
        "npu-smi:usages": SourceStatus(ok=False, error="not supported", unsupported=True),
        "npu-smi:power": SourceStatus(ok=False, error="cannot run npu-smi"),
        "hccn": SourceStatus(ok=False, error="no chips yet: npu-smi has not listed them", waiting_on="npu-smi"),
    }
    facts = facts_of(Snapshot(time=1000.0, host=HostSample(), chips=[], sources=sources))["host"]
    assert facts["source_up.npu-smi"] == 1 and facts["source_up.npu-smi:ecc"] == 0
    assert facts["source_age_seconds.npu-smi"] == 10.0
    assert facts["source_age_seconds.npu-smi:ecc"] == 300.0
    assert facts["source_age_seconds.npu-smi:board"] is None
    # not "down": an unsupported query, a tier waiting for its first poll, a source waiting for another one
    assert facts["down_sources"] == ["npu-smi:ecc", "npu-smi:power"]
    assert facts["down_source_count"] == 2
    assert facts["down_source_text"] == ("npu-smi:ecc (timed out after 10 s; last success 300 s ago); "
                                         "npu-smi:power (cannot run npu-smi; no success since start)")
    assert facts["max_down_source_age_seconds"] == 300.0


def test_version_facts_come_from_the_checker():
    seen = []

    def check(host):
        seen.append(host.driver_version)
        return False, "firmware 7.1.0 is outside the driver's range [7.3.0,7.5.99]"

    host = HostSample(driver_version="24.1.rc2")
    facts = facts_of(Snapshot(time=0.0, host=host, chips=[], sources={}), check_versions=check)["host"]
    assert facts["versions_compatible"] is False
    assert facts["versions_reason"].startswith("firmware 7.1.0")
    assert seen == ["24.1.rc2"]


def test_known_fact_names():
    assert is_known_fact("chip", "temperature_celsius")
    assert is_known_fact("chip", "host.cpu_ratio")
    assert is_known_fact("chip", "host.source_up.npu-smi")
    assert is_known_fact("host", "source_age_seconds.npu-smi:usages")
    assert is_known_fact("host", "chip_aicore_spread")
    assert not is_known_fact("host", "temperature_celsius")
    assert not is_known_fact("chip", "temprature_celsius")
    assert not is_known_fact("host", "source_up.")
    assert not is_known_fact("chip", "host.temperature_celsius")
