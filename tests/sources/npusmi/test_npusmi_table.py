"""Tests of the main `npu-smi info` table parser against real captures (tests/fixtures, copied from
shared/reference/npu-smi) and against edited copies of them. Expected values are read off the
captures by eye."""

import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npumon.model import CHIP_VALUE_FIELDS, MIB, ChipSample
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.npusmi.table import MainTable, TableChip, TableProcess, parse_info
from paths import FIXTURES



def load_capture(name: str) -> str:
    """The output part of a capture file: everything after its `# ---` header line."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        text = handle.read()
    return text.split("# ---\n", 1)[1]


def parse_capture(name: str) -> MainTable:
    return parse_info(load_capture(name))


def chip(table: MainTable, npu: int, chip_index: int = 0) -> TableChip:
    matches = [c for c in table.chips if (c.npu, c.chip) == (npu, chip_index)]
    assert len(matches) == 1, matches
    return matches[0]


def ids(table: MainTable):
    return [(c.npu, c.chip) for c in table.chips]


# --- every main-table capture -----------------------------------------------------------------


def test_310_v21_no_hugepages_two_chips_in_one_card():
    table = parse_capture("info_310_atlas300i-3000_card1_2chips_v21.0.3.1_docstring.txt")
    assert (table.tool_version, table.driver_version) == ("21.0.3.1", "21.0.3.1")
    assert ids(table) == [(1, 0), (1, 1)]
    first, second = table.chips
    assert first == TableChip(
        npu=1, chip=0, name="310", health="OK", device_id=0, phy_id=None, bus_id="0000:01:00.0",
        power_watts=12.8, temperature_celsius=49.0, hugepages_used=None, hugepages_total=None,
        aicore_percent=0.0, memory_used_mb=2621, memory_total_mb=8192, hbm_used_mb=None, hbm_total_mb=None,
    )
    assert (second.device_id, second.bus_id, second.memory_used_mb) == (1, "0000:02:00.0", 2621)
    assert table.processes == () and table.warnings == ()


def test_310b4_narrow_layout_ignores_prompt_and_later_command():
    table = parse_capture("info_310b4_200idk-a2_narrow_v23.0.rc3.txt")
    assert (table.tool_version, table.driver_version) == ("23.0.rc3", "23.0.rc3")
    assert ids(table) == [(0, 0)]
    board = table.chips[0]
    assert (board.name, board.health, board.power_watts, board.temperature_celsius) == ("310B4", "OK", 7.7, 54.0)
    assert (board.hugepages_used, board.hugepages_total) == (15, 15)
    assert (board.device_id, board.bus_id, board.aicore_percent) == (0, None, 0.0)
    assert (board.memory_used_mb, board.memory_total_mb) == (2166, 3513)
    assert (board.hbm_used_mb, board.hbm_total_mb) == (None, None)
    assert table.processes == ()


def test_310b4_alarm_health():
    table = parse_capture("info_310b4_ALARM_v23.0.0_fixture.txt")
    assert (table.tool_version, table.driver_version) == ("23.0.0", "23.0.0")
    assert len(table.chips) == 1
    board = table.chips[0]
    assert board.health == "Alarm"
    assert (board.npu, board.chip, board.name) == (0, 0, "310B4")
    assert (board.power_watts, board.temperature_celsius) == (0.0, 65.0)
    assert (board.hugepages_used, board.hugepages_total) == (15, 15)
    assert (board.device_id, board.bus_id) == (0, None)
    assert (board.memory_used_mb, board.memory_total_mb) == (3628, 15609)
    assert board.values()["health"] == "Alarm"


def test_310p3_duo_v25_two_chips_share_a_bus_id_process_header_cut():
    table = parse_capture("info_310p3-duo_1card2chips_v25.2.0_partial.txt")
    assert (table.tool_version, table.driver_version) == ("25.2.0", "25.2.0")
    assert ids(table) == [(2, 0), (2, 1)]
    die0, die1 = table.chips
    assert (die0.name, die0.health, die0.power_watts, die0.temperature_celsius) == ("310P3", "OK", None, 45.0)
    assert (die0.hugepages_used, die0.hugepages_total) == (0, 0)
    assert (die0.device_id, die0.bus_id, die0.memory_used_mb, die0.memory_total_mb) == (0, "0000:01:00.0", 1529, 44280)
    assert (die1.device_id, die1.bus_id, die1.temperature_celsius) == (1, "0000:01:00.0", 43.0)
    assert (die1.memory_used_mb, die1.memory_total_mb) == (1412, 43693)
    assert table.processes == ()


def test_310p3_duo_v24_drops_the_card_cut_after_its_first_cell():
    table = parse_capture("info_310p3-duo_host_v24.1.rc2_partial.txt")
    assert table.tool_version == "24.1.rc2"
    assert ids(table) == [(1, 0), (1, 1)]  # card 2 is cut off after "| 2       310P3   |"
    assert (table.chips[0].temperature_celsius, table.chips[0].memory_used_mb) == (59.0, 1397)
    assert (table.chips[1].temperature_celsius, table.chips[1].memory_used_mb) == (58.0, 1520)
    assert table.chips[1].memory_total_mb == 43693


def test_310p3_v22_0_0_prints_power_and_distinct_driver_version():
    table = parse_capture("info_310p3_1npu_tool22.0.0_drv22.0.2.txt")
    assert (table.tool_version, table.driver_version) == ("22.0.0", "22.0.2")
    assert ids(table) == [(0, 0)]
    card = table.chips[0]
    assert (card.name, card.power_watts, card.temperature_celsius) == ("310P3", 16.7, 57.0)
    assert (card.hugepages_used, card.hugepages_total) == (0, 0)
    assert (card.device_id, card.bus_id, card.aicore_percent) == (0, "0000:5E:00.0", 0.0)
    assert (card.memory_used_mb, card.memory_total_mb) == (932, 21534)


def test_310p3_card_id_2144():
    table = parse_capture("info_310p3_npu2144_tool22.0.2_drv22.0.4.txt")
    assert (table.tool_version, table.driver_version) == ("22.0.2", "22.0.4")
    assert ids(table) == [(2144, 0)]
    card = table.chips[0]
    assert (card.power_watts, card.temperature_celsius, card.bus_id) == (None, 47.0, "0000:86:00.0")
    assert (card.memory_used_mb, card.memory_total_mb) == (1807, 21527)


def test_310p3_card_24_with_empty_process_table():
    table = parse_capture("info_310p3_npu24_v23.0.0_with_proc_header.txt")
    assert table.tool_version == "23.0.0"
    assert ids(table) == [(24, 0)]
    card = table.chips[0]
    assert (card.health, card.power_watts, card.temperature_celsius) == ("OK", None, 29.0)
    assert (card.device_id, card.bus_id, card.memory_used_mb) == (0, "0000:04:00.0", 1832)
    assert table.processes == ()


def test_910_a1_hugepages_in_use_and_one_process_per_npu():
    table = parse_capture("info_910-32g_8npu_procs_hugepages_v23.0.rc3_doc-redacted.txt")
    assert (table.tool_version, table.driver_version) == ("23.0.rc3", "23.0.rc2.3")
    assert ids(table) == [(n, 0) for n in range(8)]
    first = chip(table, 0)
    assert (first.name, first.power_watts, first.temperature_celsius) == ("xxx", 73.4, 44.0)
    assert (first.hugepages_used, first.hugepages_total) == (1123, 1123)
    assert (first.bus_id, first.memory_used_mb, first.memory_total_mb) == ("0000:C1:00.0", 4565, 15137)
    assert (first.hbm_used_mb, first.hbm_total_mb) == (30710, 32768)
    assert (first.device_id, first.phy_id) == (None, None)
    third = chip(table, 3)
    assert (third.bus_id, third.memory_total_mb, third.hbm_used_mb) == ("0000:01:00.0", 15039, 30709)
    assert (chip(table, 7).power_watts, chip(table, 7).memory_used_mb) == (69.1, 4690)
    assert len(table.processes) == 8
    assert table.processes[0] == TableProcess(npu=0, chip=0, pid=139667, name="python", memory_mb=30780)
    assert table.processes[1] == TableProcess(npu=1, chip=0, pid=139577, name="python", memory_mb=30782)
    assert table.processes[7] == TableProcess(npu=7, chip=0, pid=139090, name="python", memory_mb=30780)


def test_910a_v21_0_2_no_hugepages_non_contiguous_cards():
    table = parse_capture("info_910a_2cards_v21.0.2.txt")
    assert (table.tool_version, table.driver_version) == ("21.0.2", "21.0.2")
    assert ids(table) == [(1, 0), (4, 0)]
    card1, card4 = table.chips
    assert (card1.name, card1.health, card1.power_watts, card1.temperature_celsius) == ("910A", "OK", 64.3, 56.0)
    assert (card1.hugepages_used, card1.hugepages_total) == (None, None)
    assert (card1.bus_id, card1.aicore_percent) == ("0000:3B:00.0", 0.0)
    assert (card1.memory_used_mb, card1.memory_total_mb) == (1809, 15079)
    assert (card1.hbm_used_mb, card1.hbm_total_mb) == (0, 32768)
    assert (card4.power_watts, card4.temperature_celsius, card4.bus_id) == (65.6, 58.0, "0000:86:00.0")


def test_910b1_partial_with_author_elision():
    table = parse_capture("info_910b1_8npu_v23.0.rc2_partial.txt")
    assert (table.tool_version, table.driver_version) == ("23.0.rc2", "23.0.rc2")
    assert ids(table) == [(0, 0), (1, 0), (7, 0)]
    first = chip(table, 0)
    assert (first.name, first.power_watts, first.temperature_celsius) == ("910B1", 88.4, 46.0)
    assert (first.memory_used_mb, first.memory_total_mb, first.hbm_used_mb, first.hbm_total_mb) == (0, 0, 4175, 65536)
    last = chip(table, 7)
    assert (last.power_watts, last.temperature_celsius) == (92.7, 48.0)
    assert (last.bus_id, last.hbm_used_mb) == ("0000:42:00.0", 4174)


def test_910b2c_trailing_spaces_and_one_process():
    table = parse_capture("info_910b2c_2npu_proc_v23.0.2.1_fixture.txt")
    assert (table.tool_version, table.driver_version) == ("23.0.2.1", "23.0.2.1")
    assert ids(table) == [(0, 0), (1, 0)]
    first, second = table.chips
    assert (first.name, first.power_watts, first.temperature_celsius) == ("910B2C", 88.6, 51.0)
    assert (first.bus_id, first.hbm_used_mb, first.hbm_total_mb) == ("0000:5A:00.0", 20701, 65536)
    assert (second.power_watts, second.bus_id, second.hbm_used_mb) == (99.6, "0000:19:00.0", 20687)
    assert table.processes == (TableProcess(npu=0, chip=0, pid=124528, name="python3.8", memory_mb=17400),)


def test_910b3_v25_vllm_process_and_five_digit_hbm():
    table = parse_capture("info_910b3_2npu_vllm-proc_v25.5.1_fixture.txt")
    assert (table.tool_version, table.driver_version) == ("25.5.1", "25.5.1")
    assert ids(table) == [(0, 0), (5, 0)]
    busy = chip(table, 5)
    assert (busy.power_watts, busy.temperature_celsius, busy.aicore_percent) == (100.8, 44.0, 12.0)
    assert (busy.bus_id, busy.hbm_used_mb, busy.hbm_total_mb) == ("0000:02:00.0", 60156, 65536)
    assert (chip(table, 0).power_watts, chip(table, 0).hbm_used_mb) == (102.8, 3445)
    assert table.processes == (
        TableProcess(npu=5, chip=0, pid=2290156, name="VLLMEngineCore", memory_mb=56630, container_pid=None),
    )


def test_910b3_eight_npus_idle():
    table = parse_capture("info_910b3_8npu_v23.0.7.txt")
    assert (table.tool_version, table.driver_version) == ("23.0.7", "23.0.7")
    assert ids(table) == [(n, 0) for n in range(8)]
    assert chip(table, 0) == TableChip(
        npu=0, chip=0, name="910B3", health="OK", bus_id="0000:C1:00.0", power_watts=102.8,
        temperature_celsius=55.0, hugepages_used=0, hugepages_total=0, aicore_percent=0.0,
        memory_used_mb=0, memory_total_mb=0, hbm_used_mb=3338, hbm_total_mb=65536,
    )
    fourth = chip(table, 3)
    assert (fourth.power_watts, fourth.temperature_celsius, fourth.bus_id) == (108.7, 57.0, "0000:82:00.0")
    assert (chip(table, 7).power_watts, chip(table, 7).hbm_used_mb) == (105.1, 3338)
    assert table.processes == ()


def test_910premiuma_busy_with_processes():
    table = parse_capture("info_910premiuma_8npu_procs_v23.0.rc2.txt")
    assert table.tool_version == "23.0.rc2"
    assert len(table.chips) == 8
    busy = chip(table, 1)
    assert (busy.name, busy.power_watts, busy.temperature_celsius) == ("910PremiumA", 295.7, 41.0)
    assert busy.aicore_percent == 90.0
    assert (busy.hugepages_used, busy.hugepages_total) == (34, 34)
    assert (busy.memory_used_mb, busy.memory_total_mb) == (1612, 15137)
    assert (busy.hbm_used_mb, busy.hbm_total_mb) == (31842, 32768)
    third = chip(table, 3)
    assert (third.bus_id, third.aicore_percent) == ("0000:01:00.0", 15.0)
    assert (third.memory_used_mb, third.memory_total_mb) == (2436, 15039)
    assert [p.pid for p in table.processes] == [5139, 5141, 5143, 5145, 5147, 5149, 5151, 5153]
    assert table.processes[4] == TableProcess(npu=4, chip=0, pid=5147, name="python", memory_mb=31912)


def test_a3_phy_id_die_power_dash_and_mixed_process_table():
    table = parse_capture("info_a3_910-93_4chips_proc_v25.2.0_fixture.txt")
    assert (table.tool_version, table.driver_version) == ("25.2.0", "25.2.0")
    assert ids(table) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [c.phy_id for c in table.chips] == [0, 1, 2, 3]
    die0 = chip(table, 0, 0)
    assert (die0.name, die0.power_watts, die0.temperature_celsius) == ("Ascend910", 162.8, 37.0)
    assert die0.bus_id == "0000:9C:00.0"
    assert (die0.device_id, die0.memory_used_mb, die0.memory_total_mb, die0.hbm_used_mb) == (None, 0, 0, 3133)
    assert chip(table, 0, 1).power_watts is None  # "-" on die 1
    last = chip(table, 1, 1)
    assert (last.bus_id, last.temperature_celsius) == ("0000:39:00.0", 38.0)
    assert (last.hbm_used_mb, last.hbm_total_mb) == (10568, 65536)
    assert table.processes == (TableProcess(npu=1, chip=1, pid=990711, name="python", memory_mb=7746),)


def test_a3_26x_wide_layout_across_an_excerpt_gap():
    table = parse_capture("info_a3_910-93_v26.0.rc2_wide_partial.txt")
    assert (table.tool_version, table.driver_version) == ("26.0.rc2", "26.0.rc2")
    assert ids(table) == [(0, 0), (0, 1), (7, 1)]
    first = chip(table, 0, 0)
    assert (first.phy_id, first.power_watts, first.temperature_celsius) == (0, 162.6, 34.0)
    assert first.bus_id == "0000:9D:00.0"
    assert (first.hbm_used_mb, first.hbm_total_mb) == (3419, 65536)
    last = chip(table, 7, 1)
    assert (last.phy_id, last.power_watts, last.bus_id, last.hbm_used_mb) == (15, None, "0000:83:00.0", 31877)
    assert table.processes == (
        TableProcess(npu=0, chip=0, pid=632268, name="python3.1", memory_mb=197, container_pid=None),
    )


def test_950_split_cells_and_npu_util():
    table = parse_capture("doc950_info_atlas350_v950.txt")
    assert (table.tool_version, table.driver_version) == ("x.x.x", "x.x.x")
    assert ids(table) == [(0, 0)]
    card = table.chips[0]
    assert (card.name, card.health, card.power_watts, card.temperature_celsius) == ("xxx", "OK", 204.4, 56.0)
    assert (card.hugepages_used, card.hugepages_total, card.bus_id) == (0, 0, "0000:91:00.0")
    assert (card.aicore_percent, card.npu_util_percent) == (0.0, 0.0)
    assert (card.memory_used_mb, card.memory_total_mb, card.hbm_used_mb, card.hbm_total_mb) == (0, 0, 4439, 86016)
    assert table.processes == ()


# --- values() ---------------------------------------------------------------------------------


def test_values_are_chip_sample_fields_in_base_units():
    busy = chip(parse_capture("info_910premiuma_8npu_procs_v23.0.rc2.txt"), 1)
    values = busy.values()
    assert set(values) <= set(CHIP_VALUE_FIELDS)
    assert values["aicore_ratio"] == pytest.approx(0.90)
    assert values["memory_used_bytes"] == 1612 * 1048576
    assert values["memory_total_bytes"] == 15137 * MIB
    assert values["hbm_used_bytes"] == 31842 * 1048576
    assert values["hbm_total_bytes"] == 32768 * 1048576
    assert (values["power_watts"], values["temperature_celsius"]) == (295.7, 41.0)
    assert (values["hugepages_used"], values["hugepages_total"]) == (34, 34)
    assert (values["name"], values["health"], values["bus_id"]) == ("910PremiumA", "OK", "0000:81:00.0")
    assert "npu_util_ratio" not in values  # no NPU Util column before 950
    sample = ChipSample(npu=busy.npu, chip=busy.chip)
    sample.update(values)
    assert sample.hbm_used_bytes == 31842 * MIB


def test_values_null_stays_null():
    values = chip(parse_capture("info_a3_910-93_4chips_proc_v25.2.0_fixture.txt"), 0, 1).values()
    assert values["power_watts"] is None
    assert values["phy_id"] == 1 and values["device_id"] is None
    three_ten = parse_capture("info_310b4_ALARM_v23.0.0_fixture.txt").chips[0].values()
    assert three_ten["bus_id"] is None and three_ten["hbm_used_bytes"] is None
    assert three_ten["memory_used_bytes"] == 3628 * MIB


def test_values_950_npu_util_fills_both_ratios():
    text = load_capture("doc950_info_atlas350_v950.txt").replace("| 0           0    / 0", "| 37          0    / 0")
    values = parse_info(text).chips[0].values()
    assert values["npu_util_ratio"] == pytest.approx(0.37)
    assert values["aicore_ratio"] == pytest.approx(0.37)
    assert set(values) <= set(CHIP_VALUE_FIELDS)


# --- process table variants -------------------------------------------------------------------

A3_PROCESS_HEADER = "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"
WIDE_PROCESS_HEADER = (
    "| NPU     Chip              | Process id    | Process name       | Process memory(MB)    | Process id in container |"
)


def with_processes(capture: str, header: str, rows):
    """A capture's chip table followed by a process table with the given header and rows."""
    text = load_capture(capture)
    chips_part = text.split("| NPU     Chip")[0] if "| NPU     Chip" in text else text
    rule = "+===========================+===============+====================================================+"
    return chips_part + "\n".join([header, rule] + [line for row in rows for line in (row, rule)]) + "\n"


