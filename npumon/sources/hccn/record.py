"""A chip's `network` object (check --json, /status, ChipSample.extra["network"]) from the parsed hccn_tool
answers, and the rule facts read off it. Pure functions, no I/O.

Units in the object: as the contract names them (speed_mbps, *_mw) or base units (bytes per second, volts,
celsius). Keys are always there, null where hccn_tool did not answer (or the answer did not print it).
"""

import datetime
from typing import Any, Dict, List, Optional

from ...model import ChipSample, HostSample, Snapshot
from .optical import Optical, lanes_outside
from .parse import HEALTHY_NET_STATES, IpAddress, LinkStat, canonical_net_health

# What each net health state means (tool_ops.c:36-47; DCMI network-health docs), for the finding's hint.
NET_HEALTH_MEANINGS = {
    "Socket fail": "the detection task could not open its socket on the NPU",
    "Receive timeout": "the detect address did not answer in time (packet loss, a down link or switch port)",
    "Unreachable": "the detect address is unreachable (routing, VLAN or the peer is down)",
    "Time exceeded": "the probe's TTL ran out on the way (a routing loop or too many hops)",
    "Fault": "the network detection reports a fault on the link",
    "Thread error": "the detection thread on the NPU failed; the tool's own state is broken",
    "Detect ip set": "the detect IP is being set; health is not known yet",
    "Unknown": "the NPU does not know its network health",
}
MB = 1000 * 1000  # hccn_tool's "MB/sec": the driver counts in 1/100 MB/s; read as decimal megabytes

EMPTY = {
    "phy_id": None, "link_status": None, "link_up_count": None, "link_down_count": None, "link_changes": [],
    "link_checked_at": None, "net_health": None, "speed_mbps": None,
    "bandwidth_tx_bytes_per_second": None, "bandwidth_rx_bytes_per_second": None, "counters": {},
    "optical_present": None, "optical_temperature_celsius": None, "optical_vcc_volts": None,
    "rx_power_mw": [], "tx_power_mw": [], "tx_bias_ma": [], "optical_flags": {}, "optical_thresholds": {},
    "ip_addresses": None, "gateway": None, "gateway_configured": None, "netdetect_address": None,
    # filled in when the object is assembled (source.py): the host's normal port speed and the flap window
    "normal_speed_mbps": None, "flap_window_seconds": None, "link_changes_in_window": None,
    "link_down_seconds": None,
    "not_ready": False,  # hccn_tool found the chip not ready (timed out, or "Get device health status failed!")
}
OPTICAL_FLAGS = ("tx_los", "rx_los", "tx_lol", "rx_lol")


def rfc3339(when: datetime.datetime) -> str:
    """A time hccn_tool printed (the host's local time, no zone) in RFC 3339 with the host's offset."""
    try:
        return when.astimezone().isoformat()
    except (OverflowError, ValueError, OSError):  # a year the platform's clock cannot place
        return when.isoformat()


def link_values(stat: LinkStat) -> Dict[str, Any]:
    return {
        "link_up_count": stat.up_count, "link_down_count": stat.down_count,
        "link_changes": [{"time": rfc3339(change.time), "state": change.state} for change in stat.changes],
        "link_checked_at": None if stat.current_time is None else rfc3339(stat.current_time),
    }


def optical_values(optical: Optical) -> Dict[str, Any]:
    return {
        "optical_present": optical.present, "optical_temperature_celsius": optical.temperature_celsius,
        "optical_vcc_volts": None if optical.vcc_mv is None else optical.vcc_mv / 1000.0,
        "rx_power_mw": list(optical.rx_power_mw), "tx_power_mw": list(optical.tx_power_mw),
        "tx_bias_ma": list(optical.tx_bias_ma),
        "optical_flags": {name: getattr(optical, name) for name in OPTICAL_FLAGS},
        "optical_thresholds": dict(optical.thresholds),
    }


