"""Render `npu-smi info -t <type> -i <npu> [-c <chip>]` the way real npu-smi 25.x does.

Pure functions: product + values -> text, or None when the product (or that chip) does not answer the
query, in which case the CLI prints npu-smi's "This device does not support querying <type>." line.

Layout rules from the npu-smi source and real captures (FORMATS.md section 4):
* every line is `\\t%-30s : value` (ECC: `%-40s`);
* the card-level form prints `NPU ID`, `Chip Count`, a blank line, then one block per chip that answers,
  each followed by its `Chip ID` line (on 310/310B boards the `Chip ID` line comes first) and a blank
  line, then the MCU block ending in `Chip Name : MCU`;
* `-t common` and `-t board` have layouts of their own;
* the chip-level form (`-c`) prints the chip's block alone.
The 950 prints its own simpler forms (render_950.py).
"""

from typing import Optional, Sequence

from .products import FAMILY_310B, FAMILY_310P, FAMILY_910, FAMILY_910_93, FAMILY_950, ChipSlot, Product
from .links import render_hccs, render_hccs_310p, render_hccs_bandwidth, render_sio
from .render_950 import card_query
from .render_common import CORE_VOLTS, Chip, Lines, die_id_words, hbm_usage_lines, kv as _kv, memory_usage_rate
from .values import ChipValues

HEALTH_WITH_CODES = ("Warning", "Alarm", "Critical")


def render_query(product: Product, query: str, npu: int, chip: Optional[int], card_chips: Sequence[Chip],
                 driver_version: str, firmware_version: str) -> Optional[str]:
    """The output of one `-t` query for card `npu` (card level) or one chip of it, or None if unsupported.

    `card_chips` are the card's NPU chips in chip order; `chip` may also name the card's MCU.
    """
    if query not in product.queries:
        return None
    if product.family == FAMILY_950:
        return card_query(product, query, npu, card_chips, driver_version, firmware_version)
    if query in LINK_QUERIES and chip is None:
        return "This command must input card id and chip id.\n"
    if query == "board" and chip is None:
        lines: Optional[Lines] = _card_board(product, npu, card_chips, driver_version, firmware_version)
    elif query == "common" and chip is None:
        lines = _card_common(product, npu, card_chips)
    elif chip is None:
        lines = _card_blocks(product, query, npu, card_chips)
    elif chip == product.mcu_chip:
        lines = _mcu_block(product, query, card_chips, card_level=False)
    else:
        slot, values = card_chips[chip]
        lines = _chip_block(product, query, slot, values, card_level=False, firmware_version=firmware_version)
    return None if lines is None else "".join(line + "\n" for line in lines)


# the interconnect types: chip-level only (npu-smi refuses them without -c); the MCU answers none
LINK_QUERIES = {"hccs": render_hccs, "hccs-bw": render_hccs_bandwidth, "sio-info": render_sio}


def _kv40(key: str, value: object) -> str:
    return "\t%-40s : %s" % (key, value)


def _card_blocks(product: Product, query: str, npu: int, card_chips: Sequence[Chip]) -> Lines:
    kv = _kv40 if query == "ecc" else _kv
    chip_id_first = product.family == FAMILY_310B
    lines = [kv("NPU ID", npu), kv("Chip Count", len(card_chips)), ""]
    for slot, values in card_chips:
        block = _chip_block(product, query, slot, values, card_level=True, firmware_version="")
        if chip_id_first:
            lines.append(kv("Chip ID", slot.chip))
        if block is None:
            continue
        lines += block
        if not chip_id_first:
            lines.append(kv("Chip ID", slot.chip))
        lines.append("")
    mcu = _mcu_block(product, query, card_chips, card_level=True)
    if mcu is not None:
        lines += mcu + [_kv("Chip Name", "MCU"), ""]
    return lines


