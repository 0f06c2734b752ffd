"""npu-exporter's UB-port families of the Ascend 950 (collector_for_ub.go; COMPAT.md section 5.1).

npu-exporter serves them on Ascend910A5 (950) chips only, one series per UB port: `npu_chip_info_<counter>` with
the chip's labels plus `udie` and `port` (its current form; the `_<udie>_<port>` name suffix is the legacy
`-enableLegacyMetrics` form, not served here). The 40 counters of its UB common statistics, cumulative counts as it
serves them (gauges); the 8 `core_mib_*` UBoE counters it serves only on a port hccn_tool marks `is_uboe_port`, which
DCMI's port statistics do not say, so they are left out. HELP texts are npu-exporter's, ending in "ub port". npumon
reads the counters through DCMI only (sources/dcmi/read.py read_ub; npu-smi has no UB query).
"""

from typing import Sequence, Tuple

from ..model import ChipSample
from .families import Families, MetricSpec

PREFIX = "npu_chip_info_"
PORT_LABELS = ("udie", "port")
# counter -> npu-exporter's HELP text before "ub port"
UB_COUNTERS = (
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
    ("crc_error_sum", "number of crc check errors "),
)


def ub_metrics(labels: Sequence[str]) -> Tuple[MetricSpec, ...]:
    return tuple(MetricSpec(PREFIX + name, tuple(labels) + PORT_LABELS, help_text + "ub port")
                 for name, help_text in UB_COUNTERS)


def render_ub(out: Families, chip: ChipSample, labels: tuple, extra: tuple) -> None:
    """The chip's port series (`extra`: the node label, last); nothing where npumon read no UB ports."""
    for port in (chip.ub or {}).get("ports") or []:
        counters = port.get("counters")
        if not counters:
            continue
        series = labels + (port["udie"], port["port"]) + extra
        for name, _ in UB_COUNTERS:
            out.add(PREFIX + name, counters.get(name), series)
