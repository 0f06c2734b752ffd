"""Tests of the npu-smi key/value parsers against the captures in tests/fixtures (copied from
shared/reference/npu-smi, header kept) and against small texts built in the same format."""

import os
import re
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npumon.model import CHIP_VALUE_FIELDS, MIB, ChipSample
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.npusmi.kv import (
    ListedNpu, MappedChip, NpuSmiError, classify_error, parse_board, parse_common, parse_ecc, parse_health,
    parse_kv_value, parse_list, parse_mapping, parse_memory, parse_power, parse_temp, parse_usages,
)
from paths import FIXTURES


CHIP_PARSERS = (parse_usages, parse_common, parse_power, parse_temp, parse_ecc, parse_health, parse_board,
                parse_memory)
ALL_PARSERS = CHIP_PARSERS + (parse_list, parse_mapping, lambda text: parse_kv_value(text, "pwm-mode"))

ERROR_CAPTURES = (
    "error_dcmi-init-8005_container.txt",
    "error_dcmi-init-8020_device-used.txt",
    "error_invalid-card-id_910a.txt",
    "error_not-support-querying_template-info_310b.txt",
)


def _load_capture(name):
    """The output part of a capture: everything after the `# ---` line that ends its header."""
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        text = handle.read()
    return text.split("\n# ---\n", 1)[1]


def _split_outputs(text):
    """A capture holding several outputs, cut before each `npu-smi ...` / `$ npu-smi ...` command line."""
    parts = re.split(r"(?m)^(?=(?:\$ )?npu-smi )", text)
    return [part for part in parts if part.strip()]


def _assert_ratios(actual, expected):
    assert set(actual) == set(expected)
    for name, value in expected.items():
        assert actual[name] == pytest.approx(value), name


# ---------------------------------------------------------------------------------------------------
# -t usages

def test_usages_910b_v25_has_npu_util_and_aicube():
    result = parse_usages(_load_capture("info-t-usages_910b_v25.5.1_fixture.txt"))
    assert list(result) == [0]
    _assert_ratios(result[0], {
        "aicore_ratio": 0.0, "aivector_ratio": 0.0, "aicpu_ratio": 0.0, "ctrlcpu_ratio": 0.06,
        "aicube_ratio": 0.0, "npu_util_ratio": 0.0, "hbm_bandwidth_ratio": 0.0, "ddr_bandwidth_ratio": 0.0,
    })


def test_usages_910a_command_line_skipped_and_no_aivector():
    result = parse_usages(_load_capture("info-t-usages_910a_v23.0.5_tabs.txt"))
    _assert_ratios(result[0], {
        "aicore_ratio": 0.0, "aicpu_ratio": 0.0, "ctrlcpu_ratio": 0.0,
        "ddr_bandwidth_ratio": 0.0, "hbm_bandwidth_ratio": 0.0,
    })
    assert list(result) == [0]


def test_usages_310p_vectorcore_and_ddr_bandwidth():
    result = parse_usages(_load_capture("info-t-usages_310p_gpustack-docstring.txt"))
    assert list(result) == [0]
    _assert_ratios(result[0], {
        "aicore_ratio": 0.0, "aicpu_ratio": 0.0, "ctrlcpu_ratio": 0.13, "vectorcore_ratio": 0.0,
        "ddr_bandwidth_ratio": 0.51,
    })


def test_usages_950_without_chip_lines_uses_given_chip():
    text = _load_capture("doc950_info-t-usages.txt")
    expected = {
        "aicore_ratio": 0.0, "aivector_ratio": 0.0, "aicpu_ratio": 0.0, "ctrlcpu_ratio": 0.40,
        "ddr_bandwidth_ratio": 0.0, "hbm_bandwidth_ratio": 0.03, "npu_util_ratio": 0.0, "aicube_ratio": 0.0,
    }
    _assert_ratios(parse_usages(text)[0], expected)
    assert list(parse_usages(text, chip=3)) == [3]