def _chip_block(product: Product, query: str, slot: ChipSlot, values: ChipValues, card_level: bool,
                firmware_version: str) -> Optional[Lines]:
    if query == "usages":
        return _usages(product, slot, values)
    if query == "power":
        if product.family == FAMILY_910_93 and slot.chip == 1:
            return None  # an A3 NPU reports its power on die 0 only (the table prints "-" for die 1)
        return [_kv("NPU Real-time Power(W)", "%.1f" % values.power_watts)]
    if query == "temp":
        key = "NPU Temperature (C)" if product.is_server else "Temperature (C)"
        return [_kv(key, values.temperature_celsius)]
    if query == "ecc":
        return _ecc(product, values)
    if query == "health":
        return [_kv("Health", values.health)] if card_level else _health_detail(values.health, values.errors)
    if query == "memory":
        return _memory(product, slot, values)
    if query == "volt":  # `Voltage(V) : 0.72` (FORMATS.md 4.9); the core rail barely moves, so a constant
        return [_kv("Voltage(V)", "%.2f" % CORE_VOLTS[product.family])]
    if query == "common":
        return _common_chip(product, slot, values)
    if query == "hccs" and product.family == FAMILY_310P:
        return render_hccs_310p(values)
    if query in LINK_QUERIES:
        return LINK_QUERIES[query](values)
    return _chip_board(product, slot, firmware_version)


def _mcu_block(product: Product, query: str, card_chips: Sequence[Chip], card_level: bool) -> Optional[Lines]:
    if product.mcu_chip is None or query not in product.mcu_queries:
        return None
    board_temperature = card_chips[0][1].board_temperature_celsius
    if query == "temp":
        # "%-8s%-22s :" is how npu-smi prints the MCU's board sensors ("LM75A_TE (C)")
        return ["\t%-8s%-22s : %d" % (sensor, " (C)", board_temperature)
                for sensor in product.mcu_temperature_sensors]
    if query == "health":  # the MCU itself stays healthy in every scenario
        return [_kv("Health", "OK")] if card_level else _health_detail("OK", [])
    if query == "power":
        return [_kv("Power Dissipation(W)", "%.1f" % _card_power(card_chips))]
    if query == "common":
        return _mcu_common(product, card_chips)
    return None


# -- usages ----------------------------------------------------------------------------------------------


