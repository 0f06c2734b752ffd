"""Render the Ascend 950's npu-smi (25.7, `NPU_SMI_V2`): its main table, `info -m`, `info -l` and `-t` outputs.

The 950 has a layout of its own: one chip per NPU, `NPU ID | Name` cells, `NPU Util(%)` where the others print
AICore(%), no `-c` option, and `-t` answers without `Chip Count` / `Chip ID` lines. Every layout here is the one
of Huawei's Ascend 950 npu-smi reference (verylucky01/driver docs/en/Ascend_950_npu-smi, copied as
tests/fixtures/doc950_*.txt) and the real 950PR `-t board` capture (info-t-board_950pr_v25.7.rc1.6_annotated.txt);
tests compare them line by line. Where no source shows a line (a process row, several fault events), the
format follows the nearest one that is shown, and says so.
"""

from typing import Optional, Sequence

from .links import render_sio
from .products import ChipSlot, Product
from .render_common import (CORE_VOLTS, MAX_PROCESSES_PER_CHIP, PROCESS_NAME_LENGTH, Chip, Lines, bus_id_cell,
                            die_id_words, hbm_usage_lines, memory_usage_rate)
from .values import ChipValues

WIDTH = 99
_CARD_RULE = "+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 53 + "+"
_CHIP_DOUBLE = "+" + "=" * 8 + "+" + "=" * 18 + "+" + "=" * 15 + "+" + "=" * 53 + "+"
_PROCESS_DOUBLE = "+" + "=" * 27 + "+" + "=" * 15 + "+" + "=" * 53 + "+"
# `-t current-fault-event` severity: 0 warning, 1 minor, 2 major, 3 critical (950 doc); health as DCMI grades it
FAULT_SEVERITY = {"Warning": 1, "Alarm": 2, "Critical": 3}


def table(product: Product, chips: Sequence[Chip], driver_version: str) -> Lines:
    """`npu-smi info`: two rows per NPU, each closed by a double rule, then the process table."""
    lines = [
        "+" + "-" * (WIDTH - 2) + "+",
        "| npu-smi %-31s Version: %-46s |" % (product.npu_smi_version, driver_version),
        _CARD_RULE,
        "| NPU ID | Name             | Health        | Power(W)    Temp(C)           Hugepages-Usage(page) |",
        "|        |                  | Bus-Id        | NPU Util(%) Memory-Usage(MB)  HBM-Usage(MB)         |",
        _CHIP_DOUBLE,
    ]
    for slot, values in chips:
        lines.append("| %-6d | %-16s | %-13s | %-11.1f %-17d %-6d/ %-13d |" % (
            slot.npu, product.chip_name, values.health, values.power_watts, values.temperature_celsius,
            values.hugepages_used, values.hugepages_total))
        # the 950 has no DDR of its own: Memory-Usage is always 0 / 0
        lines.append("|        |                  | %s | %-11d %-5d/ %-10d %-6d/ %-13d |" % (
            bus_id_cell(slot.bus_id, 2), values.npu_utilization_percent, 0, 0, values.memory_used_mb,
            slot.memory_total_mb))
        lines.append(_CHIP_DOUBLE)
    lines += [
        _CARD_RULE,
        "| NPU ID                    | Process id    | Process name             | Process memory(MB)       |",
        _PROCESS_DOUBLE,
    ]
    for slot, values in chips:
        # no source shows a 950 process row: the cells are the header's, as on the other layouts
        rows = ["| %-25d | %-13d | %-24s | %-24d |" % (slot.npu, pid, name[:PROCESS_NAME_LENGTH], memory_mb)
                for pid, name, memory_mb in values.processes[:MAX_PROCESSES_PER_CHIP]]
        no_process = "| No running processes found in NPU %d" % slot.npu
        lines += rows or [no_process + " " * (WIDTH - 1 - len(no_process)) + "|"]
        lines.append(_PROCESS_DOUBLE)
    return lines


