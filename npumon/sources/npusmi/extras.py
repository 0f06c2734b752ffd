"""Parsers for the npu-smi values that only npu-exporter's families need: a chip's identity (die id and model
name from `-t board -i N -c C`), HBM usage rate, AI Core frequency, HBM temperature, voltage and the ECC
lifetime counters.

Kept apart from kv.py, whose parsers return exactly the fields the rules and the native series use; these
read further keys of the same outputs. Pure text -> `{chip id: {ChipSample field: value}}`, like kv.py.
"""

import re
from typing import Any, Dict, Optional

from .common import NpuSmiParseError, is_null, percent_to_ratio, to_float, to_int
from .kv import (_chip_blocks, _convert, _is_non_npu_block, _parse_simple, _read_groups, _split_at_chip_ids,
                 _text)

_DIE_WORD = re.compile(r"^[0-9A-Fa-f]{1,8}$")
DIE_WORDS = 5  # npu-smi prints a die id as five 32-bit words, " %08X" each


def format_die_id(cell: Optional[str]) -> Optional[str]:
    """npu-smi's "42C711D4 20B03704 4A10C8D4 14CC040A D2102003" -> npu-exporter's `vdie_id`
    "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003" (each word 8 upper-case hex digits).

    310B boards print the chip version first ("V1, 409921D4 ..."): the last five words are the die id.
    """
    if is_null(cell):
        return None
    words = [word for word in re.split(r"[\s,]+", cell.strip()) if word]
    words = words[-DIE_WORDS:]
    if len(words) != DIE_WORDS or not all(_DIE_WORD.match(word) for word in words):
        raise NpuSmiParseError("expected {} hex words of a die id, got {!r}".format(DIE_WORDS, cell.strip()))
    return "-".join("%08X" % int(word, 16) for word in words)


# npu-exporter's model_name is "<chip name>-<chip type>-<chip version>" from DCMI's chip info. A3 and 950 print
# no Chip Type; every chip whose type is known says "Ascend", so that is what stands in.
DEFAULT_CHIP_TYPE = "Ascend"


def model_name(chip_name: Optional[str], chip_type: Optional[str], chip_version: Optional[str]) -> Optional[str]:
    """"910B3", "Ascend", "V1" -> "910B3-Ascend-V1"; None without a chip name."""
    if not chip_name:
        return None
    return "{}-{}-{}".format(chip_name, chip_type or DEFAULT_CHIP_TYPE, chip_version or "")


_IDENTITY_KEYS = ("Chip Name", "Chip Type", "Chip Version", "VDie ID", "Die ID", "DDie ID", "PCIe Bus Info")
# Keys every `-t board` output prints, whatever the product and build (FORMATS.md 4.6).
_BOARD_KEYS = ("Software Version", "Firmware Version", "Board ID")


def parse_chip_identity(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t board -i N -c C`: `vdie_id` (VDie ID; 310P and 310B print it as Die ID) and
    `model_name`. A card-level answer (no die id) gives only what it prints. The 950 takes no `-c` and prints
    no VDie ID: its card-level answer's DDie ID, its only die id, stands in (unique per chip, same format)."""
    what = "board"
    blocks = _chip_blocks(text, what, True, chip, _IDENTITY_KEYS)
    result = {}
    for chip_id, block in blocks.items():
        values: Dict[str, Any] = {}
        die = block.get("VDie ID") or block.get("Die ID") or block.get("DDie ID")
        if die is not None:
            values["vdie_id"] = _convert(die, format_die_id, what)
        texts = {key: _text(block[key].value) if key in block else None
                 for key in ("Chip Name", "Chip Type", "Chip Version")}
        name = model_name(texts["Chip Name"], texts["Chip Type"], texts["Chip Version"])
        if name is not None:
            values["model_name"] = name
        result[chip_id] = values
    return result


def parse_card_serial(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t board -i N`: the card's `Serial Number` (npu-exporter's serial_number label). Older
    builds print none (npu-smi 23.0.5 on a 910A): then nothing, and no error, as the output is a board's."""
    return _parse_simple(text, "board", True, chip, {"Serial Number": ("serial_number", _text)},
                         _BOARD_KEYS)