def test_empty_process_name_is_none():
    text = with_processes("info_a3_910-93_4chips_proc_v25.2.0_fixture.txt", A3_PROCESS_HEADER, [
        "| 0       0                 | 935440        |                          | 141                     |",
    ])
    assert parse_info(text).processes == (TableProcess(npu=0, chip=0, pid=935440, name=None, memory_mb=141),)


def test_26x_process_id_in_container():
    text = with_processes("info_a3_910-93_v26.0.rc2_wide_partial.txt", WIDE_PROCESS_HEADER, [
        "| 0       0                 | 632268        | python3.1          | 197                   | 1234                    |",
        "| 0       1                 | 632269        | my worker          | 42                    | NA                      |",
        "| No running processes found in NPU 1                                                                              |",
    ])
    assert parse_info(text).processes == (
        TableProcess(npu=0, chip=0, pid=632268, name="python3.1", memory_mb=197, container_pid=1234),
        TableProcess(npu=0, chip=1, pid=632269, name="my worker", memory_mb=42, container_pid=None),
    )


def test_950_process_table_has_no_chip_column():
    text = load_capture("doc950_info_atlas350_v950.txt").replace(
        "| No running processes found in NPU 0                                                             |",
        "| 0                         | 5120          | python                   | 1024                     |",
    )
    assert parse_info(text).processes == (TableProcess(npu=0, chip=None, pid=5120, name="python", memory_mb=1024),)


