"""The `network:` section: where hccn_tool is, its deadline, and how often each network tier polls."""

from dataclasses import dataclass
from typing import List, Tuple

DEFAULT_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"


@dataclass(frozen=True)
class NetworkConfig:
    """The `network:` section of the config file (the NPUs' RoCE ports, read through hccn_tool)."""

    enabled: bool = True
    hccn_tool: str = DEFAULT_HCCN_TOOL
    # Each call's deadline. A chip that is not ready makes hccn_tool wait up to 300 s; Huawei's own log
    # collector gives it 10 s. A chip whose call ran out of time is left alone until not_ready_retry_seconds.
    timeout_seconds: float = 10.0
    not_ready_retry_seconds: float = 300.0
    link_seconds: float = 60.0  # -link_stat, -net_health; -link, -speed when the link moved (npu-exporter: 60 s)
    stat_seconds: float = 60.0  # -stat counters
    bandwidth_seconds: float = 300.0  # -bandwidth: each call samples for 1 s
    optical_seconds: float = 300.0  # -optical: the module's registers over I2C
    config_seconds: float = 600.0  # -ip, -gateway, -netdetect: configuration, hardly changes
    # The link-flapping rule counts the link change records of this window (the tool keeps the last 10).
    flap_window_seconds: float = 600.0
    normal_speed_mbps: int = 0  # the ports' normal speed; 0: the fastest port of the host


TIER_KEYS = ("link_seconds", "stat_seconds", "bandwidth_seconds", "optical_seconds", "config_seconds")


def network_config_problems(section: NetworkConfig, config: object) -> List[Tuple[str, str]]:
    problems: List[Tuple[str, str]] = []
    if not section.hccn_tool.strip():
        problems.append(("network.hccn_tool", "must name the hccn_tool executable, e.g. " + DEFAULT_HCCN_TOOL))
    if section.timeout_seconds <= 0:
        problems.append(("network.timeout_seconds", "must be greater than 0"))
    for key in TIER_KEYS + ("not_ready_retry_seconds", "flap_window_seconds"):
        if getattr(section, key) < 0:
            problems.append(("network." + key, "must be 0 (off) or more"))
    if section.flap_window_seconds == 0:
        problems.append(("network.flap_window_seconds", "must be greater than 0"))
    if section.normal_speed_mbps < 0:
        problems.append(("network.normal_speed_mbps", "must be 0 (the fastest port) or more"))
    return problems
