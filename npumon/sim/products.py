"""The simulated products: which chips a host has, how they are numbered, and what npu-smi says about them.

Pure data. Numbers that are not scenario-driven (bus ids, capacities, board ids, clock rates) come from
real captures in shared/reference/npu-smi where one exists for the product. Everything that changes
over time (temperatures, usage, health, ECC counters, processes) lives in the scenarios instead.
"""

from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Optional, Tuple

# Chip families as npu-smi's own code tells them apart; they decide layouts and which keys exist.
FAMILY_910B = "910b"  # Atlas A2: 910B1..910B4
FAMILY_910_93 = "910_93"  # Atlas A3: two dies per NPU, name "Ascend910"
FAMILY_310P = "310p"  # Atlas 300I Pro / Duo cards
FAMILY_310B = "310b"  # Atlas 200I / 500 A2 SoC boards

# `-t` types the simulator can answer. A product lists the subset it supports; any other type that real
# npu-smi knows gets "This device does not support querying <type>."
SIMULATED_QUERIES = ("usages", "common", "power", "temp", "ecc", "health", "board", "memory", "volt")
# `npu-smi set` knobs the simulator models (sim/knobs.py). A product lists those it has; the others get
# "This device does not support setting <knob>."
PWM_MODE, PWM_DUTY, NVE_LEVEL, CPU_FREQ_UP = "pwm-mode", "pwm-duty-ratio", "nve-level", "cpu-freq-up"
BOARD_WIDE_KNOBS = frozenset((PWM_MODE, PWM_DUTY))  # the fan is one per board: no -i
QUERYABLE_KNOBS = frozenset((PWM_MODE, PWM_DUTY, NVE_LEVEL))  # also answered by `npu-smi info -t`


@dataclass(frozen=True)
class ChipSlot:
    """One NPU chip (die) position of a product, numbered the way npu-smi numbers it."""

    npu: int  # card id (`-i`)
    chip: int  # index in the card (`-c`)
    device_id: int  # logical id = /dev/davinciN = "Chip Logic ID"
    phy_id: int  # "Phy-ID" (printed on A3 only)
    bus_id: Optional[str]  # "DDDD:BB:DD.F"; None on SoC boards (printed "NA")
    memory_total_mb: int  # HBM on the 910 family, DDR on the 310 family


@dataclass(frozen=True)
class BoardInfo:
    """What `-t board` prints that no scenario changes."""

    product_name: str
    model: str
    manufacturer: str
    serial_prefix: str  # serial numbers are the prefix + two digits counting up from first_serial
    first_serial: int
    board_id: int
    main_board_id: Optional[int]  # printed on A3 only
    pcb_id: str
    bom_id: int
    vendor_id: int
    device_id: int
    subsystem_vendor_id: int
    subsystem_device_id: int
    chip_version: str


@dataclass(frozen=True)
class Product:
    name: str
    description: str
    family: str
    chip_name: str  # the main table's Name column
    mapping_name: str  # `-m` Chip Name
    npu_smi_version: str
    cards: Tuple[int, ...]  # card ids, in the order npu-smi lists them (not always contiguous)
    chips_per_card: int
    memory_total_mb: Tuple[int, ...]  # per chip index in the card
    bus_ids: Tuple[Optional[str], ...]  # per logical device id
    mcu_chip: Optional[int]  # chip id of the card's MCU, if it has one
    queries: FrozenSet[str]  # `-t` types this product answers for its NPU chips
    mcu_queries: FrozenSet[str]  # `-t` types the MCU answers (card-level blocks and `-c <mcu>`)
    mcu_temperature_sensors: Tuple[str, ...]  # board sensors the MCU reports in `-t temp`
    is_server: bool  # servers print "NPU Temperature (C)", cards and boards "Temperature (C)"
    has_process_table: bool
    aicore_count: Optional[int]  # printed by `-t common` on the 910 family only
    aicore_rated_mhz: int
    memory_clock_mhz: int  # HBM clock on the 910 family, DDR clock on the 310 family
    hbm_manufacturer_id: Optional[int]
    board: BoardInfo
    pcie_max_speed: Optional[str]  # as sysfs prints it; None on SoC boards without a PCIe link
    pcie_max_width: Optional[int]
    absent_device_files: Tuple[str, ...]  # management nodes this kind of host does not have
    # `npu-smi set` knobs the product really has (sim/knobs.py); every other product refuses them
    knobs: FrozenSet[str] = frozenset()
    nve_levels: Tuple[str, ...] = ()  # what `info -t nve-level` prints for each level, by index

    @property
    def has_hbm(self) -> bool:
        return self.family in (FAMILY_910B, FAMILY_910_93)

    def slots(self) -> List[ChipSlot]:
        """Every NPU chip, in npu-smi's order (card by card), with its logical and physical ids."""
        result = []
        for card_index, npu in enumerate(self.cards):
            for chip in range(self.chips_per_card):
                device_id = card_index * self.chips_per_card + chip
                result.append(ChipSlot(npu=npu, chip=chip, device_id=device_id, phy_id=device_id,
                                       bus_id=self.bus_ids[device_id],
                                       memory_total_mb=self.memory_total_mb[chip]))
        return result

    def serial_number(self, npu: int) -> str:
        return "{}{:02d}".format(self.board.serial_prefix, self.board.first_serial + self.cards.index(npu))


