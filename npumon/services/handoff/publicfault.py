"""MindCluster public faults from npumon's verdicts: which faults should be open at ClusterD, and the messages
that open and close them (docs/handoff.md, "MindCluster"). Pure: no I/O, no clock.

One open fault per chip that is not healthy, and one for the host when the host's own findings say so:

    chip out_of_service, deciding level PreSeparateNPU   -> PreSeparateNPU (no new jobs on the chip)
    chip out_of_service, any other cause                 -> SeparateNPU (isolate the chip, reschedule its job)
    chip degraded                                        -> SubHealthFault (the job's subHealthyStrategy decides)
    host out_of_service (a host-wide cause)              -> SeparateNPU on every chip of the host
    host degraded by a finding of its own (a job fault)  -> NotHandleFault on every chip (shown, nothing done)

A fault's id names its incident: the node, the chip's physical id (or "host"), the level and the time the
verdict entered its state, so the same incident keeps its id and a new one gets a new id. Every message carries
all open faults as `occur` (ClusterD ignores a repeated occur) and the faults that ended as `recover`, so the
last message sent is the whole of what npumon asks of ClusterD.
"""

import json
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ...rules.verdict import DEGRADED, HEALTHY, HOST, OUT_OF_SERVICE, HostVerdict, Reason
from .config import FaultCodes

VERSION = "1.0"
FAULT_TYPE = "NPU"  # every fault names its chips; a host-wide one names them all, as the API doc asks
MAX_FAULTS = 100  # per message (ClusterD's check)
MAX_DEVICES = 32  # device ids per influence entry, physical ids 0..31
MAX_DESCRIPTION = 512
MAX_MESSAGE_BYTES = 512 * 1024  # well under a ConfigMap's 1 MB and gRPC's 4 MiB
MIN_TIME_MS = 1735689600000  # 2025-01-01T00:00:00Z: ClusterD refuses earlier times
_ID_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_LEVEL_WORD = {"NotHandleFault": "nothandle", "SubHealthFault": "subhealth", "PreSeparateNPU": "preseparate",
               "SeparateNPU": "separate"}


@dataclass(frozen=True)
class OpenFault:
    """One fault npumon wants ClusterD to hold, as its `occur` entry (and, once it ends, its `recover`)."""

    fault_id: str
    level: str
    entry: Tuple[Tuple[str, Any], ...]  # the Fault's JSON fields without `assertion`, in order
    subject: str = HOST  # the chip ("npu<N>/chip<C>") or the host it is for

    def as_json(self, assertion: str) -> Dict[str, Any]:
        fields = dict(self.entry)
        fields["assertion"] = assertion
        return fields


def id_part(text: str, limit: int) -> str:
    """`text` in the id alphabet ([A-Za-z0-9._-]), at most `limit` characters."""
    return _ID_CHARS.sub("-", text)[:limit].strip("-") or "x"


def level_of(state: str, reasons: Sequence[Reason], host: bool) -> Optional[str]:
    """The public-fault level of a verdict (the table in the module's docstring); None: nothing to send."""
    if state == OUT_OF_SERVICE:
        if not host and reasons and reasons[0].level == "PreSeparateNPU":
            return "PreSeparateNPU"
        return "SeparateNPU"
    if state == DEGRADED:
        if host:
            return "NotHandleFault" if any(reason.state != HEALTHY for reason in reasons) else None
        return "SubHealthFault"
    return None


def describe(subject: str, state: str, reasons: Sequence[Reason]) -> str:
    """The fault's description: at most 512 characters, no whitespace but spaces."""
    why = "; ".join("{}: {}".format(reason.rule, reason.summary) for reason in reasons[:3]) or "guard rails"
    return " ".join("npumon {} {}: {}".format(subject, state, why).split())[:MAX_DESCRIPTION]