def test_usages_310_memory_bandwidth_maps_to_ddr():
    text = ("\tNPU ID                         : 0\n\tChip Count                     : 1\n\n"
            "\tMemory Capacity(MB)            : 7545\n\tMemory Usage Rate(%)           : 31\n"
            "\tAicore Usage Rate(%)           : 12\n\tAicpu Usage Rate(%)            : 3\n"
            "\tCtrlcpu Usage Rate(%)          : 20\n\tMemory Bandwidth Usage Rate(%) : 9\n"
            "\tChip ID                        : 0\n")
    _assert_ratios(parse_usages(text)[0], {
        "aicore_ratio": 0.12, "aicpu_ratio": 0.03, "ctrlcpu_ratio": 0.20, "ddr_bandwidth_ratio": 0.09,
    })


def test_usages_two_dies_and_mcu_chip_id_after_values():
    # A3 card layout: die 0, die 1 (Chip ID closes each block), then the MCU block.
    text = ("\tNPU ID                         : 4\n\tChip Count                     : 2\n\n"
            "\tAicore Usage Rate(%)           : 10\n\tChip ID                        : 0\n\n"
            "\tAicore Usage Rate(%)           : 20\n\tChip ID                        : 1\n\n"
            "\tAicore Usage Rate(%)           : 99\n\tChip Name                      : mcu\n")
    result = parse_usages(text)
    assert sorted(result) == [0, 1]
    assert result[0]["aicore_ratio"] == pytest.approx(0.10)
    assert result[1]["aicore_ratio"] == pytest.approx(0.20)


def test_usages_chips_without_blank_lines_split_at_chip_id():
    text = ("\tAicore Usage Rate(%)           : 10\n\tChip ID                        : 0\n"
            "\tAicore Usage Rate(%)           : 20\n\tChip ID                        : 1\n")
    result = parse_usages(text)
    assert result[0]["aicore_ratio"] == pytest.approx(0.10)
    assert result[1]["aicore_ratio"] == pytest.approx(0.20)


def test_usages_na_gives_none_and_bad_number_raises():
    text = "\tAicore Usage Rate(%)           : NA\n\tAicpu Usage Rate(%)            : -\n"
    assert parse_usages(text) == {0: {"aicore_ratio": None, "aicpu_ratio": None}}
    with pytest.raises(NpuSmiParseError, match="Aicore Usage Rate"):
        parse_usages("\tAicore Usage Rate(%)           : 1x\n")


def test_usages_rejects_310b_watch_stream():
    with pytest.raises(NpuSmiParseError):
        parse_usages(_load_capture("info-watch_310b_devboard.txt"))


def test_usages_rejects_each_950_watch_example():
    parts = _split_outputs(_load_capture("doc950_info-watch.txt"))
    assert [part.splitlines()[0] for part in parts] == [
        "$ npu-smi info watch", "$ npu-smi info watch -i 0", "$ npu-smi info watch -i 0 -d 2 -s pt"]
    for part in parts:
        with pytest.raises(NpuSmiParseError):
            parse_usages(part)


# ---------------------------------------------------------------------------------------------------
# -t common, -t power, -t temp

def test_common_910a1_doc_without_blank_line_after_chip_count():
    result = parse_common(_load_capture("info-t-common_910a1_30cores_doc.txt"))
    assert result == {0: {"aicore_ratio": 0.0, "temperature_celsius": 41.0, "power_watts": 71.7}}


def test_common_310p_leaves_mcu_block_and_its_card_power_out():
    result = parse_common(_load_capture("info-t-common_310p_mcu-power_gpustack-docstring.txt"))
    assert result == {0: {"aicore_ratio": 0.0, "temperature_celsius": 43.0}}


def test_common_950():
    result = parse_common(_load_capture("doc950_info-t-common.txt"))
    assert result == {0: {"aicore_ratio": 0.0, "temperature_celsius": 65.0, "power_watts": 298.6}}


def test_common_chip_id_before_values_splits_chips():
    text = ("\tNPU ID                         : 1\n\tChip Count                     : 2\n"
            "\tChip ID                        : 0\n\tTemperature(C)                 : 50\n"
            "\tChip ID                        : 1\n\tTemperature(C)                 : 52\n"
            "\tNPU Real-time Power(W)         : -\n")
    assert parse_common(text) == {0: {"temperature_celsius": 50.0},
                                  1: {"temperature_celsius": 52.0, "power_watts": None}}


