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
FAMILY_910 = "910"  # the first Ascend 910 (A1: 910A, 910ProB, 910PremiumA): HBM and DDR, no MCU in npu-smi
FAMILY_950 = "950"  # Ascend 950 (Atlas 350 cards): npu-smi's second layout, one chip per NPU and no `-c`

# `-t` types the simulator can answer. A product lists the subset it supports; any other type that real
# npu-smi knows gets "This device does not support querying <type>."
SIMULATED_QUERIES = ("usages", "common", "power", "temp", "ecc", "health", "board", "memory", "volt")
# and the two the 950 documents on top (its help lists no others the simulator knows)
QUERIES_950_ONLY = ("sensors", "current-fault-event", "sio-info")
# The interconnect types (sim/links.py): HCCS on 910B and A3, SIO (die to die) on the A3 (and the 950, below); the
# 300I Duo answers `-t hccs` with its one index's counters only (no -t hccs-bw)
HCCS_QUERIES = ("hccs", "hccs-bw")
SIO_QUERY = "sio-info"
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
    ddr_total_mb: int = 0  # the 910 A1's DDR, next to its HBM (no other product has both)


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
    npu_name: Optional[str] = None  # the 950's 4-digit SKU code (`NPU Name` in `-t board`)


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
    ddr_total_mb: Tuple[int, ...] = ()  # per logical device id: the 910 A1's DDR (the others print 0 / 0)
    ddr_clock_mhz: int = 0

    @property
    def has_hbm(self) -> bool:
        return self.family in (FAMILY_910B, FAMILY_910_93, FAMILY_910, FAMILY_950)

    @property
    def has_chip_option(self) -> bool:
        """Whether npu-smi takes `-c` here: the 950's answers "does not support input parameter of -c"."""
        return self.family != FAMILY_950

    def slots(self) -> List[ChipSlot]:
        """Every NPU chip, in npu-smi's order (card by card), with its logical and physical ids."""
        result = []
        for card_index, npu in enumerate(self.cards):
            for chip in range(self.chips_per_card):
                device_id = card_index * self.chips_per_card + chip
                result.append(ChipSlot(npu=npu, chip=chip, device_id=device_id, phy_id=device_id,
                                       bus_id=self.bus_ids[device_id],
                                       memory_total_mb=self.memory_total_mb[chip],
                                       ddr_total_mb=self.ddr_total_mb[device_id] if self.ddr_total_mb else 0))
        return result

    def serial_number(self, npu: int) -> str:
        return "{}{:02d}".format(self.board.serial_prefix, self.board.first_serial + self.cards.index(npu))


_SERVER_QUERIES = frozenset(SIMULATED_QUERIES)
_A2_QUERIES = _SERVER_QUERIES | frozenset(HCCS_QUERIES)
_A3_QUERIES = _A2_QUERIES | {SIO_QUERY}
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
    queries=_A2_QUERIES,
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
    queries=_A3_QUERIES,
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
    queries=(frozenset(SIMULATED_QUERIES) - {"power"}) | {HCCS_QUERIES[0]},
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

