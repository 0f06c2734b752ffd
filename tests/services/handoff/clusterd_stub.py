"""A stand-in for ClusterD's public-fault intake, written from MindCluster's API doc and checker as
cluster-handoff.md 1.2-1.5 records them: every message is checked field by field (a message breaking a rule is
kept in `invalid` and answered 409), the per-sender token bucket answers 410 when empty, and the faults are
kept per node by resource + faultId (occur adds a new key, a repeated occur does nothing, recover removes).
`ClusterdGrpc` serves it as ClusterD's gRPC `SendPublicFault` on a unix socket."""

import re
import threading
from concurrent import futures
from typing import Any, Callable, Dict, List, Tuple

import grpc

from npumon.services.handoff import pubfault_pb2, pubfault_pb2_grpc

ID = re.compile(r"^[A-Za-z0-9_.-]{8,128}$")
NODE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
MIN_MS = 1735689600000  # 2025-01-01T00:00:00Z
FAULT_KEYS = {"faultId", "faultType", "faultCode", "faultTime", "assertion", "faultLocation", "influence",
              "description"}
REQUIRED = FAULT_KEYS - {"faultLocation", "description"}
# what publicCustomization.json lists in docs/handoff.md: npumon as a sender and its four codes
RESOURCES = ("CCAE", "fd-online", "pingmesh", "Netmind", "dpcStorage", "dtfsStorage", "npumon")
LEVEL_CODES = {"000016001": "NotHandleFault", "010016001": "SubHealthFault", "020016002": "PreSeparateNPU",
               "020016001": "SeparateNPU"}