def _usages(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    usage_rate = memory_usage_rate(slot, values)
    if product.family == FAMILY_310B:
        return [
            _kv("Memory Capacity(MB)", slot.memory_total_mb),
            _kv("Memory Usage Rate(%)", usage_rate),
            _kv("Hugepages Total(page)", values.hugepages_total),
            _kv("Hugepages Usage Rate(%)", _hugepages_rate(values)),
            _kv("Aicore Usage Rate(%)", values.aicore_percent),
            _kv("Aicpu Usage Rate(%)", values.aicpu_percent),
            _kv("Ctrlcpu Usage Rate(%)", values.ctrlcpu_percent),
            _kv("Memory Bandwidth Usage Rate(%)", values.ddr_bandwidth_percent),
        ]
    if product.family == FAMILY_310P:
        return [
            _kv("DDR Capacity(MB)", slot.memory_total_mb),
            _kv("DDR Usage Rate(%)", usage_rate),
            _kv("DDR Hugepages Total(page)", values.hugepages_total),
            _kv("DDR Hugepages Usage Rate(%)", _hugepages_rate(values)),
            _kv("Aicore Usage Rate(%)", values.aicore_percent),
            _kv("Aicpu Usage Rate(%)", values.aicpu_percent),
            _kv("Ctrlcpu Usage Rate(%)", values.ctrlcpu_percent),
            _kv("Vectorcore Usage Rate(%)", values.vectorcore_percent),
            _kv("DDR Bandwidth Usage Rate(%)", values.ddr_bandwidth_percent),
        ] + [_kv("DVPP %s Usage Rate(%%)" % engine, values.dvpp_percent)
             for engine in ("VDEC", "VPC", "VENC", "JPEGE", "JPEGD")]
    if product.family == FAMILY_910:  # HBM and DDR of its own; no Aivector, no NPU Utilization or Aicube
        return [
            _kv("DDR Capacity(MB)", slot.ddr_total_mb),
            _kv("DDR Usage Rate(%)", _ddr_rate(slot, values)),
            _kv("DDR Hugepages Total(page)", values.hugepages_total),
            _kv("DDR Hugepages Usage Rate(%)", _hugepages_rate(values)),
            _kv("HBM Capacity(MB)", slot.memory_total_mb),
            _kv("HBM Usage Rate(%)", usage_rate),
            _kv("Aicore Usage Rate(%)", values.aicore_percent),
            _kv("Aicpu Usage Rate(%)", values.aicpu_percent),
            _kv("Ctrlcpu Usage Rate(%)", values.ctrlcpu_percent),
            _kv("DDR Bandwidth Usage Rate(%)", values.ddr_bandwidth_percent),
            _kv("HBM Bandwidth Usage Rate(%)", values.hbm_bandwidth_percent),
        ]
    # 910B and A3 have no DDR of their own: npu-smi prints the DDR keys with 0
    return hbm_usage_lines(slot, values)


def _ddr_rate(slot: ChipSlot, values: ChipValues) -> int:
    return values.ddr_used_mb * 100 // slot.ddr_total_mb if slot.ddr_total_mb else 0


def _hugepages_rate(values: ChipValues) -> int:
    if values.hugepages_total == 0:
        return 0
    return values.hugepages_used * 100 // values.hugepages_total


# -- ecc, health, memory ---------------------------------------------------------------------------------


def _ecc(product: Product, values: ChipValues) -> Lines:
    single, double = values.ecc_single_bit_errors, values.ecc_double_bit_errors
    if product.family == FAMILY_310B:
        return [_kv40("Single-bit Error Count", single), _kv40("Double-bit Error Count", double)]
    # the simulator keeps no counter resets, so the aggregate totals equal the current counts
    memory = "DDR" if product.family == FAMILY_310P else "HBM"
    # the 910 A1 prints its DDR's six counters before the HBM's; the scenario's errors are the HBM's
    lines = [] if product.family != FAMILY_910 else [
        _kv40("DDR " + key, 0) for key in ("Single Bit Error Count", "Double Bit Error Count",
                                           "Single Bit Aggregate Total Err Cnt", "Double Bit Aggregate Total Err Cnt",
                                           "Single Bit Isolated Pages Count", "Double Bit Isolated Pages Count")]
    lines += [
        _kv40(memory + " Single Bit Error Count", single),
        _kv40(memory + " Double Bit Error Count", double),
        _kv40(memory + " Single Bit Aggregate Total Err Cnt", single),
        _kv40(memory + " Double Bit Aggregate Total Err Cnt", double),
        _kv40(memory + " Single Bit Isolated Pages Count", values.ecc_single_bit_isolated_pages),
        _kv40(memory + " Double Bit Isolated Pages Count", values.ecc_double_bit_isolated_pages),
    ]
    if product.family == FAMILY_310P:
        lines += [_kv40("DDR Single Bit Next-Isolated Pages Count", 0),
                  _kv40("DDR Double Bit Next-Isolated Pages Count", 0)]
    return lines


def _health_detail(health: str, errors: Sequence) -> Lines:
    """The chip-level health block: status, error codes on one line, one information line per code."""
    if not errors:
        # npu-smi reports OK when a chip is unhealthy but has no error code to show
        status = "OK" if health in HEALTH_WITH_CODES else health
        return [_kv("Health Status", status), _kv("Error Code", "NA"), _kv("Error Information", "NA")]
    lines = [_kv("Health Status", health),
             "\t%-30s :%s" % ("Error Code", "".join(" %04X" % code for code, _ in errors)),
             _kv("Error Information", errors[0][1])]
    for _, information in errors[1:]:
        lines += ["", _kv(" ", information)]
    return lines


def _memory(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    if product.family == FAMILY_310B:
        return [_kv("Total Capacity(MB)", slot.memory_total_mb), _kv("Capacity(MB)", slot.memory_total_mb),
                _kv("Clock Speed(MHz)", product.memory_clock_mhz)]
    if product.family == FAMILY_310P:
        return [_kv("Total DDR Capacity(MB)", slot.memory_total_mb), _kv("DDR Capacity(MB)", slot.memory_total_mb),
                _kv("DDR Clock Speed(MHz)", product.memory_clock_mhz)]
    return [
        _kv("DDR Capacity(MB)", slot.ddr_total_mb),
        _kv("DDR Clock Speed(MHz)", product.ddr_clock_mhz),
        _kv("HBM Capacity(MB)", slot.memory_total_mb),
        _kv("HBM Clock Speed(MHz)", product.memory_clock_mhz),
        _kv("HBM Temperature(C)", values.hbm_temperature_celsius),
        _kv("HBM Manufacturer ID", "0x%X" % product.hbm_manufacturer_id),
    ]


# -- common ----------------------------------------------------------------------------------------------


def _card_common(product: Product, npu: int, card_chips: Sequence[Chip]) -> Lines:
    lines = [_kv("NPU ID", npu), _kv("Chip Count", len(card_chips))]
    for slot, values in card_chips:
        lines += ["", _kv("Chip ID", slot.chip)] + _common_chip(product, slot, values)
    mcu = _mcu_block(product, "common", card_chips, card_level=True)
    if mcu is not None:
        lines += [""] + mcu
    return lines


def _common_chip(product: Product, slot: ChipSlot, values: ChipValues) -> Lines:
    family_910 = product.has_hbm
    usage_rate = values.memory_used_mb * 100 // slot.memory_total_mb
    # "Memory Usage Rate" is DDR: of the 910 family only the A1 has any, the others print 0
    ddr_rate = _ddr_rate(slot, values) if product.family == FAMILY_910 else 0
    lines = [_kv("Memory Usage Rate(%)", ddr_rate if family_910 else usage_rate)]
    if family_910:
        lines.append(_kv("HBM Usage Rate(%)", usage_rate))
    lines.append(_kv("Aicore Usage Rate(%)", values.aicore_percent))
    if product.family != FAMILY_310B:
        lines += [_kv("Aicore Freq(MHZ)", product.aicore_rated_mhz), _kv("Aicore curFreq(MHZ)", values.aicore_freq_mhz)]
    if product.aicore_count is not None:
        lines.append(_kv("Aicore Count", product.aicore_count))
    lines.append(_kv("Temperature(C)", values.temperature_celsius))
    if product.family == FAMILY_310B:
        lines.append(_kv("Rated Power Dissipation(W)", "%.1f" % values.power_watts))
    elif family_910:
        lines.append(_kv("NPU Real-time Power(W)", "%.1f" % values.power_watts))
    return lines


def _mcu_common(product: Product, card_chips: Sequence[Chip]) -> Lines:
    lines = [_kv("Chip Name", "MCU" if product.family == FAMILY_310B else "mcu"),
             _kv("Temperature(C)", card_chips[0][1].board_temperature_celsius)]
    if product.family == FAMILY_310B:
        lines.append(_kv("Power Dissipation(W)", "%.1f" % _card_power(card_chips)))
    elif product.family == FAMILY_310P:
        # the only place a 310P card's power shows: its MCU measures the whole card
        lines.append(_kv("NPU Real-time Power(W)", "%.1f" % _card_power(card_chips)))
    return lines


def _card_power(card_chips: Sequence[Chip]) -> float:
    return sum(values.power_watts for _, values in card_chips)


# -- board -----------------------------------------------------------------------------------------------


def _card_board(product: Product, npu: int, card_chips: Sequence[Chip], driver_version: str,
                firmware_version: str) -> Lines:
    board = product.board
    first_slot, first_values = card_chips[0]
    compatibility = first_values.compatibility  # one line for the whole card: its first chip's value
    slot_id = product.cards.index(npu)
    if product.family == FAMILY_910:  # npu-smi 23.0.5 on a 910A: no Product Name, Model, Manufacturer, Serial
        return [_kv("NPU ID", npu), _kv("Software Version", driver_version), _kv("Firmware Version", firmware_version),
                _kv("Compatibility", compatibility), _kv("Board ID", "0x%02x" % board.board_id),
                _kv("PCB ID", board.pcb_id), _kv("BOM ID", board.bom_id)] \
            + _pcie_ids(product, first_slot, slot_id) + [_kv("Chip Count", len(card_chips))]
    if product.is_server:
        lines = [_kv("NPU ID", npu), _kv("Product Name", board.product_name), _kv("Model", board.model),
                 _kv("Manufacturer", board.manufacturer), _kv("Serial Number", product.serial_number(npu)),
                 _kv("Software Version", driver_version), _kv("Firmware Version", firmware_version),
                 _kv("Compatibility", compatibility), _kv("Board ID", "0x%02x" % board.board_id)]
        if board.main_board_id is not None:
            lines.append(_kv("Main Board ID", "0x%02x" % board.main_board_id))
        return lines + [_kv("PCB ID", board.pcb_id), _kv("BOM ID", board.bom_id)] \
            + _pcie_ids(product, first_slot, slot_id) + [_kv("Chip Count", len(card_chips))]
    lines = [_kv("NPU ID", npu), _kv("Product Name", board.product_name), _kv("Model", board.model),
             _kv("Manufacturer", board.manufacturer), _kv("Serial Number", product.serial_number(npu)),
             _kv("Software Version", driver_version), _kv("Firmware Version", firmware_version)]
    if first_slot.bus_id is not None:  # SoC boards print no compatibility and no PCIe block
        lines.append(_kv("Compatibility", compatibility))
    lines += [_kv("Board ID", "0x%02x" % board.board_id), _kv("PCB ID", board.pcb_id), _kv("BOM ID", board.bom_id)]
    if first_slot.bus_id is not None:
        lines += _pcie_ids(product, first_slot, slot_id)
    lines.append(_kv("Chip Count", len(card_chips)))
    lines.append(_kv("Faulty Chip Count" if product.family == FAMILY_310B else "Chip Fault", 0))
    return lines


def _pcie_ids(product: Product, slot: ChipSlot, slot_id: int) -> Lines:
    board = product.board
    return [_kv("PCIe Bus Info", slot.bus_id), _kv("Slot ID", slot_id), _kv("Class ID", "NA"),
            _kv("PCI Vendor ID", "0x%04X" % board.vendor_id), _kv("PCI Device ID", "0x%04X" % board.device_id),
            _kv("Subsystem Vendor ID", "0x%04X" % board.subsystem_vendor_id),
            _kv("Subsystem Device ID", "0x%04X" % board.subsystem_device_id)]


def _chip_board(product: Product, slot: ChipSlot, firmware_version: str) -> Lines:
    board = product.board
    lines = [_kv("NPU ID", slot.npu)]
    if product.family == FAMILY_910_93:
        lines.append(_kv("NPU Name", product.chip_name))
    lines.append(_kv("Chip ID", slot.chip))
    if product.family != FAMILY_910_93:
        lines.append(_kv("Chip Type", "Ascend"))
    lines += [_kv("Chip Name", product.chip_name), _kv("Chip Version", board.chip_version),
              _kv("Board ID", "0x%02x" % board.board_id)]
    if product.family == FAMILY_310B:
        lines.append(_kv("Module Board ID", "NA"))
    if product.family != FAMILY_310P:
        lines += [_kv("PCB ID", "NA"), _kv("BOM ID", board.bom_id)]
    die_words = die_id_words(slot)
    if product.has_hbm:
        lines += [_kv("VDie ID", die_words), _kv("NDie ID", die_id_words(slot, salt=0x0F0F))]
    elif product.family == FAMILY_310B:  # 310B boards print the chip version before the die id words
        lines.append(_kv("Die ID", "{}, {}".format(board.chip_version, die_words)))
    else:
        lines.append(_kv("Die ID", die_words))
    if slot.bus_id is not None:
        lines += [_kv("Chip Position ID", slot.chip), _kv("PCIe Bus Info", slot.bus_id),
                  _kv("Firmware Version", firmware_version)]
    return lines


