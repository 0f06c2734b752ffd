"""The Kubernetes sink: keeps npumon's node conditions equal to the latest verdict, posts an Event for every
transition, and (opt-in) taints the node while the host is out of service.

`offer` (quick, on the poll path) only notes what the node should show; `sync` (a service job, off the poll
path) makes it so: GET the node, compare npumon's conditions with what the API server holds, patch the status
when they differ or the heartbeat is due, post the Events waiting in order, then the taint. A failed request
leaves everything dirty: the next try starts again from a GET, after a backoff that doubles (or the server's
Retry-After). Transitions wait in a bounded queue until the API server has taken them.
"""

import calendar
import collections
import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Optional, Tuple
from urllib.parse import quote

from ...rules.verdict import OUT_OF_SERVICE, HostVerdict
from .config import KubernetesHandoffConfig
from .k8sbody import (CONDITION_TYPES, STRATEGIC, Condition, breaker_open, conditions_on_node, desired_conditions,
                      event_body, has_taint, status_patch, taint_patch, tainted_count)
from .kubeapi import ApiError

log = logging.getLogger(__name__)

MAX_PENDING_EVENTS = 256  # transitions not yet taken by the API server; past it the oldest go (counted)
ACTIONS = ("get_node", "patch_status", "create_event", "list_nodes", "patch_taint")
RESULTS = ("ok", "failed", "dry_run")
FAILURE_KINDS = ("unreachable", "unauthorized", "conflict", "throttled", "server", "rejected")

# send(method, path, body, content type) -> the decoded answer; raises ApiError
Send = Callable[[str, str, Optional[Dict[str, Any]], str], Dict[str, Any]]
# record(kind, subject, message, severity, details): ServiceContext.record_event
Record = Callable[[str, str, str, Optional[str], Optional[Dict[str, Any]]], None]


def failure_kind(status: int) -> str:
    if status == 0:
        return "unreachable"
    if status in (401, 403):
        return "unauthorized"
    if status == 409:
        return "conflict"
    if status == 429:
        return "throttled"
    return "server" if status >= 500 else "rejected"


def retry_delay(failed_tries: int, max_backoff_seconds: float, retry_after: Optional[float]) -> float:
    """Seconds until a sink tries again after `failed_tries` failures in a row: 1 s doubling up to the
    configured bound, or longer where the server asked for it (Retry-After, at most an hour)."""
    delay = min(max_backoff_seconds, 2.0 ** (failed_tries - 1))
    return delay if retry_after is None else max(delay, min(retry_after, 3600.0))


@dataclass(frozen=True)
class SinkState:
    """What /status and the metrics show of the sink."""

    in_sync: bool
    problem: Optional[str]
    pending_events: int
    dropped_events: int
    breaker_open: bool
    last_success: Optional[float]
    requests: Dict[Tuple[str, str], int]
    failures: Dict[str, int]


