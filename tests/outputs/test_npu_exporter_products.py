"""Every simulated product in compat mode, end to end through the CLI's main(): `npumon check --full` against
the simulator writes the exposition (--textfile) and the JSON document; every family the mapping table of
docs/npu-exporter.md lists for the product is there for every chip it says, with npu-exporter's labels and units,
and nothing it says is absent is."""

import json
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from npu_exporter_contract import CONTRACT, VDIE, mapping_table

pytestmark = pytest.mark.integration

PRODUCTS = ("atlas-800i-a2", "atlas-a3", "atlas-300i-duo", "atlas-200i-a2", "atlas-800-9000", "atlas-350")
CHIPS = {"atlas-800i-a2": 8, "atlas-a3": 16, "atlas-300i-duo": 4, "atlas-200i-a2": 1, "atlas-800-9000": 8,
         "atlas-350": 8}
MODEL = {"atlas-800i-a2": "910B3-Ascend-V1", "atlas-a3": "Ascend910-Ascend-V1",
         "atlas-300i-duo": "310P3-Ascend-V1", "atlas-200i-a2": "310B4-Ascend-V1", "atlas-800-9000": "910A-Ascend-V1",
         "atlas-350": "Ascend950PR-Ascend-V100"}
PHY_ID_PRODUCTS = ("atlas-a3", "atlas-350")  # the npu-smi that prints a Phy-ID (the 950's prints no logical id)
MACHINE = ("machine_", "node_base_info", "npu_exporter_version_info")


def run_check(cli, tmp_path, product, scenario="healthy", backend="auto"):
    """(families by name, JSON document) of one `check --full` in compat mode, through the CLI's main()
    in-process (tests/conftest.py's `cli`)."""
    config = tmp_path / "npumon.yaml"
    config.write_text("exporter:\n  npu_exporter_compat: true\ncollect:\n  backend: {}\n".format(backend))
    textfile = tmp_path / "prom"
    textfile.mkdir()
    # without the probe: no npu-exporter family comes from it, and it starts a child process per chip
    proc = cli("check", "--simulate={}".format(scenario), "--sim-product", product, "--full", "--no-probe",
               "--timeout", "60", "--json", "--config", str(config), "--textfile", str(textfile))
    assert proc.returncode in (0, 1, 2), proc.stderr
    document = json.loads(proc.stdout)
    with open(str(textfile / "npumon.prom"), encoding="utf-8") as handle:
        families = {family.name: family for family in text_string_to_metric_families(handle.read())
                    if not family.name.startswith("npumon_")}
    return families, document


@pytest.fixture(scope="module")
def healthy_checks():
    """product -> run_check's result on `healthy`: one `check --full` per product for the module, run by the first
    test that asks and read by the others (they only read it), instead of one per test."""
    return {}


def healthy_check(cli, tmp_path, product, checks):
    if product not in checks:
        checks[product] = run_check(cli, tmp_path, product)
    return checks[product]


def chips_with(family):
    return {sample.labels["id"] for sample in family.samples}


@pytest.fixture(scope="module")
def table():
    return mapping_table()


@pytest.mark.parametrize("product", PRODUCTS)
def test_every_family_of_the_mapping_table_for_every_chip(cli, tmp_path, product, table, healthy_checks):
    families, document = healthy_check(cli, tmp_path, product, healthy_checks)
    ids = {str(n) for n in range(CHIPS[product])}
    first_dies = {str(chip["phy_id"]) for chip in document["chips"] if chip["chip"] == 0}
    for name, cells in sorted(table.items()):
        cell = cells[product]
        if name.startswith(MACHINE):
            assert (name in families) == (cell == "yes"), name
            continue
        if cell in ("if codes", "if processes", "if pods"):
            continue  # the healthy scenario has no codes; processes are asserted below; pods: tests/sources/k8s
        present = chips_with(families[name]) if name in families else set()
        if cell == "yes":
            assert present == ids, name
        elif cell == "DCMI":
            assert present == set(), name  # read through DCMI only: absent under the npu-smi backend of this run
        elif cell == "die 0":
            assert present == first_dies and len(present) == CHIPS[product] // 2, name
        else:
            assert cell == "no" and present == set(), name
    # every series carries exactly npu-exporter's label set
    for name, family in families.items():
        for sample in family.samples:
            assert tuple(sorted(sample.labels)) == tuple(sorted(CONTRACT[name][0])), name
        assert family.documentation == CONTRACT[name][1]
        assert family.type == "gauge"


def test_the_950s_ub_families_through_dcmi_on_every_port_of_every_chip(cli, tmp_path, table):
    families, _ = run_check(cli, tmp_path, "atlas-350", scenario="ub-degraded", backend="dcmi")
    ub = sorted(name for name, cells in table.items() if cells["atlas-350"] == "DCMI")
    assert len(ub) == 40
    for name in ub:
        ports = {(s.labels["id"], s.labels["udie"], s.labels["port"]) for s in families[name].samples}
        assert ports == {(str(n), "0", str(port)) for n in range(CHIPS["atlas-350"]) for port in (4, 5, 6)}, name
    crc = {(s.labels["id"], s.labels["port"]): s.value for s in families["npu_chip_info_crc_error_sum"].samples}
    assert crc[("2", "5")] >= 880 and crc[("2", "4")] == 0


