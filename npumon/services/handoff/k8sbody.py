"""The Kubernetes objects the sink writes, from a HostVerdict: pure functions, no I/O.

npumon owns two node conditions, NpuOutOfService and NpuDegraded, each True while some chip (or the host) is in
that state, False otherwise. `status.conditions` merges by `type`, so a strategic-merge patch that lists only
these two leaves every other condition alone. `spec.taints` has no merge key: a taint change replaces the whole
list, guarded by the node's resourceVersion (409 on a lost race).
"""

import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ...rules.verdict import DEGRADED, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason
from .config import TaintConfig

OUT_OF_SERVICE_TYPE = "NpuOutOfService"
DEGRADED_TYPE = "NpuDegraded"
CONDITION_TYPES = (OUT_OF_SERVICE_TYPE, DEGRADED_TYPE)
COMPONENT = "npumon"
MAX_MESSAGE = 1024  # an Event's message is cut at 1 kB by the API server's recorders; conditions likewise here
STRATEGIC = "application/strategic-merge-patch+json"


@dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True" | "False"
    reason: str  # CamelCase, machine-readable
    message: str

    def key(self) -> Tuple[str, str, str]:
        return (self.status, self.reason, self.message)


def _describe(reasons: Sequence[Reason]) -> str:
    # No reason: the guard rails hold the state after its finding ended (the healthy time, an acknowledgement,
    # flap damping); a fixed text, not the tracker's countdown, so the condition does not change every pass.
    return ", ".join("{} ({})".format(reason.rule, reason.summary) if reason.summary else reason.rule
                     for reason in reasons) or "no active finding; held by npumon's guard rails (healthy time, " \
                                                "acknowledgement or flap damping)"


def _cut(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."


def _condition(kind: str, state: str, verdict: HostVerdict, label: str) -> Condition:
    chips: List[ChipVerdict] = [chip for chip in verdict.chips if chip.state == state]
    # the host counts with findings of its own; a host state that only sums up its chips adds nothing
    host = verdict.state == state and bool(verdict.reasons)
    if not chips and not host:
        return Condition(kind, "False", "NoNpu" + label, "no NPU is " + label_words(label))
    parts = ["host: " + _describe(verdict.reasons)] if host else []
    parts += ["{}: {}".format(chip.subject, _describe(chip.reasons)) for chip in sorted(chips, key=lambda c: c.subject)]
    reason = ("Host" if host else "Chip") + label
    return Condition(kind, "True", reason, _cut("{} {}: {}".format(
        len(chips), "chip" if len(chips) == 1 else "chips", "; ".join(parts))))


def label_words(label: str) -> str:
    return "out of service" if label == "OutOfService" else "degraded"


def desired_conditions(verdict: HostVerdict) -> Dict[str, Condition]:
    """npumon's conditions for this verdict, by type."""
    return {OUT_OF_SERVICE_TYPE: _condition(OUT_OF_SERVICE_TYPE, OUT_OF_SERVICE, verdict, "OutOfService"),
            DEGRADED_TYPE: _condition(DEGRADED_TYPE, DEGRADED, verdict, "Degraded")}


def rfc3339(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))


def status_patch(conditions: Sequence[Condition], now: float,
                 transitions: Dict[str, float]) -> Dict[str, Any]:
    """The strategic-merge patch of /api/v1/nodes/{name}/status that sets npumon's conditions only."""
    stamp = rfc3339(now)
    return {"status": {"conditions": [
        {"type": condition.type, "status": condition.status, "reason": condition.reason,
         "message": condition.message, "lastHeartbeatTime": stamp,
         "lastTransitionTime": rfc3339(transitions.get(condition.type, now))}
        for condition in conditions]}}


def conditions_on_node(node: Dict[str, Any]) -> Dict[str, Condition]:
    """npumon's conditions as the API server holds them on a Node object."""
    found: Dict[str, Condition] = {}
    for item in (node.get("status") or {}).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") in CONDITION_TYPES:
            found[item["type"]] = Condition(item["type"], str(item.get("status", "")), str(item.get("reason", "")),
                                            str(item.get("message", "")))
    return found


def event_body(node: str, uid: Optional[str], namespace: str, condition: Condition, unix: float,
               serial: str) -> Dict[str, Any]:
    """A core/v1 Event about the node for one condition's transition (kubectl describe node shows it). `serial`
    tells apart the transitions of one millisecond and of two npumon processes (hex, lower case)."""
    stamp = rfc3339(unix)
    return {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "{}.npumon.{:x}.{}".format(node[:200], int(unix * 1000), serial),
                     "namespace": namespace},
        "involvedObject": dict({"apiVersion": "v1", "kind": "Node", "name": node}, **({"uid": uid} if uid else {})),
        "reason": condition.reason,
        "message": condition.message,
        "type": "Warning" if condition.status == "True" else "Normal",
        "source": {"component": COMPONENT, "host": node},
        "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
        "reportingComponent": COMPONENT, "reportingInstance": node[:128],
    }


def has_taint(node: Dict[str, Any], taint: TaintConfig) -> bool:
    return any(isinstance(item, dict) and item.get("key") == taint.key and item.get("effect") == taint.effect
               for item in (node.get("spec") or {}).get("taints") or [])


def taint_patch(node: Dict[str, Any], taint: TaintConfig, present: bool, now: float) -> Dict[str, Any]:
    """The strategic-merge patch of the node that adds (present) or removes npumon's taint, keeping the others,
    guarded by the resourceVersion it was read at."""
    others = [item for item in (node.get("spec") or {}).get("taints") or []
              if not (isinstance(item, dict) and item.get("key") == taint.key and item.get("effect") == taint.effect)]
    if present:
        others.append({"key": taint.key, "value": taint.value, "effect": taint.effect, "timeAdded": rfc3339(now)})
    patch: Dict[str, Any] = {"spec": {"taints": others}}
    version = (node.get("metadata") or {}).get("resourceVersion")
    if version:  # none in a dry run, which reads no node
        patch["metadata"] = {"resourceVersion": version}
    return patch


def tainted_count(node_list: Dict[str, Any], taint: TaintConfig, own: str) -> Tuple[int, int]:
    """(other nodes carrying npumon's taint, all nodes) in a NodeList."""
    items = [item for item in node_list.get("items") or [] if isinstance(item, dict)]
    tainted = sum(1 for item in items if has_taint(item, taint) and (item.get("metadata") or {}).get("name") != own)
    return tainted, len(items)


def breaker_open(tainted: int, total: int, taint: TaintConfig) -> bool:
    """True when more than the allowed share or number of the other nodes already carry the taint: then a
    fleet-wide cause is likelier than this host's, and tainting would only shrink the cluster further."""
    if taint.max_nodes is not None and tainted > taint.max_nodes:
        return True
    return total > 0 and tainted / total > taint.max_share
