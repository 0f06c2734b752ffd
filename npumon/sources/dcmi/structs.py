"""Every struct, union and enum of the DCMI header as ctypes types, field for field.

Source: the MindCluster copy of `dcmi_interface_api.h` (Ascend/mind-cluster @ 22bb3d98,
shared/reference/dcmi/dcmi_interface_api.h.txt) and, where the driver's own header (hicann/driver @ ef377e95)
differs, the larger layout: `dcmi_ecc_info` has 9 fields there and 7 in the driver's header, so the 9-field
struct (36 bytes) is what a call writes into and an older library can never overrun it. Field types, array
lengths and order are the header's; tests/sources/dcmi/test_bindings.py compiles the header with gcc and
compares every size and offset. Enums are C `int` (what gcc gives an enum whose members fit in one).
"""

import ctypes
from ctypes import (c_char, c_double, c_float, c_int, c_long, c_uint, c_ulong, c_ulonglong, c_ushort, c_ubyte)

MAX_CHIP_NAME_LEN = 32
TEMPLATE_NAME_LEN = 32
DIE_ID_COUNT = 5
AGENTDRV_PROF_DATA_NUM = 3
MAX_LENGTH = 256
DCMI_UTIL_RESERVED_LEN = 8
DCMI_VDEV_RES_NAME_LEN = 16
DCMI_VDEV_SIZE = 20
DCMI_VDEV_FOR_RESERVE = 32
DCMI_SOC_SPLIT_MAX = 32
DCMI_MAX_EVENT_NAME_LENGTH = 256
DCMI_MAX_EVENT_DATA_LENGTH = 32
DCMI_MAX_EVENT_RESV_LENGTH = 32
HCCS_MAX_PCS_NUM = 16
HCCS_RES_PCS_NUM = 64
IP_ADDR_LIST_LEN = 1024
HCCS_PING_MESH_MAX_NUM = 48
ADDR_MAX_LEN = 16
UB_PING_MESH_MAX_NUM = 48
UB_ADDR_MAX_LEN = 16
UB_DST_EIT_MAX_LEN = 64
DCMI_URMA_EID_MAX_COUNT = 32
DCMI_URMA_EID_SIZE = 16

c_enum = c_int

# -- enums (values as the header names them) ----------------------------------------------------------

DCMI_IPADDR_TYPE_V4, DCMI_IPADDR_TYPE_V6, DCMI_IPADDR_TYPE_ANY = 0, 1, 2
NPU_TYPE, MCU_TYPE, CPU_TYPE, INVALID_TYPE = 0, 1, 2, 0xFF
RDFX_DETECT_RESULTS = {0: "OK", 1: "SOCK_FAIL", 2: "RECV_TIMEOUT", 3: "UNREACH", 4: "TIME_EXCEEDED", 5: "FAULT",
                       6: "INIT", 7: "THREAD_ERR", 8: "IP_SET", 0xFF: "MAX"}
DCMI_VNIC_PORT, DCMI_ROCE_PORT, DCMI_INVALID_PORT = 0, 1, 2
DCMI_MAIN_CMD = {"DVPP": 0, "ISP": 1, "TS_GROUP_NUM": 2, "CAN": 3, "UART": 4, "UPGRADE": 5, "HCCS": 16, "TEMP": 50,
                 "SVM": 51, "VDEV_MNG": 52, "SIO": 56, "DEVICE_SHARE": 0x8001, "MAX": 0x8002}
DCMI_FREQ_DDR, DCMI_FREQ_CTRLCPU, DCMI_FREQ_HBM = 1, 2, 6
DCMI_FREQ_AICORE_CURRENT, DCMI_FREQ_AICORE_MAX, DCMI_FREQ_VECTORCORE_CURRENT = 7, 9, 12
OUTBAND_CHANNEL, INBAND_CHANNEL = 0, 1
BOOT_STATUS = {0: "UNINIT", 1: "BIOS", 2: "OS", 3: "FINISH"}
DCMI_DEVICE_TYPE_DDR, DCMI_DEVICE_TYPE_SRAM, DCMI_DEVICE_TYPE_HBM, DCMI_DEVICE_TYPE_NPU = 0, 1, 2, 3
DCMI_DEVICE_TYPE_NONE = 0xFF
DCMI_DMS_FAULT_EVENT = 0
NDIE, VDIE = 0, 1
COMPATIBILITY_TEXT = {1: "OK", 2: "NOK", 3: "UNKNOWN"}  # enum dcmi_device_compat (the driver's header)
DCMI_MULTI_DIE_UNION_POLICY, DCMI_MULTI_DIE_INDEP_POLICY, DCMI_MULTI_DIE_POLICY_MAX = 0, 1, 2

