"""The DCMI functions' C signatures as ctypes argtypes, the return codes by name, and the V1/V2 choice.

Sources: the MindCluster header (shared/reference/dcmi/dcmi_interface_api.h.txt, every `dcmi_*` prototype), its
V2 companion `dcmi_interface_api_v2.h` and the driver's own header (hicann/driver @ ef377e95) for the calls the
MindCluster copy lacks (`dcmi_get_device_errorcode_string`, `dcmi_get_driver_version`, ...), both quoted in
shared/reference/dcmi_prototypes.h.txt; return codes from the driver's `DCMI_ERR_CODE_*` macros and the wrapper
codes npu-exporter's cgo layer uses. Where the headers disagree only in signedness of an int argument the ABI is
the same; `dcmi_subscribe_fault_event` (a by-value struct plus a callback) is declared but never called here.

V1 (`dcmi_init`, card id + device id) is what 910/910B/A3/310P drivers answer; V2 (`dcmiv2_init`, one logical
device id) is the Ascend 950 API, where most V1 calls return -8255. Like npu-exporter: V1 first, V2 if V1's init
is missing or fails.
"""

import ctypes
from ctypes import POINTER, c_char_p, c_int, c_uint, c_ubyte, c_void_p
from typing import Dict, List, Optional, Tuple

from . import structs as s

P = POINTER
c_enum = s.c_enum

# -- return codes ------------------------------------------------------------------------------------------

DCMI_OK = 0
RETURN_CODES: Dict[int, str] = {
    0: "DCMI_OK",
    -8001: "DCMI_ERR_CODE_INVALID_PARAMETER",
    -8002: "DCMI_ERR_CODE_OPER_NOT_PERMITTED",
    -8003: "DCMI_ERR_CODE_MEM_OPERATE_FAIL",
    -8004: "DCMI_ERR_CODE_SECURE_FUN_FAIL",
    -8005: "DCMI_ERR_CODE_INNER_ERR",
    -8006: "DCMI_ERR_CODE_TIME_OUT",
    -8007: "DCMI_ERR_CODE_INVALID_DEVICE_ID",
    -8008: "DCMI_ERR_CODE_DEVICE_NOT_EXIST",
    -8009: "DCMI_ERR_CODE_IOCTL_FAIL",
    -8010: "DCMI_ERR_CODE_SEND_MSG_FAIL",
    -8011: "DCMI_ERR_CODE_RECV_MSG_FAIL",
    -8012: "DCMI_ERR_CODE_NOT_REDAY",  # sic: the header's spelling
    -8013: "DCMI_ERR_CODE_NOT_SUPPORT_IN_CONTAINER",
    -8014: "DCMI_ERR_CODE_FILE_OPERATE_FAIL",
    -8015: "DCMI_ERR_CODE_RESET_FAIL",
    -8016: "DCMI_ERR_CODE_ABORT_OPERATE",
    -8017: "DCMI_ERR_CODE_IS_UPGRADING",
    -8020: "DCMI_ERR_CODE_RESOURCE_OCCUPIED",
    -8022: "DCMI_ERR_CODE_PARTITION_NOT_RIGHT",
    -8023: "DCMI_ERR_CODE_CONFIG_INFO_NOT_EXIST",
    -8255: "DCMI_ERR_CODE_NOT_SUPPORT",
    # npu-exporter's wrapper codes; npumon returns the same where it stands in for the library
    -99997: "ERROR_UNKNOWN",
    -99998: "FUNCTION_NOT_FOUND",
    -99999: "SO_NOT_FOUND",
}
FUNCTION_NOT_FOUND = -99998
# The product or deployment has no such value: asked again only after a restart.
UNSUPPORTED_CODES = frozenset((-8255, -8013, -8002, FUNCTION_NOT_FOUND))
# Worth another try in a moment: the driver was busy.
TRANSIENT_CODES = frozenset((-8006, -8012, -8017, -8020))
# The library lost its link to the driver: a burst of these calls for dcmi_init again.
INIT_TYPE_CODES = frozenset((-8009, -8010, -8011, -99997))


def code_name(code: int) -> str:
    """-8255 -> "-8255 DCMI_ERR_CODE_NOT_SUPPORT"; an unknown code is named as such."""
    return "{} {}".format(code, RETURN_CODES.get(code, "unknown DCMI code"))


# -- signatures --------------------------------------------------------------------------------------------

_I = c_int
_U = c_uint
_PI, _PU = P(c_int), P(c_uint)


def _dev(*rest):
    """(int card_id, int device_id, ...)"""
    return (_I, _I) + rest