def test_process_row_with_bad_pid_raises():
    text = with_processes("info_910b3_8npu_v23.0.7.txt", A3_PROCESS_HEADER, [
        "| 0       0                 | 93x440        | python                   | 141                     |",
    ])
    with pytest.raises(NpuSmiParseError, match="93x440"):
        parse_info(text)


def test_process_row_not_fitting_its_header_raises_unless_cut():
    row = "| 0       0                 | 935440        | 141                     |"
    text = with_processes("info_910b3_8npu_v23.0.7.txt", A3_PROCESS_HEADER, [row])
    with pytest.raises(NpuSmiParseError, match="process row"):
        parse_info(text)
    cut = with_processes("info_910b3_8npu_v23.0.7.txt", A3_PROCESS_HEADER, [
        "| 1       0                 | 7             | python                   | 5                       |",
    ]) + "| 2       0                 | 935440        | pyth"
    assert [p.pid for p in parse_info(cut).processes] == [7]


# --- cosmetic leniency ------------------------------------------------------------------------


def test_tabs_indentation_and_trailing_spaces_do_not_matter():
    original = load_capture("info_a3_910-93_4chips_proc_v25.2.0_fixture.txt")
    expected = parse_info(original)
    tabbed = "\n".join("        " + line.replace("    ", "\t") + "  \t" for line in original.splitlines())
    assert parse_info(tabbed) == expected
    assert parse_info(original.replace("\n", "\r\n")) == expected
    assert parse_info(original.replace("\n", "\n\n")) == expected  # double-spaced web copy