# dcmi_get_device_utilization_rate input_type (driver header's DCMI_UTILIZATION_RATE_* macros)
UTILIZATION_DDR, UTILIZATION_AICORE, UTILIZATION_AICPU, UTILIZATION_CTRLCPU = 1, 2, 3, 4
UTILIZATION_DDR_BANDWIDTH, UTILIZATION_HBM, UTILIZATION_HBM_BANDWIDTH = 5, 6, 10
UTILIZATION_VECTORCORE, UTILIZATION_NPU, UTILIZATION_AICUBE = 12, 13, 14


def _struct(name, fields, base=ctypes.Structure):
    return type(name, (base,), {"_fields_": fields})


# -- structs, in the header's order ------------------------------------------------------------------------

dcmi_chip_info = _struct("dcmi_chip_info", [
    ("chip_type", c_ubyte * MAX_CHIP_NAME_LEN), ("chip_name", c_ubyte * MAX_CHIP_NAME_LEN),
    ("chip_ver", c_ubyte * MAX_CHIP_NAME_LEN), ("aicore_cnt", c_uint)])
dcmi_chip_info_v2 = _struct("dcmi_chip_info_v2", dcmi_chip_info._fields_ + [
    ("npu_name", c_ubyte * MAX_CHIP_NAME_LEN)])
dcmi_pcie_info_all = _struct("dcmi_pcie_info_all", [
    ("venderid", c_uint), ("subvenderid", c_uint), ("deviceid", c_uint), ("subdeviceid", c_uint), ("domain", c_int),
    ("bdf_busid", c_uint), ("bdf_deviceid", c_uint), ("bdf_funcid", c_uint), ("reserve", c_ubyte * 32)])
dcmi_die_id = _struct("dcmi_die_id", [("soc_die", c_uint * DIE_ID_COUNT)])
dcmi_ecc_info = _struct("dcmi_ecc_info", [
    ("enable_flag", c_int), ("single_bit_error_cnt", c_uint), ("double_bit_error_cnt", c_uint),
    ("total_single_bit_error_cnt", c_uint), ("total_double_bit_error_cnt", c_uint),
    ("single_bit_isolated_pages_cnt", c_uint), ("double_bit_isolated_pages_cnt", c_uint),
    ("single_bit_next_isolated_pages_cnt", c_uint), ("double_bit_next_isolated_pages_cnt", c_uint)])
dcmi_hbm_info = _struct("dcmi_hbm_info", [
    ("memory_size", c_ulonglong), ("freq", c_uint), ("memory_usage", c_ulonglong), ("temp", c_int),
    ("bandwith_util_rate", c_uint)])
# The header's comment says 96 bytes; with three `unsigned long` fields it is 112 on LP64 (DCMI.md section 5).
dcmi_get_memory_info_stru = _struct("dcmi_get_memory_info_stru", [
    ("memory_size", c_ulonglong), ("memory_available", c_ulonglong), ("freq", c_uint), ("hugepagesize", c_ulong),
    ("hugepages_total", c_ulong), ("hugepages_free", c_ulong), ("utiliza", c_uint), ("reserve", c_ubyte * 60)])
_ip_union = _struct("_dcmi_ip_addr_u", [("ip6", c_ubyte * 16), ("ip4", c_ubyte * 4)], ctypes.Union)
dcmi_ip_addr = _struct("dcmi_ip_addr", [("u_addr", _ip_union), ("ip_type", c_enum)])
dcmi_base_resource = _struct("dcmi_base_resource", [
    ("token", c_ulonglong), ("token_max", c_ulonglong), ("task_timeout", c_ulonglong), ("vfg_id", c_uint),
    ("vip_mode", c_ubyte), ("reserved", c_ubyte * (DCMI_VDEV_FOR_RESERVE - 1))])
