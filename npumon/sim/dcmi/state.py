"""The bridge from a simulation to the simulated libdcmi.so: the state file the C library reads.

`write_dcmi_state(state_dir)` writes `<state_dir>/dcmi-state.txt` from the simulation's state (state.json,
the fan knobs, the injected DCMI faults). prepare_simulation, set_scenario, set_latency_scale and every
`npu-smi set` call rewrite it, always by rename, so a reader sees the old file or the new one.
The library finds it through NPUMON_SIM_DCMI_STATE (the file's path) or else NPUMON_SIM_STATE (the
state directory, already in `Simulation.env`), rereads it when it changes, and evaluates the scenario's
expressions itself at the moment of each call, so its values move with scenario time exactly as the
simulated npu-smi's do. NPUMON_SIM_DCMI_CLOCK=<unix time> makes it answer as at that wall time (tests).

The format: one `key=value` per line, `#` comments; values are words separated by spaces.

| key | value |
|---|---|
| `format` | 1 |
| `start_time`, `time_scale` | the scenario clock (state.json) |
| `init_seconds`, `call_seconds` | how long dcmi_init and every other call take (latency scale applied) |
| `cards`, `chips_per_card`, `mcu_id` | the card ids in npu-smi's order, NPU chips per card, the MCU's device id or -1 |
| `chip_type`, `chip_name`, `chip_ver`, `npu_name`, `aicore_cnt` | dcmi_chip_info(_v2) (npu-smi `-t board -c`) |
| `board_id`, `pcb_id`, `bom_id`, `main_board_id`, `pci_*` | board and PCIe ids (npu-smi `-t board`) |
| `elabel.*`, `card.<id>.serial_number`, `driver_version` | dcmi_get_card_elabel_v2, the versions |
| `voltage_centivolts`, `aicore_rated_mhz`, `memory_clock_mhz` | product constants (0.01 V, MHz) |
| `ecc_memory_type`, `vector_is_aivector` | the ECC memory (2 HBM, 0 DDR); utilisation type 12 is AI Vector (910) |
| `cooling` | `from to since time_constant`: the fan's temperature offset (products with a fan) |
| `unsupported` | words `function`, `function:input_type`, `function@logic_id`: these return -8255 |
| `chip.<logic>.card/device/phy/bus/memory_total_mb/vdie/ndie` | the chip's ids (die ids: 5 hex words) |
| `chip.<logic>.<field>` | a values.py expression (below); `health` as DCMI's 0..3, 0xFFFFFFFF; `compatibility` 1..3, 0 none; `hccs_health` 0 OK, 1 NOK |
| `chip.<logic>.errors`, `chip.<logic>.error.<CODE>` | the chip's error codes (hex) and each one's information text |
| `chip.<logic>.processes`, `chip.<logic>.process.<i>` | how many; `pid mb N` or `pid pct <expression>` |
| `fault.init` | dcmi_init returns this code |
| `fault.hang`, `fault.hang_seconds` | these functions (`*`: all but dcmi_init) sleep this long before answering |
| `fault.segfault` | these functions (`*`: all but dcmi_init) crash the process with SIGSEGV |
| `fault.code.<function>`, `fault.code.<function>@<logic>` | that function (on that chip) returns this code |

Expressions: `c V` a constant; `s N t0 v0 t1 v1 ...` N steps; `r start per_minute wobble period phase max min`
a ramp with its wobble (`nan`: no cap). The library rounds as values.py does (half to even, counters floored).
"""

import math
import os
import tempfile
from typing import Any, Dict, Iterable, List, Optional

from ..knobs import COOLING_TIME_CONSTANT, read_knobs
from ..latency import PROFILES
from ..products import (FAMILY_310B, FAMILY_310P, FAMILY_910, FAMILY_910_93, FAMILY_910B, FAMILY_950, PRODUCTS,
                        PWM_MODE, Product, get_product)
from ..render_common import CORE_VOLTS, die_id_words
from ..state import read_state
from ..values import CHIP_FIELDS, NUMBER, chip_phase, process_pid, resolved_chip_expressions
from .faults import read_faults, write_faults