SIGNATURES: Dict[str, Tuple] = {
    # MindCluster header, DCMI_VERSION_2 block (the card/device API despite the name)
    "dcmi_init": (),
    "dcmi_get_card_list": (_PI, _PI, _I),
    "dcmi_get_device_num_in_card": (_I, _PI),
    "dcmi_get_device_id_in_card": (_I, _PI, _PI, _PI),
    "dcmi_get_device_type": _dev(P(c_enum)),
    "dcmi_get_device_pcie_info_v2": _dev(P(s.dcmi_pcie_info_all)),
    "dcmi_get_device_chip_info": _dev(P(s.dcmi_chip_info)),
    "dcmi_get_device_chip_info_v2": _dev(P(s.dcmi_chip_info_v2)),
    "dcmi_get_device_power_info": _dev(_PI),
    "dcmi_get_device_health": _dev(_PU),
    "dcmi_get_device_errorcode_v2": _dev(_PI, _PU, _U),
    "dcmi_get_device_temperature": _dev(_PI),
    "dcmi_get_device_voltage": _dev(_PU),
    "dcmi_get_device_ecc_info": _dev(c_enum, P(s.dcmi_ecc_info)),
    "dcmi_get_device_frequency": _dev(c_enum, _PU),
    "dcmi_get_device_hbm_info": _dev(P(s.dcmi_hbm_info)),
    "dcmi_get_device_memory_info_v3": _dev(P(s.dcmi_get_memory_info_stru)),
    "dcmi_get_device_utilization_rate": _dev(_I, _PU),
    "dcmi_get_device_multi_utilization_rate": _dev(P(s.dcmi_multi_utilization_info)),
    "dcmi_get_device_multi_utilization_rate_period": _dev(P(s.dcmi_multi_utilization_info), _I),
    "dcmi_get_device_info": _dev(c_enum, _U, c_void_p, _PU),
    "dcmi_get_device_ip": _dev(c_enum, _I, P(s.dcmi_ip_addr), P(s.dcmi_ip_addr)),
    "dcmi_get_device_network_health": _dev(P(c_enum)),
    "dcmi_get_device_logic_id": (_PI, _I, _I),
    "dcmi_create_vdevice": _dev(P(s.dcmi_create_vdev_res_stru), P(s.dcmi_create_vdev_out)),
    "dcmi_set_destroy_vdevice": _dev(_U),
    "dcmi_get_device_phyid_from_logicid": (_U, _PU),
    "dcmi_get_device_logicid_from_phyid": (_U, _PU),
    "dcmi_get_card_id_device_id_from_logicid": (_PI, _PI, _U),
    "dcmi_get_card_id_device_id_from_phyid": (_PI, _PI, _U),
    "dcmi_get_product_type": _dev(c_char_p, _I),
    "dcmi_set_device_reset": _dev(c_enum),
    "dcmi_get_device_outband_channel_state": _dev(_PI),
    "dcmi_pre_reset_soc": _dev(),
    "dcmi_rescan_soc": _dev(),
    "dcmi_get_netdev_brother_device": _dev(_PI),
    "dcmi_get_device_boot_status": _dev(P(c_enum)),
    "dcmi_subscribe_fault_event": None,  # by-value filter + callback: not called (see the module docstring)
    "dcmi_get_npu_work_mode": (_I, P(c_ubyte)),
    "dcmi_get_device_die_v2": _dev(c_enum, P(s.dcmi_die_id)),
    "dcmi_get_device_resource_info": _dev(P(s.dcmi_proc_mem_info), _PI),
    "dcmi_get_device_board_info": _dev(P(s.dcmi_board_info)),
    "dcmi_get_pcie_link_bandwidth_info": _dev(P(s.dcmi_pcie_link_bandwidth_info)),
    "dcmi_get_dcmi_version": (c_char_p, _I),
    "dcmi_get_mainboard_id": _dev(_PU),
    "dcmi_get_affinity_cpu_info_by_device_id": _dev(c_char_p, _PI),
    "dcmi_get_hccs_link_bandwidth_info": _dev(P(s.dcmi_hccs_bandwidth_info)),
    "dcmi_start_hccsping_mesh": _dev(_I, P(s.dcmi_hccsping_mesh_operate)),
    "dcmi_stop_hccsping_mesh": _dev(_I, _U),
    "dcmi_get_hccsping_mesh_info": _dev(_I, _U, P(s.dcmi_hccsping_mesh_info)),
    "dcmi_get_hccsping_mesh_state": _dev(_I, _U, _PU),
    "dcmi_get_spod_node_status": _dev(_U, _PU),
    "dcmi_set_spod_node_status": _dev(_U, _U),
    "dcmi_get_multi_die_policy": (P(c_enum),),
    "dcmi_set_multi_die_policy": (c_enum,),
    "dcmi_start_ub_ping_mesh": _dev(_I, P(s.dcmi_ub_ping_mesh_operate)),
    "dcmi_stop_ub_ping_mesh": _dev(_I),
    "dcmi_get_ub_ping_mesh_info": _dev(_I, P(s.dcmi_ub_ping_mesh_info), _I, _PI),
    "dcmi_get_ub_ping_mesh_state": _dev(_I, _PU),
    "dcmi_get_urma_device_cnt": _dev(_PU),
    "dcmi_get_eid_list_by_urma_dev_index": _dev(_U, P(s.dcmi_urma_eid_info), _PU),
    # MindCluster header, DCMI_VERSION_1 block
    "dcmi_get_memory_info": _dev(P(s.dcmi_memory_info_stru)),
    "dcmi_get_device_errorcode": _dev(_PI, _PU, _PI),
    "dcmi_mcu_get_power_info": (_I, _PI),
    "dcmi_get_card_elabel_v2": (_I, P(s.dcmi_elabel_info)),
    # the driver's header only
    "dcmi_get_driver_version": (c_char_p, _U),
    "dcmi_get_card_num_list": (_PI, _PI, _I),
    "dcmi_get_all_device_count": (_PI,),
    "dcmi_get_driver_health": (_PU,),
    "dcmi_get_device_errorcode_string": _dev(_U, P(c_ubyte), _I),
    "dcmi_get_device_compatibility": _dev(P(c_enum)),
    # dcmi_interface_api_v2.h: one logical device id
    "dcmiv2_init": (),
    "dcmiv2_get_device_list": (_PI, _PI, _I),
    "dcmiv2_get_all_device_count": (_PI,),
    "dcmiv2_get_device_type": (_I, P(c_enum)),
    "dcmiv2_get_device_pcie_info": (_I, P(s.dcmi_pcie_info_all)),
    "dcmiv2_get_device_chip_info": (_I, P(s.dcmi_chip_info_v2)),
    "dcmiv2_get_device_power_info": (_I, _PI),
    "dcmiv2_get_device_health": (_I, _PU),
    "dcmiv2_get_device_error_code_list": (_I, _PI, _PU, _U),
    "dcmiv2_get_device_temperature": (_I, _PI),
    "dcmiv2_get_device_voltage": (_I, _PU),
    "dcmiv2_get_device_ecc_info": (_I, c_enum, P(s.dcmi_ecc_info)),
    "dcmiv2_get_device_frequency": (_I, c_enum, _PU),
    "dcmiv2_get_device_hbm_info": (_I, P(s.dcmi_hbm_info)),
    "dcmiv2_get_device_utilization_rate": (_I, _I, _PU),
    "dcmiv2_get_device_multi_utilization_rate": (_I, P(s.dcmi_multi_utilization_info)),
    "dcmiv2_get_device_multi_utilization_rate_period": (_I, P(s.dcmi_multi_utilization_info), _I),
    "dcmiv2_get_device_info": (_I, c_enum, _U, c_void_p, _PU),
    "dcmiv2_get_device_network_health": (_I, P(c_enum)),
    "dcmiv2_get_chip_phy_id_by_dev_id": (_U, _PU),
    "dcmiv2_get_dev_id_by_chip_phy_id": (_U, _PU),
    "dcmiv2_reset_device": (_I, c_enum),
    "dcmiv2_get_device_outband_channel_state": (_I, _PI),
    "dcmiv2_pre_reset_device": (_I,),
    "dcmiv2_rescan_device": (_I,),
    "dcmiv2_get_device_boot_status": (_I, P(c_enum)),
    "dcmiv2_subscribe_fault_event": None,
    "dcmiv2_get_device_die_id": (_I, c_enum, P(s.dcmi_die_id)),
    "dcmiv2_get_device_proc_mem_info": (_I, P(s.dcmi_proc_mem_info), _PI),
    "dcmiv2_get_device_board_info": (_I, P(s.dcmi_board_info)),
    "dcmiv2_get_pcie_link_bandwidth_info": (_I, P(s.dcmi_pcie_link_bandwidth_info)),
    "dcmiv2_get_dcmi_version": (c_char_p, _I),
    "dcmiv2_get_mainboard_id": (_I, _PU),
    "dcmiv2_get_affinity_cpu_info_by_dev_id": (_I, c_char_p, _PI),
    "dcmiv2_start_ub_ping_mesh": (_I, _I, P(s.dcmi_ub_ping_mesh_operate)),
    "dcmiv2_stop_ub_ping_mesh": (_I, _I),
    "dcmiv2_get_ub_ping_mesh_info": (_I, _I, P(s.dcmi_ub_ping_mesh_info), _I, _PI),
    "dcmiv2_get_ub_ping_mesh_state": (_I, _I, _PU),
    "dcmiv2_get_urma_device_cnt": (_I, _PU),
    "dcmiv2_get_eid_list_by_urma_dev_index": (_I, _U, P(s.dcmi_urma_eid_info), _PU),
    "dcmiv2_get_device_elabel_info": (_I, P(s.dcmi_elabel_info)),
    "dcmiv2_get_port_pkt_stats_info": (_I, P(s.dcmi_ub_port_info), P(s.dcmi_port_pkt_stats_info)),
    # the driver header (dcmi_driver_extras.h): the 950's UB port states
    "dcmiv2_get_ub_port_link_status": (_I, P(s.dcmi_ub_port_link_status)),
    "dcmiv2_get_ub_realtime_bandwidth_info": (_I, _U, P(s.dcmi_ub_port_info), P(s.dcmi_ub_bandwidth_info)),
}

