"""npu-exporter's HCCS and SIO families (collector_for_hccs.go, collector_for_sio.go; COMPAT.md section 5).

npu-exporter serves them on 910B and A3 chips only (SIO on A3 and A5): per link N the statistic counters
`npu_chip_info_hccs_statistic_info_{tx,rx,crc_err}_cnt_N` and the bandwidth `npu_chip_info_hccs_bandwidth_info_
{tx,rx}_N` (GB/s), with N the DCMI array index: 1-7 on 910B, the A3 900 SuperPoD and 800I A3, 2-7 on the 9000
A3 SuperPoD, which is the link number npumon keeps (sources/npusmi/links.py). Totals and the profiling window
(ms) come with the bandwidth. HELP texts are npu-exporter's, link number included.
"""

from typing import Sequence, Tuple

from ..model import ChipSample
from .families import Families, MetricSpec, RowsMemo

HCCS_LINK_NUMBERS = range(1, 8)
STATISTIC = "npu_chip_info_hccs_statistic_info_"
BANDWIDTH = "npu_chip_info_hccs_bandwidth_info_"
# the profiling window npumon asks hccs-bw for (sources/npusmi/source.py HCCS_BW_PROFILING_MS; npu-exporter's
# -hccsBWProfilingTime default)
PROFILING_MS = 200


def link_metrics(labels: Sequence[str]) -> Tuple[MetricSpec, ...]:
    specs = []
    for number in HCCS_LINK_NUMBERS:
        specs += [
            MetricSpec("{}tx_cnt_{}".format(STATISTIC, number), labels,
                       "transmitted message count for hccs {}".format(number)),
            MetricSpec("{}rx_cnt_{}".format(STATISTIC, number), labels,
                       "received message count for hccs {}".format(number)),
            MetricSpec("{}crc_err_cnt_{}".format(STATISTIC, number), labels,
                       "crc error count for hccs {}".format(number)),
            MetricSpec("{}tx_{}".format(BANDWIDTH, number), labels,
                       "single-link transmission data bandwidth for hccs {}".format(number)),
            MetricSpec("{}rx_{}".format(BANDWIDTH, number), labels,
                       "single-link receive data bandwidth for hccs {}".format(number)),
        ]
    return tuple(specs) + (
        MetricSpec(BANDWIDTH + "profiling_time", labels, "sampling interval for hccs bandwidth"),
        MetricSpec(BANDWIDTH + "total_tx", labels, "total sent data bandwidth"),
        MetricSpec(BANDWIDTH + "total_rx", labels, "total received data bandwidth"),
        MetricSpec("npu_chip_info_sio_crc_tx_err_cnt", labels, "sio transmitted error count between die"),
        MetricSpec("npu_chip_info_sio_crc_rx_err_cnt", labels, "sio received error count between die"),
    )


_ROWS = RowsMemo()  # a chip's rows, while its links read the same


def render_links(out: Families, chip: ChipSample, labels: tuple) -> None:
    """The chip's link series; nothing where npumon read no links (products without them)."""
    _ROWS.add(out, labels, (chip.hccs, chip.hccs_bandwidth, chip.sio), lambda part: _render_links(part, chip, labels))


def _render_links(out: Families, chip: ChipSample, labels: tuple) -> None:
    for link in (chip.hccs or {}).get("links") or []:
        if link["link"] not in HCCS_LINK_NUMBERS:
            continue
        out.add("{}tx_cnt_{}".format(STATISTIC, link["link"]), link.get("tx_packets"), labels)
        out.add("{}rx_cnt_{}".format(STATISTIC, link["link"]), link.get("rx_packets"), labels)
        out.add("{}crc_err_cnt_{}".format(STATISTIC, link["link"]), link.get("crc_errors"), labels)
    bandwidth = chip.hccs_bandwidth
    if bandwidth:
        for link in bandwidth.get("links") or []:
            if link["link"] not in HCCS_LINK_NUMBERS:
                continue
            out.add("{}tx_{}".format(BANDWIDTH, link["link"]), link.get("tx_gbps"), labels)
            out.add("{}rx_{}".format(BANDWIDTH, link["link"]), link.get("rx_gbps"), labels)
        out.add(BANDWIDTH + "profiling_time", PROFILING_MS, labels)
        out.add(BANDWIDTH + "total_tx", bandwidth.get("total_tx_gbps"), labels)
        out.add(BANDWIDTH + "total_rx", bandwidth.get("total_rx_gbps"), labels)
    sio = chip.sio or {}
    out.add("npu_chip_info_sio_crc_tx_err_cnt", sio.get("tx_errors"), labels)
    out.add("npu_chip_info_sio_crc_rx_err_cnt", sio.get("rx_errors"), labels)