DCMI_STATE_ENV = "NPUMON_SIM_DCMI_STATE"  # the state file's path; else $NPUMON_SIM_STATE/dcmi-state.txt
DCMI_CLOCK_ENV = "NPUMON_SIM_DCMI_CLOCK"
DCMI_STATE_FILE = "dcmi-state.txt"
# AReaL's DCMI reader: about 0.07 s per chip for its four getters (utilisation, HBM, temperature, power)
DCMI_CALL_SECONDS = 0.07 / 4
HEALTH_CODES = {"OK": 0, "Warning": 1, "Alarm": 2, "Critical": 3, "UNKNOWN": 0xFFFFFFFF}
# enum dcmi_device_compat; npu-smi's "NOT SUPPORT" is the call's -8255 (0 here)
COMPATIBILITY_CODES = {"OK": 1, "NOK": 2, "UNKNOWN": 3, "NOT SUPPORT": 0}
HCCS_MAIN_CMD, SIO_MAIN_CMD = 16, 56  # enum dcmi_main_cmd
HCCS_HEALTH_CODES = {"OK": 0, "NOK": 1}  # the PCS status: 0 normal, bit 0 abnormal
UB_PORT_STATUS_CODES = {"partial": 2, "down": 3}  # dcmi_ub_port_status: PARTIAL_LANE, INITIAL (not linked)
ECC_DDR, ECC_HBM = 0, 2  # enum dcmi_device_type
NDIE = 0  # enum dcmi_die_type
# Getters npu-smi's main table needs: they answer in the "unsupported" behaviour, where only `-t` fails.
_TABLE_GETTERS = ("dcmi_get_device_chip_info", "dcmi_get_device_chip_info_v2", "dcmi_get_device_health",
                  "dcmi_get_device_temperature", "dcmi_get_device_power_info", "dcmi_get_device_hbm_info",
                  "dcmi_get_device_memory_info_v3", "dcmi_get_device_pcie_info_v2", "dcmi_get_device_resource_info")
_QUERY_GETTERS = ("dcmi_get_device_info", "dcmi_get_hccs_link_bandwidth_info", "dcmi_get_device_errorcode_v2", "dcmi_get_device_errorcode_string", "dcmi_get_device_voltage",
                  "dcmi_get_device_frequency", "dcmi_get_device_multi_utilization_rate",
                  "dcmi_get_device_multi_utilization_rate_period", "dcmi_get_device_ecc_info",
                  "dcmi_get_device_board_info", "dcmi_get_device_die_v2", "dcmi_get_card_elabel_v2",
                  "dcmi_get_mainboard_id", "dcmi_mcu_get_power_info", "dcmi_get_device_compatibility",
                  "dcmiv2_get_ub_port_link_status", "dcmiv2_get_port_pkt_stats_info",
                  "dcmiv2_get_ub_realtime_bandwidth_info")
UTILIZATION_TYPES = (1, 2, 3, 4, 5, 6, 10, 12, 13, 14)  # DCMI_UTILIZATION_RATE_*


def dcmi_state_path(state_dir: str) -> str:
    return os.path.join(state_dir, DCMI_STATE_FILE)


def write_dcmi_state(state_dir: str) -> str:
    """(Re)write the simulated libdcmi.so's state file for the simulation in `state_dir`; returns its path."""
    state_dir = os.path.abspath(state_dir)
    lines = state_lines(read_state(state_dir), read_knobs(state_dir), read_faults(state_dir))
    path = dcmi_state_path(state_dir)
    handle, temp_path = tempfile.mkstemp(dir=state_dir, prefix=".tmp-dcmi-")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as temp:
            temp.write("".join(line + "\n" for line in lines))
        os.replace(temp_path, path)
    except BaseException:
        os.unlink(temp_path)
        raise
    return path


def set_dcmi_faults(state_dir: str, init: Optional[int] = None, hang: Iterable[str] = (),
                    hang_seconds: float = 3600.0, segfault: Iterable[str] = (),
                    codes: Optional[Dict[str, int]] = None) -> str:
    """Replace the simulation's DCMI faults (no arguments: none) and rewrite the library's state file,
    which every process using the library sees at its next call. Returns the state file's path.
    Raises ValueError for a name that is not a DCMI function or a code that is not an int."""
    write_faults(state_dir, init, hang, hang_seconds, segfault, codes)
    return write_dcmi_state(state_dir)


# Every simulated product answers through the simulated library. The 950 (Atlas 350) speaks DCMI V2 (dcmiv2_*,
# one logical id per chip: dcmi_interface_api_v2.h, "used on Ascend 950/A5, where most v1 dcmi_* return -8255"),
# where its dcmi_init and every V1 call return -8255; the others speak V1 and refuse the dcmiv2_* calls.
DCMI_PRODUCTS = tuple(PRODUCTS)
V2_FAMILIES = frozenset((FAMILY_950,))


