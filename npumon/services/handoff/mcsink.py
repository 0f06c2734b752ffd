"""The MindCluster sink: keeps the public faults ClusterD holds from npumon equal to the latest verdict.

`offer` (quick, on the poll path) notes which faults should be open; `sync` (a service job) sends one message
when they differ from what ClusterD was last told: the ones that ended as `recover`, the open ones as `occur`.
What ClusterD holds is the state, not a queue of transitions, so nothing is lost however long ClusterD is away:
a failed message is sent again, rebuilt from the latest verdict, after a backoff that doubles. At most one
message a second (ClusterD refills each sender's bucket at 1 request/s and answers 410 when it is empty). On
the ConfigMap route the first sync reads back what the ConfigMap holds, so faults an earlier npumon left open
are recovered when they no longer hold.
"""

import logging
import os
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Protocol, Tuple

from ...rules.verdict import HostVerdict
from .config import MindClusterHandoffConfig
from .heldfile import load_held, save_held
from .kubeapi import ApiError
from .kubesink import Record, SinkState, failure_kind, retry_delay
from .mcroute import Count
from .publicfault import OpenFault, changes, desired_faults, first_batch, held_faults, id_part, message

log = logging.getLogger(__name__)

SPACING_SECONDS = 1.0  # between two messages: ClusterD's per-sender refill rate
ACTIONS = ("read_configmap", "write_configmap", "send_public_fault")
RESULTS = ("ok", "failed", "dry_run")
FAILURE_KINDS = ("unreachable", "unauthorized", "conflict", "throttled", "server", "rejected")


class Route(Protocol):
    name: str

    def request(self, body: Dict[str, Any]) -> Dict[str, Any]: ...

    def read(self, count: Count) -> Optional[str]: ...

    def deliver(self, body: Dict[str, Any], count: Count) -> None: ...


def mc_failure_kind(route: str, status: int) -> str:
    """On gRPC the status is ClusterD's RespStatus code: 409 invalid parameters, 410 over the rate limit."""
    if route == "grpc" and status not in (0, 429):
        return {409: "rejected", 410: "throttled"}.get(status, "server")
    return failure_kind(status)