def mapping(product: Product) -> str:
    """`npu-smi info -m` as the 950 doc prints it: NPU ID, Slot ID, Chip ID, Chip Phy-ID, Chip Name."""
    lines = ["%-16s%-17s%-17s%-21s%-29s" % ("NPU ID", "Slot ID", "Chip ID", "Chip Phy-ID", "Chip Name")]
    for index, slot in enumerate(product.slots()):
        lines.append("%-16d%-17d%-17d%-21d%s" % (slot.npu, index, slot.chip, slot.phy_id, product.mapping_name))
    return "".join(line + "\n" for line in lines)


def listing(product: Product) -> str:
    """`npu-smi info -l`: the 950 prints each NPU's product name and serial number, no chip count."""
    lines = [_kv("Total Count", len(product.cards)), ""]
    for npu in product.cards:
        lines += [_kv("NPU ID", npu), _kv("Product Name", product.board.product_name),
                  _kv("Serial Number", product.serial_number(npu)), ""]
    return "".join(line + "\n" for line in lines)


def card_query(product: Product, query: str, npu: int, card_chips: Sequence[Chip], driver_version: str,
               firmware_version: str) -> Optional[str]:
    """One `-t` answer for NPU `npu` (the 950 takes no `-c`), or None for a type it does not answer."""
    slot, values = card_chips[0]
    if query == "board":
        lines = _board(product, slot, values, driver_version, firmware_version)
    elif query in _QUERIES:
        lines = _QUERIES[query](product, slot, values)
    else:
        return None
    return "".join(line + "\n" for line in lines)


def _kv(key: str, value: object) -> str:
    return "\t%-30s : %s" % (key, value)


def _kv40(key: str, value: object) -> str:
    return "\t%-40s : %s" % (key, value)