_SERVER_QUERIES = frozenset(SIMULATED_QUERIES)
# The 910 family's MCU answers these; `-t usages`, `-t ecc`, `-t memory` and, per the 25.5.1 capture,
# `-t power` print no MCU block.
_910_MCU_QUERIES = frozenset(("common", "temp", "health"))

ATLAS_800I_A2 = Product(
    name="atlas-800i-a2",
    description="Atlas 800I A2 inference server: 8 x Ascend 910B3 (64 GB HBM each), MCU as chip 1",
    family=FAMILY_910B,
    chip_name="910B3",
    mapping_name="Ascend 910B3",
    npu_smi_version="25.5.1",
    cards=tuple(range(8)),
    chips_per_card=1,
    memory_total_mb=(65536,),
    # the bus ids of the 8-NPU 910B3 capture (info_910b3_8npu_v23.0.7.txt)
    bus_ids=tuple("0000:{}:00.0".format(bus) for bus in ("C1", "C2", "81", "82", "01", "02", "41", "42")),
    mcu_chip=1,
    queries=_SERVER_QUERIES,
    mcu_queries=_910_MCU_QUERIES,
    mcu_temperature_sensors=("LM75A_TE", "LM75B_TE"),
    is_server=True,
    has_process_table=True,
    aicore_count=20,
    aicore_rated_mhz=1800,
    memory_clock_mhz=1600,
    hbm_manufacturer_id=0x57,
    board=BoardInfo(
        product_name="IT21HMDC_Bin5", model="NA", manufacturer="Huawei",
        serial_prefix="1025C90487", first_serial=91, board_id=0x60, main_board_id=None,
        pcb_id="A", bom_id=1, vendor_id=0x19E5, device_id=0xD802,
        subsystem_vendor_id=0x19E5, subsystem_device_id=0x3003, chip_version="V1"),
    pcie_max_speed="32.0 GT/s PCIe",
    pcie_max_width=16,
    absent_device_files=(),
)

ATLAS_A3 = Product(
    name="atlas-a3",
    description="Atlas A3 (Ascend 910_93) server: 8 NPUs x 2 dies = 16 chips, MCU as chip 2",
    family=FAMILY_910_93,
    chip_name="Ascend910",
    mapping_name="Ascend910",
    npu_smi_version="25.5.1",
    cards=tuple(range(8)),
    chips_per_card=2,
    memory_total_mb=(65536, 65536),
    # the 16 bus ids of a complete A3 capture (vllm-ascend issue 960, npu-smi 24.1.rc3.5)
    bus_ids=tuple("0000:{}:00.0".format(bus) for bus in (
        "9D", "9F", "99", "9B", "95", "97", "91", "93", "8D", "8F", "89", "8B", "85", "87", "81", "83")),
    mcu_chip=2,
    queries=_SERVER_QUERIES,
    mcu_queries=_910_MCU_QUERIES,
    mcu_temperature_sensors=("LM75A_TE", "LM75B_TE"),
    is_server=True,
    has_process_table=True,
    aicore_count=24,
    aicore_rated_mhz=1800,
    memory_clock_mhz=1600,
    hbm_manufacturer_id=0x57,
    board=BoardInfo(
        product_name="IT22HMDA_2_S", model="NA", manufacturer="Huawei",
        serial_prefix="1025D10733", first_serial=1, board_id=0x71, main_board_id=0x68,
        pcb_id="A", bom_id=1, vendor_id=0x19E5, device_id=0xD803,
        subsystem_vendor_id=0x19E5, subsystem_device_id=0x3001, chip_version="V1"),
    pcie_max_speed="32.0 GT/s PCIe",
    pcie_max_width=16,
    absent_device_files=(),
)