def _millis(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and len(str(value)) == 13 and value >= MIN_MS


def message_problems(message: Any) -> List[str]:
    """Every documented rule the message breaks (empty: ClusterD takes it)."""
    if not isinstance(message, dict):
        return ["not a JSON object"]
    problems = []
    if set(message) != {"id", "timestamp", "version", "resource", "faults"}:
        problems.append("message keys {}".format(sorted(message)))
    if not ID.match(str(message.get("id"))):
        problems.append("id {!r}".format(message.get("id")))
    if not _millis(message.get("timestamp")):
        problems.append("timestamp {!r}".format(message.get("timestamp")))
    if message.get("version") != "1.0":
        problems.append("version {!r}".format(message.get("version")))
    if message.get("resource") not in RESOURCES:
        problems.append("resource {!r}".format(message.get("resource")))
    faults = message.get("faults")
    if not isinstance(faults, list) or not 1 <= len(faults) <= 100:
        return problems + ["faults: 1-100 expected"]
    for fault in faults:
        problems.extend(fault_problems(fault))
    return problems


def fault_problems(fault: Dict[str, Any]) -> List[str]:
    return ["{}: {}".format(fault.get("faultId"), problem) for problem in _fault_problems(fault)]


def _fault_problems(fault: Dict[str, Any]) -> List[str]:
    problems = []
    if not REQUIRED <= set(fault) <= FAULT_KEYS:
        problems.append("keys {}".format(sorted(fault)))
    if not ID.match(str(fault.get("faultId"))):
        problems.append("faultId")
    if fault.get("faultType") not in ("NPU", "Node", "Network", "Storage"):
        problems.append("faultType")
    code = fault.get("faultCode")
    if not isinstance(code, str) or len(code) != 9 or code not in LEVEL_CODES:
        problems.append("faultCode {!r} not in the fault config".format(code))
    if not _millis(fault.get("faultTime")):
        problems.append("faultTime {!r}".format(fault.get("faultTime")))
    if fault.get("assertion") not in ("occur", "recover", "once"):
        problems.append("assertion")
    location = fault.get("faultLocation", {})
    if not isinstance(location, dict) or len(location) > 10 or any(
            not isinstance(k, str) or not isinstance(v, str) or len(k) > 16 or len(v) > 128
            for k, v in location.items()):
        problems.append("faultLocation {!r}".format(location))
    description = fault.get("description", "")
    if not isinstance(description, str) or len(description) > 512 or any(
            c.isspace() and c != " " for c in description):
        problems.append("description")
    influence = fault.get("influence")
    if not isinstance(influence, list) or not 1 <= len(influence) <= 1000:
        return problems + ["influence"]
    for info in influence:
        if not NODE.match(str(info.get("nodeName"))) and not info.get("nodeSN"):
            problems.append("nodeName {!r}".format(info.get("nodeName")))
        ids = info.get("deviceIds")
        if not isinstance(ids, list) or not 1 <= len(ids) <= 32 or len(set(ids)) != len(ids) or any(
                not isinstance(i, int) or not 0 <= i <= 31 for i in ids):
            problems.append("deviceIds {!r}".format(ids))
    return problems


class ClusterD:
    """The public-fault cache and the sender's token bucket (refill 1/s, burst `burst`) on a clock."""

    def __init__(self, clock: Callable[[], float], burst: int = 100):
        self.clock = clock
        self.burst = burst
        self.tokens: Dict[str, Tuple[float, float]] = {}  # resource -> (tokens, at)
        self.faults: Dict[Tuple[str, str], Dict[str, Any]] = {}  # (node, resource + faultId) -> the occur
        self.messages: List[Dict[str, Any]] = []  # taken
        self.invalid: List[str] = []
        self.refused = 0  # 410s
        self.lock = threading.Lock()

    def take(self, message: Dict[str, Any]) -> Tuple[int, str]:
        """ClusterD's answer code and info for one message."""
        with self.lock:
            resource = str(message.get("resource"))
            now = self.clock()
            tokens, at = self.tokens.get(resource, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at))
            if tokens < 1:
                self.tokens[resource] = (tokens, now)
                self.refused += 1
                return 410, "rate limit exceeded"
            self.tokens[resource] = (tokens - 1, now)
            problems = message_problems(message)
            if problems:
                self.invalid.extend(problems)
                return 409, "; ".join(problems)
            self.messages.append(message)
            for fault in message["faults"]:
                for info in fault["influence"]:
                    key = (info["nodeName"], resource + fault["faultId"])
                    if fault["assertion"] == "recover":
                        self.faults.pop(key, None)
                    elif key not in self.faults:  # a repeated occur is a no-op
                        self.faults[key] = fault
            return 0, "ok"

    def open_faults(self, node: str) -> List[Dict[str, Any]]:
        with self.lock:
            return [fault for (name, _), fault in sorted(self.faults.items()) if name == node]


def request_dict(request: Any) -> Dict[str, Any]:
    """A PublicFaultRequest as the JSON ClusterD's checker reads (int64 stays a number, as in Go)."""
    return {"id": request.id, "timestamp": request.timestamp, "version": request.version,
            "resource": request.resource,
            "faults": [{"faultId": f.faultId, "faultType": f.faultType, "faultCode": f.faultCode,
                        "faultTime": f.faultTime, "assertion": f.assertion, "faultLocation": dict(f.faultLocation),
                        "influence": [{"nodeName": i.nodeName, "deviceIds": list(i.deviceIds)} for i in f.influence],
                        "description": f.description} for f in request.faults]}


class ClusterdGrpc:
    """ClusterD's PubFault service on a unix socket, handing each request to a ClusterD."""

    def __init__(self, clusterd: ClusterD, socket_path: str):
        self.clusterd = clusterd
        self.calls = 0
        stand_in = self

        class Servicer(pubfault_pb2_grpc.PubFaultServicer):
            def SendPublicFault(self, request, context):
                stand_in.calls += 1
                code, info = clusterd.take(request_dict(request))
                return pubfault_pb2.RespStatus(code=code, info=info)

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        pubfault_pb2_grpc.add_PubFaultServicer_to_server(Servicer(), self.server)
        self.target = "unix:" + socket_path
        self.server.add_insecure_port(self.target)
        self.server.start()

    def close(self) -> None:
        self.server.stop(None)