# fake_dcmi_v2.c: the V2 function that runs each V1 function's body (a V2 product's support and faults name these)
V2_TWINS = {
    "dcmi_get_device_type": "dcmiv2_get_device_type", "dcmi_get_device_pcie_info_v2": "dcmiv2_get_device_pcie_info",
    "dcmi_get_device_chip_info_v2": "dcmiv2_get_device_chip_info",
    "dcmi_get_device_power_info": "dcmiv2_get_device_power_info", "dcmi_get_device_health": "dcmiv2_get_device_health",
    "dcmi_get_device_errorcode_v2": "dcmiv2_get_device_error_code_list",
    "dcmi_get_device_temperature": "dcmiv2_get_device_temperature",
    "dcmi_get_device_voltage": "dcmiv2_get_device_voltage", "dcmi_get_device_ecc_info": "dcmiv2_get_device_ecc_info",
    "dcmi_get_device_frequency": "dcmiv2_get_device_frequency",
    "dcmi_get_device_hbm_info": "dcmiv2_get_device_hbm_info",
    "dcmi_get_device_utilization_rate": "dcmiv2_get_device_utilization_rate",
    "dcmi_get_device_multi_utilization_rate": "dcmiv2_get_device_multi_utilization_rate",
    "dcmi_get_device_multi_utilization_rate_period": "dcmiv2_get_device_multi_utilization_rate_period",
    "dcmi_get_device_phyid_from_logicid": "dcmiv2_get_chip_phy_id_by_dev_id",
    "dcmi_get_device_logicid_from_phyid": "dcmiv2_get_dev_id_by_chip_phy_id",
    "dcmi_get_device_die_v2": "dcmiv2_get_device_die_id",
    "dcmi_get_device_resource_info": "dcmiv2_get_device_proc_mem_info",
    "dcmi_get_device_board_info": "dcmiv2_get_device_board_info", "dcmi_get_mainboard_id": "dcmiv2_get_mainboard_id",
    "dcmi_get_dcmi_version": "dcmiv2_get_dcmi_version", "dcmi_get_card_elabel_v2": "dcmiv2_get_device_elabel_info",
}


def dcmi_api(product: Product) -> str:
    return "v2" if product.family in V2_FAMILIES else "v1"


def _in_api(word: str, api: str) -> str:
    """An `unsupported` word (function, function:type, function@logic) under the name the product's API calls."""
    if api != "v2":
        return word
    cut = min([index for index in (word.find(":"), word.find("@")) if index >= 0] or [len(word)])
    return V2_TWINS.get(word[:cut], word[:cut]) + word[cut:]


def state_lines(state: Dict[str, Any], knobs: Dict[str, Any], faults: Dict[str, Any]) -> List[str]:
    """The state file's lines (pure: the simulation's state, its knobs and its DCMI faults)."""
    product = get_product(state["product"])
    scenario = state["scenario"]
    scale = state.get("latency_scale", 1.0) * scenario.get("latency_scale", 1.0)
    lines = ["# the simulated libdcmi.so's state (npumon/sim/dcmi/state.py); rewritten, never edited",
             "format=1"]
    values = {
        "start_time": repr(float(state["start_time"])), "time_scale": repr(float(state["time_scale"])),
        "init_seconds": repr(scale * PROFILES[product.name].start), "call_seconds": repr(scale * DCMI_CALL_SECONDS),
    }
    values.update(_product_values(product, state["host"]))
    if PWM_MODE in product.knobs:
        cooling = knobs["cooling"]
        values["cooling"] = _words((cooling["from"], cooling["to"], cooling["since"], COOLING_TIME_CONSTANT))
    values["unsupported"] = " ".join(_in_api(word, dcmi_api(product))
                                     for word in unsupported_calls(product, scenario["behaviour"]))
    lines += ["{}={}".format(key, value) for key, value in values.items()]
    lines += _fault_lines(faults, scenario["behaviour"])
    for slot in product.slots():
        lines += _chip_lines(product, slot, scenario["chips"])
    return lines