def test_driver_warning_line_is_reported():
    warning = ("[WARNING]The driver package may not be completely installed, which may cause function "
               "abnormal. Please reinstall it.")
    text = load_capture("info_910b3_8npu_v23.0.7.txt") + warning + "\n"
    table = parse_info(text)
    assert table.warnings == (warning,)
    assert len(table.chips) == 8


def test_unknown_column_is_skipped_not_misread():
    text = load_capture("info_310b4_200idk-a2_narrow_v23.0.rc3.txt")
    text = text.replace("Temp(C)           Hugepages", "Temp(C) Fan(%)    Hugepages")
    text = text.replace("54                15    / 15", "54      30        15    / 15")
    assert "Fan(%)" in text and "54      30" in text
    board = parse_info(text).chips[0]
    assert (board.temperature_celsius, board.hugepages_used, board.hugepages_total) == (54.0, 15, 15)


# --- strict about data ------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    "",
    "   \n\n",
    "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\ndcmi module initialize failed. ret is -8005\n",
    "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n"
    "dcmi model initialized failed, because the device is used. ret is -8020\n",
    "Invalid card id.\nError parameter of -i\n",
    "-bash: npu-smi: command not found\n",
    "\x00\x01\xff garbage | with | bars |\n+---+\n",
    "| NPU   Name   | Health |\n",  # a header cut in its first row
])
def test_no_main_table_raises(text):
    with pytest.raises(NpuSmiParseError):
        parse_info(text)


