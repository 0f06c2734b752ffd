"""The simulated 910 A1 (atlas-800-9000) and Ascend 950 (atlas-350) hosts print what the real products print:
each output compared line by line with the real capture or Huawei's own example of it (tests/fixtures), and the
950's refusal of `-c`."""

import dataclasses
import json
import re

import pytest

from npumon.sim.npusmi import respond, sim_host
from npumon.sim.products import ATLAS_350, ATLAS_800_9000, PRODUCTS
from npumon.sim.render_query import render_query
from npumon.sim.render_table import render_info, render_list, render_mapping
from npumon.sources.npusmi import extras, kv
from test_sim import _state, capture, chip_values, lines_of, variant

PROCESS_MEMORY = [31913, 31913, 31913, 31913, 31912, 31913, 31912, 31912]


def query(product, name, card_chips, driver="25.5.1", firmware="7.8.0.6.201", chip=None):
    return render_query(product, name, card_chips[0][0].npu, chip, card_chips, driver, firmware)


def card(product, index=0, **values):
    return [(product.slots()[index], chip_values(**values))]


def without_values(lines, keys):
    """The lines with the values of `keys` cut off (values a capture redacted or that are per chip)."""
    return [line.split(":")[0] if line.split(":")[0].strip() in keys else line for line in lines]


# -- the 910 A1 (Atlas 800 training server, 8 x 910A) ---------------------------------------------------


def test_910_a1_table_matches_the_8_npu_910premiuma_capture_with_ddr_and_processes():
    product = variant(ATLAS_800_9000, npu_smi_version="23.0.rc2", chip_name="910PremiumA")
    readings = [(143.7, 39, 11, 1413), (295.7, 41, 90, 1612), (138.8, 42, 87, 3161), (179.6, 41, 15, 2436),
                (93.3, 41, 46, 1537), (93.1, 44, 65, 1940), (183.6, 44, 71, 2946), (189.2, 41, 71, 2197)]
    chips = [(slot, chip_values(power_watts=power, temperature_celsius=temp, aicore_percent=aicore, ddr_used_mb=ddr,
                                memory_used_mb=31842, hugepages_used=34, hugepages_total=34,
                                processes=[(5139 + 2 * slot.npu, "python", PROCESS_MEMORY[slot.npu])]))
             for slot, (power, temp, aicore, ddr) in zip(product.slots(), readings)]
    assert lines_of(render_info(product, chips, "23.0.rc2")) == capture("info_910premiuma_8npu_procs_v23.0.rc2.txt",
                                                                         skip=1)


def test_910_a1_mapping_list_and_board_match_the_910a_captures():
    # this capture's lines carry no trailing spaces (npu-smi pads the header's last cell, FORMATS.md 4.9)
    assert [line.rstrip() for line in lines_of(render_mapping(ATLAS_800_9000))] == capture(
        "info-m_910a_8npu_v23.0.5_tabs.txt", skip=1)
    # a server build: the count and each NPU's chip count, no product name or serial (as on the 910B server)
    assert lines_of(render_list(ATLAS_800_9000)).count("\tChip Count                     : 1") == 8
    product = variant(ATLAS_800_9000, bus_ids=("0000:61:00.0",) + ATLAS_800_9000.bus_ids[1:])
    board = query(product, "board", card(product), driver="23.0.5", firmware="7.1.0.7.220")
    assert lines_of(board) == capture("info-t-board-card_910a_v23.0.5_tabs.txt", skip=1)
    chip_board = query(product, "board", card(product), firmware="7.1.0.7.220", chip=0)
    die_keys = ("VDie ID", "NDie ID")
    assert without_values(lines_of(chip_board), die_keys) == without_values(
        capture("info-t-board-chip_910a_v23.0.5_tabs.txt", skip=1), die_keys)
    assert extras.parse_chip_identity(chip_board, chip=0)[0]["model_name"] == "910A-Ascend-V1"  # npu-exporter's