def _product_values(product: Product, host: Dict[str, Any]) -> Dict[str, str]:
    board = product.board
    values = {
        "api": dcmi_api(product), "cards": _words(product.cards), "chips_per_card": str(product.chips_per_card),
        "mcu_id": str(-1 if product.mcu_chip is None else product.mcu_chip),
        # npu-smi prints no Chip Type on A3 (npu-exporter's model_name lacks it there too)
        "chip_type": "" if product.family == FAMILY_910_93 else "Ascend",
        "chip_name": product.chip_name, "chip_ver": board.chip_version,
        "npu_name": product.chip_name if product.family == FAMILY_910_93 else "",
        "aicore_cnt": str(product.aicore_count or 0),
        "board_id": str(board.board_id), "pcb_id": str(ord(board.pcb_id[0]) - ord("A") + 1),
        "bom_id": str(board.bom_id), "pci_vendor_id": str(board.vendor_id), "pci_device_id": str(board.device_id),
        "pci_subsystem_vendor_id": str(board.subsystem_vendor_id),
        "pci_subsystem_device_id": str(board.subsystem_device_id),
        "elabel.product_name": board.product_name, "elabel.model": board.model,
        "elabel.manufacturer": board.manufacturer, "driver_version": host["driver_version"],
        "voltage_centivolts": str(int(round(CORE_VOLTS[product.family] * 100))),
        "aicore_rated_mhz": str(product.aicore_rated_mhz), "memory_clock_mhz": str(product.memory_clock_mhz),
        "ecc_memory_type": str(ECC_HBM if product.has_hbm else ECC_DDR),
        "vector_is_aivector": "1" if product.has_hbm else "0",
        # the 310P's driver answers only the HCCS statistics (sub 5), for its one index 0
        "hccs_statistics_only": "1" if product.family == FAMILY_310P else "0",
    }
    if board.main_board_id is not None:
        values["main_board_id"] = str(board.main_board_id)
    for npu in product.cards:
        values["card.{}.serial_number".format(npu)] = product.serial_number(npu)
    return values


def unsupported_calls(product: Product, behaviour: str = "normal") -> List[str]:
    """What the product's real library refuses with -8255 (shared/reference/dcmi/DCMI.md sections 3 and 6),
    plus, in the "unsupported" behaviour, every getter npu-smi's main table does not need."""
    family = product.family
    if family == FAMILY_910:
        # the 910A: HBM and DDR of its own, no multi-rate call (npu-exporter: "A2/A3/A5" only), no vector,
        # overall or cube rate ("not 910A"; npu-smi's -t usages prints none), no MCU card power
        calls = ["dcmi_get_device_multi_utilization_rate", "dcmi_get_device_multi_utilization_rate_period",
                 "dcmi_mcu_get_power_info"] + _typed("dcmi_get_device_utilization_rate", (12, 13, 14))
    elif product.has_hbm:  # A2/A3/950: DDR getters N, no MCU card power; utilisation "only 2, 3, 4, 6, 10, 12, 13"
        calls = ["dcmi_get_device_memory_info_v3", "dcmi_mcu_get_power_info"]
        calls += _typed("dcmi_get_device_utilization_rate", (1, 5, 14))
        calls += _typed("dcmi_get_device_frequency", (1,))
        if family == FAMILY_910_93:  # an A3 NPU reports its power on die 0 only
            calls += ["dcmi_get_device_power_info@{}".format(slot.device_id)
                      for slot in product.slots() if slot.chip == 1]
    else:  # the 310 family: no HBM, no multi-utilisation, no N-die id
        calls = ["dcmi_get_device_hbm_info", "dcmi_get_device_multi_utilization_rate",
                 "dcmi_get_device_multi_utilization_rate_period"] + _typed("dcmi_get_device_die_v2", (NDIE,))
        calls += _typed("dcmi_get_device_frequency", (6,))
        calls += _typed("dcmi_get_device_utilization_rate", (6, 10, 13, 14) if family == FAMILY_310P
                        else (6, 10, 12, 13, 14))
        if family == FAMILY_310P:  # a 310P chip cannot measure its power; the card's MCU can
            calls.append("dcmi_get_device_power_info")
        if family == FAMILY_310B:  # npu-smi shows no AI Core clock and no Compatibility on 310B boards
            calls += _typed("dcmi_get_device_frequency", (7, 9)) + ["dcmi_get_device_compatibility"]
    # the links: HCCS on the 910B and the A3, its statistics alone on the 310P (hccs_statistics_only), SIO on the A3
    # (the simulated npu-smi answers alike: sim/products.py)
    if family not in (FAMILY_910B, FAMILY_910_93, FAMILY_310P):
        calls += _typed("dcmi_get_device_info", (HCCS_MAIN_CMD,))
    if family not in (FAMILY_910B, FAMILY_910_93):
        calls.append("dcmi_get_hccs_link_bandwidth_info")
    if family != FAMILY_910_93:
        calls += _typed("dcmi_get_device_info", (SIO_MAIN_CMD,))
    if behaviour == "unsupported":
        calls += list(_QUERY_GETTERS) + _typed("dcmi_get_device_utilization_rate",
                                               [kind for kind in UTILIZATION_TYPES if kind != 2])
    return calls