def test_error_message_quotes_npu_smi():
    with pytest.raises(NpuSmiParseError, match="ret is -8005"):
        parse_info("dcmi module initialize failed. ret is -8005\n")


@pytest.mark.parametrize("value", [None, b"| npu-smi 23.0.7 |", 42])
def test_non_text_raises_parse_error(value):
    with pytest.raises(NpuSmiParseError):
        parse_info(value)


@pytest.mark.parametrize("old, new, message", [
    ("102.8       55", "102.8       hot", "hot"),  # temperature not a number
    ("102.8       55", "nan         55", "nan"),  # power not finite
    ("0000:C1:00.0", "0000:ZZ:00.0", "0000:ZZ:00.0"),  # not a bus id
    ("| 0     910B3", "| x     910B3", "'x'"),  # card id not a number
    ("3338 / 65536", "3338 - 65536", "does not fit"),  # not a used / total pair
    ("0    / 0          3338", "0    / 0   7      3338", "does not fit"),  # an extra value
])
def test_malformed_value_raises(old, new, message):
    text = load_capture("info_910b3_8npu_v23.0.7.txt")
    assert text.count(old) >= 1
    with pytest.raises(NpuSmiParseError, match=message):
        parse_info(text.replace(old, new, 1))


def test_chip_without_second_row_inside_the_table_raises():
    lines = load_capture("info_910b3_8npu_v23.0.7.txt").splitlines()
    second_row_of_npu_0 = 8
    assert "0000:C1:00.0" in lines[second_row_of_npu_0]
    del lines[second_row_of_npu_0]
    with pytest.raises(NpuSmiParseError, match="second row"):
        parse_info("\n".join(lines))