def _usages(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    return [_kv("NPU ID", slot.npu)] + hbm_usage_lines(slot, values)


def _common(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    return [
        _kv("NPU ID", slot.npu),
        _kv("Memory Usage Rate(%)", 0),
        _kv("HBM Usage Rate(%)", memory_usage_rate(slot, values)),
        _kv("Aicore Usage Rate(%)", values.aicore_percent),
        _kv("Aicore Freq(MHZ)", product.aicore_rated_mhz),
        _kv("Aicore curFreq(MHZ)", values.aicore_freq_mhz),
        _kv("Aicore Count", product.aicore_count),
        _kv("Temperature(C)", values.temperature_celsius),
        _kv("NPU Real-time Power(W)", "%.1f" % values.power_watts),
    ]


def _power(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    return [_kv("NPU ID", slot.npu), _kv("NPU Real-time Power(W)", "%.1f" % values.power_watts)]


def _temp(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    return [_kv("NPU ID", slot.npu), _kv("Temperature (C)", values.temperature_celsius)]


def _sensors(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    # the doc's SoC maximum runs 2 C above the NPU die; the optical module (SFP) reads NA on a card without one
    return [_kv("Soc Max Temperature (C)", values.temperature_celsius + 2), _kv("SFP Temperature (C)", "NA"),
            _kv("NDIE Temperature (C)", values.temperature_celsius),
            _kv("HBM Temperature (C)", values.hbm_temperature_celsius)]


def _ecc(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    single, double = values.ecc_single_bit_errors, values.ecc_double_bit_errors
    # the simulator keeps no counter resets (aggregate = current) and no pages waiting to be isolated
    return [
        _kv40("NPU ID", slot.npu),
        _kv40("HBM Single Bit Error Count", single),
        _kv40("HBM Double Bit Error Count", double),
        _kv40("HBM Single Bit Aggregate Total Err Cnt", single),
        _kv40("HBM Double Bit Aggregate Total Err Cnt", double),
        _kv40("HBM Single Bit Isolated Pages Count", values.ecc_single_bit_isolated_pages),
        _kv40("HBM Double Bit Isolated Pages Count", values.ecc_double_bit_isolated_pages),
        _kv40("HBM Single Bit Next-Isolated Pages Count", 0),
        _kv40("HBM Double Bit Next-Isolated Pages Count", 0),
    ]


def _health(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    """Health and error codes in one card-level answer; further descriptions as on the other layouts."""
    lines = [_kv("NPU ID", slot.npu), _kv("Health", values.health)]
    if not values.errors:
        return lines + [_kv("Error Code", "NA"), _kv("Error Information", "NA")]
    lines += ["\t%-30s :%s" % ("Error Code", "".join(" %04X" % code for code, _ in values.errors)),
              _kv("Error Information", values.errors[0][1])]
    for _, information in values.errors[1:]:
        lines += ["", _kv(" ", information)]
    return lines


def _fault_events(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    """One event per error code (the doc shows one; more are taken to repeat the information line). The node
    fields are the doc's example's: the simulator does not model which unit raised an event."""
    severity = FAULT_SEVERITY.get(values.health, 0)
    return [_kv("Fault Event Count", len(values.errors))] + [
        _kv("Fault Event Information", "event id=0x%08X, severity=%d, node type ex=215, node id=0, "
                                       "sub node type ex=0, sub node id=0" % (code, severity))
        for code, _ in values.errors]


def _memory(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    return [_kv("NPU ID", slot.npu), _kv("DDR Capacity(MB)", 0), _kv("DDR Clock Speed(MHz)", 0),
            _kv("HBM Capacity(MB)", slot.memory_total_mb), _kv("HBM Clock Speed(MHz)", product.memory_clock_mhz),
            _kv("HBM Temperature(C)", values.hbm_temperature_celsius),
            _kv("HBM Manufacturer ID", "0x%X" % product.hbm_manufacturer_id)]


def _volt(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    return [_kv("NPU ID", slot.npu), _kv("Voltage(V)", "%.2f" % CORE_VOLTS[product.family])]


def _board(product: Product, slot: ChipSlot, values: ChipValues, driver_version: str,
           firmware_version: str) -> Lines:
    """The card's and its chip's identity in one answer; its only die id is the DDie ID (no VDie ID)."""
    board = product.board
    return [
        _kv("NPU ID", slot.npu), _kv("Product Name", board.product_name), _kv("NPU Name", board.npu_name),
        _kv("Chip Name", product.chip_name), _kv("Chip Version", board.chip_version), _kv("Model", board.model),
        _kv("Manufacturer", board.manufacturer), _kv("Serial Number", product.serial_number(slot.npu)),
        _kv("Software Version", driver_version), _kv("Firmware Version", firmware_version),
        _kv("Compatibility", values.compatibility), _kv("Board ID", "0x%02x" % board.board_id),
        _kv("Main Board ID", "0x%02x(1P)" % board.main_board_id),  # 1P: a one-chip board
        _kv("PCB ID", board.pcb_id), _kv("BOM ID", board.bom_id), _kv("PCIe Bus Info", slot.bus_id),
        _kv("Slot ID", product.cards.index(slot.npu)), _kv("Class ID", "NA"),
        _kv("PCI Vendor ID", "0x%04X" % board.vendor_id), _kv("PCI Device ID", "0x%04X" % board.device_id),
        _kv("Subsystem Vendor ID", "0x%04X" % board.subsystem_vendor_id),
        _kv("Subsystem Device ID", "0x%04X" % board.subsystem_device_id),
        _kv("Chip Count", product.chips_per_card), _kv("DDie ID", die_id_words(slot, salt=0xDD1E)),
        _kv("Chip Position ID", slot.chip),
    ]


def _sio(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    """`-t sio-info -i N`: the 950 documents the A3's two lines (its doc sample prints 0 and 0)."""
    return render_sio(values)


_QUERIES = {"usages": _usages, "common": _common, "power": _power, "temp": _temp, "sensors": _sensors,
            "ecc": _ecc, "health": _health, "current-fault-event": _fault_events, "memory": _memory,
            "volt": _volt, "sio-info": _sio}
