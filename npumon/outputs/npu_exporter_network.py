"""npu-exporter's network, RoCE and optical families (its `network`, `roce` and `optical` groups), rendered from
each chip's network object (sources/hccn) for `exporter.npu_exporter_compat`.

Names, HELP texts (verbatim), units and encodings: shared/reference/npu-exporter/COMPAT.md section 5 and
shared/reference/hccn/FORMATS.md section 2: link status 1 UP / 0 other / -1 when hccn_tool failed; network
status 1 for Success or Init (npu-exporter asks DCMI for it; here the same state comes from -net_health);
bandwidth in MB/s and link speed as hccn_tool prints it (Mb/s); a -stat counter the answer lacks is 0, as
npu-exporter's map lookup gives; optical values as printed (mV, C, mW), absent where NA. Like npu-exporter,
none of these exist on chips without ports (310 family).
"""

from typing import Any, Dict, Optional, Tuple

from .families import Families, MetricSpec, RowsMemo
from ..sources.hccn.parse import HEALTHY_NET_STATES, canonical_net_health

MB = 1000 * 1000

# npu-exporter family -> the -stat key it reads (collector_for_roce.go:58-86, hccn_tool.go:196-222)
STAT_FAMILIES: Tuple[Tuple[str, str, str], ...] = (
    ("npu_chip_mac_rx_pause_num", "mac_rx_mac_pause_num", "npu interface receive mac-rx-pause-num"),
    ("npu_chip_mac_tx_pause_num", "mac_tx_mac_pause_num", "npu interface receive mac-tx-pause-num"),
    ("npu_chip_mac_rx_pfc_pkt_num", "mac_rx_pfc_pkt_num", "npu interface receive mac-rx-pfc-pkt-num"),
    ("npu_chip_mac_tx_pfc_pkt_num", "mac_tx_pfc_pkt_num", "npu interface receive mac-tx-pfc-pkt-num"),
    ("npu_chip_mac_rx_bad_pkt_num", "mac_rx_bad_pkt_num", "npu interface receive mac-rx-bad-pkt-num"),
    ("npu_chip_mac_tx_bad_pkt_num", "mac_tx_bad_pkt_num", "npu interface receive mac-tx-bad-pkt-num"),
    ("npu_chip_mac_tx_bad_oct_num", "mac_tx_bad_oct_num", "npu interface receive mac-tx-bad-oct-num"),
    ("npu_chip_mac_rx_bad_oct_num", "mac_rx_bad_oct_num", "npu interface receive mac-rx-bad-oct-num"),
    ("npu_chip_info_rx_fcs_num", "mac_rx_fcs_err_pkt_num", "the npu network fcs receive number"),
    ("npu_chip_info_rx_ecn_num", "roce_ecn_db_num", "the npu network ecn receive number"),
    ("npu_chip_roce_rx_all_pkt_num", "roce_rx_all_pkt_num", "npu interface receive roce-rx-all-pkt-num"),
    ("npu_chip_roce_tx_all_pkt_num", "roce_tx_all_pkt_num", "npu interface receive roce-tx-all-pkt-num"),
    ("npu_chip_roce_rx_err_pkt_num", "roce_rx_err_pkt_num", "npu interface receive roce-rx-err-pkt-num"),
    ("npu_chip_roce_tx_err_pkt_num", "roce_tx_err_pkt_num", "npu interface receive roce-tx-err-pkt-num"),
    ("npu_chip_roce_rx_cnp_pkt_num", "roce_rx_cnp_pkt_num", "npu interface receive roce-rx-cnp-pkt-num"),
    ("npu_chip_roce_tx_cnp_pkt_num", "roce_tx_cnp_pkt_num", "npu interface receive roce-tx-cnp-pkt-num"),
    ("npu_chip_roce_new_pkt_rty_num", "roce_new_pkt_rty_num", "npu interface receive roce-new-pkt-rty-num"),
    ("npu_chip_roce_out_of_order_num", "roce_out_of_order_num", "the npu interface receive roce-out-of-order-num"),
    ("npu_chip_roce_qp_status_err_num", "roce_qp_status_err_num", "the npu interface receive roce-qp-status-err-num"),
    ("npu_chip_roce_unexpected_ack_num", "roce_unexpected_ack_num",
     "the npu interface receive roce-unexpected-ack-num"),
    ("npu_chip_roce_verification_err_num", "roce_verification_err_num",
     "the npu interface receive roce-verification-err-num"),
)
LANES = 4  # npu-exporter reads Tx_Power0..3 / Rx_Power0..3 only