def parse_usages_extra(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`-t usages`: HBM Usage Rate (npu-exporter's hbm_utilization)."""
    return _parse_simple(text, "usages", False, chip, {"HBM Usage Rate(%)": ("hbm_usage_ratio", percent_to_ratio)},
                         ("Aicore Usage Rate(%)", "Memory Usage Rate(%)"))


_CARD_POWER_KEY = "NPU Real-time Power(W)"


def parse_common_extra(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`-t common -i N`: AI Core current frequency in MHz, and on 310P cards the card's power, which only
    the MCU block prints (`card_power_watts` on every chip of the card: npu-exporter serves it as each
    chip's power)."""
    result = _parse_simple(text, "common", True, chip,
                           {"Aicore curFreq(MHZ)": ("aicore_freq_mhz", to_float)},
                           ("Aicore Usage Rate(%)", "Temperature(C)"))
    card_power = _mcu_power(text)
    if card_power is not None:
        for values in result.values():
            values["card_power_watts"] = card_power
    return result


def _mcu_power(text: str) -> Optional[float]:
    for group in _read_groups(text, "common"):
        for part in _split_at_chip_ids(group, True):
            if _is_non_npu_block(part):
                for item in part:
                    if item.key == _CARD_POWER_KEY:
                        return _convert(item, to_float, "common")
    return None


def parse_memory_extra(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`-t memory`: HBM temperature."""
    return _parse_simple(text, "memory", False, chip,
                         {"HBM Temperature(C)": ("hbm_temperature_celsius", to_float)},
                         ("HBM Capacity(MB)", "DDR Capacity(MB)", "Capacity(MB)", "Total Capacity(MB)",
                          "DDR Clock Speed(MHz)", "Clock Speed(MHz)"))


def parse_volt(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t volt -i N -c C`: `Voltage(V) : 0.72`."""
    return _parse_simple(text, "volt", False, chip, {"Voltage(V)": ("voltage_volts", to_float)})


_ECC_COUNTER_KEYS = {
    "{} {} Bit {}".format(memory, bit, suffix): (memory.lower(), prefix + bit.lower())
    for memory in ("DDR", "HBM") for bit in ("Single", "Double")
    for suffix, prefix in (("Aggregate Total Err Cnt", "aggregate_"), ("Isolated Pages Count", "isolated_"))
}


def parse_ecc_counters(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`-t ecc -i N`: `ecc_counters` = {memory: {aggregate_single, aggregate_double, isolated_single,
    isolated_double}}, the counters kv.parse_ecc sums or leaves out; nothing for 310/310B, which print none."""
    known = list(_ECC_COUNTER_KEYS) + ["Single-bit Error Count", "HBM Single Bit Error Count",
                                       "DDR Single Bit Error Count"]
    blocks = _chip_blocks(text, "ecc", False, chip, known)
    result: Dict[int, Dict[str, Any]] = {}
    for chip_id, block in blocks.items():
        counters: Dict[str, Dict[str, Optional[int]]] = {}
        for key, (memory, counter) in _ECC_COUNTER_KEYS.items():
            if key in block:
                counters.setdefault(memory, {})[counter] = _convert(block[key], to_int, "ecc")
        result[chip_id] = {"ecc_counters": counters} if counters else {}
    return result


def merged(*parsers):
    """One parser whose result is the union of the parsers' results, chip by chip (the first wins a field)."""
    def parse(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
        result: Dict[int, Dict[str, Any]] = {}
        for parser in parsers:
            for chip_id, values in parser(text, chip=chip).items():
                target = result.setdefault(chip_id, {})
                for name, value in values.items():
                    target.setdefault(name, value)
        return result
    parse.__doc__ = " + ".join(parser.__name__ for parser in parsers)
    return parse