# The V1 call a reader makes -> its V2 counterpart (same output struct, one logical device id in place of
# card id + device id). A call without one is unsupported on V2.
V2_NAMES = {
    "dcmi_get_device_type": "dcmiv2_get_device_type",
    "dcmi_get_device_pcie_info_v2": "dcmiv2_get_device_pcie_info",
    "dcmi_get_device_chip_info_v2": "dcmiv2_get_device_chip_info",
    "dcmi_get_device_power_info": "dcmiv2_get_device_power_info",
    "dcmi_get_device_health": "dcmiv2_get_device_health",
    "dcmi_get_device_errorcode_v2": "dcmiv2_get_device_error_code_list",
    "dcmi_get_device_temperature": "dcmiv2_get_device_temperature",
    "dcmi_get_device_voltage": "dcmiv2_get_device_voltage",
    "dcmi_get_device_ecc_info": "dcmiv2_get_device_ecc_info",
    "dcmi_get_device_frequency": "dcmiv2_get_device_frequency",
    "dcmi_get_device_hbm_info": "dcmiv2_get_device_hbm_info",
    "dcmi_get_device_utilization_rate": "dcmiv2_get_device_utilization_rate",
    "dcmi_get_device_multi_utilization_rate": "dcmiv2_get_device_multi_utilization_rate",
    "dcmi_get_device_network_health": "dcmiv2_get_device_network_health",
    "dcmi_get_device_die_v2": "dcmiv2_get_device_die_id",
    "dcmi_get_device_resource_info": "dcmiv2_get_device_proc_mem_info",
    "dcmi_get_device_board_info": "dcmiv2_get_device_board_info",
    "dcmi_get_mainboard_id": "dcmiv2_get_mainboard_id",
}