dcmi_computing_resource = _struct("dcmi_computing_resource", [
    ("aic", c_float), ("aiv", c_float), ("dsa", c_ushort), ("rtsq", c_ushort), ("acsq", c_ushort),
    ("cdqm", c_ushort), ("c_core", c_ushort), ("ffts", c_ushort), ("sdma", c_ushort), ("pcie_dma", c_ushort),
    ("memory_size", c_ulonglong), ("event_id", c_uint), ("notify_id", c_uint), ("stream_id", c_uint),
    ("model_id", c_uint), ("topic_schedule_aicpu", c_ushort), ("host_ctrl_cpu", c_ushort),
    ("host_aicpu", c_ushort), ("device_aicpu", c_ushort), ("topic_ctrl_cpu_slot", c_ushort),
    ("vdev_aicore_utilization", c_uint), ("vdev_memory_total", c_ulonglong), ("vdev_memory_free", c_ulonglong),
    ("reserved", c_ubyte * (DCMI_VDEV_FOR_RESERVE - DCMI_VDEV_SIZE))])
dcmi_media_resource = _struct("dcmi_media_resource", [
    ("jpegd", c_float), ("jpege", c_float), ("vpc", c_float), ("vdec", c_float), ("pngd", c_float),
    ("venc", c_float), ("reserved", c_ubyte * DCMI_VDEV_FOR_RESERVE)])
dcmi_create_vdev_out = _struct("dcmi_create_vdev_out", [
    ("vdev_id", c_uint), ("pcie_bus", c_uint), ("pcie_device", c_uint), ("pcie_func", c_uint), ("vfg_id", c_uint),
    ("reserved", c_ubyte * DCMI_VDEV_FOR_RESERVE)])
dcmi_create_vdev_res_stru = _struct("dcmi_create_vdev_res_stru", [
    ("vdev_id", c_uint), ("vfg_id", c_uint), ("template_name", c_char * TEMPLATE_NAME_LEN),
    ("reserved", c_ubyte * 64)])
dcmi_vdev_query_info = _struct("dcmi_vdev_query_info", [
    ("name", c_char * DCMI_VDEV_RES_NAME_LEN), ("status", c_uint), ("is_container_used", c_uint), ("vfid", c_uint),
    ("vfg_id", c_uint), ("container_id", c_ulonglong), ("base", dcmi_base_resource),
    ("computing", dcmi_computing_resource), ("media", dcmi_media_resource)])
dcmi_vdev_query_stru = _struct("dcmi_vdev_query_stru", [("vdev_id", c_uint), ("query_info", dcmi_vdev_query_info)])
dcmi_ub_ping_mesh_operate = _struct("dcmi_ub_ping_mesh_operate", [
    ("src_eid", c_char * UB_ADDR_MAX_LEN), ("dst_eid_list", (c_char * UB_ADDR_MAX_LEN) * UB_DST_EIT_MAX_LEN),
    ("dst_num", c_int), ("pkt_size", c_int), ("pkt_send_num", c_int), ("pkt_interval", c_int), ("timeout", c_int),
    ("task_interval", c_int), ("task_id", c_int)])
dcmi_ub_ping_mesh_info = _struct("dcmi_ub_ping_mesh_info", [
    ("src_eid", c_char * UB_ADDR_MAX_LEN), ("dst_eid_list", (c_char * UB_ADDR_MAX_LEN) * UB_DST_EIT_MAX_LEN),
    ("suc_pkt_num", c_uint * UB_PING_MESH_MAX_NUM), ("fail_pkt_num", c_uint * UB_PING_MESH_MAX_NUM),
    ("max_time", c_long * UB_PING_MESH_MAX_NUM), ("min_time", c_long * UB_PING_MESH_MAX_NUM),
    ("avg_time", c_long * UB_PING_MESH_MAX_NUM), ("tp95_time", c_long * UB_PING_MESH_MAX_NUM),
    ("reply_stat_num", c_int * UB_PING_MESH_MAX_NUM), ("ping_total_num", c_ulonglong * UB_PING_MESH_MAX_NUM),
    ("dest_num", c_int), ("occur_time", c_ulong)])
