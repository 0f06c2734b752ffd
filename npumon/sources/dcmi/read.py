"""One DCMI sweep: every chip of every card, read into the fields the npu-smi source fills.

Runs inside the worker process (worker.py), never in the daemon: a call can hang in the driver or a wrong
struct crash the process. Calls, units and codes: shared/reference/dcmi/DCMI.md sections 2-4 and
shared/reference/npu-exporter-and-dcmi.md section 2 (power 0.1 W, voltage 0.01 V, HBM/DDR sizes MB = MiB,
utilisation percent, die id five words as `%08X` joined by `-`).

Per chip and metric: a result in bindings.UNSUPPORTED_CODES (-8255 and friends, or a symbol this library lacks)
marks that metric unsupported for that chip; the caller keeps the mark and passes it back, so it is not asked
again until npumon restarts. A transient code (-8006 timeout, -8012 not ready, ...) is asked again up to
TRANSIENT_RETRIES times. Any other code is a problem of this sweep, named in full; the value is left out.
"""

import ctypes
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from . import bindings as b
from . import structs as s

MIB = 1048576
MAX_CARDS = 64  # dcmi_get_card_list's limit
MAX_ERROR_CODES = 128  # npu-exporter's list length for dcmi_get_device_errorcode_v2
ERROR_STRING_BYTES = 256  # "≥256 B for the full text"
TRANSIENT_RETRIES = 2
TRANSIENT_PAUSE_SECONDS = 0.02
HEALTH_TEXT = {0: "OK", 1: "Warning", 2: "Alarm", 3: "Critical"}
# input_type of dcmi_get_device_utilization_rate -> ChipSample field (npu-smi `-t usages` names the same rates).
# "vector_ratio": the vector cores' rate, which npu-smi calls Aivector on the 910 family and Vectorcore on the
# 310 family; the source names it by the chip (source.with_values).
UTILIZATION_FIELDS = (
    (s.UTILIZATION_AICORE, "aicore_ratio"), (s.UTILIZATION_AICPU, "aicpu_ratio"),
    (s.UTILIZATION_CTRLCPU, "ctrlcpu_ratio"), (s.UTILIZATION_DDR_BANDWIDTH, "ddr_bandwidth_ratio"),
    (s.UTILIZATION_HBM, "hbm_usage_ratio"), (s.UTILIZATION_HBM_BANDWIDTH, "hbm_bandwidth_ratio"),
    (s.UTILIZATION_VECTORCORE, "vector_ratio"), (s.UTILIZATION_NPU, "npu_util_ratio"),
    (s.UTILIZATION_AICUBE, "aicube_ratio"),
)
ChipKey = Tuple[int, int]


class CallFailed(Exception):
    def __init__(self, metric: str, function: str, code: int):
        super().__init__("{}: {} returned {}".format(metric, function, b.code_name(code)))
        self.metric, self.function, self.code = metric, function, code


def text(buffer) -> str:
    """A NUL-padded byte array or char array -> str."""
    raw = bytes(buffer)
    return raw.split(b"\0", 1)[0].decode("utf-8", errors="replace").strip()


def format_die_id(words) -> str:
    return "-".join("%08X" % (word & 0xFFFFFFFF) for word in words)


def format_bus_id(pcie) -> str:
    return "%04X:%02X:%02X.%X" % (pcie.domain & 0xFFFF, pcie.bdf_busid, pcie.bdf_deviceid, pcie.bdf_funcid)


class Api:
    """A chip's calls on the API that initialised: V1 passes (card id, device id), V2 the logical device id."""

    def __init__(self, library: b.Library):
        self.library = library
        self.init_type_errors = 0  # in this sweep: a burst calls for dcmi_init again
        # (card, device) -> whether it is an NPU chip: asked once per process (what a device is never changes)
        self.npu_devices: Dict[Tuple[int, int], bool] = {}
        # card -> its devices, asked again by every static sweep (a card's chips change only with the card)
        self.devices_in_card: Dict[int, int] = {}
        # error code -> its text: a code's text is the driver's, the same on every chip and every sweep
        self.error_texts: Dict[int, str] = {}

    def call(self, chip_ref: Tuple[int, ...], name: str, *args) -> int:
        if self.library.api == "v2":
            v2_name = b.V2_NAMES.get(name)
            if v2_name is None:
                return b.FUNCTION_NOT_FOUND
            return self._with_retries(v2_name, chip_ref[-1:] + args)
        return self._with_retries(name, chip_ref[:2] + args)

    def plain(self, name: str, *args) -> int:
        return self._with_retries(name, args)

    def _with_retries(self, name: str, args: Tuple) -> int:
        code = b.DCMI_OK
        for attempt in range(TRANSIENT_RETRIES + 1):
            code = self.library.call(name, *args)
            if code not in b.TRANSIENT_CODES:
                break
            time.sleep(TRANSIENT_PAUSE_SECONDS)
        if code in b.INIT_TYPE_CODES:
            self.init_type_errors += 1
        return code


