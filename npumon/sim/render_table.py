"""Render `npu-smi info` (the main table), `info -l` and `info -m` exactly as real npu-smi 23.x-25.x does.

Pure functions: product + values -> text. Column formats are the printf formats of the npu-smi
source (FORMATS.md [SRC]); tests compare the output byte for byte with real captures. Two layouts here:
the 98-column table of the 910 family (910 A1, A2, A3) and the 106-column table of the 310 family (310P,
310B); the 950's layout of its own is in render_950.py.
"""

from typing import List, Optional, Sequence, Tuple

from .products import FAMILY_310B, FAMILY_310P, FAMILY_910, FAMILY_910_93, FAMILY_950, Product
from . import render_950
from .render_common import MAX_PROCESSES_PER_CHIP, PROCESS_NAME_LENGTH, Chip, bus_id_cell


_910_RULE = "+---------------------------+---------------+----------------------------------------------------+"
_910_DOUBLE = "+===========================+===============+====================================================+"
_910_CHIP_SEPARATOR = "+" + "-" * 96 + "+"
_310_RULE = "+" + "-" * 31 + "+" + "-" * 17 + "+" + "-" * 54 + "+"
_310_DOUBLE = "+" + "=" * 31 + "+" + "=" * 17 + "+" + "=" * 54 + "+"


def render_info(product: Product, chips: Sequence[Chip], driver_version: str) -> str:
    """The whole `npu-smi info` output for these chips (in npu-smi's card-by-card order)."""
    if product.family == FAMILY_950:
        lines = render_950.table(product, chips, driver_version)
    elif product.has_hbm:
        lines = _910_table(product, chips, driver_version)
    else:
        lines = _310_table(product, chips, driver_version)
    return "".join(line + "\n" for line in lines)


def render_list(product: Product) -> str:
    """`npu-smi info -l`."""
    if product.family == FAMILY_950:
        return render_950.listing(product)
    chip_count_key = "Card Count" if product.family == FAMILY_310B else "Total Count"
    lines = [_kv(chip_count_key, len(product.cards)), ""]
    for npu in product.cards:
        lines.append(_kv("NPU ID", npu))
        if not product.is_server:  # server builds of the 910 family leave these two out
            lines.append(_kv("Product Name", product.board.product_name))
            lines.append(_kv("Serial Number", product.serial_number(npu)))
        lines.append(_kv("Chip Count", product.chips_per_card))
        lines.append("")
    return "".join(line + "\n" for line in lines)


def render_mapping(product: Product) -> str:
    """`npu-smi info -m`: TAB, then %-30s columns; only the chip-name rows are not padded at the end."""
    if product.family == FAMILY_950:
        return render_950.mapping(product)
    with_phy_id = product.family == FAMILY_910_93
    header = ["NPU ID", "Chip ID", "Chip Logic ID"] + (["Chip Phy-ID"] if with_phy_id else []) + ["Chip Name"]
    lines = [_mapping_row(header)]
    slots = product.slots()
    for npu in product.cards:
        for slot in (s for s in slots if s.npu == npu):
            ids = [str(slot.npu), str(slot.chip), str(slot.device_id)] + ([str(slot.phy_id)] if with_phy_id else [])
            lines.append(_mapping_row(ids, last=product.mapping_name, pad_last=False))
        if product.mcu_chip is not None:
            lines.append(_mapping_row([str(npu), str(product.mcu_chip), "-"] + (["-"] if with_phy_id else [])
                                      + ["Mcu"]))
    return "".join(line + "\n" for line in lines)


def _mapping_row(cells: List[str], last: Optional[str] = None, pad_last: bool = True) -> str:
    if last is not None:
        cells = cells + [last]
    padded = ["%-30s" % cell for cell in cells[:-1]]
    padded.append("%-30s" % cells[-1] if pad_last else cells[-1])
    return "\t" + " ".join(padded)


def _kv(key: str, value: object) -> str:
    return "\t%-30s : %s" % (key, value)


# -- the 910 family (98 columns) -------------------------------------------------------------------------