def test_missing_npu_id_raises():
    text = load_capture("info_910b3_8npu_v23.0.7.txt").replace("| 3     910B3", "| NA    910B3")
    with pytest.raises(NpuSmiParseError, match="NPU"):
        parse_info(text)


# --- truncated output -------------------------------------------------------------------------


def row_end_offsets(text: str, marker: str):
    """Offset just past the closing '|' of every line containing `marker`."""
    offsets, start = [], 0
    for line in text.splitlines(keepends=True):
        if marker in line:
            offsets.append(start + line.rstrip().rindex("|") + 1)
        start += len(line)
    return offsets


@pytest.mark.parametrize("capture, second_row_marker", [
    ("info_910b3_8npu_v23.0.7.txt", "| 0000:"),
    ("info_a3_910-93_4chips_proc_v25.2.0_fixture.txt", "| 0000:"),
    ("info_310p3-duo_1card2chips_v25.2.0_partial.txt", "| 0000:"),
])
def test_cut_anywhere_keeps_the_complete_chips_before_the_cut(capture, second_row_marker):
    text = load_capture(capture)
    full = parse_info(text)
    chip_ends = row_end_offsets(text, second_row_marker)
    assert len(chip_ends) == len(full.chips)
    header_end = row_end_offsets(text, "Bus-Id")[0]
    for cut in range(len(text) + 1):
        if cut < header_end:
            with pytest.raises(NpuSmiParseError):
                parse_info(text[:cut])
            continue
        table = parse_info(text[:cut])
        complete = sum(1 for end in chip_ends if end <= cut)
        assert table.chips == full.chips[:complete], cut
        assert table.processes == full.processes[:len(table.processes)], cut