dcmi_soc_free_resource = _struct("dcmi_soc_free_resource", [
    ("vfg_num", c_uint), ("vfg_bitmap", c_uint), ("base", dcmi_base_resource),
    ("computing", dcmi_computing_resource), ("media", dcmi_media_resource)])
dcmi_soc_total_resource = _struct("dcmi_soc_total_resource", [
    ("vdev_num", c_uint), ("vdev_id", c_uint * DCMI_SOC_SPLIT_MAX), ("vfg_num", c_uint), ("vfg_bitmap", c_uint),
    ("base", dcmi_base_resource), ("computing", dcmi_computing_resource), ("media", dcmi_media_resource)])
dcmi_spod_info = _struct("dcmi_spod_info", [
    ("sdid", c_uint), ("scale_type", c_uint), ("super_pod_id", c_uint), ("server_id", c_uint),
    ("chassis_id", c_uint), ("super_pod_type", c_uint), ("reserve", c_uint * 6)])
dcmi_dms_fault_event = _struct("dcmi_dms_fault_event", [
    ("event_id", c_uint), ("deviceid", c_ushort), ("node_type", c_ubyte), ("node_id", c_ubyte),
    ("sub_node_type", c_ubyte), ("sub_node_id", c_ubyte), ("severity", c_ubyte), ("assertion", c_ubyte),
    ("event_serial_num", c_int), ("notify_serial_num", c_int), ("alarm_raised_time", c_ulonglong),
    ("event_name", c_char * DCMI_MAX_EVENT_NAME_LENGTH), ("additional_info", c_char * DCMI_MAX_EVENT_DATA_LENGTH),
    ("resv", c_ubyte * DCMI_MAX_EVENT_RESV_LENGTH)])
_event_union = _struct("_dcmi_event_t", [("dms_event", dcmi_dms_fault_event)], ctypes.Union)
dcmi_event = _struct("dcmi_event", [("type", c_enum), ("event_t", _event_union)])
dcmi_event_filter = _struct("dcmi_event_filter", [
    ("filter_flag", c_ulonglong), ("event_id", c_uint), ("severity", c_ubyte), ("node_type", c_ubyte),
    ("resv", c_ubyte * DCMI_MAX_EVENT_RESV_LENGTH)])
dcmi_proc_mem_info = _struct("dcmi_proc_mem_info", [("proc_id", c_int), ("proc_mem_usage", c_ulong)])
dcmi_board_info = _struct("dcmi_board_info", [
    ("board_id", c_uint), ("pcb_id", c_uint), ("bom_id", c_uint), ("slot_id", c_uint)])
dcmi_pcie_link_bandwidth_info = _struct("dcmi_pcie_link_bandwidth_info", [("profiling_time", c_int)] + [
    (name, c_uint * AGENTDRV_PROF_DATA_NUM) for name in (
        "tx_p_bw", "tx_np_bw", "tx_cpl_bw", "tx_np_lantency", "rx_p_bw", "rx_np_bw", "rx_cpl_bw")])
dcmi_hccs_statistic_info = _struct("dcmi_hccs_statistic_info", [
    ("tx_cnt", c_uint * HCCS_MAX_PCS_NUM), ("rx_cnt", c_uint * HCCS_MAX_PCS_NUM),
    ("crc_err_cnt", c_uint * HCCS_MAX_PCS_NUM), ("retry_cnt", c_uint * HCCS_MAX_PCS_NUM),
    ("reserved_field_cnt", c_uint * HCCS_RES_PCS_NUM)])
