"""npu-exporter's families as npumon renders them, against npu-exporter's documented contract
(tests/npu_exporter_contract.py) and the mapping table of docs/npu-exporter.md."""

import re

import pytest

from npumon.model import MIB, ChipSample, HostSample, ProcessSample, Snapshot
from npumon.outputs import npu_exporter
from npumon.outputs.exporter import ExporterView, render_families
from npumon.sim.products import PRODUCTS
from npu_exporter_contract import CONTRACT, mapping_table

def test_every_family_has_npu_exporters_name_labels_and_help():
    served = {spec.name: (tuple(spec.labels), spec.help) for spec in npu_exporter.BASE_METRICS}
    assert served == CONTRACT


def test_with_a_node_label_every_family_gets_node_last():
    for spec in npu_exporter.with_node_label(npu_exporter.BASE_METRICS):
        assert spec.labels == CONTRACT[spec.name][0] + ("node",)


def test_the_readme_table_names_every_served_family_and_only_real_ones():
    table = mapping_table()
    served = {spec.name for spec in npu_exporter.BASE_METRICS}
    # every family npumon serves has its row (the ten error code families share one: _1 .. _9)
    assert served - set(table) - {"npu_chip_info_error_code_{}".format(n) for n in range(2, 9)} == set()
    # a family the table says is served on some product is one npumon declares
    said_served = {family for family, cells in table.items() if any(cell != "no" for cell in cells.values())}
    assert said_served - served == set()
    # a column for every simulated product
    assert set(next(iter(table.values()))) == {"atlas-800i-a2", "atlas-a3", "atlas-300i-duo", "atlas-200i-a2",
                                               "atlas-800-9000", "atlas-350"} == set(PRODUCTS)


@pytest.mark.parametrize("health, value", [("OK", 1), ("Warning", 0), ("Alarm", 0), ("Critical", 0),
                                           ("UNKNOWN", -1), ("garbled", -1), (None, None)])
def test_health_encoding(health, value):
    assert npu_exporter.health_value(health) == value


@pytest.mark.parametrize("name, family", [
    ("910B3", "910b"), ("Ascend910", "a3"), ("910_9392", "a3"), ("910A", "910a"), ("910ProB", "910a"),
    ("310P3", "310p"), ("Ascend 310P3", "310p"), ("310B4", "310b"), ("310", "310"), ("Ascend950PR", "950"),
    ("", None), (None, None), ("Mcu", None)])
def test_chip_family_from_the_npu_smi_name(name, family):
    assert npu_exporter.chip_family(name) == family


def test_node_label_reads_the_environment_or_takes_the_value():
    assert npu_exporter.resolve_node_label("$NODE_NAME", {"NODE_NAME": "worker-3"}) == "worker-3"
    assert npu_exporter.resolve_node_label("${NODE_NAME}", {"NODE_NAME": "worker-3"}) == "worker-3"
    assert npu_exporter.resolve_node_label("$NODE_NAME", {}) is None
    assert npu_exporter.resolve_node_label("rack7-n01") == "rack7-n01"
    assert npu_exporter.resolve_node_label(None) is None
    assert npu_exporter.resolve_node_label("") is None


def test_exporter_version_has_npu_exporters_shape():
    assert re.fullmatch(r"npumon-\S+_linux-\S+", npu_exporter.exporter_version())


# -- rendering one snapshot --------------------------------------------------------------------------------

def chip(**values):
    return ChipSample(**dict(dict(npu=0, chip=0, health="OK", temperature_celsius=40.0), **values))


def rendered(chips, node=None, only=False):
    snapshot = Snapshot(time=1.0, host=HostSample(driver_version="25.5.1"), chips=chips, sources={},
                        driver_version="25.5.1")
    families = render_families(ExporterView(snapshot=snapshot, findings=[]), npu_exporter_compat=True, node=node,
                               only_npu_exporter=only)
    return {family.name: {tuple(sorted(s.labels.items())): s.value for s in family.samples} for family in families}


def values_of(found, name):
    return sorted(found.get(name, {}).values())