def enumerate_chips(api: Api, static: bool = True) -> Tuple[List[Tuple[int, int, Tuple[int, ...]]], List[str]]:
    """[(npu, chip, chip_ref)] of the NPU chips (MCUs and CPUs left out), and the problems met. The card list is
    asked every sweep (a card that left it loses its chips at once); a card's device count only when `static`
    or for a card not seen before."""
    problems: List[str] = []
    chips = []
    if api.library.api == "v2":
        devices = (ctypes.c_int * MAX_CARDS)()
        count = ctypes.c_int(0)
        code = api.plain("dcmiv2_get_device_list", devices, ctypes.byref(count), MAX_CARDS)
        if code != b.DCMI_OK:
            raise CallFailed("chips", "dcmiv2_get_device_list", code)
        # One logical device per chip: npu-smi numbers a 950's chips as cards of one chip each.
        return [(devices[i], 0, (devices[i],)) for i in range(min(count.value, MAX_CARDS))], problems
    cards = (ctypes.c_int * MAX_CARDS)()
    count = ctypes.c_int(0)
    code = api.plain("dcmi_get_card_list", ctypes.byref(count), cards, MAX_CARDS)
    if code != b.DCMI_OK:
        raise CallFailed("chips", "dcmi_get_card_list", code)
    listed = list(cards)[:min(count.value, MAX_CARDS)]
    for gone in [card for card in api.devices_in_card if card not in listed]:
        del api.devices_in_card[gone]
    for card in listed:
        if static or card not in api.devices_in_card:
            number = ctypes.c_int(0)
            code = api.plain("dcmi_get_device_num_in_card", card, ctypes.byref(number))
            if code != b.DCMI_OK:
                api.devices_in_card.pop(card, None)
                problems.append("card {}: dcmi_get_device_num_in_card returned {}".format(card, b.code_name(code)))
                continue
            api.devices_in_card[card] = number.value
        for device in range(max(0, min(api.devices_in_card[card], 8))):
            if (card, device) not in api.npu_devices:
                kind = ctypes.c_int(s.NPU_TYPE)
                code = api.call((card, device), "dcmi_get_device_type", ctypes.byref(kind))
                api.npu_devices[(card, device)] = not (code == b.DCMI_OK and kind.value != s.NPU_TYPE)
            if api.npu_devices[(card, device)]:  # not the card's MCU or CPU
                chips.append((card, device, (card, device)))
    return chips, problems


# -- one metric each: (chip_ref, api) -> {field: value}; CallFailed when the call did not answer -----------

def _get(api: Api, ref, metric: str, name: str, *args) -> None:
    code = api.call(ref, name, *args)
    if code != b.DCMI_OK:
        raise CallFailed(metric, name, code)


def read_chip_info(api: Api, ref) -> Dict[str, Any]:
    info = s.dcmi_chip_info_v2()
    code = api.call(ref, "dcmi_get_device_chip_info_v2", ctypes.byref(info))
    if code != b.DCMI_OK:  # older drivers: no _v2 (npu-exporter falls back on any error)
        info = s.dcmi_chip_info()
        _get(api, ref, "chip_info", "dcmi_get_device_chip_info", ctypes.byref(info))
    name, kind, version = text(info.chip_name), text(info.chip_type), text(info.chip_ver)
    values: Dict[str, Any] = {"name": name or None, "extra.aicore_count": info.aicore_cnt}
    if name:
        values["model_name"] = "{}-{}-{}".format(name, kind or "Ascend", version)
    if hasattr(info, "npu_name") and text(info.npu_name):
        values["extra.npu_name"] = text(info.npu_name)
    return values