dcmi_hccs_statistic_info_u64 = _struct("dcmi_hccs_statistic_info_u64", [
    ("tx_cnt", c_ulonglong * HCCS_MAX_PCS_NUM), ("rx_cnt", c_ulonglong * HCCS_MAX_PCS_NUM),
    ("crc_err_cnt", c_ulonglong * HCCS_MAX_PCS_NUM), ("retry_cnt", c_ulonglong * HCCS_MAX_PCS_NUM),
    ("reserved", c_ulonglong * HCCS_RES_PCS_NUM)])
dcmi_hccs_bandwidth_info = _struct("dcmi_hccs_bandwidth_info", [
    ("profiling_time", c_int), ("total_txbw", c_double), ("total_rxbw", c_double),
    ("tx_bandwidth", c_double * HCCS_MAX_PCS_NUM), ("rx_bandwidth", c_double * HCCS_MAX_PCS_NUM)])
# dcmi_get_device_info(HCCS, 0 status / 1 lane info): the driver header's structs as
# shared/reference/interconnect-and-compute.md 1.4 describes them (12 and 132 bytes)
dcmi_hccs_statues = _struct("dcmi_hccs_statues", [  # sic
    ("pcs_status", c_uint), ("hdlc_status", c_uint), ("reserve", c_ubyte * 4)])
dcmi_hccs_lane_info = _struct("dcmi_hccs_lane_info", [
    ("hccs_port_pcs_bitmap", c_uint), ("pcs_lane_bitmap", c_uint * HCCS_MAX_PCS_NUM),
    ("reserve", c_uint * HCCS_MAX_PCS_NUM)])
HCCS_SUB_STATUS, HCCS_SUB_LANE_INFO, HCCS_SUB_STATISTIC, HCCS_SUB_STATISTIC_U64 = 0, 1, 3, 5
SIO_SUB_CRC_ERR_STATISTICS = 0
HDLC_STATUS_OK = 0x3
dcmi_sio_crc_err_statistic_info = _struct("dcmi_sio_crc_err_statistic_info", [
    ("tx_error_count", c_ushort), ("rx_error_count", c_ushort), ("reserved", c_ubyte * 8)])
dcmi_elabel_info = _struct("dcmi_elabel_info", [
    (name, c_char * MAX_LENGTH) for name in (
        "product_name", "model", "manufacturer", "manufacturer_date", "serial_number")])
dcmi_hccsping_mesh_operate = _struct("dcmi_hccsping_mesh_operate", [
    ("dst_addr_list", c_char * IP_ADDR_LIST_LEN), ("pkt_size", c_int), ("pkt_send_num", c_int),
    ("pkt_interval", c_int), ("timeout", c_int), ("task_interval", c_int), ("task_id", c_int)])
dcmi_hccsping_mesh_info = _struct("dcmi_hccsping_mesh_info", [
    ("dst_addr", (c_char * ADDR_MAX_LEN) * HCCS_PING_MESH_MAX_NUM),
    ("suc_pkt_num", c_uint * HCCS_PING_MESH_MAX_NUM), ("fail_pkt_num", c_uint * HCCS_PING_MESH_MAX_NUM),
    ("max_time", c_long * HCCS_PING_MESH_MAX_NUM), ("min_time", c_long * HCCS_PING_MESH_MAX_NUM),
    ("avg_time", c_long * HCCS_PING_MESH_MAX_NUM), ("tp95_time", c_long * HCCS_PING_MESH_MAX_NUM),
    ("reply_stat_num", c_int * HCCS_PING_MESH_MAX_NUM), ("ping_total_num", c_ulonglong * HCCS_PING_MESH_MAX_NUM),
    ("dest_num", c_int)])
dcmi_multi_utilization_info = _struct("dcmi_multi_utilization_info", [
    ("aic_util", c_uint), ("aiv_util", c_uint), ("aicore_util", c_uint), ("npu_util", c_uint),
    ("reserved", c_uint * DCMI_UTIL_RESERVED_LEN)])
_eid_in4 = _struct("_dcmi_urma_eid_in4", [("reserved", c_ulong), ("prefix", c_uint), ("addr", c_uint)])
_eid_in6 = _struct("_dcmi_urma_eid_in6", [("subnet_prefix", c_ulong), ("interface_id", c_ulong)])
dcmi_urma_eid = _struct("dcmi_urma_eid", [
    ("raw", c_ubyte * DCMI_URMA_EID_SIZE), ("in4", _eid_in4), ("in6", _eid_in6)], ctypes.Union)
