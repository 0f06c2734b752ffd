"""The simulated interconnect links of one chip and how npu-smi prints them (`-t hccs`, `-t hccs-bw`, `-t sio-info`).

Pure functions of a chip's ChipValues. Layout from the driver's printer (shared/reference/interconnect-and-compute.md
1.2-1.3): `\\t%-30s : ` lines, per-link lists `[` + `%-20u ` per link + `]`, lane lists 4 digits LSB first then
16 spaces, link speed = lanes x 56, tx/rx bytes = packets x 20; hccs-bw rows `%-35d %-30.6f %-30.6f` under a
`%-30s %-30s %-30s` header, then `total`.

Every link carries the chip's hccs_traffic_gbps each way; the degraded link carries it scaled by its lanes / 4
and holds the CRC errors and retries. Packet counters grow with scenario time at the traffic rate (one packet
is 20 bytes, so GB/s x 5e7 packets a second), from 0 at scenario time 0. The simulated libdcmi.so computes the
same values (fake_dcmi_links.c).
"""

import math
from typing import Any, Dict, List

from .values import ChipValues

HCCS_LINKS = tuple(range(1, 8))  # links 1-7: 910B and the A3 900 SuperPoD (npu-smi prints 7 entries)
FULL_LANES = 4
GBPS_PER_LANE = 56
BYTES_PER_PACKET = 20
PACKETS_PER_GBYTE = 1e9 / BYTES_PER_PACKET
SIO_COUNTER_MAX = 65535  # DCMI's SIO counters are u16


def lane_bits(lanes: int) -> str:
    """Lanes in use as npu-smi prints them, lane 0 first: 4 -> "1111", 2 -> "1100"."""
    lanes = max(0, min(FULL_LANES, lanes))
    return "1" * lanes + "0" * (FULL_LANES - lanes)


def hccs_links(values: ChipValues) -> List[Dict[str, Any]]:
    """The chip's links at its values' time: link, lane_mode, lanes, speed_gbps, tx/rx packets, retries, crc_errors,
    tx_gbps."""
    links = []
    for link in HCCS_LINKS:
        degraded = link == values.hccs_degraded_link
        lanes = values.hccs_degraded_lanes if degraded else FULL_LANES
        gbps = values.hccs_traffic_gbps * lanes / FULL_LANES
        packets = int(math.floor(gbps * PACKETS_PER_GBYTE * max(0.0, values.t)))
        links.append({"link": link, "lane_mode": lanes, "lanes": lane_bits(lanes), "speed_gbps": lanes * GBPS_PER_LANE,
                      "tx_packets": packets, "rx_packets": packets, "tx_gbps": gbps,
                      "retries": values.hccs_retries if degraded else 0,
                      "crc_errors": values.hccs_crc_errors if degraded else 0})
    return links


def _kv(key: str, value: object) -> str:
    return "\t%-30s : %s" % (key, value)


def _row(entries: List[object]) -> str:
    return "[" + "".join("%-20s " % entry for entry in entries) + "]"


def render_hccs(values: ChipValues) -> List[str]:
    links = hccs_links(values)
    healthy = values.hccs_health == "OK"
    # the first faulty link only where the PCS is not in its normal state
    first_error = "NA" if healthy else str(values.hccs_degraded_link or HCCS_LINKS[0])
    return [
        _kv("hccs health status", values.hccs_health),
        _kv("hccs lane mode", _row([link["lane_mode"] for link in links])),
        _kv("hccs link lane list", "[" + "".join(link["lanes"] + " " * 16 for link in links) + "]"),
        _kv("hccs link speed", _row([link["speed_gbps"] for link in links])),
        _kv("hccs tx packets", _row([link["tx_packets"] for link in links])),
        _kv("hccs rx packets", _row([link["rx_packets"] for link in links])),
        _kv("hccs tx bytes", _row([link["tx_packets"] * BYTES_PER_PACKET for link in links])),
        _kv("hccs rx bytes", _row([link["rx_packets"] * BYTES_PER_PACKET for link in links])),
        _kv("hccs retry count", _row([link["retries"] for link in links])),
        _kv("hccs error count", _row([link["crc_errors"] for link in links])),
        _kv("hccs first error lane", first_error),
    ]


# The 300I Duo (310P): npu-smi prints only the packet, byte, retry and error lines, for the one HCCS index 0 (DCMI
# statistics only: interconnect-and-compute.md 1.2). That index carries the chip's traffic and its CRC errors and
# retries.
HCCS_310P_INDEX = 0


def hccs_310p_link(values: ChipValues) -> Dict[str, Any]:
    packets = int(math.floor(values.hccs_traffic_gbps * PACKETS_PER_GBYTE * max(0.0, values.t)))
    return {"link": HCCS_310P_INDEX, "tx_packets": packets, "rx_packets": packets, "retries": values.hccs_retries,
            "crc_errors": values.hccs_crc_errors}


def render_hccs_310p(values: ChipValues) -> List[str]:
    link = hccs_310p_link(values)
    return [
        _kv("hccs tx packets", _row([link["tx_packets"]])),
        _kv("hccs rx packets", _row([link["rx_packets"]])),
        _kv("hccs tx bytes", _row([link["tx_packets"] * BYTES_PER_PACKET])),
        _kv("hccs rx bytes", _row([link["rx_packets"] * BYTES_PER_PACKET])),
        _kv("hccs retry count", _row([link["retries"]])),
        _kv("hccs error count", _row([link["crc_errors"]])),
    ]


def render_hccs_bandwidth(values: ChipValues) -> List[str]:
    links = hccs_links(values)
    lines = ["%-30s %-30s %-30s" % ("hccs link", "tx_bandwidth(GB/S)", "rx_bandwidth(GB/S)")]
    lines += ["%-35d %-30.6f %-30.6f" % (link["link"], link["tx_gbps"], link["tx_gbps"]) for link in links]
    total = sum(link["tx_gbps"] for link in links)
    lines.append("%-35s %-30.6f %-30.6f" % ("total", total, total))
    return lines


def render_sio(values: ChipValues) -> List[str]:
    return ["\tTX Error Count : %d" % min(SIO_COUNTER_MAX, values.sio_tx_crc_errors),
            "\tRX Error Count : %d" % min(SIO_COUNTER_MAX, values.sio_rx_crc_errors)]