def network_metrics(labels: Tuple[str, ...]) -> Tuple[MetricSpec, ...]:
    """Every family of these groups, with npu-exporter's chip label set `labels`."""
    specs = [
        MetricSpec("npu_chip_info_network_status", labels, "the npu network health status"),
        MetricSpec("npu_chip_info_link_status", labels, "the npu link status"),
        MetricSpec("npu_chip_info_bandwidth_tx", labels, "the npu interface transport speed, unit is 'MB/s'"),
        MetricSpec("npu_chip_info_bandwidth_rx", labels, "the npu interface receive speed, unit is 'MB/s'"),
        MetricSpec("npu_chip_link_speed", labels, "the npu interface receive link speed, unit is 'Mb/s'"),
        MetricSpec("npu_chip_link_up_num", labels, "the npu interface receive link-up num"),
    ]
    specs += [MetricSpec(name, labels, help_text) for name, _, help_text in STAT_FAMILIES]
    specs += [
        MetricSpec("npu_chip_optical_state", labels, "the npu interface receive optical-state"),
        MetricSpec("npu_chip_optical_vcc", labels, "the npu interface receive optical-vcc"),
        MetricSpec("npu_chip_optical_temp", labels, "the npu interface receive optical-temperature"),
    ]
    specs += [MetricSpec("npu_chip_optical_{}_power_{}".format(direction, lane), labels,
                         "npu interface receive optical-{}-power-{}".format(direction, lane))
              for direction in ("tx", "rx") for lane in range(LANES)]
    return tuple(specs)


def _per_second_mb(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value / MB, 2)


_ROWS = RowsMemo()  # a chip's rows, while its network object is the same


def render_network(out: Families, network: Optional[Dict[str, Any]], labels: tuple) -> None:
    """One chip's samples; nothing for a chip without a port (network None)."""
    if network:
        _ROWS.add(out, labels, network, lambda part: _render_network(part, network, labels))


def _render_network(out: Families, network: Dict[str, Any], labels: tuple) -> None:
    printed = network.get("net_health")
    if printed is not None:
        out.add("npu_chip_info_network_status", int(canonical_net_health(printed) in HEALTHY_NET_STATES), labels)
    status = network.get("link_status")
    out.add("npu_chip_info_link_status", -1 if status is None else int(status == "UP"), labels)
    out.add("npu_chip_info_bandwidth_tx", _per_second_mb(network.get("bandwidth_tx_bytes_per_second")), labels)
    out.add("npu_chip_info_bandwidth_rx", _per_second_mb(network.get("bandwidth_rx_bytes_per_second")), labels)
    out.add("npu_chip_link_speed", network.get("speed_mbps"), labels)
    out.add("npu_chip_link_up_num", network.get("link_up_count"), labels)
    counters = network.get("counters") or {}
    if counters:  # -stat answered: what it left out is 0, as in npu-exporter
        for name, key, _ in STAT_FAMILIES:
            out.add(name, counters.get(key, 0), labels)
    present = network.get("optical_present")
    if present is not None:
        out.add("npu_chip_optical_state", int(present), labels)
    vcc = network.get("optical_vcc_volts")
    out.add("npu_chip_optical_vcc", None if vcc is None else round(vcc * 1000.0, 2), labels)
    out.add("npu_chip_optical_temp", network.get("optical_temperature_celsius"), labels)
    for direction in ("tx", "rx"):
        lanes = network.get(direction + "_power_mw") or []
        for lane in range(min(LANES, len(lanes))):
            out.add("npu_chip_optical_{}_power_{}".format(direction, lane), lanes[lane], labels)