def test_common_and_power_leave_310_rated_power_out():
    text = ("\tNPU ID                         : 2\n\tChip Count                     : 1\n\n"
            "\tChip ID                        : 0\n\tAicore Usage Rate(%)           : 5\n"
            "\tTemperature(C)                 : 47\n\tRated Power Dissipation(W)     : 8\n")
    assert parse_common(text) == {0: {"aicore_ratio": 0.05, "temperature_celsius": 47.0}}
    power_text = "\tRated Power Dissipation(W)     : 8\n\tChip ID                        : 0\n"
    assert parse_power(power_text) == {0: {}}


def test_power_910b():
    assert parse_power(_load_capture("info-t-power_910b_v25.5.1_fixture.txt")) == {0: {"power_watts": 103.5}}


def test_power_950_and_failed_value():
    assert parse_power(_load_capture("doc950_info-t-power.txt")) == {0: {"power_watts": 296.5}}
    assert parse_power("\tNPU Real-time Power(W)         : Failed\n", chip=1) == {1: {"power_watts": None}}


def test_temp_910b_leaves_mcu_sensors_out():
    result = parse_temp(_load_capture("info-t-temp_910b_mcu_v25.5.1_fixture.txt"))
    assert result == {0: {"temperature_celsius": 39.0}}


def test_temp_950():
    assert parse_temp(_load_capture("doc950_info-t-temp.txt")) == {0: {"temperature_celsius": 53.0}}


def test_temp_rejects_950_sensors_output():
    with pytest.raises(NpuSmiParseError, match="expected keys"):
        parse_temp(_load_capture("doc950_info-t-sensors.txt"))


# ---------------------------------------------------------------------------------------------------
# -t ecc

ZERO_COUNTERS = {"single": 0, "double": 0, "isolated_pages": 0}


def test_ecc_910a_ddr_and_hbm():
    result = parse_ecc(_load_capture("info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt"))
    assert result == {0: {
        "ecc": {"ddr": ZERO_COUNTERS, "hbm": ZERO_COUNTERS},
        "ecc_single_bit_errors": 0, "ecc_double_bit_errors": 0, "ecc_isolated_pages": 0,
    }}


def test_ecc_910a_counts_and_saturated_counter_kept():
    text = _load_capture("info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt")
    edits = {
        "DDR Single Bit Error Count               : 0": "DDR Single Bit Error Count               : 3",
        "HBM Single Bit Error Count               : 0": "HBM Single Bit Error Count               : 4294967295",
        "HBM Double Bit Error Count               : 0": "HBM Double Bit Error Count               : 2",
        "HBM Single Bit Isolated Pages Count      : 0": "HBM Single Bit Isolated Pages Count      : 5",
        "HBM Double Bit Isolated Pages Count      : 0": "HBM Double Bit Isolated Pages Count      : 1",
        "DDR Double Bit Isolated Pages Count      : 0": "DDR Double Bit Isolated Pages Count      : NA",
    }
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    result = parse_ecc(text)[0]
    assert result["ecc"] == {"ddr": {"single": 3, "double": 0, "isolated_pages": 0},
                             "hbm": {"single": 4294967295, "double": 2, "isolated_pages": 6}}
    assert result["ecc_single_bit_errors"] == 4294967298
    assert result["ecc_double_bit_errors"] == 2
    assert result["ecc_isolated_pages"] == 6


def test_ecc_950_hbm_only():
    result = parse_ecc(_load_capture("doc950_info-t-ecc.txt"))
    assert result == {0: {"ecc": {"hbm": ZERO_COUNTERS},
                          "ecc_single_bit_errors": 0, "ecc_double_bit_errors": 0, "ecc_isolated_pages": 0}}


def test_ecc_310_unprefixed_keys_are_ddr():
    text = ("\tNPU ID                                   : 0\n\tChip Count                               : 1\n\n"
            "\tSingle-bit Error Count                   : 7\n\tDouble-bit Error Count                   : NA\n"
            "\tChip ID                                  : 0\n")
    assert parse_ecc(text) == {0: {"ecc": {"ddr": {"single": 7, "double": None, "isolated_pages": None}},
                                   "ecc_single_bit_errors": 7, "ecc_double_bit_errors": None,
                                   "ecc_isolated_pages": None}}