@pytest.mark.parametrize("product", PRODUCTS)
def test_identity_labels_and_check_json_ids(cli, tmp_path, product, healthy_checks):
    families, document = healthy_check(cli, tmp_path, product, healthy_checks)
    samples = families["npu_chip_info_name"].samples
    # the ids a tool joins on: 0..n-1 in device order, unique die ids in npu-exporter's format
    assert sorted(int(s.labels["id"]) for s in samples) == list(range(CHIPS[product]))
    vdie_ids = [s.labels["vdie_id"] for s in samples]
    assert all(VDIE.match(vdie) for vdie in vdie_ids) and len(set(vdie_ids)) == len(vdie_ids)
    assert {s.labels["name"] for s in samples} == {MODEL[product]}
    chips = document["chips"]
    assert len(chips) == CHIPS[product]
    for chip in chips:
        assert isinstance(chip["device_id"], int) == (product != "atlas-350"), chip
        assert VDIE.match(chip["vdie_id"]), chip
        assert chip["model_name"] == MODEL[product]
        assert (chip["phy_id"] is not None) == (product in PHY_ID_PRODUCTS)
    by_id = {s.labels["id"]: s.labels for s in samples}
    for chip in chips:
        labels = by_id[str(chip["phy_id"] if chip["phy_id"] is not None else chip["device_id"])]
        assert labels["vdie_id"] == chip["vdie_id"]
        assert labels["pcie_bus_info"] == (chip["bus_id"] or "")


def values(families, name):
    return [sample.value for sample in families[name].samples]


@pytest.mark.parametrize("product", ("atlas-800i-a2", "atlas-300i-duo", "atlas-800-9000"))
def test_units_are_npu_exporters(cli, tmp_path, product, healthy_checks):
    families, document = healthy_check(cli, tmp_path, product, healthy_checks)
    chips = {chip["device_id"]: chip for chip in document["chips"]}
    for sample in families["npu_chip_info_temperature"].samples:  # Celsius
        assert sample.value == chips[int(sample.labels["id"])]["temperature_celsius"]
    assert all(0 <= value <= 100 for value in values(families, "npu_chip_info_utilization"))  # percent
    assert all(0.5 <= value <= 1.2 for value in values(families, "npu_chip_info_voltage"))  # volts
    assert all(300 <= value <= 2000 for value in values(families, "npu_chip_info_aicore_current_freq"))  # MHz
    memory = "npu_chip_info_total_memory" if product == "atlas-300i-duo" else "npu_chip_info_hbm_total_memory"
    for sample in families[memory].samples:  # MB = MiB
        chip = chips[int(sample.labels["id"])]
        total = chip["memory_total_bytes"] if product == "atlas-300i-duo" else chip["hbm_total_bytes"]
        assert sample.value == total / 1048576
    if product == "atlas-800-9000":  # the 910 A1's DDR, next to its HBM
        ddr = {int(sample.labels["id"]): sample.value for sample in families["npu_chip_info_total_memory"].samples}
        assert ddr == {device: chip["memory_total_bytes"] / 1048576 for device, chip in chips.items()}
        assert set(ddr.values()) == {15137, 15039}
    process_mb = {(s.labels["id"], s.labels["process_id"]): s.value
                  for s in families["npu_chip_info_process_info"].samples}
    expected = {(str(chip["device_id"]), str(p["pid"])): p["memory_bytes"] / 1048576
                for chip in document["chips"] for p in chip["processes"]}
    assert process_mb == expected and expected


@pytest.mark.parametrize("product", ("atlas-800i-a2", "atlas-350"))
def test_error_codes_as_numbers_in_npu_exporters_slots(cli, tmp_path, product):
    families, document = run_check(cli, tmp_path, product, scenario="health-alarm")
    for chip in document["chips"]:
        codes = [int(code, 16) for code in chip["error_codes"]]
        slots = [("npu_chip_info_error_code" if n == 0 else "npu_chip_info_error_code_{}".format(n))
                 for n in range(len(codes))]
        chip_id = str(chip["phy_id"] if chip["phy_id"] is not None else chip["device_id"])  # npu-exporter's id
        found = [next((s.value for s in families[slot].samples if s.labels["id"] == chip_id), None)
                 if slot in families else None for slot in slots]
        assert found == codes, chip["error_codes"]
    assert any(chip["error_codes"] for chip in document["chips"])
    health = {s.labels["id"]: s.value for s in families["npu_chip_info_health_status"].samples}
    assert sorted(health.values()).count(0.0) == sum(chip["health"] != "OK" for chip in document["chips"])
    assert re.fullmatch(r"\d+", next(iter(health)))
