"""Handling levels, repair actions, code families and node/sensor type names, read from actions.yaml.

The levels are the Ascend Device Plugin's (MindCluster faultCode.json keys); their order here is npumon's
judgement of severity, mildest first, used to pick the one level of a chip with several codes.
"""

import functools
import os
from typing import Any, Dict, List, Optional

from ..config import yamlparse

ACTIONS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "actions.yaml")
REPAIR_ACTIONS = ("none", "restart_workload", "reset_npu", "reboot_host", "inspect_hardware", "replace_hardware")


@functools.lru_cache(maxsize=1)
def _data() -> Dict[str, Any]:
    with open(ACTIONS_PATH, encoding="utf-8") as handle:
        data = yamlparse.safe_load(handle.read())
    for name, level in data["levels"].items():
        if level["repair_action"] not in REPAIR_ACTIONS:
            raise ValueError("{}: level {}: unknown repair_action {!r}".format(
                ACTIONS_PATH, name, level["repair_action"]))
    if tuple(data["repair_actions"]) != REPAIR_ACTIONS:
        raise ValueError("{}: repair_actions must list {} in that order".format(ACTIONS_PATH, ", ".join(REPAIR_ACTIONS)))
    return data


def levels() -> List[str]:
    """Every level, mildest first."""
    return list(_data()["levels"])


def level_rank(level: str) -> int:
    """The level's place in the order (an unknown level ranks below every known one)."""
    names = levels()
    return names.index(level) if level in names else -1


def repair_action(level: str) -> Optional[str]:
    entry = _data()["levels"].get(level)
    return None if entry is None else entry["repair_action"]


def repair_rank(action: Optional[str]) -> int:
    """How strong a repair action is (REPAIR_ACTIONS is mildest first); -1 for none known."""
    return REPAIR_ACTIONS.index(action) if action in REPAIR_ACTIONS else -1


def stronger_repair(first: Optional[str], second: Optional[str]) -> Optional[str]:
    return first if repair_rank(first) >= repair_rank(second) else second


def repair_text(action: str) -> Optional[str]:
    """The recommendation for a repair action, `{npu}` and `{chip}` still in it; None for an unknown action."""
    return _data()["repair_actions"].get(action)


def level_action(level: str) -> Optional[str]:
    entry = _data()["levels"].get(level)
    return None if entry is None else entry["action"]


def node_type_name(node_type: int) -> Optional[str]:
    return _data()["node_types"].get(node_type)


def sensor_type_name(sensor_type: int) -> Optional[str]:
    return _data()["sensor_types"].get(sensor_type)


def family(node_type: int, sensor_type: int) -> Optional[str]:
    """The code family of a decoded code (sensor types are matched first); None when no family fits."""
    families = _data()["families"]
    for name, entry in families.items():
        if sensor_type in entry.get("sensor_types", ()):
            return name
    for name, entry in families.items():
        if node_type in entry.get("node_types", ()) or node_type >= entry.get("min_node_type", 1 << 30):
            return name
    return None


def family_action(name: str) -> Optional[str]:
    entry = _data()["families"].get(name)
    return None if entry is None else entry["action"]