# ---------------------------------------------------------------------------------------------------
# -t health

def test_health_alarm_with_three_codes_and_multiline_information():
    result = parse_health(_load_capture("info-t-health_910a_ALARM_errcodes_tabs.txt"), chip=0)
    assert result == {0: {
        "health": "Alarm",
        "error_codes": ["A4025021", "8C03A000", "8C084E00"],
        "error_information": [
            "ascend_monitor adda heart beat lost error",
            "node type=process-manager, sensor type=General Software, "
            "event state=The process start failed or exit abnormally",
            "node type=adda, sensor type=Heartbeat Sensor, event state=Heartbeat Lost.",
        ],
    }}


def test_health_ok_chip_level_goes_to_given_chip():
    text = _load_capture("info-t-health_910a_OK_v23.0.5_tabs.txt")
    assert parse_health(text, chip=1) == {1: {"health": "OK", "error_codes": [], "error_information": []}}


def test_health_950():
    result = parse_health(_load_capture("doc950_info-t-health.txt"))
    assert result == {0: {"health": "OK", "error_codes": [], "error_information": []}}


def test_health_310b_doc_card_level_excludes_mcu_and_chip_level():
    card, chip_level = _split_outputs(_load_capture("doc_info-t-health-card_310b_200ia2.txt"))
    assert card.startswith("npu-smi info -t health -i 0\n")
    assert parse_health(card) == {0: {"health": "OK"}}
    assert parse_health(chip_level, chip=0) == {0: {"health": "OK", "error_codes": [], "error_information": []}}


def test_health_two_outputs_at_once_are_rejected():
    with pytest.raises(NpuSmiParseError):
        parse_health(_load_capture("doc_info-t-health-card_310b_200ia2.txt"))


def test_health_lower_case_code_upper_cased_and_non_hex_rejected():
    text = "\tHealth Status                  : Critical\n\tError Code                     : 80e01801\n"
    assert parse_health(text)[0]["error_codes"] == ["80E01801"]
    with pytest.raises(NpuSmiParseError, match="hex"):
        parse_health("\tHealth Status                  : Warning\n\tError Code                     : 80E0180Z\n")


# ---------------------------------------------------------------------------------------------------
# -t board, -t memory

def test_board_card_910a():
    result = parse_board(_load_capture("info-t-board-card_910a_v23.0.5_tabs.txt"))
    assert result == {0: {"driver_version": "23.0.5", "firmware_version": "7.1.0.7.220", "compatibility": "OK"}}


def test_board_chip_910a_has_only_firmware():
    result = parse_board(_load_capture("info-t-board-chip_910a_v23.0.5_tabs.txt"), chip=5)
    # The Chip ID line wins over the caller's chip.
    assert result == {0: {"firmware_version": "7.1.0.7.220"}}


def test_board_chip_310p():
    result = parse_board(_load_capture("info-t-board-chip_310p_gpustack-docstring.txt"))
    assert result == {0: {"firmware_version": "7.1.0.4"}}


def test_board_card_910b_v25():
    result = parse_board(_load_capture("info-t-board_910b_card_v25.5.1_fixture.txt"), chip=0)
    assert result == {0: {"driver_version": "25.5.1", "firmware_version": "7.8.0.6.201", "compatibility": "OK"}}


def test_board_950pr_annotated():
    result = parse_board(_load_capture("info-t-board_950pr_v25.7.rc1.6_annotated.txt"))
    assert result == {0: {"driver_version": "25.7.rc1.6", "firmware_version": "9.0.0.105.229",
                          "compatibility": "OK"}}


def test_board_950_doc_placeholders_kept_and_non_root_firmware_na():
    result = parse_board(_load_capture("doc950_info-t-board.txt"))
    assert result == {0: {"driver_version": "xxx", "firmware_version": "xxx", "compatibility": "OK"}}
    text = "\tSoftware Version               : 24.1.rc2\n\tFirmware Version               : NA\n"
    assert parse_board(text) == {0: {"driver_version": "24.1.rc2", "firmware_version": None}}


def test_memory_910b_chip_level():
    result = parse_memory(_load_capture("info-t-memory_910b_issue78.txt"), chip=0)
    assert result == {0: {"memory_total_bytes": 0, "hbm_total_bytes": 65536 * MIB}}