ATLAS_800_9000 = Product(
    name="atlas-800-9000",
    description="Atlas 800 training server (model 9000): 8 x Ascend 910A (32 GB HBM + 15 GB DDR each), no MCU",
    family=FAMILY_910,
    chip_name="910A",
    mapping_name="Ascend 910A",
    # the npu-smi of every complete 910A capture (info -m, -t board, -t usages, -t health: mind-cluster FaultDiag)
    npu_smi_version="23.0.5",
    cards=tuple(range(8)),
    chips_per_card=1,
    memory_total_mb=(32768,),  # HBM as the 8-NPU 910 A1 tables print it
    # the bus ids of the 8-NPU 910 A1 tables (info_910-32g_8npu..., info_910premiuma_8npu...)
    bus_ids=tuple("0000:{}:00.0".format(bus) for bus in ("C1", "81", "41", "01", "C2", "82", "42", "02")),
    # no Mcu rows in its `info -m` and no MCU block in its `-t common`: npu-smi shows no MCU on the 910A
    mcu_chip=None,
    queries=_SERVER_QUERIES,
    mcu_queries=frozenset(),
    mcu_temperature_sensors=(),
    is_server=True,
    has_process_table=True,
    aicore_count=32,  # the full 910A (the 910ProB bin has 30: info-t-common_910a1_30cores_doc.txt)
    aicore_rated_mhz=1000,  # npu-exporter's 910A sample reads 1000 MHz (COMPAT.md section 7)
    memory_clock_mhz=1200,  # HBM2 clock: no capture prints it (-t memory was not captured on a 910A)
    hbm_manufacturer_id=0x57,
    board=BoardInfo(
        # npu-smi 23.0.5 prints no Product Name, Model, Manufacturer or Serial Number on a 910A card
        product_name="NA", model="NA", manufacturer="NA",
        serial_prefix="NA", first_serial=0, board_id=0x02, main_board_id=None,
        pcb_id="A", bom_id=1, vendor_id=0x19E5, device_id=0xD801,
        subsystem_vendor_id=0x0200, subsystem_device_id=0x0100, chip_version="V1"),
    pcie_max_speed="16.0 GT/s PCIe",
    pcie_max_width=16,
    absent_device_files=(),
    # DDR totals of the 8-NPU 910 A1 tables: cards 3 and 7 show 15039 MB, the others 15137 MB
    ddr_total_mb=(15137, 15137, 15137, 15039, 15137, 15137, 15137, 15039),
    ddr_clock_mhz=2666,  # not captured either
)

ATLAS_350 = Product(
    name="atlas-350",
    description="8 x Atlas 350 card (Ascend 950PR, 128 GB HBM each); npu-smi 25.7 takes no -c on it",
    family=FAMILY_950,
    chip_name="Ascend950PR",
    mapping_name="Ascend950PR",
    npu_smi_version="25.7.rc1.6",  # the 950PR `-t board` capture
    cards=tuple(range(8)),
    chips_per_card=1,
    memory_total_mb=(131072,),  # HBM Capacity of the 950 doc's -t usages and -t memory
    # 0000:61:00.0 is the 950PR capture's card; 91 and F1 are the 950 doc's; the others follow the same pattern
    bus_ids=tuple("0000:{}:00.0".format(bus) for bus in ("01", "11", "31", "61", "81", "91", "C1", "F1")),
    mcu_chip=None,  # the 950 doc's -t common shows no MCU block and its -m no Mcu row
    queries=frozenset(SIMULATED_QUERIES + QUERIES_950_ONLY),
    mcu_queries=frozenset(),
    mcu_temperature_sensors=(),
    is_server=False,  # `-t temp` prints "Temperature (C)" (950 doc)
    has_process_table=True,
    aicore_count=32,  # 950 doc -t common
    aicore_rated_mhz=1650,
    memory_clock_mhz=3200,
    hbm_manufacturer_id=0x5A,
    board=BoardInfo(
        product_name="A310-50-C00MM304A1", model="A310-50-C00MM304A1", manufacturer="Huawei",
        serial_prefix="10264L5408", first_serial=72, board_id=0x1A, main_board_id=0x68,
        pcb_id="A", bom_id=1, vendor_id=0x19E5, device_id=0xD806,
        subsystem_vendor_id=0x19E5, subsystem_device_id=0x4004, chip_version="V100", npu_name="9579"),
    pcie_max_speed="32.0 GT/s PCIe",
    pcie_max_width=16,
    absent_device_files=(),
)

PRODUCTS: Dict[str, Product] = {product.name: product for product in (
    ATLAS_800I_A2, ATLAS_A3, ATLAS_300I_DUO, ATLAS_200I_A2, ATLAS_800_9000, ATLAS_350)}


def get_product(name: str) -> Product:
    try:
        return PRODUCTS[name]
    except KeyError:
        raise KeyError("unknown product {!r}; known: {}".format(name, ", ".join(sorted(PRODUCTS)))) from None