class KubernetesSink:
    def __init__(self, config: KubernetesHandoffConfig, node: str, send: Optional[Send],
                 clock: Callable[[], float], record: Record, wake: Optional[Callable[[float], None]] = None):
        """`send` None: dry run (nothing is sent: each request is logged and recorded). `wake(seconds)`: run
        `sync` again that soon (a retry sooner than the job's interval)."""
        self._config = config
        self._node = node
        self._send = send
        self._clock = clock
        self._record = record
        self._wake = wake
        self._lock = threading.Lock()  # offer (poll path) against sync (service job)
        self._desired: Optional[Dict[str, Condition]] = None
        self._transitions: Dict[str, float] = {}
        self._want_taint = False
        self._pending: Deque[Tuple[Condition, float, str]] = collections.deque()
        self._serial = 0
        self._instance = os.urandom(4).hex()  # a restarted npumon's Events never take an earlier one's names
        self._dirty = False
        self._sent: Dict[str, Condition] = {}  # dry run: what it would have the node show
        self._sent_taint = False
        self._read_once = False  # the node's conditions compared with the first verdict
        self._last_write: Optional[float] = None
        self._last_success: Optional[float] = None
        self._retry_at = 0.0
        self._failed_tries = 0
        self._problem: Optional[str] = None
        self._breaker = False
        self._dropped = 0
        self._overflowing = False  # the queue filled up and has not drained since: its journal line is out
        self._requests: Dict[Tuple[str, str], int] = {(a, r): 0 for a in ACTIONS for r in RESULTS}
        self._failures: Dict[str, int] = {kind: 0 for kind in FAILURE_KINDS}

    # -- the poll path ---------------------------------------------------------------------------------------
    def offer(self, verdict: HostVerdict) -> bool:
        """Note the latest verdict; True when the node must change (the caller then runs `sync` soon)."""
        now = self._clock()
        desired = desired_conditions(verdict)
        with self._lock:
            previous = self._desired
            changed = [kind for kind in CONDITION_TYPES
                       if previous is None or previous[kind].key() != desired[kind].key()]
            for kind in changed:
                self._transitions[kind] = now
                # at start only a problem is news: "still healthy" after a restart is no transition
                if previous is not None or desired[kind].status == "True":
                    self._queue_event(desired[kind], now)
            want_taint = self._config.taint.enabled and verdict.state == OUT_OF_SERVICE
            self._desired = desired
            if changed or want_taint != self._want_taint:
                self._want_taint = want_taint
                self._dirty = True
                return True
            return False

    def _queue_event(self, condition: Condition, now: float) -> None:
        if len(self._pending) >= MAX_PENDING_EVENTS:
            self._pending.popleft()
            self._dropped += 1
            if not self._overflowing:  # one line until the queue has drained
                self._overflowing = True
                log.warning("kubernetes hand-off: %d transitions wait for the API server; dropping the oldest "
                            "Events (the conditions still follow the latest verdict)", MAX_PENDING_EVENTS)
        self._serial += 1  # fixed per transition: a retried Event keeps its name (409 AlreadyExists, not a twin)
        self._pending.append((condition, now, "{}{:x}".format(self._instance, self._serial)))

    # -- the service job ---------------------------------------------------------------------------------------
    def sync(self) -> None:
        """Bring the node in line with the latest verdict, when something changed, a retry or the heartbeat is
        due. Never raises for the API server's failures: they are counted, logged once and retried."""
        now = self._clock()
        with self._lock:
            if self._desired is None or now < self._retry_at:
                return
            heartbeat_due = self._last_write is None or now - self._last_write >= self._config.heartbeat_seconds
            if not (self._dirty or heartbeat_due):
                return
            desired, transitions = dict(self._desired), dict(self._transitions)
            want_taint = self._want_taint
        try:
            if self._send is None:
                self._dry_run(desired, transitions, want_taint, now)
            else:
                self._sync_node(desired, transitions, want_taint, now)
        except ApiError as exc:
            self._failed(exc, now)
            return
        with self._lock:
            self._dirty = self._desired != desired or self._want_taint != want_taint or bool(self._pending)
            self._overflowing = self._overflowing and bool(self._pending)
            self._retry_at, self._failed_tries, self._last_success = 0.0, 0, now
            recovered, self._problem = self._problem, None
        if recovered:
            log.info("kubernetes hand-off: node %s in sync again after: %s", self._node, recovered)
            self._record("handoff_action", self._node, "Kubernetes hand-off in sync again", "info", None)

    def _call(self, action: str, method: str, path: str, body: Optional[Dict[str, Any]] = None,
              content_type: str = "application/json") -> Dict[str, Any]:
        assert self._send is not None
        try:
            answer = self._send(method, path, body, content_type)
        except ApiError:
            self._count(action, "failed")
            raise
        self._count(action, "ok")
        return answer

    def _count(self, action: str, result: str) -> None:
        with self._lock:
            self._requests[(action, result)] += 1

    def _sync_node(self, desired: Dict[str, Condition], transitions: Dict[str, float], want_taint: bool,
                   now: float) -> None:
        node_path = "/api/v1/nodes/" + quote(self._node, safe="")
        node = self._call("get_node", "GET", node_path)
        held = conditions_on_node(node)
        if not self._read_once:
            self._read_once = True
            # a problem that ended while npumon was down is a transition too: its Event was not queued at start
            with self._lock:
                for kind in CONDITION_TYPES:
                    if held.get(kind) is not None and held[kind].status == "True" and desired[kind].status == "False":
                        self._queue_event(desired[kind], now)
        heartbeat_due = self._last_write is None or now - self._last_write >= self._config.heartbeat_seconds
        if heartbeat_due or any(held.get(kind, None) is None or held[kind].key() != desired[kind].key()
                                for kind in CONDITION_TYPES):
            # a transition time the server already holds for an unchanged status stays as it is
            stamps = {kind: transitions[kind] for kind in CONDITION_TYPES
                      if held.get(kind) is None or held[kind].status != desired[kind].status}
            held_times = _held_transition_times(node)
            for kind in CONDITION_TYPES:
                stamps.setdefault(kind, held_times.get(kind, transitions[kind]))
            body = status_patch([desired[kind] for kind in CONDITION_TYPES], now, stamps)
            node = self._call("patch_status", "PATCH", node_path + "/status", body, STRATEGIC)  # its new version
            self._last_write = now
            changed = [kind for kind in CONDITION_TYPES if held.get(kind) is None or held[kind] != desired[kind]]
            if changed:
                self._record("handoff_action", self._node, "node conditions set: " + ", ".join(
                    "{}={} ({})".format(kind, desired[kind].status, desired[kind].reason) for kind in changed),
                    "info", {"conditions": [desired[kind].__dict__ for kind in changed]})
        uid = (node.get("metadata") or {}).get("uid")
        self._post_events(uid)
        if self._config.taint.enabled:
            self._sync_taint(node, node_path, want_taint, now)

    def _post_events(self, uid: Optional[str]) -> None:
        namespace = self._config.event_namespace
        while True:
            with self._lock:
                if not self._pending:
                    return
                condition, when, serial = self._pending[0]
            body = event_body(self._node, uid, namespace, condition, when, serial)
            try:
                self._call("create_event", "POST", "/api/v1/namespaces/{}/events".format(namespace), body)
            except ApiError as exc:
                if exc.status != 409:  # 409 here: already exists, an earlier try's answer was lost
                    raise
            with self._lock:
                if self._pending and self._pending[0] == (condition, when, serial):
                    self._pending.popleft()
            self._record("handoff_action", self._node,
                         "Event {} posted: {}".format(condition.reason, condition.message),
                         "warning" if condition.status == "True" else "info", {"event": body["metadata"]["name"]})

    def _sync_taint(self, node: Dict[str, Any], node_path: str, want: bool, now: float) -> None:
        taint = self._config.taint
        have = has_taint(node, taint)
        if want == have:
            self._set_breaker(False, 0, 0)
            return
        if want:
            tainted, total = tainted_count(self._call("list_nodes", "GET", "/api/v1/nodes?resourceVersion=0"),
                                           taint, self._node)
            if breaker_open(tainted, total, taint):
                self._set_breaker(True, tainted, total)
                return
            self._set_breaker(False, tainted, total)
        self._call("patch_taint", "PATCH", node_path, taint_patch(node, taint, want, now), STRATEGIC)
        self._record("handoff_action", self._node, "taint {}:{} {}".format(
            taint.key, taint.effect, "added: the host is out of service" if want else "removed: back in service"),
            "warning" if want else "info", None)

    def _set_breaker(self, opened: bool, tainted: int, total: int) -> None:
        with self._lock:
            was, self._breaker = self._breaker, opened
        if opened and not was:
            taint = self._config.taint
            message = ("taint circuit breaker open: {} of {} other nodes already carry {} (limit {:g} %{}); "
                       "node {} is not tainted, its conditions still say why").format(
                tainted, total, taint.key, taint.max_share * 100,
                "" if taint.max_nodes is None else " or {} nodes".format(taint.max_nodes), self._node)
            log.warning("kubernetes hand-off: %s", message)
            self._record("handoff_problem", self._node, message, "warning", {"tainted": tainted, "nodes": total})

    def _failed(self, exc: ApiError, now: float) -> None:
        kind = failure_kind(exc.status)
        with self._lock:
            self._failures[kind] += 1
            self._failed_tries += 1
            delay = retry_delay(self._failed_tries, self._config.max_backoff_seconds, exc.retry_after)
            self._retry_at = now + delay
            self._dirty = True
            new_problem = self._problem is None or not self._problem.startswith(kind + ":")
            self._problem = "{}: {}".format(kind, exc)
            pending = len(self._pending)
        if new_problem:  # one journal line per problem, not per retry
            hint = ""
            if kind == "unauthorized":
                hint = " (the service account needs the RBAC in deploy/kubernetes/rbac-handoff.yaml)"
            log.warning("kubernetes hand-off: %s%s; retrying with backoff, %d Events waiting", exc, hint, pending)
            self._record("handoff_problem", self._node, "Kubernetes hand-off failing: {}{}".format(exc, hint),
                         "warning", {"kind": kind, "status": exc.status})
        if self._wake is not None:
            self._wake(delay)

    def _dry_run(self, desired: Dict[str, Condition], transitions: Dict[str, float], want_taint: bool,
                 now: float) -> None:
        node_path = "/api/v1/nodes/" + quote(self._node, safe="")
        heartbeat_due = self._last_write is None or now - self._last_write >= self._config.heartbeat_seconds
        if heartbeat_due or self._sent != desired:
            self._would("patch_status", "PATCH", node_path + "/status", STRATEGIC,
                        status_patch([desired[kind] for kind in CONDITION_TYPES], now, transitions))
            self._sent, self._last_write = dict(desired), now
        while True:
            with self._lock:
                if not self._pending:
                    break
                condition, when, serial = self._pending.popleft()
            namespace = self._config.event_namespace
            self._would("create_event", "POST", "/api/v1/namespaces/{}/events".format(namespace), "application/json",
                        event_body(self._node, None, namespace, condition, when, serial))
        if self._config.taint.enabled and want_taint != self._sent_taint:
            # the node is not read in a dry run: the patch shows npumon's taint alone, with no resourceVersion
            self._would("patch_taint", "PATCH", node_path, STRATEGIC,
                        taint_patch({}, self._config.taint, want_taint, now))
            self._sent_taint = want_taint

    def _would(self, action: str, method: str, path: str, content_type: str, body: Dict[str, Any]) -> None:
        self._count(action, "dry_run")
        request = {"method": method, "path": path, "content_type": content_type, "body": body}
        log.info("kubernetes hand-off (dry run) would send: %s %s %s", method, path, body)
        self._record("handoff_action", self._node, "dry run: would send {} {}".format(method, path), "info",
                     {"dry_run": True, "request": request})

    def state(self) -> SinkState:
        with self._lock:
            return SinkState(not self._dirty and self._problem is None, self._problem, len(self._pending),
                             self._dropped, self._breaker, self._last_success, dict(self._requests),
                             dict(self._failures))


def _held_transition_times(node: Dict[str, Any]) -> Dict[str, float]:
    """lastTransitionTime of npumon's conditions on the node, as unix times (unreadable ones left out)."""
    found: Dict[str, float] = {}
    for item in (node.get("status") or {}).get("conditions") or []:
        if isinstance(item, dict) and item.get("type") in CONDITION_TYPES:
            try:
                found[item["type"]] = float(calendar.timegm(time.strptime(str(item.get("lastTransitionTime")),
                                                                           "%Y-%m-%dT%H:%M:%SZ")))
            except ValueError:
                continue
    return found