def test_910_a1_usages_common_and_ecc_match_the_captures():
    usable = variant(ATLAS_800_9000, memory_total_mb=(31129,), ddr_total_mb=(13553,) * 8)
    usages = query(usable, "usages", card(usable, ddr_used_mb=814))  # 6 % of 13553 MB
    # the card-level form ends each chip block with a blank line; the capture was trimmed after the last key
    assert lines_of(usages) == capture("info-t-usages_910a_v23.0.5_tabs.txt", skip=1) + [""]
    bin_30 = variant(ATLAS_800_9000, aicore_count=30, aicore_rated_mhz=900)
    common = query(bin_30, "common", card(bin_30, ddr_used_mb=909, aicore_freq_mhz=900, temperature_celsius=41,
                                           power_watts=71.7))
    # the doc's copy has no blank line after Chip Count (the real 23.0.rc2 output has one)
    assert [line for line in lines_of(common, " " * 8) if line] == capture("info-t-common_910a1_30cores_doc.txt")
    ecc = query(ATLAS_800_9000, "ecc", card(ATLAS_800_9000, 1))
    assert lines_of(ecc, "") == capture("info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt") + [""]


def test_910_a1_chip_health_matches_the_alarm_and_ok_captures():
    errors = [(0xA4025021, "ascend_monitor adda heart beat lost error"),
              (0x8C03A000, "node type=process-manager, sensor type=General Software, "
                           "event state=The process start failed or exit abnormally"),
              (0x8C084E00, "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.")]
    alarm = query(ATLAS_800_9000, "health", card(ATLAS_800_9000, health="Alarm", errors=errors), chip=0)
    assert lines_of(alarm) == capture("info-t-health_910a_ALARM_errcodes_tabs.txt", skip=1)
    assert lines_of(query(ATLAS_800_9000, "health", card(ATLAS_800_9000), chip=0)) == capture(
        "info-t-health_910a_OK_v23.0.5_tabs.txt", skip=1)


def test_910_a1_has_no_mcu_and_answers_only_its_chips():
    host = sim_host(_state("healthy", "atlas-800-9000"), 0.0)
    assert respond(["info", "-t", "temp", "-i", "0", "-c", "1"], host)[0].startswith("Invalid chip id.\n")
    assert "Chip Name" not in respond(["info", "-t", "common", "-i", "0"], host)[0]  # no MCU block
    assert "Mcu" not in respond(["info", "-m"], host)[0]
    sensors = respond(["info", "-t", "sensors", "-i", "0"], host)
    assert sensors == ("This device does not support querying sensors.\n", 0)


# -- the Ascend 950 (Atlas 350, 950PR) ----------------------------------------------------------------------


def test_950_table_matches_the_atlas_350_doc():
    product = variant(ATLAS_350, npu_smi_version="x.x.x", chip_name="xxx", cards=(0,), bus_ids=("0000:91:00.0",),
                      memory_total_mb=(86016,))
    chips = [(product.slots()[0], chip_values(power_watts=204.4, temperature_celsius=56, memory_used_mb=4439))]
    assert lines_of(render_info(product, chips, "x.x.x")) == capture("doc950_info_atlas350_v950.txt", skip=1)


def test_950_table_keeps_its_width_with_six_digit_hbm_and_processes():
    host = sim_host(_state("healthy", "atlas-350"), 0.0)
    table = respond(["info"], host)[0].splitlines()
    assert {len(line) for line in table} == {99}
    assert sum("VLLMEngineCore" in line for line in table) == 8


def test_950_mapping_and_list_match_the_doc():
    one_card = variant(ATLAS_350, cards=(0,), mapping_name="xxx")
    assert render_mapping(one_card).split("\n")[:-1] == capture("doc950_info-m.txt", skip=1)
    listed = variant(ATLAS_350, cards=(0,), board=dataclasses.replace(ATLAS_350.board, product_name="A5 PCIe Card"))
    expected = capture("doc950_info-l.txt", skip=1)
    assert without_values(lines_of(render_list(listed), ""), ("Serial Number",)) == without_values(
        expected, ("Serial Number",)) + [""]


DOC_VALUES = dict(memory_used_mb=3933, ctrlcpu_percent=40, hbm_bandwidth_percent=3, aicore_percent=0,
                  aivector_percent=0, aicpu_percent=0, aicube_percent=0, npu_utilization_percent=0)


@pytest.mark.parametrize("name, values, indent", [
    ("usages", DOC_VALUES, ""),
    ("common", dict(memory_used_mb=3933, aicore_freq_mhz=100, temperature_celsius=65, power_watts=298.6), ""),
    ("power", dict(power_watts=296.5), " " * 8),
    ("temp", dict(temperature_celsius=53), ""),
    ("sensors", dict(temperature_celsius=65, hbm_temperature_celsius=63), ""),
    ("ecc", {}, " " * 8),
    ("health", {}, " " * 8),
    ("memory", dict(hbm_temperature_celsius=63), " " * 8),
    ("current-fault-event", dict(health="Alarm", errors=[(0x81AF8000, "")]), ""),
])
def test_950_queries_match_the_doc(name, values, indent):
    text = query(ATLAS_350, name, card(ATLAS_350, **values))
    assert lines_of(text, indent) == capture("doc950_info-t-{}.txt".format(name), skip=1)