def test_cut_mid_row_example():
    text = load_capture("info_910b3_8npu_v23.0.7.txt")
    cut = text[:text.index("| 0000:81:00.0") + 20]  # inside the second row of NPU 2
    table = parse_info(cut)
    assert ids(table) == [(0, 0), (1, 0)]
    assert table.chips[1].hbm_used_mb == 3337


# --- never anything but NpuSmiParseError ------------------------------------------------------

ALL_CAPTURES = sorted(
    name for name in os.listdir(FIXTURES) if name.startswith("info_") or name.startswith("doc950_info_atlas350")
)


def test_every_capture_is_covered_above():
    assert len(ALL_CAPTURES) == 18


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capture=st.sampled_from(ALL_CAPTURES),
    edits=st.lists(st.tuples(st.floats(0, 1), st.integers(0, 8), st.text("|+/ \t\n-.:0123456789NAx", max_size=4)),
                   max_size=6),
)
def test_damaged_captures_parse_or_raise_parse_error(capture, edits):
    text = load_capture(capture)
    for where, deleted, inserted in edits:
        at = int(where * len(text))
        text = text[:at] + inserted + text[at + deleted:]
    try:
        table = parse_info(text)
    except NpuSmiParseError:
        return
    assert isinstance(table, MainTable)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_arbitrary_text_parses_or_raises_parse_error(text):
    try:
        parse_info(text)
    except NpuSmiParseError:
        pass