def test_memory_950():
    result = parse_memory(_load_capture("doc950_info-t-memory.txt"))
    assert result == {0: {"memory_total_bytes": 0, "hbm_total_bytes": 131072 * MIB}}


def test_results_merge_into_a_chip_sample():
    sample = ChipSample(npu=0, chip=0)
    for parse, name in ((parse_usages, "info-t-usages_910b_v25.5.1_fixture.txt"),
                        (parse_health, "info-t-health_910a_ALARM_errcodes_tabs.txt"),
                        (parse_ecc, "info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt"),
                        (parse_board, "info-t-board_910b_card_v25.5.1_fixture.txt"),
                        (parse_memory, "info-t-memory_910b_issue78.txt"),
                        (parse_temp, "info-t-temp_910b_mcu_v25.5.1_fixture.txt"),
                        (parse_power, "info-t-power_910b_v25.5.1_fixture.txt")):
        values = parse(_load_capture(name))[0]
        assert set(values) <= set(CHIP_VALUE_FIELDS)
        sample.update(values)
    assert sample.health == "Alarm"
    assert sample.power_watts == 103.5
    assert sample.hbm_total_bytes == 65536 * MIB


# ---------------------------------------------------------------------------------------------------
# -l, -m, single values

def test_list_910b_eight_npus():
    result = parse_list(_load_capture("info-l_910b_8npu_v25.5.1_fixture.txt"))
    assert result == [ListedNpu(npu=n, chip_count=1, product_name=None, serial_number=None) for n in range(8)]


def test_list_partial_16_npu_capture_gives_what_it_shows():
    result = parse_list(_load_capture("info-l_16npu_partial_issue78.txt"))
    assert [(npu.npu, npu.chip_count) for npu in result] == [(0, 1), (1, 1), (2, 1)]


def test_list_950_product_and_serial():
    assert parse_list(_load_capture("doc950_info-l.txt")) == [
        ListedNpu(npu=0, chip_count=None, product_name="A5 PCIe Card", serial_number="IT23HMDA0502FAA")]


def test_list_rejects_board_output():
    with pytest.raises(NpuSmiParseError, match="Total Count"):
        parse_list(_load_capture("info-t-board_910b_card_v25.5.1_fixture.txt"))


def test_mapping_910a_eight_rows():
    result = parse_mapping(_load_capture("info-m_910a_8npu_v23.0.5_tabs.txt"))
    assert result == [MappedChip(npu=n, chip=0, logic_id=n, phy_id=None, name="Ascend 910A", is_mcu=False)
                      for n in range(8)]


def test_mapping_910b3_mcu_rows():
    assert parse_mapping(_load_capture("info-m_910b3_tabs_v25.5.1_fixture.txt")) == [
        MappedChip(npu=0, chip=0, logic_id=0, phy_id=None, name="Ascend 910B3", is_mcu=False),
        MappedChip(npu=0, chip=1, logic_id=None, phy_id=None, name="Mcu", is_mcu=True),
        MappedChip(npu=1, chip=0, logic_id=1, phy_id=None, name="Ascend 910B3", is_mcu=False),
        MappedChip(npu=1, chip=1, logic_id=None, phy_id=None, name="Mcu", is_mcu=True),
    ]


def test_mapping_950_layout():
    assert parse_mapping(_load_capture("doc950_info-m.txt")) == [
        MappedChip(npu=0, chip=0, logic_id=None, phy_id=0, name="xxx", is_mcu=False)]


def test_mapping_a3_five_columns():
    columns = ("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name")
    rows = (("0", "0", "0", "0", "Ascend910"), ("0", "1", "1", "1", "Ascend910"), ("0", "2", "-", "-", "Mcu"))
    text = "\n".join("\t" + " ".join("{:<30}".format(cell) for cell in line) for line in (columns,) + rows)
    assert parse_mapping(text) == [
        MappedChip(npu=0, chip=0, logic_id=0, phy_id=0, name="Ascend910", is_mcu=False),
        MappedChip(npu=0, chip=1, logic_id=1, phy_id=1, name="Ascend910", is_mcu=False),
        MappedChip(npu=0, chip=2, logic_id=None, phy_id=None, name="Mcu", is_mcu=True),
    ]