def test_ddr_on_910b_and_a3_is_absent_not_zero_and_hbm_on_310_is_absent():
    found = rendered([
        chip(npu=0, name="910B3", memory_used_bytes=0, memory_total_bytes=0, hbm_used_bytes=MIB,
             hbm_total_bytes=64 * MIB),
        chip(npu=1, name="Ascend910", memory_used_bytes=0, memory_total_bytes=0, hbm_used_bytes=MIB,
             hbm_total_bytes=64 * MIB),
        chip(npu=2, name="310P3", memory_used_bytes=2 * MIB, memory_total_bytes=8 * MIB),
        chip(npu=3, name="310B4", memory_used_bytes=1 * MIB, memory_total_bytes=4 * MIB),
    ])
    assert values_of(found, "npu_chip_info_total_memory") == [4.0, 8.0]  # the 310P and the 310B only
    assert values_of(found, "npu_chip_info_used_memory") == [1.0, 2.0]
    assert values_of(found, "npu_chip_info_hbm_total_memory") == [64.0, 64.0]  # 910B and A3 only


def test_310p_power_is_the_cards_on_every_chip():
    found = rendered([chip(npu=2, chip=0, name="310P3", card_power_watts=44.7),
                      chip(npu=2, chip=1, name="310P3", card_power_watts=44.7, device_id=1)])
    assert values_of(found, "npu_chip_info_power") == [44.7, 44.7]


def test_machine_card_nums_only_where_npu_exporter_counts_cards():
    assert "machine_card_nums" not in rendered([chip(name="310B4")])
    assert values_of(rendered([chip(name="310P3"), chip(npu=5, name="310P3")]), "machine_card_nums") == [2.0]


def test_vector_cube_and_overall_utilization_per_family():
    ratios = dict(aicore_ratio=0.5, aivector_ratio=0.25, aicube_ratio=0.75, npu_util_ratio=0.6, vectorcore_ratio=0.1)
    found = rendered([chip(npu=0, name="910A", **ratios), chip(npu=1, name="310P3", **ratios)])
    assert values_of(found, "npu_chip_info_vector_utilization") == [25.0]  # the 310P: its aivector first
    assert "npu_chip_info_cube_utilization" not in found  # neither 910A nor 310P has multi-util
    found = rendered([chip(name="910B3", **ratios)])
    assert values_of(found, "npu_chip_info_cube_utilization") == [75.0]
    assert values_of(found, "npu_chip_info_overall_utilization") == [60.0]


def test_identity_labels_error_codes_and_units():
    found = rendered([chip(name="910B3", device_id=4, vdie_id="42C711D4-20B03704-4A10C8D4-14CC040A-D2102003",
                           model_name="910B3-Ascend-V1", bus_id="0000:01:00.0", health="Alarm",
                           error_codes=["80E01801", "zz", "A4025021"], voltage_volts=0.8, aicore_freq_mhz=1800.0,
                           processes=[ProcessSample(npu=0, chip=0, pid=42, name="python", memory_bytes=3 * MIB)],
                           serial_number="1025C9048791")])
    labels = (("container_name", ""), ("id", "4"), ("model_name", "910B3-Ascend-V1"), ("namespace", ""),
              ("pcie_bus_info", "0000:01:00.0"), ("pod_name", ""),
              ("vdie_id", "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"))
    assert found["npu_chip_info_health_status"] == {labels: 0.0}
    assert found["npu_chip_info_error_code"] == {labels: 2162169857.0}  # 0x80E01801, as in npu-exporter's docs
    assert found["npu_chip_info_error_code_1"] == {labels: float(0xA4025021)}
    assert found["npu_chip_info_voltage"] == {labels: 0.8}
    assert found["npu_chip_info_aicore_current_freq"] == {labels: 1800.0}
    assert found["npu_chip_info_process_info"] == {
        tuple(sorted(labels + (("process_id", "42"), ("container_id", "")))): 3.0}
    name_labels = tuple(sorted(dict(labels, name="910B3-Ascend-V1").items() - {("model_name", "910B3-Ascend-V1")}))
    assert found["npu_chip_info_name"] == {name_labels: 1.0}
    assert found["npu_chip_info_serial_number"] == {tuple(sorted(labels + (("serial_number", "1025C9048791"),))): 1.0}
    assert found["node_base_info"] == {(("driverVersion", "25.5.1"),
                                        ("exporterVersion", npu_exporter.exporter_version())): 1.0}
    assert values_of(found, "machine_unhealthy_npu_nums") == [1.0]


def test_node_label_and_npu_exporter_only_rendering():
    found = rendered([chip(name="910B3")], node="worker-3", only=True)
    assert not any(name.startswith("npumon_") for name in found)
    for name, series in found.items():
        for labels in series:
            assert ("node", "worker-3") in labels, name