def _910_table(product: Product, chips: Sequence[Chip], driver_version: str) -> List[str]:
    a3 = product.family == FAMILY_910_93
    lines = [
        "+" + "-" * 96 + "+",
        "| npu-smi %-24s Version: %-52s |" % (product.npu_smi_version, driver_version),
        _910_RULE,
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        "| Chip  Phy-ID              | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |" if a3 else
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        _910_DOUBLE,
    ]
    for card_chips in _by_card(chips):
        for index, (slot, values) in enumerate(card_chips):
            if index:
                lines.append(_910_CHIP_SEPARATOR)
            # an A3 NPU reports its power on die 0; die 1 prints "-"
            power = "%-11s" % "-" if a3 and slot.chip == 1 else "%-11.1f" % values.power_watts
            lines.append("| %-5d %-20s| %-13s | %s %-17d %-5d/ %-13d |" % (
                slot.npu, product.chip_name, values.health, power, values.temperature_celsius,
                values.hugepages_used, values.hugepages_total))
            first = "| %-5d %-20d| " % (slot.chip, slot.phy_id) if a3 else "| %-26d| " % slot.chip
            # Memory-Usage is DDR: only the 910 A1 has any; 910B and A3 print 0 / 0
            ddr_used, ddr_total = (values.ddr_used_mb, slot.ddr_total_mb) if product.family == FAMILY_910 else (0, 0)
            lines.append(first + "%s | %-11d %-5d/ %-10d %-5d/ %-13d |" % (
                bus_id_cell(slot.bus_id, 2), values.aicore_percent, ddr_used, ddr_total, values.memory_used_mb,
                slot.memory_total_mb))
        lines.append(_910_DOUBLE)
    lines += [
        _910_RULE,
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |",
        _910_DOUBLE,
    ]
    for card_chips in _by_card(chips):
        rows = ["| %-7d %-18d| %-13d | %-24s | %-23d |" % (slot.npu, slot.chip, pid, _comm(name), memory_mb)
                for slot, values in card_chips for pid, name, memory_mb in _shown(values.processes)]
        lines += rows or ["| No running processes found in NPU %-7d" % card_chips[0][0].npu + " " * 54 + "|"]
        lines.append(_910_DOUBLE)
    return lines


# -- the 310 family (106 columns) ------------------------------------------------------------------------


def _310_table(product: Product, chips: Sequence[Chip], driver_version: str) -> List[str]:
    lines = [
        "+" + "-" * 104 + "+",
        "| npu-smi %-40s Version: %-44s |" % (product.npu_smi_version, driver_version),
        _310_RULE,
        "| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |",
        "| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |",
        _310_DOUBLE,
    ]
    for card_chips in _by_card(chips):
        for index, (slot, values) in enumerate(card_chips):
            if index:
                lines.append(_310_RULE)
            # 310P chips cannot measure their own power; 310B SoCs can
            power = "%-12s" % "NA" if product.family == FAMILY_310P else "%-12.1f" % values.power_watts
            lines.append("| %-7d %-22s| %-15s | %s %-17d %-6d/ %-13d |" % (
                slot.npu, product.chip_name, values.health, power, values.temperature_celsius,
                values.hugepages_used, values.hugepages_total))
            bus_id = bus_id_cell(slot.bus_id, 4) if slot.bus_id else "%-15s" % "NA"
            lines.append("| %-7d %-22d| %s | %-12d %-5d/ %-32d |" % (
                slot.chip, slot.device_id, bus_id, values.aicore_percent, values.memory_used_mb,
                slot.memory_total_mb))
        lines.append(_310_DOUBLE)
    if product.has_process_table:
        lines += [
            _310_RULE,
            "| NPU     Chip                  | Process id      "
            "| Process name             | Process memory(MB)        |",
            _310_DOUBLE,
        ]
        for card_chips in _by_card(chips):
            rows = ["| %-7d %-22d| %-15d | %-24s | %-25d |" % (slot.npu, slot.chip, pid, _comm(name), memory_mb)
                    for slot, values in card_chips for pid, name, memory_mb in _shown(values.processes)]
            lines += rows or ["| No running processes found in NPU %-7d" % card_chips[0][0].npu + " " * 62 + "|"]
            lines.append(_310_DOUBLE)
    return lines


# -- helpers ---------------------------------------------------------------------------------------------


def _by_card(chips: Sequence[Chip]) -> List[List[Chip]]:
    cards: List[List[Chip]] = []
    for chip in chips:
        if cards and cards[-1][0][0].npu == chip[0].npu:
            cards[-1].append(chip)
        else:
            cards.append([chip])
    return cards


def _shown(processes: Sequence[Tuple[int, str, int]]) -> Sequence[Tuple[int, str, int]]:
    return processes[:MAX_PROCESSES_PER_CHIP]


def _comm(name: str) -> str:
    return name[:PROCESS_NAME_LENGTH]