def _typed(function: str, input_types: Iterable[int]) -> List[str]:
    return ["{}:{}".format(function, kind) for kind in input_types]


def _fault_lines(faults: Dict[str, Any], behaviour: str) -> List[str]:
    hang = list(faults.get("hang", []))
    if behaviour == "hang":  # the scenario's wedged driver: every call after init hangs
        hang.append("*")
    lines = []
    if faults.get("init") is not None:
        lines.append("fault.init={}".format(int(faults["init"])))
    if hang:
        lines += ["fault.hang=" + " ".join(hang), "fault.hang_seconds={!r}".format(
            float(faults.get("hang_seconds", 3600.0)))]
    if faults.get("segfault"):
        lines.append("fault.segfault=" + " ".join(faults["segfault"]))
    lines += ["fault.code.{}={}".format(where, int(code)) for where, code in sorted(faults.get("codes", {}).items())]
    return lines


def _chip_lines(product: Product, slot, chips_spec: Dict[str, Any]) -> List[str]:
    prefix = "chip.{}.".format(slot.device_id)
    expressions = resolved_chip_expressions(chips_spec, slot.device_id, product.aicore_rated_mhz)
    phase = chip_phase(slot.device_id)
    lines = [prefix + "card={}".format(slot.npu), prefix + "device={}".format(slot.chip),
             prefix + "phy={}".format(slot.phy_id), prefix + "memory_total_mb={}".format(slot.memory_total_mb),
             prefix + "vdie=" + die_id_words(slot), prefix + "ndie=" + die_id_words(slot, salt=0x0F0F),
             prefix + "health=" + encode_expression(_coded(expressions["health"], HEALTH_CODES), 0.0),
             prefix + "compatibility=" + encode_expression(_coded(expressions["compatibility"], COMPATIBILITY_CODES),
                                                            0.0),
             prefix + "hccs_health=" + encode_expression(_coded(expressions["hccs_health"], HCCS_HEALTH_CODES), 0.0),
             prefix + "ub_degraded_port_status=" + encode_expression(
                 _coded(expressions["ub_degraded_port_status"], UB_PORT_STATUS_CODES), 0.0)]
    if slot.bus_id is not None:
        lines.append(prefix + "bus=" + slot.bus_id)
    if slot.ddr_total_mb:  # the 910A's own DDR (dcmi_get_device_memory_info_v3), beside its HBM
        lines.append(prefix + "ddr_total_mb={}".format(slot.ddr_total_mb))
    lines += [prefix + "{}={}".format(name, encode_expression(expressions[name], phase))
              for name, (kind, _) in CHIP_FIELDS.items() if kind == NUMBER]
    errors = expressions["errors"]
    lines.append(prefix + "errors=" + " ".join("%08X" % int(error["code"], 16) for error in errors))
    lines += [prefix + "error.%08X=%s" % (int(error["code"], 16), _one_line(error["information"]))
              for error in errors]
    processes = expressions["processes"]
    lines.append(prefix + "processes={}".format(len(processes)))
    for index, process in enumerate(processes):
        pid = process_pid(process, slot.device_id, index)
        memory = ("mb {}".format(int(process["memory_mb"])) if "memory_mb" in process
                  else "pct " + encode_expression(process["memory_percent"], 0.0))
        lines.append(prefix + "process.{}={} {}".format(index, pid, memory))
    return lines


def _coded(expression: Any, codes: Dict[str, int]) -> Any:
    """A text value (constant or steps) as the numbers DCMI returns for it."""
    if isinstance(expression, dict) and "steps" in expression:
        return {"steps": [[at, codes[value]] for at, value in expression["steps"]]}
    return codes[expression]


def encode_expression(expression: Any, phase: float) -> str:
    """One value expression (values.py) as the C library reads it."""
    if not isinstance(expression, dict):
        return "c " + repr(float(expression))
    if "steps" in expression:
        steps = expression["steps"]
        return "s {} {}".format(len(steps), _words(number for step in steps for number in (step[0], step[1])))
    period = float(expression.get("period_seconds", 60.0))
    return "r " + _words((expression.get("start", 0.0), expression.get("per_minute", 0.0),
                          expression.get("wobble", 0.0), period, phase,
                          expression.get("max", math.nan), expression.get("min", math.nan)))


def _words(numbers: Iterable[Any]) -> str:
    return " ".join(repr(float(number)) if isinstance(number, float) else str(number) for number in numbers)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