def bandwidth_values(tx_mb: float, rx_mb: float) -> Dict[str, Any]:
    # the tool prints hundredths of a MB/s: whole bytes, without float noise
    return {"bandwidth_tx_bytes_per_second": round(tx_mb * 100) * (MB // 100),
            "bandwidth_rx_bytes_per_second": round(rx_mb * 100) * (MB // 100)}


def ip_values(addresses: Optional[List[IpAddress]]) -> Dict[str, Any]:
    return {"ip_addresses": None if addresses is None else [
        {"address": ip.address, "netmask": ip.netmask} for ip in addresses]}


# -- facts -----------------------------------------------------------------------------------------------

ROCE_ERROR_COUNTERS = ("roce_rx_err_pkt_num", "roce_tx_err_pkt_num", "roce_verification_err_num",
                       "roce_qp_status_err_num", "roce_unexpected_ack_num")
ROCE_RETRY_COUNTERS = ("roce_new_pkt_rty_num", "roce_out_of_order_num")
# all RoCE packets sent and received: flat on a chip whose job hangs (the device plugin's hang detector)
ROCE_PACKET_COUNTERS = ("roce_tx_all_pkt_num", "roce_rx_all_pkt_num")
PAUSE_COUNTERS = ("mac_rx_mac_pause_num", "mac_rx_pfc_pkt_num", "mac_tx_mac_pause_num", "mac_tx_pfc_pkt_num")


# the counters a rule reads for a fault (errors, retries, pauses); the others count traffic, which moves always
JUDGED_COUNTERS = ROCE_ERROR_COUNTERS + ROCE_RETRY_COUNTERS + PAUSE_COUNTERS


def judged_view(name: str, value: Any) -> Any:
    """What of a network field a rule may judge: the fault counters of `-stat`, the whole of any other field.
    A poll whose answers differ only in traffic counters gives the rules nothing new (Outcome.changed)."""
    if name == "counters" and isinstance(value, dict):
        return {counter: value.get(counter) for counter in JUDGED_COUNTERS}
    return value


def _sum(counters: Dict[str, int], names) -> Optional[int]:
    known = [counters[name] for name in names if name in counters]
    return sum(known) if known else None


def _parse_time(text: Optional[str]) -> Optional[datetime.datetime]:
    try:
        return None if text is None else datetime.datetime.fromisoformat(text)
    except ValueError:
        return None


def changes_within(network: Dict[str, Any], window_seconds: float, now: float) -> Optional[int]:
    """Link change records no older than the window: against the tool's own clock ("current time") where it
    printed one, so a host clock in another zone does not matter; else against `now`."""
    if network.get("link_up_count") is None:
        return None
    reference = _parse_time(network.get("link_checked_at"))
    end = reference.timestamp() if reference is not None else now
    count = 0
    for change in network.get("link_changes") or []:
        when = _parse_time(change.get("time"))
        if when is not None and end - when.timestamp() <= window_seconds:
            count += 1
    return count


def down_for(network: Dict[str, Any], now: float) -> Optional[float]:
    """Seconds since the link went down, from its newest change record (against the tool's clock, as
    changes_within does); 0 while it is up, None where hccn_tool gave no state or no record of the change."""
    status = network.get("link_status")
    if status != "DOWN":
        return None if status is None else 0.0
    reference = _parse_time(network.get("link_checked_at"))
    end = reference.timestamp() if reference is not None else now
    for change in network.get("link_changes") or []:  # newest first
        when = _parse_time(change.get("time"))
        if when is not None and change.get("state") == "DOWN":
            return max(0.0, end - when.timestamp())
        if when is not None:
            return None  # the newest record says UP: when it went down again is unknown
    return None


def optical_problems(network: Dict[str, Any]) -> List[str]:
    """What of the module lies outside its own thresholds, e.g. "RX power lane 1 0.0854 mW below 0.1445 mW"."""
    thresholds = network.get("optical_thresholds") or {}
    problems = []
    for name, key, unit in (("RX power", "rx_power", "mW"), ("TX power", "tx_power", "mW")):
        values = network.get(key + "_mw") or []
        low, high = thresholds.get(key + "_low_mw"), thresholds.get(key + "_high_mw")
        for lane in lanes_outside(values, low, high):
            value = values[lane]
            below = low is not None and value < low
            problems.append("{} lane {} {:.4f} {} {} {:.4f} {}".format(
                name, lane, value, unit, "below" if below else "above", low if below else high, unit))
    temperature = network.get("optical_temperature_celsius")
    low, high = thresholds.get("temp_low_celsius"), thresholds.get("temp_high_celsius")
    if temperature is not None and lanes_outside([temperature], low, high):
        below = low is not None and temperature < low
        problems.append("temperature {:.0f} C {} {:.0f} C".format(
            temperature, "below" if below else "above", low if below else high))
    return problems


def chip_facts(chip: ChipSample, host: HostSample) -> Dict[str, Any]:
    network = chip.extra.get("network")
    facts: Dict[str, Any] = dict.fromkeys((
        "network_link_status", "network_link_up", "network_link_changes_in_window", "network_flap_window_minutes",
        "network_net_health", "network_net_health_ok", "network_net_health_meaning", "network_speed_mbps",
        "network_normal_speed_mbps", "network_speed_below_normal", "network_roce_error_packets",
        "network_roce_packets", "network_roce_retransmissions", "network_pause_frames", "network_optical_out_of_range",
        "network_optical_problem_text", "network_ip_configured", "network_gateway_configured",
        "network_phy_id", "network_link_down_seconds", "network_link_down_minutes", "network_not_ready"))
    if not network:
        return facts
    status = network.get("link_status")
    printed = network.get("net_health")
    health = canonical_net_health(printed)
    speed = network.get("speed_mbps")
    normal = network.get("normal_speed_mbps")
    counters = network.get("counters") or {}
    optical = optical_problems(network)
    window = network.get("flap_window_seconds")
    facts.update({
        "network_not_ready": network.get("not_ready"),
        "network_phy_id": network.get("phy_id"),
        "network_link_status": status,
        "network_link_up": None if status is None else status == "UP",
        "network_link_changes_in_window": network.get("link_changes_in_window"),
        "network_link_down_seconds": network.get("link_down_seconds"),
        "network_link_down_minutes": None if network.get("link_down_seconds") is None
        else network["link_down_seconds"] / 60.0,
        "network_flap_window_minutes": None if not window else window / 60.0,
        "network_net_health": printed,
        "network_net_health_ok": None if printed is None else health in HEALTHY_NET_STATES,
        "network_net_health_meaning": NET_HEALTH_MEANINGS.get(health or "", "a state outside hccn_tool's table"),
        "network_speed_mbps": speed,
        "network_normal_speed_mbps": normal,
        "network_speed_below_normal": None if speed is None or not normal or status != "UP" else speed < normal,
        "network_roce_error_packets": _sum(counters, ROCE_ERROR_COUNTERS),
        "network_roce_packets": _sum(counters, ROCE_PACKET_COUNTERS),
        "network_roce_retransmissions": _sum(counters, ROCE_RETRY_COUNTERS),
        "network_pause_frames": _sum(counters, PAUSE_COUNTERS),
        "network_optical_out_of_range": None if not network.get("optical_thresholds") else bool(optical),
        "network_optical_problem_text": "; ".join(optical) or "none",
        "network_ip_configured": None if network.get("ip_addresses") is None else bool(network["ip_addresses"]),
        "network_gateway_configured": network.get("gateway_configured"),
    })
    return facts


def host_facts(snapshot: Snapshot) -> Dict[str, Any]:
    networks = [chip.extra.get("network") for chip in snapshot.chips if chip.extra.get("network")]
    return {
        "network_chip_count": len(networks),
        "network_ip_chip_count": sum(1 for network in networks if network.get("ip_addresses")),
        "network_gateway_chip_count": sum(1 for network in networks if network.get("gateway_configured")),
        "network_link_down_count": sum(1 for network in networks if network.get("link_status") == "DOWN"),
    }