class Library:
    """A loaded libdcmi with its signatures set: `call(name, *args)` returns the C return code, or
    FUNCTION_NOT_FOUND where this library has no such symbol (an older driver)."""

    def __init__(self, cdll: ctypes.CDLL):
        self.cdll = cdll
        self._functions: Dict[str, Optional[object]] = {}
        self.api: Optional[str] = None  # "v1" or "v2" once init succeeded

    def function(self, name: str):
        if name not in self._functions:
            try:
                func = getattr(self.cdll, name)
            except AttributeError:
                func = None
            argtypes = SIGNATURES.get(name)
            if func is not None and argtypes is not None:
                func.argtypes = list(argtypes)
                func.restype = c_int
            elif name in SIGNATURES and argtypes is None:
                func = None  # declared, never called
            self._functions[name] = func
        return self._functions[name]

    def has(self, name: str) -> bool:
        return self.function(name) is not None

    def call(self, name: str, *args) -> int:
        func = self.function(name)
        if func is None:
            return FUNCTION_NOT_FOUND
        return int(func(*args))

    def initialise(self) -> Tuple[Optional[str], List[str]]:
        """dcmi_init, else dcmiv2_init: (the API that answered or None, what each attempt returned)."""
        tried = []
        for api, name in (("v1", "dcmi_init"), ("v2", "dcmiv2_init")):
            code = self.call(name)
            if code == DCMI_OK:
                self.api = api
                return api, tried
            tried.append("{}: {}".format(name, code_name(code)))
        return None, tried