dcmi_urma_eid_info = _struct("dcmi_urma_eid_info", [("eid", dcmi_urma_eid), ("eid_index", c_uint)])
dcmi_ub_port_info = _struct("dcmi_ub_port_info", [("udie_id", c_int), ("port_id", c_int)])
PORT_PKT_COUNTERS = (
    "ub_glb_ipv4_pkt_cnt_rx", "ub_glb_ipv6_pkt_cnt_rx", "unic_ipv4_pkt_cnt_rx", "unic_ipv6_pkt_cnt_rx",
    "ub_clan_pkt_cnt_rx", "ub_umoc_ctph_cnt_rx", "ub_umoc_ntph_cnt_rx", "ub_mem_pkt_cnt_rx", "unknown_pkt_cnt_rx",
    "drop_ind_cnt_rx", "err_ind_cnt_rx", "to_host_pkt_cnt_rx", "to_imp_pkt_cnt_rx", "to_mar_pkt_cnt_rx",
    "to_link_pkt_cnt_rx", "to_noc_pkt_cnt_rx", "route_err_cnt_rx", "out_err_cnt_rx", "length_err_cnt_rx",
    "rx_busi_flit_num", "rx_send_ack_flit", "ub_glb_ipv4_pkt_cnt_tx", "ub_glb_ipv6_pkt_cnt_tx",
    "unic_ipv4_pkt_cnt_tx", "unic_ipv6_pkt_cnt_tx", "ub_clan_pkt_cnt_tx", "ub_umoc_ctph_cnt_tx",
    "ub_umoc_ntph_cnt_tx", "ub_mem_pkt_cnt_tx", "unknown_pkt_cnt_tx", "drop_ind_cnt_tx", "err_ind_cnt_tx",
    "lpbk_ind_cnt_tx", "out_err_cnt_tx", "length_err_cnt_tx", "tx_busi_flit_num", "tx_recv_ack_flit",
    "retry_req_sum", "retry_ack_sum", "crc_error_sum", "core_mib_rxpausepkts", "core_mib_txpausepkts",
    "core_mib_rxpfcpkts", "core_mib_txpfcpkts", "core_mib_rxbadpkts", "core_mib_txbadpkts",
    "core_mib_rxbadoctets", "core_mib_txbadoctets")
dcmi_port_pkt_stats_info = _struct("dcmi_port_pkt_stats_info", [("port_mode", c_int)] + [
    (name, c_ulonglong) for name in PORT_PKT_COUNTERS] + [("reserved", c_ulonglong * 16)])
# dcmiv2_get_ub_port_link_status (the 950): the driver header's struct as shared/reference/interconnect-and-compute.md
# 1.4 describes it (148 bytes): the chip's link state, then one state per UB port (both enums)
UB_PORT_NUM = 36
dcmi_ub_port_link_status = _struct("dcmi_ub_port_link_status", [
    ("ub_link_status", c_enum), ("ub_port_status", c_enum * UB_PORT_NUM)])
# dcmiv2_get_ub_realtime_bandwidth_info's answer: MB/s each way
dcmi_ub_bandwidth_info = _struct("dcmi_ub_bandwidth_info", [
    ("tx_bandwidth", c_uint), ("rx_bandwidth", c_uint), ("reserved", c_uint * 2)])
dcmi_memory_info_stru = _struct("dcmi_memory_info_stru", [
    ("memory_size", c_ulonglong), ("freq", c_uint), ("utiliza", c_uint)])

# Every struct and union the header declares, by its C name ("union dcmi_urma_eid" is its typedef's union):
# the layout test walks this.
STRUCTS = {name: value for name, value in dict(globals()).items()
           if name.startswith("dcmi_") and isinstance(value, type)
           and issubclass(value, (ctypes.Structure, ctypes.Union))}
UNIONS = frozenset(("dcmi_urma_eid",))