def desired_faults(verdict: HostVerdict, phy_ids: Mapping[str, int], node: str, codes: FaultCodes,
                   previous: Optional[Mapping[str, OpenFault]] = None) -> Tuple[Dict[str, OpenFault], List[str]]:
    """(fault id -> the fault npumon wants open, the chips left out because their physical id is unknown or
    out of ClusterD's range 0..31). `previous`: the faults wanted before; a verdict the guard rails hold (no
    finding of its state is left) keeps the fault open for it, level and all, rather than one rebuilt from the
    findings of the moment."""
    wanted: Dict[str, OpenFault] = {}
    unnamed: List[str] = []
    earlier = {fault.subject: fault for fault in (previous or {}).values()}
    node_part = id_part(node, 64)
    for chip in verdict.chips:
        held = earlier.get(chip.subject)
        if held is not None and chip.state != HEALTHY and not any(r.state == chip.state for r in chip.reasons):
            wanted[held.fault_id] = held
            continue
        level = level_of(chip.state, chip.reasons, host=False)
        if level is None:
            continue
        phy = phy_ids.get(chip.subject)
        if phy is None or not 0 <= phy < MAX_DEVICES:
            unnamed.append(chip.subject)
            continue
        fault = _fault(node, "{}.phy{}".format(node_part, phy), level, chip.since, [phy], codes,
                       describe(chip.subject, chip.state, chip.reasons), chip.subject, chip.reasons)
        wanted[fault.fault_id] = fault
    level = level_of(verdict.state, verdict.reasons, host=True)
    devices = sorted({phy for phy in phy_ids.values() if 0 <= phy < MAX_DEVICES})
    held = earlier.get(HOST)
    if held is not None and verdict.state == OUT_OF_SERVICE and not any(
            r.state == OUT_OF_SERVICE for r in verdict.reasons):
        wanted[held.fault_id] = held
    elif level is not None and devices:
        fault = _fault(node, node_part + ".host", level, verdict.since, devices, codes,
                       describe("host", verdict.state, verdict.reasons), "host", verdict.reasons)
        wanted[fault.fault_id] = fault
    return wanted, unnamed


def _fault(node: str, where: str, level: str, since: float, devices: List[int], codes: FaultCodes,
           description: str, subject: str, reasons: Sequence[Reason]) -> OpenFault:
    began = max(int(since * 1000), MIN_TIME_MS)
    fault_id = "npumon.{}.{}.{}".format(where, _LEVEL_WORD[level], began // 1000)
    location = {"npumonSubject": subject[:128]}
    if reasons:
        location["npumonRule"] = reasons[0].rule[:128]
        location["repairAction"] = reasons[0].repair_action[:128]
    entry = (("faultId", fault_id), ("faultType", FAULT_TYPE), ("faultCode", codes.code(level)),
             ("faultTime", began), ("faultLocation", location),
             ("influence", [{"nodeName": node, "deviceIds": devices}]), ("description", description))
    return OpenFault(fault_id, level, entry, subject)


def changes(wanted: Mapping[str, OpenFault], held: Mapping[str, Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The faults of the next message(s): every held one no longer wanted as `recover`, then every wanted one
    as `occur`, those ClusterD does not hold yet first: a message bounded in size closes what ended and opens
    what began before it repeats what is open."""
    recovers = [dict(entry, assertion="recover") for fault_id, entry in sorted(held.items())
                if fault_id not in wanted]
    fresh = [wanted[fault_id].as_json("occur") for fault_id in sorted(wanted) if fault_id not in held]
    again = [wanted[fault_id].as_json("occur") for fault_id in sorted(wanted) if fault_id in held]
    return recovers + fresh + again


def message(message_id: str, now_ms: int, resource: str, faults: List[Dict[str, Any]]) -> Dict[str, Any]:
    return {"id": message_id, "timestamp": max(now_ms, MIN_TIME_MS), "version": VERSION, "resource": resource,
            "faults": faults}


def first_batch(faults: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The faults of one message: at most MAX_FAULTS, and fewer while the JSON would pass MAX_MESSAGE_BYTES."""
    batch = faults[:MAX_FAULTS]
    while len(batch) > 1 and len(encode({"faults": batch})) > MAX_MESSAGE_BYTES:
        batch = batch[:len(batch) // 2]
    return batch


def encode(body: Dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), sort_keys=False)


def held_faults(text: str) -> Dict[str, Dict[str, Any]]:
    """The faults a message left open (its `occur` entries, by faultId), read back from the ConfigMap; an
    unreadable message leaves none."""
    try:
        body = json.loads(text)
    except ValueError:
        return {}
    faults = body.get("faults") if isinstance(body, dict) else None
    held = {}
    for fault in faults if isinstance(faults, list) else []:
        if isinstance(fault, dict) and fault.get("assertion") == "occur" and isinstance(fault.get("faultId"), str):
            held[fault["faultId"]] = {key: value for key, value in fault.items() if key != "assertion"}
    return held
