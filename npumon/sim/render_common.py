"""What the npu-smi renderers share: the chip pair, npu-smi's limits and the cells and lines that the 910/310
layouts (render_table.py, render_query.py) and the 950's (render_950.py) print alike. Pure functions."""

from typing import List, Tuple

from .products import FAMILY_310B, FAMILY_310P, FAMILY_910, FAMILY_910B, FAMILY_910_93, FAMILY_950, ChipSlot
from .values import ChipValues

Lines = List[str]
Chip = Tuple[ChipSlot, ChipValues]

# Real npu-smi shows at most this many processes per chip.
MAX_PROCESSES_PER_CHIP = 8
# /proc/<pid>/comm, where npu-smi gets the name, keeps 15 characters ("mindie_llm_back").
PROCESS_NAME_LENGTH = 15
CORE_VOLTS = {FAMILY_910B: 0.8, FAMILY_910_93: 0.8, FAMILY_310P: 0.72, FAMILY_310B: 0.72, FAMILY_910: 0.8,
              FAMILY_950: 0.8}


def kv(key: str, value: object) -> str:
    """A `-t` query's `\\t%-30s : value` line."""
    return "\t%-30s : %s" % (key, value)


def bus_id_cell(bus_id: str, function_width: int) -> str:
    """npu-smi prints the bus id with printf("%04X:%02X:%02X.%-NX"), so the function digit is padded."""
    domain, bus, device_function = bus_id.split(":")
    device, function = device_function.split(".")
    return "%04X:%02X:%02X.%-*X" % (int(domain, 16), int(bus, 16), int(device, 16), function_width,
                                    int(function, 16))


def memory_usage_rate(slot: ChipSlot, values: ChipValues) -> int:
    """npu-smi's usage rate of the chip's own memory (HBM on the 910 family, DDR on the 310), in %."""
    return values.memory_used_mb * 100 // slot.memory_total_mb


def hbm_usage_lines(slot: ChipSlot, values: ChipValues) -> Lines:
    """`-t usages` of a chip with HBM and no DDR of its own (910B, A3, 950): npu-smi prints the DDR keys with 0."""
    usage_rate = memory_usage_rate(slot, values)
    return [
        kv("DDR Capacity(MB)", 0),
        kv("DDR Usage Rate(%)", 0),
        kv("DDR Hugepages Total(page)", 0),
        kv("DDR Hugepages Usage Rate(%)", 0),
        kv("HBM Capacity(MB)", slot.memory_total_mb),
        kv("HBM Usage Rate(%)", usage_rate),
        kv("Aicore Usage Rate(%)", values.aicore_percent),
        kv("Aivector Usage Rate(%)", values.aivector_percent),
        kv("Aicpu Usage Rate(%)", values.aicpu_percent),
        kv("Ctrlcpu Usage Rate(%)", values.ctrlcpu_percent),
        kv("DDR Bandwidth Usage Rate(%)", 0),
        kv("HBM Bandwidth Usage Rate(%)", values.hbm_bandwidth_percent),
        kv("NPU Utilization(%)", values.npu_utilization_percent),
        kv("Aicube Usage Rate(%)", values.aicube_percent),
    ]


def die_id_words(slot: ChipSlot, salt: int = 0) -> str:
    """Five stable 32-bit words per chip, printed like npu-smi's " %08X" die ids."""
    seed = (slot.device_id + 1) * 0x9E3779B1 + salt
    return " ".join("%08X" % ((seed * (index + 3) + index * 0x01000193) & 0xFFFFFFFF) for index in range(5))