class MindClusterSink:
    def __init__(self, config: MindClusterHandoffConfig, node: str, route: Route, dry_run: bool,
                 clock: Callable[[], float], record: Record, wake: Optional[Callable[[float], None]] = None,
                 held_file: Optional[str] = None):
        """`dry_run`: nothing is sent, each message is logged and recorded. `wake(seconds)`: run `sync` again
        that soon (a retry, or the next message of a split, sooner than the job's interval). `held_file`:
        where the faults ClusterD holds are kept across restarts (heldfile.py); None keeps them in memory."""
        self._config = config
        self._node = node
        self._route = route
        self._dry_run = dry_run
        self._clock = clock
        self._record = record
        self._wake = wake
        self._lock = threading.Lock()  # offer (poll path) against sync (service job)
        self._wanted: Optional[Dict[str, OpenFault]] = None
        self._held_file = None if dry_run else held_file
        # faultId -> its occur entry (no assertion) ClusterD took
        self._held: Dict[str, Dict[str, Any]] = load_held(self._held_file) if self._held_file else {}
        self._held_file_problem: Optional[str] = None
        self._unnamed: List[str] = []
        self._read_once = dry_run  # a dry run reads nothing back
        self._serial = 0
        self._instance = os.urandom(4).hex()  # a restarted npumon's message ids never repeat an earlier one's
        self._last_sent: Optional[float] = None
        self._last_success: Optional[float] = None
        self._retry_at = 0.0
        self._failed_tries = 0
        self._problem: Optional[str] = None
        self._requests: Dict[Tuple[str, str], int] = {(a, r): 0 for a in ACTIONS for r in RESULTS}
        self._failures: Dict[str, int] = {kind: 0 for kind in FAILURE_KINDS}

    def count(self, action: str, result: str) -> None:
        with self._lock:
            self._requests[(action, result)] = self._requests.get((action, result), 0) + 1

    # -- the poll path ---------------------------------------------------------------------------------------
    def offer(self, verdict: HostVerdict, phy_ids: Mapping[str, int]) -> bool:
        """Note the latest verdict (and the chips' physical ids); True when ClusterD must be told."""
        with self._lock:
            previous = self._wanted
        wanted, unnamed = desired_faults(verdict, phy_ids, self._node, self._config.fault_codes, previous)
        with self._lock:
            changed = self._wanted is None or set(wanted) != set(self._wanted)
            self._wanted = wanted
            new_unnamed = unnamed and unnamed != self._unnamed
            self._unnamed = unnamed
        if new_unnamed:
            message_text = ("chips {} are not healthy but have no physical id in 0..31: no public fault names "
                            "them").format(", ".join(unnamed))
            log.warning("mindcluster hand-off: %s", message_text)
            self._record("handoff_problem", self._node, "MindCluster hand-off: " + message_text, "warning",
                         {"chips": unnamed})
        return changed

    # -- the service job ---------------------------------------------------------------------------------------
    def sync(self) -> None:
        """Send one message when ClusterD's faults differ from the verdict's. Never raises for a failed
        delivery: it is counted, logged once and retried with backoff."""
        now = self._clock()
        with self._lock:
            if self._wanted is None or now < self._retry_at:
                return
            early = self._last_sent is not None and now - self._last_sent < SPACING_SECONDS
            pending = self._pending_locked()
            wanted = dict(self._wanted)
        if early:  # within a second of the last message: the next one waits for ClusterD's refill
            assert self._last_sent is not None
            if pending and self._wake is not None:
                self._wake(SPACING_SECONDS - (now - self._last_sent))
            return
        try:
            if not self._read_once:
                self._adopt(self._route.read(self.count))
            with self._lock:
                held = dict(self._held)
            faults = changes(wanted, held)
            if not any(f["assertion"] == "recover" or f["faultId"] not in held for f in faults):
                self._succeeded(now)
                return
            batch = first_batch(faults)
            self._serial += 1
            body = message("{}.{}.{}.{:x}".format(self._config.resource, id_part(self._node, 64), self._instance,
                                                  self._serial), int(now * 1000), self._config.resource, batch)
            if self._dry_run:
                self.count(self._route_action(), "dry_run")
                request = self._route.request(body)
                log.info("mindcluster hand-off (dry run) would send: %s", request)
            else:
                request = None
                self._route.deliver(body, self.count)
        except ApiError as exc:
            self._failed(exc, now)
            return
        with self._lock:
            for fault in batch:
                if fault["assertion"] == "recover":
                    self._held.pop(fault["faultId"], None)
                else:
                    self._held[fault["faultId"]] = {k: v for k, v in fault.items() if k != "assertion"}
            self._last_sent = now
            more = self._pending_locked()
            held_now = dict(self._held)
        self._report(body, held, request)
        if self._held_file:
            self._keep(held_now)
        self._succeeded(now)
        if more and self._wake is not None:
            self._wake(SPACING_SECONDS)

    def _keep(self, held: Dict[str, Dict[str, Any]]) -> None:
        assert self._held_file is not None
        problem = save_held(self._held_file, held)
        if problem and problem != self._held_file_problem:  # once per problem
            log.warning("mindcluster hand-off: cannot write %s (%s): after a restart, faults that end meanwhile "
                        "may stay open at ClusterD", self._held_file, problem)
        self._held_file_problem = problem

    def _route_action(self) -> str:
        return "write_configmap" if self._route.name == "configmap" else "send_public_fault"

    def _adopt(self, text: Optional[str]) -> None:
        """What an earlier npumon left open on this node, from the ConfigMap's message."""
        adopted = held_faults(text) if text else {}
        with self._lock:
            for fault_id, entry in adopted.items():
                self._held.setdefault(fault_id, entry)
            self._read_once = True
        if adopted:
            log.info("mindcluster hand-off: the ConfigMap holds %d open faults from an earlier run", len(adopted))

    def _pending_locked(self) -> int:
        """Fault changes ClusterD has not taken yet (the lock held)."""
        wanted = self._wanted or {}
        return (sum(1 for fault_id in self._held if fault_id not in wanted)
                + sum(1 for fault_id in wanted if fault_id not in self._held))

    def _report(self, body: Dict[str, Any], held: Mapping[str, Any], request: Optional[Dict[str, Any]]) -> None:
        """One event in the history per message, naming the faults it opened and closed (not those it repeats)."""
        said = ", ".join("{} {} on devices {} ({})".format(
            fault["assertion"], self._level_of(fault), fault["influence"][0]["deviceIds"], fault["faultId"])
            for fault in body["faults"] if fault["assertion"] == "recover" or fault["faultId"] not in held)
        details: Dict[str, Any] = {"message_id": body["id"], "route": self._route.name,
                                   "faults": [{"faultId": f["faultId"], "assertion": f["assertion"],
                                               "faultCode": f["faultCode"]} for f in body["faults"]]}
        if request is not None:
            details.update(dry_run=True, request=request)
        prefix = "dry run: would send public faults" if request is not None else "public faults sent"
        self._record("handoff_action", self._node, "MindCluster {}: {}".format(prefix, said), "info", details)

    def _level_of(self, fault: Dict[str, Any]) -> str:
        codes = self._config.fault_codes
        return {codes.code(level): level for level in
                ("NotHandleFault", "SubHealthFault", "PreSeparateNPU", "SeparateNPU")}.get(fault["faultCode"],
                                                                                          fault["faultCode"])

    def _succeeded(self, now: float) -> None:
        with self._lock:
            self._retry_at, self._failed_tries, self._last_success = 0.0, 0, now
            recovered, self._problem = self._problem, None
        if recovered:
            log.info("mindcluster hand-off: in sync again after: %s", recovered)
            self._record("handoff_action", self._node, "MindCluster hand-off in sync again", "info", None)

    def _failed(self, exc: ApiError, now: float) -> None:
        kind = mc_failure_kind(self._route.name, exc.status)
        with self._lock:
            self._failures[kind] = self._failures.get(kind, 0) + 1
            self._failed_tries += 1
            delay = retry_delay(self._failed_tries, self._config.max_backoff_seconds, exc.retry_after)
            self._retry_at = now + delay
            new_problem = self._problem is None or not self._problem.startswith(kind + ":")
            self._problem = "{}: {}".format(kind, exc)
            pending = self._pending_locked()
        if new_problem:  # one journal line per problem, not per retry
            hint = ""
            if kind == "unauthorized":
                hint = " (the service account needs the RBAC in deploy/kubernetes/rbac-handoff.yaml)"
            elif kind == "rejected":
                hint = " (is npumon listed in ClusterD's publicCustomization.json, with its fault codes?)"
            log.warning("mindcluster hand-off: %s%s; retrying with backoff, %d fault changes waiting", exc, hint,
                        pending)
            self._record("handoff_problem", self._node, "MindCluster hand-off failing: {}{}".format(exc, hint),
                         "warning", {"kind": kind, "status": exc.status})
        if self._wake is not None:
            self._wake(delay)

    def held(self) -> Dict[str, Dict[str, Any]]:
        """The faults ClusterD took from npumon and holds open (by faultId)."""
        with self._lock:
            return dict(self._held)

    def state(self) -> SinkState:
        with self._lock:
            pending = self._pending_locked() if self._wanted is not None else 0
            return SinkState(pending == 0 and self._problem is None, self._problem, pending, 0, False,
                             self._last_success, dict(self._requests), dict(self._failures))