def read_ids(api: Api, ref) -> Dict[str, Any]:
    if api.library.api == "v2":
        logic = ctypes.c_int(ref[-1])
    else:
        logic = ctypes.c_int(-1)
        code = api.plain("dcmi_get_device_logic_id", ctypes.byref(logic), ref[0], ref[1])
        if code != b.DCMI_OK:
            raise CallFailed("ids", "dcmi_get_device_logic_id", code)
    values: Dict[str, Any] = {"device_id": logic.value}
    phy = ctypes.c_uint(0)
    name = "dcmiv2_get_chip_phy_id_by_dev_id" if api.library.api == "v2" else "dcmi_get_device_phyid_from_logicid"
    if api.plain(name, logic.value, ctypes.byref(phy)) == b.DCMI_OK:
        values["phy_id"] = phy.value
    return values


def read_health(api: Api, ref) -> Dict[str, Any]:
    health = ctypes.c_uint(0)
    _get(api, ref, "health", "dcmi_get_device_health", ctypes.byref(health))
    return {"health": HEALTH_TEXT.get(health.value, "UNKNOWN")}


def read_error_codes(api: Api, ref) -> Dict[str, Any]:
    count = ctypes.c_int(0)
    codes = (ctypes.c_uint * MAX_ERROR_CODES)()
    _get(api, ref, "error_codes", "dcmi_get_device_errorcode_v2", ctypes.byref(count), codes, MAX_ERROR_CODES)
    listed = [codes[i] for i in range(max(0, min(count.value, MAX_ERROR_CODES)))]
    values: Dict[str, Any] = {"error_codes": ["%04X" % code for code in listed]}
    texts = []
    for code in listed:  # text where this driver has it (V2 has no such call), asked once per code
        if code not in api.error_texts:
            buffer = (ctypes.c_ubyte * ERROR_STRING_BYTES)()
            answer = api.call(ref, "dcmi_get_device_errorcode_string", code, buffer, ERROR_STRING_BYTES)
            if answer == b.DCMI_OK:
                api.error_texts[code] = text(buffer)
            elif answer in b.UNSUPPORTED_CODES:
                api.error_texts[code] = ""
            else:  # a transient failure: asked again next sweep
                continue
        if api.error_texts[code]:
            texts.append(api.error_texts[code])
    if listed:
        values["error_information"] = texts
    return values


def read_temperature(api: Api, ref) -> Dict[str, Any]:
    value = ctypes.c_int(0)
    _get(api, ref, "temperature", "dcmi_get_device_temperature", ctypes.byref(value))
    return {"temperature_celsius": float(value.value)}


def read_power(api: Api, ref) -> Dict[str, Any]:
    value = ctypes.c_int(0)
    _get(api, ref, "power", "dcmi_get_device_power_info", ctypes.byref(value))
    return {"power_watts": value.value / 10.0}  # 0.1 W


def read_card_power(api: Api, ref) -> Dict[str, Any]:
    """310P: the card's power from its MCU (npu-exporter serves it as each chip's power)."""
    value = ctypes.c_int(0)
    # V2 has no MCU call: unsupported there (no V1 call may reach a V2 driver)
    code = b.FUNCTION_NOT_FOUND if api.library.api == "v2" else api.plain("dcmi_mcu_get_power_info", ref[0],
                                                                            ctypes.byref(value))
    if code != b.DCMI_OK:
        raise CallFailed("card_power", "dcmi_mcu_get_power_info", code)
    return {"card_power_watts": value.value / 10.0}


def read_voltage(api: Api, ref) -> Dict[str, Any]:
    value = ctypes.c_uint(0)
    _get(api, ref, "voltage", "dcmi_get_device_voltage", ctypes.byref(value))
    return {"voltage_volts": value.value / 100.0}  # 0.01 V


def utilization_reader(input_type: int, field: str) -> Callable:
    def read(api: Api, ref) -> Dict[str, Any]:
        value = ctypes.c_uint(0)
        _get(api, ref, "utilization:" + field, "dcmi_get_device_utilization_rate", input_type, ctypes.byref(value))
        return {field: value.value / 100.0}
    return read


def read_multi_utilization(api: Api, ref) -> Dict[str, Any]:
    """AI Core, its cube (AIC) and vector (AIV) units and the NPU overall in one call (910B/A3); where it answers,
    the single-type calls for those four rates are not made (COVERS)."""
    info = s.dcmi_multi_utilization_info()
    _get(api, ref, "multi_utilization", "dcmi_get_device_multi_utilization_rate", ctypes.byref(info))
    return {"aicore_ratio": info.aicore_util / 100.0, "aicube_ratio": info.aic_util / 100.0,
            "vector_ratio": info.aiv_util / 100.0, "npu_util_ratio": info.npu_util / 100.0}


