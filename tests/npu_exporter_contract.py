"""npu-exporter's output contract, written out from shared/reference/npu-exporter/COMPAT.md (section 2 label
sets, section 5 HELP texts, verbatim from npu-exporter's code) rather than from npumon's module, so that a drift
on either side fails; and the per-product mapping table of docs/npu-exporter.md, read as the tests' expectation."""

import os
import re

from paths import REPO

L1 = ("id", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
LN = ("id", "name", "vdie_id", "pcie_bus_info", "namespace", "pod_name", "container_name")
L2 = L1 + ("process_id", "container_id")

CONTRACT = {  # family: (labels, HELP)
    "npu_exporter_version_info": (("exporterVersion",), "exporter version with value '1'"),
    "node_base_info": (("exporterVersion", "driverVersion"), "the common information of this node"),
    "machine_npu_nums": ((), "Amount of npu installed on the machine."),
    "machine_card_nums": ((), "Amount of card installed on the machine."),
    "machine_healthy_npu_nums": ((), "Amount of healthy npu on the machine."),
    "machine_unhealthy_npu_nums": ((), "Amount of unhealthy npu on the machine."),
    "machine_unknown_npu_nums": (
        (), "Amount of the npus whose health status cannot be obtained via DCMI interface on the machine."),
    "npu_chip_info_name": (LN, "the Ascend npu name with value '1'"),
    "npu_chip_info_serial_number": (L1 + ("serial_number",), "the npu serial number information"),
    "npu_chip_info_health_status": (L1, "the npu health status"),
    "npu_chip_info_error_code": (L1, "the npu error code"),
    "npu_chip_info_temperature": (L1, "the npu temperature"),
    "npu_chip_info_power": (L1, "the npu power"),
    "npu_chip_info_voltage": (L1, "the npu voltage"),
    "npu_chip_info_aicore_current_freq": (L1, "the npu ai core current frequency, unit is 'MHz'"),
    "npu_chip_info_process_info_num": (L1, "the npu process num"),
    "npu_chip_info_process_info": (L2, "the npu process info, unit is 'MB'. if process run on host, "
                                       "container_id and container_name will be empty"),
    "npu_chip_info_utilization": (L1, "the ai core utilization"),
    "npu_chip_info_overall_utilization": (L1, "the overall utilization of npu"),
    "npu_chip_info_vector_utilization": (L1, "the vector utilization"),
    "npu_chip_info_cube_utilization": (L1, "the cube utilization"),
    "npu_chip_info_total_memory": (L1, "the npu total memory"),
    "npu_chip_info_used_memory": (L1, "the npu used memory"),
    "npu_chip_info_hbm_total_memory": (L1, "the npu hbm total memory"),
    "npu_chip_info_hbm_used_memory": (L1, "the npu hbm used memory"),
    "npu_chip_info_hbm_utilization": (L1, "the npu hbm utilization"),
    "npu_chip_info_hbm_temperature": (L1, "the npu hbm temperature"),
    "npu_chip_info_hbm_bandwidth_utilization": (L1, "the npu hbm bandwidth util rate"),
    "npu_chip_info_hbm_ecc_single_bit_error_cnt": (L1, "HBM Single Bit Error Count"),
    "npu_chip_info_hbm_ecc_double_bit_error_cnt": (L1, "HBM Double Bit Error Count"),
    "npu_chip_info_hbm_ecc_total_single_bit_error_cnt": (L1, "HBM Single Bit Aggregate Total Err Cnt"),
    "npu_chip_info_hbm_ecc_total_double_bit_error_cnt": (L1, "HBM Double Bit Aggregate Total Err Cnt"),
    "npu_chip_info_hbm_ecc_single_bit_isolated_pages_cnt": (L1, "HBM Single Bit Isolated Pages Count"),
    "npu_chip_info_hbm_ecc_double_bit_isolated_pages_cnt": (L1, "HBM Double Bit Isolated Pages Count"),
}
CONTRACT.update({"npu_chip_info_error_code_{}".format(n): (L1, "the npu error code") for n in range(1, 10)})
CONTRACT.update({  # the network, RoCE and optical groups (COMPAT.md section 5, hccn_tool)
    "npu_chip_info_network_status": (L1, "the npu network health status"),
    "npu_chip_info_link_status": (L1, "the npu link status"),
    "npu_chip_info_bandwidth_tx": (L1, "the npu interface transport speed, unit is 'MB/s'"),
    "npu_chip_info_bandwidth_rx": (L1, "the npu interface receive speed, unit is 'MB/s'"),
    "npu_chip_link_speed": (L1, "the npu interface receive link speed, unit is 'Mb/s'"),
    "npu_chip_link_up_num": (L1, "the npu interface receive link-up num"),
    "npu_chip_mac_rx_pause_num": (L1, "npu interface receive mac-rx-pause-num"),
    "npu_chip_mac_tx_pause_num": (L1, "npu interface receive mac-tx-pause-num"),
    "npu_chip_mac_rx_pfc_pkt_num": (L1, "npu interface receive mac-rx-pfc-pkt-num"),
    "npu_chip_mac_tx_pfc_pkt_num": (L1, "npu interface receive mac-tx-pfc-pkt-num"),
    "npu_chip_mac_rx_bad_pkt_num": (L1, "npu interface receive mac-rx-bad-pkt-num"),
    "npu_chip_mac_tx_bad_pkt_num": (L1, "npu interface receive mac-tx-bad-pkt-num"),
    "npu_chip_mac_tx_bad_oct_num": (L1, "npu interface receive mac-tx-bad-oct-num"),
    "npu_chip_mac_rx_bad_oct_num": (L1, "npu interface receive mac-rx-bad-oct-num"),
    "npu_chip_info_rx_fcs_num": (L1, "the npu network fcs receive number"),
    "npu_chip_info_rx_ecn_num": (L1, "the npu network ecn receive number"),
    "npu_chip_roce_rx_all_pkt_num": (L1, "npu interface receive roce-rx-all-pkt-num"),
    "npu_chip_roce_tx_all_pkt_num": (L1, "npu interface receive roce-tx-all-pkt-num"),
    "npu_chip_roce_rx_err_pkt_num": (L1, "npu interface receive roce-rx-err-pkt-num"),
    "npu_chip_roce_tx_err_pkt_num": (L1, "npu interface receive roce-tx-err-pkt-num"),
    "npu_chip_roce_rx_cnp_pkt_num": (L1, "npu interface receive roce-rx-cnp-pkt-num"),
    "npu_chip_roce_tx_cnp_pkt_num": (L1, "npu interface receive roce-tx-cnp-pkt-num"),
    "npu_chip_roce_new_pkt_rty_num": (L1, "npu interface receive roce-new-pkt-rty-num"),
    "npu_chip_roce_out_of_order_num": (L1, "the npu interface receive roce-out-of-order-num"),
    "npu_chip_roce_qp_status_err_num": (L1, "the npu interface receive roce-qp-status-err-num"),
    "npu_chip_roce_unexpected_ack_num": (L1, "the npu interface receive roce-unexpected-ack-num"),
    "npu_chip_roce_verification_err_num": (L1, "the npu interface receive roce-verification-err-num"),
    "npu_chip_optical_state": (L1, "the npu interface receive optical-state"),
    "npu_chip_optical_vcc": (L1, "the npu interface receive optical-vcc"),
    "npu_chip_optical_temp": (L1, "the npu interface receive optical-temperature"),
    "npu_chip_optical_tx_power_0": (L1, "npu interface receive optical-tx-power-0"),
    "npu_chip_optical_tx_power_1": (L1, "npu interface receive optical-tx-power-1"),
    "npu_chip_optical_tx_power_2": (L1, "npu interface receive optical-tx-power-2"),
    "npu_chip_optical_tx_power_3": (L1, "npu interface receive optical-tx-power-3"),
    "npu_chip_optical_rx_power_0": (L1, "npu interface receive optical-rx-power-0"),
    "npu_chip_optical_rx_power_1": (L1, "npu interface receive optical-rx-power-1"),
    "npu_chip_optical_rx_power_2": (L1, "npu interface receive optical-rx-power-2"),
    "npu_chip_optical_rx_power_3": (L1, "npu interface receive optical-rx-power-3"),
})

CONTRACT.update({  # the HCCS group, links 1-7 (COMPAT.md section 5; collector_for_hccs.go builds the HELP with the number)
    name.format(n): (L1, help_text.format(n)) for n in range(1, 8) for name, help_text in (
        ("npu_chip_info_hccs_statistic_info_tx_cnt_{}", "transmitted message count for hccs {}"),
        ("npu_chip_info_hccs_statistic_info_rx_cnt_{}", "received message count for hccs {}"),
        ("npu_chip_info_hccs_statistic_info_crc_err_cnt_{}", "crc error count for hccs {}"),
        ("npu_chip_info_hccs_bandwidth_info_tx_{}", "single-link transmission data bandwidth for hccs {}"),
        ("npu_chip_info_hccs_bandwidth_info_rx_{}", "single-link receive data bandwidth for hccs {}"))})
CONTRACT.update({  # the HCCS bandwidth totals and the SIO group
    "npu_chip_info_hccs_bandwidth_info_profiling_time": (L1, "sampling interval for hccs bandwidth"),
    "npu_chip_info_hccs_bandwidth_info_total_tx": (L1, "total sent data bandwidth"),
    "npu_chip_info_hccs_bandwidth_info_total_rx": (L1, "total received data bandwidth"),
    "npu_chip_info_sio_crc_tx_err_cnt": (L1, "sio transmitted error count between die"),
    "npu_chip_info_sio_crc_rx_err_cnt": (L1, "sio received error count between die"),
})

# The 950's UB group (COMPAT.md section 5.1, collector_for_ub.go): the chip's labels plus udie and port, the HELP
# text npu-exporter builds ending in "ub port"; the 40 UB common counters (the UBoE core_mib_* ones are not served)
LUB = L1 + ("udie", "port")
CONTRACT.update({"npu_chip_info_" + name: (LUB, help_text + "ub port") for name, help_text in (
    ("ub_ipv4_pkt_cnt_rx", "number of ipv4 ub packets received by rx on "),
    ("ub_ipv6_pkt_cnt_rx", "number of ipv6 ub packets received by rx on "),
    ("unic_ipv4_pkt_cnt_rx", "number of ipv4 unic packets received by rx on "),
    ("unic_ipv6_pkt_cnt_rx", "number of ipv6 unic packets received by rx on "),
    ("ub_compact_pkt_cnt_rx", "number of cfg6 packets received by rx on "),
    ("ub_umoc_ctph_cnt_rx", "number of cfg7 clan packets received by rx on "),
    ("ub_umoc_ntph_cnt_rx", "number of cfg7 not clan packets received by rx on "),
    ("ub_mem_pkt_cnt_rx", "number of ub mem packets received by rx on "),
    ("unknown_pkt_cnt_rx", "number of unknown packets received by rx on "),
    ("drop_ind_cnt_rx", "number of packet with drop_ind received by rx on "),
    ("err_ind_cnt_rx", "number of err packets received by rx on "),
    ("to_host_pkt_cnt_rx", "number of landed packets after routing on the rx "),
    ("to_imp_pkt_cnt_rx", "number of landed enumeration configuration and management packets after routing on the rx "),
    ("to_mar_pkt_cnt_rx", "number of landed ub memory packets after routing on the rx "),
    ("to_link_pkt_cnt_rx", "number of packets forward from the rx to the tx of the same port after routing "),
    ("to_noc_pkt_cnt_rx", "number of p2p packets received on the rx after routing "),
    ("route_err_cnt_rx", "number of packets with routing lookup errors after processing received on the rx "),
    ("out_err_cnt_rx", "total number of erroneous packets after validation of packets received on the rx "),
    ("length_err_cnt_rx", "number of packets with length errors after validation of packets received on the rx "),
    ("rx_busi_flit_num", "number of flits of service packets received from the mac on the rx "),
    ("rx_send_ack_flit", "cumulative number of acks released to the peer on the rx "),
    ("ub_ipv4_pkt_cnt_tx", "number of ipv4 ub packets sent by tx on "),
    ("ub_ipv6_pkt_cnt_tx", "number of ipv6 ub packets sent by tx on "),
    ("unic_ipv4_pkt_cnt_tx", "number of ipv4 unic packets sent by tx on "),
    ("unic_ipv6_pkt_cnt_tx", "number of ipv6 unic packets sent by tx on "),
    ("ub_compact_pkt_cnt_tx", "number of cfg6 packets sent by tx on "),
    ("ub_umoc_ctph_cnt_tx", "number of cfg7 clan packets sent by tx on "),
    ("ub_umoc_ntph_cnt_tx", "number of cfg7 not clan packets sent by tx on "),
    ("ub_mem_pkt_cnt_tx", "number of ub mem packets sent by tx on "),
    ("unknown_pkt_cnt_tx", "number of unknown packets sent by tx on "),
    ("drop_ind_cnt_tx", "number of packet with drop_ind sent by tx on "),
    ("err_ind_cnt_tx", "number of err packets sent by tx on "),
    ("lpbk_ind_cnt_tx", "number of packets looped back at nl by tx on "),
    ("out_err_cnt_tx", "total number of erroneous packets after validation of packets sent on the tx "),
    ("length_err_cnt_tx", "number of packets with length errors after validation of packets sent on the tx "),
    ("tx_busi_flit_num", "number of flits of service packets sent from the mac on the tx "),
    ("tx_recv_ack_flit", "cumulative number of acks released to the peer on the tx "),
    ("retry_req_sum", "number of retransmission attempts initiated on "),
    ("retry_ack_sum", "number of response retransmissions on "),
    ("crc_error_sum", "number of crc check errors "))})

CONTRACT.update({  # the container group (COMPAT.md sections 2 L5 and 5), from the Kubernetes source's pods
    "npu_container_info": (("npuID",) + L1[1:] + ("containerID", "containerName"),
                           "the container name and deviceID relationship"),
    "container_npu_total_memory": (L1, "npu total memory in container, unit is 'MB'"),
    "container_npu_used_memory": (L1, "the npu used memory in container, unit is 'MB'"),
    "container_npu_utilization": (L1, "npu ai core utilization in container, unit is '%'"),
})

VDIE = re.compile(r"[0-9A-F]{8}(-[0-9A-F]{8}){4}\Z")  # npu-exporter's vdie_id: %08X words joined by "-"


# Documents that carry rows of the per-product table; a later one's row for a family replaces an earlier one's
# (docs/kubernetes.md: the container families, served once the Kubernetes source attaches pods).
MAPPING_TABLE_FILES = (os.path.join("docs", "npu-exporter.md"), os.path.join("docs", "kubernetes.md"))


def mapping_table():
    """The per-product table (docs/npu-exporter.md, and the rows other pages add): {family: {product: cell}}."""
    table = {}
    for name in MAPPING_TABLE_FILES:
        table.update(_mapping_rows(os.path.join(REPO, name)))
    return table


def _mapping_rows(path):
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| family | `atlas-800i-a2`"))
    products = re.findall(r"`([a-z0-9-]+)`", lines[start])
    table = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        for family in re.findall(r"`((?:npu|machine|node|container|vnpu)_[a-z_0-9]+)`", cells[0]):
            table[family] = dict(zip(products, cells[1:1 + len(products)]))
    return table
