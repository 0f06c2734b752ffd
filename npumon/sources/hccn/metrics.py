"""The hccn source's native families, `npumon_chip_network_*`, in base units, from each chip's network object.

hccn_tool's counters (link up/down counts, -stat) are cumulative but can be cleared (`-stat -c`, a driver
reload), so they are gauges without `_total`, like npumon_chip_ecc_errors; `increase()`/`rate()` in PromQL
treat a drop as a reset either way.
"""

import datetime
from typing import Any, Dict, Optional

from ...model import Snapshot
from ...outputs.families import Families, MetricSpec, RowsMemo
from .parse import canonical_net_health

CHIP = ("npu", "chip")
MW = 0.001  # watts per milliwatt

METRICS = (
    MetricSpec("npumon_chip_network_link_up", CHIP, "1 if the NPU's RoCE port link is UP, 0 if DOWN (hccn_tool -link)."),
    MetricSpec("npumon_chip_network_link_up_events", CHIP,
               "Times the link came up, as hccn_tool -link_stat counts them (cleared by a driver reload)."),
    MetricSpec("npumon_chip_network_link_down_events", CHIP,
               "Times the link went down (-link_stat; absent where the driver does not print the count)."),
    MetricSpec("npumon_chip_network_link_changes_in_window", CHIP,
               "Link change records within network.flap_window_seconds (-link_stat keeps the last 10)."),
    MetricSpec("npumon_chip_network_last_link_change_timestamp_seconds", CHIP,
               "Unix time of the newest link change record."),
    MetricSpec("npumon_chip_network_health", CHIP + ("state",),
               "1 for the port's net health state (hccn_tool -net_health, current spelling), value 1."),
    MetricSpec("npumon_chip_network_speed_bytes_per_second", CHIP,
               "Port link speed (-speed), in bytes per second as the naming guide asks: Mb/s x 125000."),
    MetricSpec("npumon_chip_network_bandwidth_bytes_per_second", CHIP + ("direction",),
               "Port bandwidth over hccn_tool's 1 s sample (-bandwidth; MB read as 10^6 bytes)."),
    MetricSpec("npumon_chip_network_stat", CHIP + ("counter",),
               "A -stat counter of the port as hccn_tool names it (packets or octets since boot or -stat -c)."),
    MetricSpec("npumon_chip_network_optical_present", CHIP, "1 if the port's optical module is present."),
    MetricSpec("npumon_chip_network_optical_temperature_celsius", CHIP, "Optical module temperature."),
    MetricSpec("npumon_chip_network_optical_supply_volts", CHIP, "Optical module supply voltage (Vcc)."),
    MetricSpec("npumon_chip_network_optical_power_watts", CHIP + ("direction", "lane"),
               "Optical power per lane (tx sent, rx received)."),
    MetricSpec("npumon_chip_network_optical_bias_amperes", CHIP + ("lane",), "Optical transmitter bias per lane."),
    MetricSpec("npumon_chip_network_optical_power_threshold_watts", CHIP + ("direction", "bound"),
               "The module's own alarm thresholds for optical power (low, high)."),
    MetricSpec("npumon_chip_network_optical_temperature_threshold_celsius", CHIP + ("bound",),
               "The module's own alarm thresholds for its temperature (low, high)."),
    MetricSpec("npumon_chip_network_optical_flags", CHIP + ("flag",),
               "Loss-of-signal / loss-of-lock flag bytes (tx_los, rx_los, tx_lol, rx_lol), one bit per lane."),
    MetricSpec("npumon_chip_network_ip_configured", CHIP, "1 if the port has an IP address (-ip), else 0."),
    MetricSpec("npumon_chip_network_gateway_configured", CHIP, "1 if the port has a default gateway (-gateway)."),
)


def _flag(value: Optional[bool]) -> Optional[int]:
    return None if value is None else int(bool(value))


def _timestamp(text: Optional[str]) -> Optional[float]:
    try:
        return None if text is None else datetime.datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


_ROWS = RowsMemo()  # a chip's rows, while its network object is the same


def export(snapshot: Snapshot, out: Families) -> None:
    for chip in snapshot.chips:
        network = chip.extra.get("network")
        if network:
            ids = (chip.npu, chip.chip)
            _ROWS.add(out, ids, network, lambda part: _export_chip(part, ids, network))


def _export_chip(out: Families, ids: tuple, network: Dict[str, Any]) -> None:
    status = network.get("link_status")
    out.add("npumon_chip_network_link_up", None if status is None else int(status == "UP"), ids)
    out.add("npumon_chip_network_link_up_events", network.get("link_up_count"), ids)
    out.add("npumon_chip_network_link_down_events", network.get("link_down_count"), ids)
    out.add("npumon_chip_network_link_changes_in_window", network.get("link_changes_in_window"), ids)
    changes = network.get("link_changes") or []
    if changes:
        out.add("npumon_chip_network_last_link_change_timestamp_seconds", _timestamp(changes[0]["time"]), ids)
    printed = network.get("net_health")
    if printed is not None:
        out.add("npumon_chip_network_health", 1, ids + (canonical_net_health(printed) or printed,))
    speed = network.get("speed_mbps")
    out.add("npumon_chip_network_speed_bytes_per_second", None if speed is None else speed * 125000, ids)
    for direction in ("tx", "rx"):
        out.add("npumon_chip_network_bandwidth_bytes_per_second",
                network.get("bandwidth_{}_bytes_per_second".format(direction)), ids + (direction,))
    for name, value in sorted((network.get("counters") or {}).items()):
        out.add("npumon_chip_network_stat", value, ids + (name,))
    out.add("npumon_chip_network_optical_present", _flag(network.get("optical_present")), ids)
    out.add("npumon_chip_network_optical_temperature_celsius", network.get("optical_temperature_celsius"), ids)
    out.add("npumon_chip_network_optical_supply_volts", network.get("optical_vcc_volts"), ids)
    for direction in ("tx", "rx"):
        for lane, value in enumerate(network.get(direction + "_power_mw") or []):
            out.add("npumon_chip_network_optical_power_watts", None if value is None else value * MW,
                    ids + (direction, lane))
    for lane, value in enumerate(network.get("tx_bias_ma") or []):
        out.add("npumon_chip_network_optical_bias_amperes", None if value is None else value * MW, ids + (lane,))
    thresholds = network.get("optical_thresholds") or {}
    for direction in ("tx", "rx"):
        for bound in ("low", "high"):
            value = thresholds.get("{}_power_{}_mw".format(direction, bound))
            out.add("npumon_chip_network_optical_power_threshold_watts", None if value is None else value * MW,
                    ids + (direction, bound))
    for bound in ("low", "high"):
        out.add("npumon_chip_network_optical_temperature_threshold_celsius",
                thresholds.get("temp_{}_celsius".format(bound)), ids + (bound,))
    for flag, value in sorted((network.get("optical_flags") or {}).items()):
        out.add("npumon_chip_network_optical_flags", value, ids + (flag,))
    addresses = network.get("ip_addresses")
    out.add("npumon_chip_network_ip_configured", None if addresses is None else int(bool(addresses)), ids)
    out.add("npumon_chip_network_gateway_configured", _flag(network.get("gateway_configured")), ids)