def test_950_board_matches_the_doc_and_the_real_950pr_capture():
    doc = variant(ATLAS_350, bus_ids=("0000:F1:00.0",) + ATLAS_350.bus_ids[1:],
                  board=dataclasses.replace(ATLAS_350.board, board_id=0x1B))
    rendered = lines_of(query(doc, "board", card(doc)), " " * 14)
    expected = capture("doc950_info-t-board.txt", skip=1)
    placeholders = {line.split(":")[0].strip() for line in expected if line.endswith(": xxx")} | {"DDie ID"}
    assert without_values(rendered, placeholders) == without_values(expected, placeholders)
    real = variant(ATLAS_350, bus_ids=("0000:61:00.0",) + ATLAS_350.bus_ids[1:])
    rendered = lines_of(query(real, "board", card(real), driver="25.7.rc1.6", firmware="9.0.0.105.229"), "")
    # the capture's author dropped some lines and annotated one: each of its lines is there, in its order
    shown = [re.sub(r"\s+#.*", "", line) for line in capture("info-t-board_950pr_v25.7.rc1.6_annotated.txt")]
    assert [line for line in rendered if line in shown] == shown
    assert extras.parse_chip_identity(query(real, "board", card(real)))[0]["model_name"] == "Ascend950PR-Ascend-V100"


def test_950_refuses_the_chip_option_as_npu_smi_v2_does():
    host = sim_host(_state("healthy", "atlas-350"), 0.0)
    for name in ("health", "volt", "board"):
        text, status = respond(["info", "-t", name, "-i", "0", "-c", "0"], host)
        assert (text, status) == ("This device does not support input parameter of -c.\n", 0)
        assert kv.classify_error(text).kind == "unsupported"
    assert respond(["info", "-t", "volt", "-i", "0"], host)[0] == (
        "\tNPU ID                         : 0\n\tVoltage(V)                     : 0.80\n")
    # its only die id, the DDie ID, stands in for the VDie ID npu-exporter reads through DCMI
    identity = extras.parse_chip_identity(respond(["info", "-t", "board", "-i", "3"], host)[0])
    assert re.fullmatch(r"[0-9A-F]{8}(-[0-9A-F]{8}){4}", identity[0]["vdie_id"])


def test_both_products_are_listed_with_their_own_chips():
    assert {"atlas-800-9000", "atlas-350"} <= set(PRODUCTS)
    assert [slot.ddr_total_mb for slot in ATLAS_800_9000.slots()][3] == 15039
    assert {slot.ddr_total_mb for slot in ATLAS_350.slots()} == {0}


# -- the rules fire on them as on the default product --------------------------------------------------------

FAULTS = [("healthy", 0, set()), ("overheat", 2, {"temperature-critical", "temperature-warning"}),
          ("ecc-rising", 2, {"ecc-uncorrectable"}), ("health-alarm", 2, {"health-alarm", "health-warning"}),
          ("health-critical", 2, {"health-critical", "health-unknown"}),
          ("board-incompatible", 2, {"board-incompatible"}), ("memory-bound", 0, {"memory-bound"})]


@pytest.mark.parametrize("product", ["atlas-800-9000", "atlas-350"])
@pytest.mark.parametrize("scenario, code, rules", FAULTS, ids=[fault[0] for fault in FAULTS])
def test_the_rules_fire_as_on_the_default_product(cli, product, scenario, code, rules):
    """The exit code and findings test_check.py asserts for each scenario on the 910B3 host (through the CLI's
    main() in-process: tests/conftest.py's `cli`)."""
    full = ["--full"] if scenario in ("board-incompatible", "memory-bound") else []
    proc = cli("check", "--json", "--simulate={}".format(scenario), "--sim-product", product, *full)
    document = json.loads(proc.stdout)
    assert proc.returncode == code, (document["findings"], proc.stderr[-2000:])
    assert {finding["rule"] for finding in document["findings"]} == rules
    assert len(document["chips"]) == 8
    assert all(source["ok"] or source["unsupported"] for name, source in document["sources"].items()
               if name.startswith("npu-smi")), document["sources"]