def test_mapping_rejects_short_row():
    text = "\tNPU ID                         Chip ID                        Chip Name\n\t0\n"
    with pytest.raises(NpuSmiParseError, match="cells"):
        parse_mapping(text)


def test_kv_value_fan_doc_examples():
    mode, ratio, set_mode, set_ratio = _split_outputs(_load_capture("doc_fan-control_pwm_atlas200idk-a2.txt"))
    assert parse_kv_value(mode, "pwm-mode") == "auto"
    assert parse_kv_value(ratio, " pwm-duty-ratio(%) ") == "40"
    assert parse_kv_value(set_mode, "Status") == "OK"
    assert parse_kv_value(set_mode, "Message") == "Set pwm manual mode success"
    assert parse_kv_value(set_ratio, "Message") == "Set pwm duty ratio 40 success"
    with pytest.raises(NpuSmiParseError, match="not printed"):
        parse_kv_value(mode, "pwm-duty-ratio(%)")


def test_kv_value_950_sensors_and_fault_events():
    sensors = _load_capture("doc950_info-t-sensors.txt")
    assert parse_kv_value(sensors, "Soc Max Temperature (C)") == "67"
    assert parse_kv_value(sensors, "SFP Temperature (C)") is None
    assert parse_kv_value(sensors, "HBM Temperature (C)") == "63"
    events = _load_capture("doc950_info-t-current-fault-event.txt")
    assert parse_kv_value(events, "Fault Event Count") == "1"
    assert parse_kv_value(events, "Fault Event Information") == (
        "event id=0x81AF8000, severity=2, node type ex=215, node id=0, sub node type ex=0, sub node id=0")
    with pytest.raises(NpuSmiParseError):
        parse_health(events)


# ---------------------------------------------------------------------------------------------------
# Errors

@pytest.mark.parametrize("name, expected", [
    ("error_dcmi-init-8005_container.txt",
     NpuSmiError("dcmi_init", "dcmi module initialize failed. ret is -8005", -8005, None)),
    ("error_dcmi-init-8020_device-used.txt",
     NpuSmiError("device_busy", "dcmi model initialized failed, because the device is used. ret is -8020",
                 -8020, None)),
    ("error_invalid-card-id_910a.txt", NpuSmiError("invalid_id", "Invalid card id.", None, None)),
    ("error_not-support-querying_template-info_310b.txt",
     NpuSmiError("unsupported", "This device does not support querying template-info.", None, "template-info")),
])
def test_classify_error_captures(name, expected):
    assert classify_error(_load_capture(name)) == expected


@pytest.mark.parametrize("text, kind, code, query", [
    ("This device does not support setting pwm-mode.", "unsupported", None, "pwm-mode"),
    ("This device does not support input parameter of -c.", "unsupported", None, None),
    ("NPU is working in SMP mode, does not support querying ecc", "smp_mode", None, "ecc"),
    ("This command can be executed only by the root user.", "not_root", None, None),
    ("There is no NPU card on this server.", "no_card", None, None),
    ('Failed to query "health" info.', "query_failed", None, "health"),
    ("Failed to execute npu-smi info. ret is -8007.", "query_failed", -8007, None),
    ("npu get board type failed. ret is -8009", "query_failed", -8009, None),
    ("Error parameter of -t", "bad_parameter", None, None),
    ("\tMust input parameter of -d.", "bad_parameter", None, None),
    ("Command or option is not found.", "unknown_command", None, None),
    ("Invalid chip id.\nError parameter of -c", "invalid_id", None, None),
])
def test_classify_error_messages_from_the_format_reference(text, kind, code, query):
    error = classify_error(text)
    assert (error.kind, error.code, error.query) == (kind, code, query)


@pytest.mark.parametrize("name", [
    "info-t-health_910a_ALARM_errcodes_tabs.txt", "info-t-topo_910b1_8npu_hccs_v23.0.rc2.txt",
    "info-h_910b1_v23.0.rc2.txt", "info-watch_310b_devboard.txt", "doc_fan-control_pwm_atlas200idk-a2.txt",
])
def test_classify_error_none_for_data_and_help(name):
    assert classify_error(_load_capture(name)) is None


