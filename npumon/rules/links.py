"""Rule facts of a chip's interconnect links (ChipSample.hccs, .hccs_bandwidth, .sio, .ub, .ub_bandwidth), whichever
backend read them.

A chip's facts are scalars, so the links are summed or reduced to the one worth naming: the narrowest link, the
slowest link against its siblings, the links with errors. Every fact is None where the chip has no such links.
"""

from typing import Any, Dict, List, Optional, Tuple

from ..model import ChipSample

LINK_FACTS = (
    "hccs_health", "hccs_first_error_lane", "hccs_link_count", "hccs_min_lane_mode", "hccs_narrowest_link",
    "hccs_narrowest_link_speed_gbps", "hccs_lane_modes_text", "hccs_crc_errors", "hccs_retries",
    "hccs_error_links_text", "hccs_slowest_link", "hccs_slowest_link_gbps", "hccs_sibling_median_gbps",
    "hccs_slowest_link_share", "sio_tx_crc_errors", "sio_rx_crc_errors", "sio_crc_errors",
    "ub_link_status", "ub_port_count", "ub_down_port_count", "ub_down_ports_text", "ub_partial_port_count",
    "ub_partial_ports_text", "ub_crc_errors", "ub_retries", "ub_error_ports_text", "ub_slowest_port",
    "ub_slowest_port_mbps", "ub_sibling_median_mbps", "ub_slowest_port_share", "ub_down_port_args",
    "ub_partial_port_args", "ub_error_port_args", "ub_slowest_port_args",
)
TEXT_FACTS = ("hccs_lane_modes_text", "hccs_error_links_text", "ub_down_ports_text", "ub_partial_ports_text",
              "ub_error_ports_text")


def _total(links: List[Dict[str, Any]], field: str) -> Optional[int]:
    known = [link[field] for link in links if link.get(field) is not None]
    return sum(known) if known else None