ATLAS_300I_DUO = Product(
    name="atlas-300i-duo",
    description="Two Atlas 300I Duo cards (ids 2 and 5), 2 x Ascend 310P3 each sharing the card's bus id",
    family=FAMILY_310P,
    chip_name="310P3",
    mapping_name="Ascend 310P3",
    npu_smi_version="25.5.1",
    cards=(2, 5),
    chips_per_card=2,
    memory_total_mb=(44280, 43693),  # DDR totals of the two chips in the 300I Duo captures
    bus_ids=("0000:01:00.0", "0000:01:00.0", "0000:82:00.0", "0000:82:00.0"),
    mcu_chip=2,
    # 310P NPU chips cannot report power on their own: npu-smi prints NA in the table and refuses `-t power`
    queries=frozenset(SIMULATED_QUERIES) - {"power"},
    mcu_queries=frozenset(("common", "health")),
    mcu_temperature_sensors=(),
    is_server=False,
    has_process_table=True,
    aicore_count=None,
    aicore_rated_mhz=1080,
    memory_clock_mhz=3200,
    hbm_manufacturer_id=None,
    board=BoardInfo(
        product_name="Atlas 300I Duo", model="NA", manufacturer="NA",
        serial_prefix="102384A913", first_serial=1, board_id=0x64, main_board_id=None,
        pcb_id="A", bom_id=1, vendor_id=0x19E5, device_id=0xD500,
        subsystem_vendor_id=0x0200, subsystem_device_id=0x0100, chip_version="V1"),
    pcie_max_speed="16.0 GT/s PCIe",
    pcie_max_width=16,
    absent_device_files=(),
    knobs=frozenset((CPU_FREQ_UP,)),  # the card's control CPU clock (help: "0: 1.9GHz, 1: 1.0GHz")
)

ATLAS_200I_A2 = Product(
    name="atlas-200i-a2",
    description="Atlas 200I A2 board: one Ascend 310B4 SoC (16 GB LPDDR, no PCIe bus id), MCU as chip 1",
    family=FAMILY_310B,
    chip_name="310B4",
    mapping_name="Ascend 310B4",
    npu_smi_version="25.5.1",
    cards=(0,),
    chips_per_card=1,
    memory_total_mb=(15609,),  # from the 310B4 Alarm capture
    bus_ids=(None,),
    mcu_chip=1,
    queries=frozenset(SIMULATED_QUERIES),
    mcu_queries=frozenset(("common", "power", "health")),
    mcu_temperature_sensors=(),
    is_server=False,
    has_process_table=False,  # npu-smi prints no process table on 310B boards
    aicore_count=None,
    aicore_rated_mhz=1000,
    memory_clock_mhz=3200,
    hbm_manufacturer_id=None,
    board=BoardInfo(
        product_name="Atlas 200I A2", model="NA", manufacturer="NA",
        serial_prefix="102396B155", first_serial=1, board_id=0x39, main_board_id=None,
        pcb_id="A", bom_id=1, vendor_id=0x19E5, device_id=0xD107,
        subsystem_vendor_id=0x19E5, subsystem_device_id=0x0100, chip_version="V1"),
    pcie_max_speed=None,
    pcie_max_width=None,
    # SoC boards expose svm0/ts_aisle/... instead of the PCIe host's management nodes
    absent_device_files=("/dev/devmm_svm", "/dev/hisi_hdc"),
    # npu-smi drives the board's fan (pwm) and its compute gear (nve-level) on 310B boards only;
    # the levels are the 8T module's (the 20T module has four: 20T, 8T, 16T and 8T at 1.6GHz)
    knobs=frozenset((PWM_MODE, PWM_DUTY, NVE_LEVEL)),
    nve_levels=("8T_1.0GHz", "4T_1.0GHz"),
)

PRODUCTS: Dict[str, Product] = {product.name: product for product in (
    ATLAS_800I_A2, ATLAS_A3, ATLAS_300I_DUO, ATLAS_200I_A2)}


def get_product(name: str) -> Product:
    try:
        return PRODUCTS[name]
    except KeyError:
        raise KeyError("unknown product {!r}; known: {}".format(name, ", ".join(sorted(PRODUCTS)))) from None