@pytest.mark.parametrize("parse", ALL_PARSERS)
@pytest.mark.parametrize("name", ERROR_CAPTURES)
def test_parsers_reject_error_capture_and_quote_it(parse, name):
    message = classify_error(_load_capture(name)).message
    with pytest.raises(NpuSmiParseError) as raised:
        parse(_load_capture(name))
    assert message in str(raised.value)


@pytest.mark.parametrize("parse", ALL_PARSERS)
@pytest.mark.parametrize("text", [
    "", "\n  \n", "hello world\n", "\x00\xff\ufffd", "NPU ID : 0\nthis line is not a pair\n",
    "some key : some value\n",
])
def test_parsers_reject_empty_and_garbage(parse, text):
    with pytest.raises(NpuSmiParseError):
        parse(text)


BIG_ANSWER = "NPU ID : 0\nChip Count : 1\n\n" + "        Aicore Usage Rate(%)           : 0\n" * 110000  # 4 MiB


@pytest.mark.parametrize("parse", ALL_PARSERS)
def test_an_answer_of_more_lines_than_any_is_refused_before_it_is_split(parse):
    tracemalloc.start()
    try:
        with pytest.raises(NpuSmiParseError) as raised:
            parse(BIG_ANSWER)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(raised.value)
    assert peak < 0.5 * len(BIG_ANSWER), "peak {:.1f} x the answer".format(peak / len(BIG_ANSWER))


@pytest.mark.parametrize("parse", ALL_PARSERS)
@pytest.mark.parametrize("name", ["info-t-topo_910b1_8npu_hccs_v23.0.rc2.txt", "info-h_910b1_v23.0.rc2.txt"])
def test_parsers_reject_topo_and_help_outputs(parse, name):
    with pytest.raises(NpuSmiParseError):
        parse(_load_capture(name))


@pytest.mark.parametrize("parse", CHIP_PARSERS)
def test_chip_parsers_reject_a_key_printed_twice_for_one_chip(parse):
    line = {parse_usages: "Aicore Usage Rate(%) : 1", parse_common: "Temperature(C) : 40",
            parse_power: "NPU Real-time Power(W) : 9.1", parse_temp: "NPU Temperature (C) : 40",
            parse_ecc: "HBM Single Bit Error Count : 0", parse_health: "Health : OK",
            parse_board: "Firmware Version : 7.1", parse_memory: "HBM Capacity(MB) : 1"}[parse]
    with pytest.raises(NpuSmiParseError, match="twice"):
        parse("\t{}\n\t{}\n".format(line, line))


# Lines from the real outputs, shuffled and mangled, must never raise anything but NpuSmiParseError.
_SAMPLE_LINES = [
    line
    for name in ("info-t-usages_910b_v25.5.1_fixture.txt", "info-t-health_910a_ALARM_errcodes_tabs.txt",
                 "info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt", "info-m_910b3_tabs_v25.5.1_fixture.txt",
                 "info-l_910b_8npu_v25.5.1_fixture.txt", "info-t-temp_910b_mcu_v25.5.1_fixture.txt")
    for line in _load_capture(name).splitlines()
]


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.one_of(st.sampled_from(_SAMPLE_LINES), st.text(max_size=40)), max_size=12),
       parse=st.sampled_from(ALL_PARSERS))
def test_parsers_raise_only_parse_errors(lines, parse):
    try:
        parse("\n".join(lines))
    except NpuSmiParseError:
        pass


def test_error_classification_reads_only_the_head_and_tail_of_a_long_output():
    from npumon.sources.npusmi.common import head_and_tail

    noise = "DrvMngGetConsoleLogLevel failed. (g_conLogLevel=3)\n" * 100000  # about 5 MB
    message = "dcmi model initialized failed, because the device is used. ret is -8020\n"
    assert classify_error(noise + message).code == -8020  # last, after the driver's noise
    assert classify_error(message + noise).code == -8020  # first
    buried = noise + message + noise  # a line in the middle of megabytes is no npu-smi error message
    assert classify_error(buried) is None
    assert head_and_tail(buried) == noise[:8192].rsplit("\n", 1)[0] + "\n" + noise[-8192:].split("\n", 1)[1]
    assert head_and_tail(message) == message