def _median(values: List[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0


def _hccs_facts(hccs: Dict[str, Any]) -> Dict[str, Any]:
    links = hccs.get("links") or []
    modes = [link for link in links if link.get("lane_mode") is not None]
    narrowest = min(modes, key=lambda link: link["lane_mode"]) if modes else None
    errors = ["link {}: {} CRC errors, {} retries".format(link["link"], link.get("crc_errors") or 0,
                                                          link.get("retries") or 0)
              for link in links if link.get("crc_errors") or link.get("retries")]
    return {
        "hccs_health": hccs.get("health"),
        "hccs_first_error_lane": hccs.get("first_error_lane"),
        "hccs_link_count": len(links),
        "hccs_min_lane_mode": None if narrowest is None else narrowest["lane_mode"],
        "hccs_narrowest_link": None if narrowest is None else narrowest["link"],
        "hccs_narrowest_link_speed_gbps": None if narrowest is None else narrowest.get("speed_gbps"),
        "hccs_lane_modes_text": " ".join("{}:{}".format(link["link"], link["lane_mode"]) for link in modes) or "none",
        "hccs_crc_errors": _total(links, "crc_errors"),
        "hccs_retries": _total(links, "retries"),
        "hccs_error_links_text": "; ".join(errors) or "none",
    }


def _slowest_of_siblings(items: List[Dict[str, Any]], tx: str, rx: str
                         ) -> Optional[Tuple[Dict[str, Any], float, float]]:
    """The item (a link, a port) with the least traffic (tx + rx), its traffic and the median of the others';
    None under three measured items (a median of one sibling says nothing)."""
    measured = [item for item in items if item.get(tx) is not None and item.get(rx) is not None]
    if len(measured) < 3:
        return None
    slowest = min(measured, key=lambda item: item[tx] + item[rx])
    return (slowest, slowest[tx] + slowest[rx],
            _median([item[tx] + item[rx] for item in measured if item is not slowest]))


def _bandwidth_facts(bandwidth: Dict[str, Any]) -> Dict[str, Any]:
    """The link with the least traffic (tx + rx) and the median of its siblings."""
    found = _slowest_of_siblings(bandwidth.get("links") or [], "tx_gbps", "rx_gbps")
    if found is None:
        return {}
    slowest, own, median = found
    return {"hccs_slowest_link": slowest["link"], "hccs_slowest_link_gbps": own,
            "hccs_sibling_median_gbps": median, "hccs_slowest_link_share": own / median if median > 0 else None}


def _port_name(port: Dict[str, Any]) -> str:
    return "{}/{}".format(port["udie"], port["port"])


def _port_args(ports: List[Dict[str, Any]]) -> Optional[str]:
    """hccn_tool's options for the first of `ports` (the hints' commands): "-u 0 -p 5"."""
    return "-u {} -p {}".format(ports[0]["udie"], ports[0]["port"]) if ports else None


def _ub_facts(ub: Dict[str, Any]) -> Dict[str, Any]:
    """The 950's UB ports: the ports not linked, those linked on part of their lanes, and the error counters
    (CRC errors; retransmission requests, retry_req_sum) summed over the ports that report them."""
    ports = ub.get("ports") or []
    down = [port for port in ports if port["status"] == "down"]
    partial = [port for port in ports if port["status"] == "partial_lanes"]
    counted = [port for port in ports if port.get("counters")]
    erroring = [port for port in counted if port["counters"]["crc_error_sum"] or port["counters"]["retry_req_sum"]]
    errors = ["port {}: {} CRC errors, {} retransmission requests".format(
        _port_name(port), port["counters"]["crc_error_sum"], port["counters"]["retry_req_sum"]) for port in erroring]
    return {
        "ub_link_status": ub.get("link_status"),
        "ub_port_count": len(ports),
        "ub_down_port_count": len(down),
        "ub_down_ports_text": ", ".join(map(_port_name, down)) or "none",
        "ub_down_port_args": _port_args(down),
        "ub_partial_port_count": len(partial),
        "ub_partial_ports_text": ", ".join(map(_port_name, partial)) or "none",
        "ub_partial_port_args": _port_args(partial),
        "ub_error_port_args": _port_args(erroring),
        "ub_crc_errors": sum(port["counters"]["crc_error_sum"] for port in counted) if counted else None,
        "ub_retries": sum(port["counters"]["retry_req_sum"] for port in counted) if counted else None,
        "ub_error_ports_text": "; ".join(errors) or "none",
    }


def _ub_bandwidth_facts(bandwidth: Dict[str, Any]) -> Dict[str, Any]:
    """The linked UB port with the least traffic (tx + rx, MB/s) and the median of its siblings."""
    found = _slowest_of_siblings(bandwidth.get("ports") or [], "tx_mbps", "rx_mbps")
    if found is None:
        return {}
    slowest, own, median = found
    return {"ub_slowest_port": _port_name(slowest), "ub_slowest_port_args": _port_args([slowest]),
            "ub_slowest_port_mbps": own, "ub_sibling_median_mbps": median,
            "ub_slowest_port_share": own / median if median > 0 else None}


def link_facts(chip: ChipSample) -> Dict[str, Any]:
    facts: Dict[str, Any] = dict.fromkeys(LINK_FACTS)
    facts.update(dict.fromkeys(TEXT_FACTS, "none"))
    if chip.hccs:
        facts.update(_hccs_facts(chip.hccs))
    if chip.hccs_bandwidth:
        facts.update(_bandwidth_facts(chip.hccs_bandwidth))
    if chip.sio:
        tx, rx = chip.sio.get("tx_errors"), chip.sio.get("rx_errors")
        facts.update({"sio_tx_crc_errors": tx, "sio_rx_crc_errors": rx,
                      "sio_crc_errors": None if tx is None and rx is None else (tx or 0) + (rx or 0)})
    if chip.ub:
        facts.update(_ub_facts(chip.ub))
    if chip.ub_bandwidth:
        facts.update(_ub_bandwidth_facts(chip.ub_bandwidth))
    return facts
