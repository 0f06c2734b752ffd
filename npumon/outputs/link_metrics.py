"""npumon's own families of a chip's interconnect links (ChipSample.hccs, .hccs_bandwidth, .sio, .ub), in base units.

The counters run since the driver loaded and are served as gauges, like the ECC counts (npu-smi prints them, it
does not promise they never reset). A chip without links gives no sample.
"""

from typing import Optional

from ..model import ChipSample
from .families import Families, MetricSpec, RowsMemo

CHIP = ("npu", "chip")
LINK = CHIP + ("link",)
PORT = CHIP + ("udie", "port")
GIGA = 1e9  # npu-smi's Gb/s and GB/s are decimal

LINK_METRICS = (
    MetricSpec("npumon_hccs_healthy", CHIP, "1 if the chip's HCCS health is OK (PCS and HDLC normal), 0 if NOK."),
    MetricSpec("npumon_hccs_first_error_link", CHIP,
               "The first faulty HCCS link (PCS) of the chip; no sample while the health is OK."),
    MetricSpec("npumon_hccs_link_lanes", LINK, "Lanes the HCCS link uses (lane mode: 4 is the full width)."),
    MetricSpec("npumon_hccs_link_speed_bytes_per_second", LINK, "HCCS link speed: lanes x 56 Gb/s, in bytes."),
    MetricSpec("npumon_hccs_link_packets", LINK + ("direction",),
               "HCCS packets (flits, 20 bytes) sent (tx) or received (rx) on the link since the driver loaded."),
    MetricSpec("npumon_hccs_link_retries", LINK, "HCCS retransmissions on the link since the driver loaded."),
    MetricSpec("npumon_hccs_link_crc_errors", LINK, "HCCS CRC errors on the link since the driver loaded."),
    MetricSpec("npumon_hccs_link_bandwidth_bytes_per_second", LINK + ("direction",),
               "HCCS traffic on the link over the last 200 ms profiling window (npu-smi -t hccs-bw)."),
    MetricSpec("npumon_sio_crc_errors", CHIP + ("direction",),
               "CRC errors on the A3's die-to-die SIO link, sent (tx) or received (rx), since the driver loaded."),
    MetricSpec("npumon_ub_link_state", CHIP + ("state",),
               "1 for the state of the 950 chip's UB links (linked, partial, no_link, not_needed: links not wanted)."),
    MetricSpec("npumon_ub_port_linked", PORT,
               "1 if the 950's UB port is linked (on all or part of its lanes), 0 if not."),
    MetricSpec("npumon_ub_port_full_width", PORT,
               "1 if the linked UB port uses all its lanes, 0 if only part (PARTIAL_LANE); no sample while unlinked."),
    MetricSpec("npumon_ub_port_crc_errors", PORT, "CRC errors on the UB port since the driver loaded."),
    MetricSpec("npumon_ub_port_retries", PORT + ("kind",),
               "Retransmissions on the UB port since the driver loaded: requested (request) or answered (ack)."),
    MetricSpec("npumon_ub_port_flits", PORT + ("direction",),
               "Service-packet flits sent (tx) or received (rx) on the UB port since the driver loaded."),
    MetricSpec("npumon_ub_port_bandwidth_bytes_per_second", PORT + ("direction",),
               "UB port traffic over the last 100 ms profiling window (DCMI, MB/s as decimal megabytes)."),
)
MEGA = 1e6
UB_LINK_STATES = ("linked", "partial", "no_link", "not_needed")


def _scaled(value: Optional[float]) -> Optional[float]:
    return None if value is None else value * GIGA


_ROWS = RowsMemo()  # a chip's rows, while its links read the same


def add_links(out: Families, chip: ChipSample) -> None:
    inputs = (chip.hccs, chip.hccs_bandwidth, chip.sio, chip.ub, chip.ub_bandwidth)
    _ROWS.add(out, (chip.npu, chip.chip), inputs, lambda part: _add_links(part, chip))


def _add_links(out: Families, chip: ChipSample) -> None:
    ids = (chip.npu, chip.chip)
    hccs = chip.hccs or {}
    if hccs.get("health") is not None:
        out.add("npumon_hccs_healthy", 1 if hccs["health"] == "OK" else 0, ids)
    out.add("npumon_hccs_first_error_link", hccs.get("first_error_lane"), ids)
    for link in hccs.get("links") or []:
        labels = ids + (link["link"],)
        out.add("npumon_hccs_link_lanes", link.get("lane_mode"), labels)
        speed = _scaled(link.get("speed_gbps"))
        out.add("npumon_hccs_link_speed_bytes_per_second", None if speed is None else speed / 8, labels)
        out.add("npumon_hccs_link_packets", link.get("tx_packets"), labels + ("tx",))
        out.add("npumon_hccs_link_packets", link.get("rx_packets"), labels + ("rx",))
        out.add("npumon_hccs_link_retries", link.get("retries"), labels)
        out.add("npumon_hccs_link_crc_errors", link.get("crc_errors"), labels)
    for link in (chip.hccs_bandwidth or {}).get("links") or []:
        labels = ids + (link["link"],)
        out.add("npumon_hccs_link_bandwidth_bytes_per_second", _scaled(link.get("tx_gbps")), labels + ("tx",))
        out.add("npumon_hccs_link_bandwidth_bytes_per_second", _scaled(link.get("rx_gbps")), labels + ("rx",))
    sio = chip.sio or {}
    out.add("npumon_sio_crc_errors", sio.get("tx_errors"), ids + ("tx",))
    out.add("npumon_sio_crc_errors", sio.get("rx_errors"), ids + ("rx",))
    _add_ub(out, chip, ids)


def _add_ub(out: Families, chip: ChipSample, ids: tuple) -> None:
    ub = chip.ub or {}
    if ub.get("link_status") in UB_LINK_STATES:
        for state in UB_LINK_STATES:
            out.add("npumon_ub_link_state", 1 if state == ub["link_status"] else 0, ids + (state,))
    for port in ub.get("ports") or []:
        labels = ids + (port["udie"], port["port"])
        linked = port["status"] in ("full", "partial_lanes")
        out.add("npumon_ub_port_linked", 1 if linked else 0, labels)
        if linked:
            out.add("npumon_ub_port_full_width", 1 if port["status"] == "full" else 0, labels)
        counters = port.get("counters") or {}
        out.add("npumon_ub_port_crc_errors", counters.get("crc_error_sum"), labels)
        out.add("npumon_ub_port_retries", counters.get("retry_req_sum"), labels + ("request",))
        out.add("npumon_ub_port_retries", counters.get("retry_ack_sum"), labels + ("ack",))
        out.add("npumon_ub_port_flits", counters.get("tx_busi_flit_num"), labels + ("tx",))
        out.add("npumon_ub_port_flits", counters.get("rx_busi_flit_num"), labels + ("rx",))
    for port in (chip.ub_bandwidth or {}).get("ports") or []:
        labels = ids + (port["udie"], port["port"])
        out.add("npumon_ub_port_bandwidth_bytes_per_second", port["tx_mbps"] * MEGA, labels + ("tx",))
        out.add("npumon_ub_port_bandwidth_bytes_per_second", port["rx_mbps"] * MEGA, labels + ("rx",))