def read_hbm(api: Api, ref) -> Dict[str, Any]:
    """HBM size, use, temperature and clock, and two rates from the same answer (HBM_COVERS): the bandwidth rate
    is the struct's own `bandwith_util_rate` (what npu-exporter exports as the HBM bandwidth utilisation), the
    usage rate npu-smi's `HBM Usage Rate(%)`, used * 100 // size, so the type 6 and 10 rate calls are not made."""
    info = s.dcmi_hbm_info()
    _get(api, ref, "hbm", "dcmi_get_device_hbm_info", ctypes.byref(info))
    if not info.memory_size:
        return {}  # boards without HBM answer success with size 0
    return {"hbm_total_bytes": info.memory_size * MIB, "hbm_used_bytes": info.memory_usage * MIB,
            "hbm_temperature_celsius": float(info.temp), "extra.hbm_freq_mhz": info.freq,
            "hbm_usage_ratio": (info.memory_usage * 100 // info.memory_size) / 100.0,
            "hbm_bandwidth_ratio": info.bandwith_util_rate / 100.0}


def read_memory(api: Api, ref) -> Dict[str, Any]:
    """DDR (310P, 310B): size and available in MB; available counts free hugepages too."""
    info = s.dcmi_get_memory_info_stru()
    _get(api, ref, "memory", "dcmi_get_device_memory_info_v3", ctypes.byref(info))
    if not info.memory_size:
        return {}
    hugepage_mb = info.hugepagesize / 1024.0
    free_mb = max(0.0, info.memory_available - info.hugepages_free * hugepage_mb)
    return {"memory_total_bytes": info.memory_size * MIB,
            "memory_used_bytes": int(round(info.memory_size - free_mb - info.hugepages_free * hugepage_mb)) * MIB,
            "hugepages_total": info.hugepages_total, "hugepages_used": info.hugepages_total - info.hugepages_free}


def ecc_reader(memory: str, device_type: int) -> Callable:
    def read(api: Api, ref) -> Dict[str, Any]:
        info = s.dcmi_ecc_info()
        _get(api, ref, "ecc:" + memory, "dcmi_get_device_ecc_info", device_type, ctypes.byref(info))
        return {"ecc." + memory: {
            "single": info.single_bit_error_cnt, "double": info.double_bit_error_cnt,
            "isolated_pages": info.single_bit_isolated_pages_cnt + info.double_bit_isolated_pages_cnt},
            "ecc_counters." + memory: {
                "aggregate_single": info.total_single_bit_error_cnt,
                "aggregate_double": info.total_double_bit_error_cnt,
                "isolated_single": info.single_bit_isolated_pages_cnt,
                "isolated_double": info.double_bit_isolated_pages_cnt}}
    return read


def read_pcie(api: Api, ref) -> Dict[str, Any]:
    info = s.dcmi_pcie_info_all()
    _get(api, ref, "pcie", "dcmi_get_device_pcie_info_v2", ctypes.byref(info))
    return {"bus_id": format_bus_id(info), "extra.pcie_vendor_id": "0x%04x" % info.venderid,
            "extra.pcie_device_id": "0x%04x" % info.deviceid, "extra.pcie_subvendor_id": "0x%04x" % info.subvenderid,
            "extra.pcie_subdevice_id": "0x%04x" % info.subdeviceid}


def read_aicore_freq(api: Api, ref) -> Dict[str, Any]:
    value = ctypes.c_uint(0)
    _get(api, ref, "aicore_freq", "dcmi_get_device_frequency", s.DCMI_FREQ_AICORE_CURRENT, ctypes.byref(value))
    return {"aicore_freq_mhz": float(value.value)}


def read_aicore_rated_freq(api: Api, ref) -> Dict[str, Any]:
    value = ctypes.c_uint(0)
    _get(api, ref, "aicore_rated_freq", "dcmi_get_device_frequency", s.DCMI_FREQ_AICORE_MAX, ctypes.byref(value))
    return {"extra.aicore_rated_freq_mhz": float(value.value)}


def read_board(api: Api, ref) -> Dict[str, Any]:
    info = s.dcmi_board_info()
    _get(api, ref, "board", "dcmi_get_device_board_info", ctypes.byref(info))
    return {"extra.board_id": info.board_id, "extra.slot_id": info.slot_id}


def read_vdie(api: Api, ref) -> Dict[str, Any]:
    die = s.dcmi_die_id()
    _get(api, ref, "vdie", "dcmi_get_device_die_v2", s.VDIE, ctypes.byref(die))
    return {"vdie_id": format_die_id(die.soc_die)} if any(die.soc_die) else {}


def read_serial(api: Api, ref) -> Dict[str, Any]:
    info = s.dcmi_elabel_info()
    if api.library.api == "v2":
        code = api.plain("dcmiv2_get_device_elabel_info", ref[-1], ctypes.byref(info))
    else:
        code = api.plain("dcmi_get_card_elabel_v2", ref[0], ctypes.byref(info))
    if code != b.DCMI_OK:
        raise CallFailed("serial", "dcmi_get_card_elabel_v2", code)
    serial = text(info.serial_number)
    return {"serial_number": serial} if serial and serial != "NA" else {}


def read_compatibility(api: Api, ref) -> Dict[str, Any]:
    """The card's firmware against the driver, as npu-smi's `-t board` Compatibility prints it."""
    value = ctypes.c_int(0)
    _get(api, ref, "compatibility", "dcmi_get_device_compatibility", ctypes.byref(value))
    return {"compatibility": s.COMPATIBILITY_TEXT.get(value.value, "UNKNOWN")}


# -- the interconnect links (shared/reference/interconnect-and-compute.md 1.4): the fields sources/npusmi/links.py
# reads from -t hccs / -t hccs-bw / -t sio-info, the same links numbered the same way (the arrays' index) ------

LINK_SLOTS = 7  # HCCS macros 1-7 (DCMI_HCCS_910B_PCS_NUM); npu-smi prints these
HCCS_BANDWIDTH_PROFILING_MS = 200  # as npu-smi's -time (sources/npusmi/source.py HCCS_BW_PROFILING_MS)
LANE_MODES = {0: 0, 1: 1, 2: 4, 3: 2}  # bits 9-10 of a link's lane bitmap -> lanes in use
LANE_BITS = 4  # npu-smi prints lanes 0-3 (bits 1-4)


def _device_info(api: Api, ref, metric: str, main_cmd: int, sub_cmd: int, buffer) -> None:
    size = ctypes.c_uint(ctypes.sizeof(buffer))
    _get(api, ref, metric, "dcmi_get_device_info", main_cmd, sub_cmd, ctypes.addressof(buffer), ctypes.byref(size))


def _link_lanes(api: Api, ref) -> Dict[int, Dict[str, Any]]:
    """link -> lane_mode, lanes, speed_gbps from the lane info: the lane bitmaps come packed in the order of the
    set bits of the port bitmap (a link whose bit 0 is clear is not switched to HCCS: its bits mean nothing)."""
    info = s.dcmi_hccs_lane_info()
    _device_info(api, ref, "hccs", s.DCMI_MAIN_CMD["HCCS"], s.HCCS_SUB_LANE_INFO, info)
    links = [link for link in range(s.HCCS_MAX_PCS_NUM) if info.hccs_port_pcs_bitmap >> link & 1]
    result = {}
    for packed, link in enumerate(links):
        bitmap = info.pcs_lane_bitmap[packed]
        if not bitmap & 1:
            result[link] = {"lane_mode": None, "lanes": None, "speed_gbps": None}
            continue
        mode = LANE_MODES[bitmap >> 9 & 0x3]
        result[link] = {"lane_mode": mode, "lanes": "".join(str(bitmap >> bit & 1) for bit in range(1, 1 + LANE_BITS)),
                        "speed_gbps": mode * 56}
    return result


def _link_counters(api: Api, ref):
    """The statistics, u64 where the driver has them (sub 5), else the u32 form (sub 3, wraps at 2^32)."""
    info = s.dcmi_hccs_statistic_info_u64()
    try:
        _device_info(api, ref, "hccs", s.DCMI_MAIN_CMD["HCCS"], s.HCCS_SUB_STATISTIC_U64, info)
    except CallFailed as failed:
        if failed.code not in b.UNSUPPORTED_CODES:
            raise
        info = s.dcmi_hccs_statistic_info()
        _device_info(api, ref, "hccs", s.DCMI_MAIN_CMD["HCCS"], s.HCCS_SUB_STATISTIC, info)
    return info


def read_hccs(api: Api, ref) -> Dict[str, Any]:
    status = s.dcmi_hccs_statues()
    try:
        _device_info(api, ref, "hccs", s.DCMI_MAIN_CMD["HCCS"], s.HCCS_SUB_STATUS, status)
    except CallFailed as failed:
        if failed.code not in b.UNSUPPORTED_CODES:
            raise
        return _hccs_statistics_only(api, ref)
    lanes = _link_lanes(api, ref)
    counters = _link_counters(api, ref)
    numbers = sorted(lanes) or list(range(1, LINK_SLOTS + 1))
    links = [dict({"link": link, "lane_mode": None, "lanes": None, "speed_gbps": None}, **lanes.get(link, {}),
                  tx_packets=counters.tx_cnt[link], rx_packets=counters.rx_cnt[link], retries=counters.retry_cnt[link],
                  crc_errors=counters.crc_err_cnt[link]) for link in numbers]
    healthy = status.pcs_status == 0 and status.hdlc_status & 0x3 == s.HDLC_STATUS_OK
    return {"hccs": {"health": "OK" if healthy else "NOK",
                     "first_error_lane": None if status.pcs_status == 0 else status.pcs_status >> 8 & 0xFF,
                     "links": links}}


def _hccs_statistics_only(api: Api, ref) -> Dict[str, Any]:
    """The 310P's HCCS: no status or lane info, the statistics of its one index 0 (as its npu-smi prints them);
    a product without HCCS refuses these too, which marks the metric unsupported."""
    counters = _link_counters(api, ref)
    return {"hccs": {"health": None, "first_error_lane": None, "links": [{
        "link": 0, "lane_mode": None, "lanes": None, "speed_gbps": None, "tx_packets": counters.tx_cnt[0],
        "rx_packets": counters.rx_cnt[0], "retries": counters.retry_cnt[0], "crc_errors": counters.crc_err_cnt[0]}]}}


def read_hccs_bandwidth(api: Api, ref) -> Dict[str, Any]:
    """GB/s over HCCS_BANDWIDTH_PROFILING_MS (the call blocks that long), rounded as npu-smi prints them (%.6f)."""
    info = s.dcmi_hccs_bandwidth_info(profiling_time=HCCS_BANDWIDTH_PROFILING_MS)
    _get(api, ref, "hccs_bw", "dcmi_get_hccs_link_bandwidth_info", ctypes.byref(info))
    return {"hccs_bandwidth": {
        "total_tx_gbps": round(info.total_txbw, 6), "total_rx_gbps": round(info.total_rxbw, 6),
        "links": [{"link": link, "tx_gbps": round(info.tx_bandwidth[link], 6),
                   "rx_gbps": round(info.rx_bandwidth[link], 6)} for link in range(1, LINK_SLOTS + 1)]}}


def read_sio(api: Api, ref) -> Dict[str, Any]:
    info = s.dcmi_sio_crc_err_statistic_info()
    _device_info(api, ref, "sio", s.DCMI_MAIN_CMD["SIO"], s.SIO_SUB_CRC_ERR_STATISTICS, info)
    return {"sio": {"tx_errors": info.tx_error_count, "rx_errors": info.rx_error_count}}


# -- the 950's UB ports (interconnect-and-compute.md 1.4): DCMI V2 only. npu-smi has no query for them (its 950
# `-t topo` prints `UB` cells, nothing per port), so only the DCMI backend reads them -------------------------------

# dcmi_entire_ub_status and dcmi_ub_port_status (0: no such port) -> the words npumon keeps
UB_LINK_STATUS = {0: "no_link", 1: "linked", 2: "partial", 3: "not_needed"}
UB_PORT_STATUS = {1: "full", 2: "partial_lanes", 3: "down"}
# The port array is indexed by port id; the Atlas 350's ports (4, 5, 6) sit on UDie 0 (the 950 hccn_tool doc's
# -dev_info table), the only UDie the references show
UB_UDIE = 0
# dcmi_port_pkt_stats_info's counters under npu-exporter's names (collector_for_ub.go): the same order, the
# MindCluster header's `ub_glb_` and `ub_clan_` being npu-exporter's `ub_` and `ub_compact_`
UB_COUNTERS = tuple((field, field.replace("ub_glb_", "ub_").replace("ub_clan_", "ub_compact_"))
                    for field in s.PORT_PKT_COUNTERS)


# the bandwidth call's window (1-226 ms; it blocks that long per port): npu-exporter's hccn_tool -time 100
UB_BANDWIDTH_PROFILING_MS = 100


def _ub_status(api: Api, ref, metric: str):
    """The chip's UB link status (V2 only: a V1 library has no UB call, the 950 speaks V2)."""
    if api.library.api != "v2":
        raise CallFailed(metric, "dcmiv2_get_ub_port_link_status", b.FUNCTION_NOT_FOUND)
    status = s.dcmi_ub_port_link_status()
    code = api.plain("dcmiv2_get_ub_port_link_status", ref[-1], ctypes.byref(status))
    if code != b.DCMI_OK:
        raise CallFailed(metric, "dcmiv2_get_ub_port_link_status", code)
    return status


def read_ub(api: Api, ref) -> Dict[str, Any]:
    """`ub` = {"link_status", "ports": [{"udie", "port", "status", "counters": {npu-exporter name: count}}]}."""
    status = _ub_status(api, ref, "ub")
    ports = []
    for port, state in enumerate(status.ub_port_status):
        if state == 0:
            continue
        stats = s.dcmi_port_pkt_stats_info()
        where = s.dcmi_ub_port_info(udie_id=UB_UDIE, port_id=port)
        code = api.plain("dcmiv2_get_port_pkt_stats_info", ref[-1], ctypes.byref(where), ctypes.byref(stats))
        if code != b.DCMI_OK and code not in b.UNSUPPORTED_CODES:
            raise CallFailed("ub", "dcmiv2_get_port_pkt_stats_info", code)
        counters = None if code != b.DCMI_OK else {name: getattr(stats, field) for field, name in UB_COUNTERS}
        ports.append({"udie": UB_UDIE, "port": port, "status": UB_PORT_STATUS.get(state, "unknown"),
                      "counters": counters})
    return {"ub": {"link_status": UB_LINK_STATUS.get(status.ub_link_status, "unknown"), "ports": ports}}


def read_ub_bandwidth(api: Api, ref) -> Dict[str, Any]:
    """`ub_bandwidth` = {"ports": [{"udie", "port", "tx_mbps", "rx_mbps"}]} over UB_BANDWIDTH_PROFILING_MS, for the
    linked ports (the driver measures only on 2- and 4-card UB interconnects; elsewhere it refuses)."""
    status = _ub_status(api, ref, "ub_bw")
    ports = []
    for port, state in enumerate(status.ub_port_status):
        if UB_PORT_STATUS.get(state) not in ("full", "partial_lanes"):
            continue
        answer = s.dcmi_ub_bandwidth_info()
        where = s.dcmi_ub_port_info(udie_id=UB_UDIE, port_id=port)
        code = api.plain("dcmiv2_get_ub_realtime_bandwidth_info", ref[-1], UB_BANDWIDTH_PROFILING_MS,
                         ctypes.byref(where), ctypes.byref(answer))
        if code != b.DCMI_OK:
            raise CallFailed("ub_bw", "dcmiv2_get_ub_realtime_bandwidth_info", code)
        ports.append({"udie": UB_UDIE, "port": port, "tx_mbps": answer.tx_bandwidth, "rx_mbps": answer.rx_bandwidth})
    return {"ub_bandwidth": {"ports": ports}}


METRICS: Tuple[Tuple[str, Callable], ...] = (
    ("chip_info", read_chip_info), ("ids", read_ids), ("pcie", read_pcie), ("health", read_health),
    ("error_codes", read_error_codes), ("temperature", read_temperature), ("power", read_power),
    ("card_power", read_card_power), ("voltage", read_voltage), ("multi_utilization", read_multi_utilization),
    ("hbm", read_hbm),
) + tuple(("utilization:" + field, utilization_reader(kind, field)) for kind, field in UTILIZATION_FIELDS) + (
    ("memory", read_memory),
    ("ecc:hbm", ecc_reader("hbm", s.DCMI_DEVICE_TYPE_HBM)), ("ecc:ddr", ecc_reader("ddr", s.DCMI_DEVICE_TYPE_DDR)),
    ("aicore_freq", read_aicore_freq), ("aicore_rated_freq", read_aicore_rated_freq), ("board", read_board),
    ("vdie", read_vdie), ("serial", read_serial), ("compatibility", read_compatibility),
    ("hccs", read_hccs), ("hccs_bw", read_hccs_bandwidth), ("sio", read_sio), ("ub", read_ub),
    ("ub_bw", read_ub_bandwidth),
)
METRIC_NAMES = tuple(name for name, _ in METRICS)
CARD_WIDE = frozenset(("card_power", "serial", "compatibility"))  # asked of a card's first chip, given to all of its chips
# A metric whose answer carries other metrics' values: where it answered, those calls are not made.
COVERS = {
    "multi_utilization": frozenset("utilization:" + field for field in (
        "aicore_ratio", "aicube_ratio", "vector_ratio", "npu_util_ratio")),
    "hbm": frozenset(("utilization:hbm_usage_ratio", "utilization:hbm_bandwidth_ratio")),
}
# What changes only with the hardware: asked in the first sweep and then at the identity interval, not every poll
# (a third of the calls).
STATIC_METRICS = frozenset(("chip_info", "ids", "pcie", "aicore_rated_freq", "board", "vdie", "serial",
                            "compatibility"))


# The links: read only in the sweeps that ask for them (`links`), each at its own interval (the source's link tiers,
# poll.hccs_seconds etc.): one call per chip, and the bandwidth call blocks for its profiling window.
LINK_METRICS = frozenset(("hccs", "hccs_bw", "sio", "ub", "ub_bw"))


# What a quick `npumon check` asks (the npu-smi source's quick tiers: health and ECC; the main table, read on
# both backends, gives the rest of what the quick rules judge).
QUICK_METRICS = frozenset(("health", "error_codes", "ecc:hbm", "ecc:ddr"))


def sweep(api: Api, unsupported: Set[Tuple[int, int, str]], static: bool = True, metrics=METRICS,
          only: Optional[Set[str]] = None, links: Set[str] = frozenset()) -> Dict[str, Any]:
    """Every chip's values: {"chips": [{"npu", "chip", "values", "static", "problems"}], "unsupported": [[npu,
    chip, metric]] newly found, "problems": [...]} -- JSON-shaped, for the worker to send. `static`: also the
    STATIC_METRICS (their fields are listed in each chip's "static"). `only`: just these metrics (a quick pass).
    `links`: the LINK_METRICS due in this sweep (the others are left out)."""
    api.init_type_errors = 0
    chips, problems = enumerate_chips(api, static)
    found: List[List[Any]] = []
    records = []
    card_values: Dict[int, Dict[str, Any]] = {}
    for npu, chip, ref in chips:
        values: Dict[str, Any] = {}
        static_fields: List[str] = []
        chip_problems: List[str] = []
        covered: Set[str] = set()
        for name, reader in metrics:
            if (name in STATIC_METRICS and not static or name in covered
                    or name in LINK_METRICS and name not in links
                    or only is not None and name not in only):
                continue
            if name in CARD_WIDE and npu in card_values and name in card_values[npu]:
                values.update(card_values[npu][name])
                continue
            if (npu, chip, name) in unsupported:
                continue
            try:
                got = reader(api, ref)
            except CallFailed as failed:
                if failed.code in b.UNSUPPORTED_CODES:
                    found.append([npu, chip, name])
                else:
                    chip_problems.append(str(failed))
                continue
            values.update(got)
            if got and name in COVERS:
                covered |= COVERS[name]
            if name in STATIC_METRICS:
                static_fields.extend(got)
            if name in CARD_WIDE:
                card_values.setdefault(npu, {})[name] = got
        records.append({"npu": npu, "chip": chip, "values": values, "static": static_fields,
                        "problems": chip_problems})
    return {"chips": records, "unsupported": found, "problems": problems,
            "init_type_errors": api.init_type_errors}


def versions(library: b.Library) -> Dict[str, Optional[str]]:
    result: Dict[str, Optional[str]] = {}
    names = ((("driver_version", "dcmi_get_driver_version"), ("dcmi_version", "dcmi_get_dcmi_version"))
             if library.api != "v2" else (("dcmi_version", "dcmiv2_get_dcmi_version"),))  # V2 has no driver version
    for key, name in names:
        buffer = ctypes.create_string_buffer(64)
        result[key] = buffer.value.decode("utf-8", "replace") if library.call(name, buffer, 64) == b.DCMI_OK else None
    return result
