"""What the simulator prints for a chip's identity (`info -m`, `-t board -i N -c C`) and `-t volt`, against
real captures: the same keys in the same order and layout, and npu-smi's real cost per call."""

import dataclasses
import os
import re

from npumon.sim.latency import CHIP_QUERY, MAPPING, kind_of
from npumon.sim.products import ATLAS_200I_A2, ATLAS_300I_DUO, ATLAS_800I_A2, ATLAS_A3
from npumon.sim.render_query import render_query
from npumon.sim.values import ChipValues
from npumon.sources.npusmi.extras import parse_chip_identity, parse_volt
from paths import FIXTURES

KV = re.compile(r"^\t(.{30}) : (.*)$")  # npu-smi's `\t%-30s : %s`


def capture_keys(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        body = handle.read().split("# ---\n", 1)[1]
    return [line.split(":", 1)[0].strip() for line in body.splitlines() if " : " in line]


def chip_board(product, chip=0):
    values = {field.name: 0 for field in dataclasses.fields(ChipValues)}
    values.update(health="OK", compatibility="OK", errors=[], power_watts=0.0, processes=[])
    slots = [slot for slot in product.slots() if slot.npu == product.cards[0]]
    card = [(slot, ChipValues(**values)) for slot in slots]
    return render_query(product, "board", product.cards[0], chip, card, "25.5.1", "7.8.0.6.201")


def keys_and_layout(text):
    lines = text.splitlines()
    assert all(KV.match(line) for line in lines), lines  # every line is npu-smi's key/value layout
    return [KV.match(line).group(1).strip() for line in lines]


def test_910b_chip_board_has_the_keys_of_the_real_910_chip_board_in_order():
    assert keys_and_layout(chip_board(ATLAS_800I_A2)) == capture_keys("info-t-board-chip_910a_v23.0.5_tabs.txt")


def test_310p_chip_board_has_the_keys_of_the_real_310p_chip_board_in_order():
    assert keys_and_layout(chip_board(ATLAS_300I_DUO)) == \
        capture_keys("info-t-board-chip_310p_gpustack-docstring.txt")


def test_a3_chip_board_names_the_npu_and_prints_no_chip_type():
    keys = keys_and_layout(chip_board(ATLAS_A3, chip=1))
    assert keys[:3] == ["NPU ID", "NPU Name", "Chip ID"] and "Chip Type" not in keys and "VDie ID" in keys


def test_every_product_prints_a_die_id_npu_exporter_can_key_on():
    for product in (ATLAS_800I_A2, ATLAS_A3, ATLAS_300I_DUO, ATLAS_200I_A2):
        values = parse_chip_identity(chip_board(product), chip=0)[0]
        assert re.fullmatch(r"[0-9A-F]{8}(-[0-9A-F]{8}){4}", values["vdie_id"]), product.name


def test_volt_is_one_key_value_line_per_chip():
    values = {field.name: 0 for field in dataclasses.fields(ChipValues)}
    values.update(health="OK", compatibility="OK", errors=[], power_watts=0.0, processes=[])
    slot = ATLAS_800I_A2.slots()[0]
    text = render_query(ATLAS_800I_A2, "volt", 0, 0, [(slot, ChipValues(**values))], "25.5.1", "x")
    assert text == "\tVoltage(V)                     : 0.80\n"
    assert parse_volt(text, chip=0) == {0: {"voltage_volts": 0.8}}


def test_identity_calls_cost_what_real_npu_smi_calls_cost():
    assert kind_of(["info", "-m"]) == MAPPING
    assert kind_of(["info", "-t", "board", "-i", "0", "-c", "0"]) == CHIP_QUERY
    assert kind_of(["info", "-t", "volt", "-i", "0", "-c", "0"]) == CHIP_QUERY
