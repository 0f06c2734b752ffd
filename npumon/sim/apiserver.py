"""A stand-in for the Kubernetes API server on 127.0.0.1, for `--simulate` and the tests: Nodes (get, list, status
patch, taint patch with its resourceVersion precondition), core/v1 Events (create, list per namespace) and
ConfigMaps (get, create, update; each write handed to `on_configmap`, as ClusterD's informer sees it).

Every object it stores after a write is checked against the Kubernetes 1.37 schema with kubernetes-validate
(strict: an unknown field fails) when that is installed, else by a structural check of the fields npumon writes
(`schema_checker`); a body that fails is answered 422 and kept in `invalid`. Requests need the bearer token.
Failures are injected per request: `fail_next(status, count, headers)`. What it keeps is bounded: the newest
MAX_EVENTS Events and MAX_REQUESTS requests, at most MAX_EVENTS ConfigMaps (more are refused as over quota).
"""

import copy
import functools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

try:
    import kubernetes_validate
    from kubernetes_validate import utils as _kubernetes_validate_utils
except ImportError:  # not a dependency of npumon: the structural check stands in
    kubernetes_validate = None
else:
    # kubernetes_validate.validate() reads and parses its schema files (the definitions are megabytes of JSON) on
    # every call; parsed once here, a flap storm's hundreds of writes stop costing seconds of CPU each.
    if not hasattr(_kubernetes_validate_utils.schema_contents, "cache_info"):
        _kubernetes_validate_utils.schema_contents = functools.lru_cache(maxsize=16)(
            _kubernetes_validate_utils.schema_contents)

KUBERNETES_VERSION = "1.37.0"
STRATEGIC = "application/strategic-merge-patch+json"
TOKEN = "test-token"
MAX_EVENTS = 1000
MAX_REQUESTS = 10000
MAX_BODY_BYTES = 1024 * 1024
READY_TIME = "2026-01-01T00:00:00Z"


def node_object(name: str, taints: Optional[List[Dict[str, Any]]] = None) -> Dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "uid": "uid-" + name, "resourceVersion": "1"},
            "spec": {"taints": taints} if taints else {},
            "status": {"conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready",
                 "lastHeartbeatTime": READY_TIME, "lastTransitionTime": READY_TIME}]}}


def validate(obj: Dict[str, Any]) -> Optional[str]:
    """Why `obj` is not a valid object of Kubernetes 1.37 (one line), or None."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return str(exc).splitlines()[0]
    return None


# -- the structural check, without kubernetes-validate: the core/v1 fields of what npumon writes --------------
_TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")
_CONDITION_FIELDS = {"type", "status", "reason", "message", "lastHeartbeatTime", "lastTransitionTime"}
_TAINT_FIELDS = {"key", "value", "effect", "timeAdded"}
_EVENT_FIELDS = {"apiVersion", "kind", "metadata", "involvedObject", "reason", "message", "type", "source",
                 "firstTimestamp", "lastTimestamp", "count", "eventTime", "series", "action", "related",
                 "reportingComponent", "reportingInstance"}
_REFERENCE_FIELDS = {"apiVersion", "kind", "name", "namespace", "uid", "resourceVersion", "fieldPath"}


def structural_problem(obj: Dict[str, Any]) -> Optional[str]:
    """Why `obj`, a Node or an Event, breaks the core/v1 schema in a field npumon writes (one line), or None."""
    try:
        if obj.get("kind") == "Node":
            for item in obj["status"].get("conditions") or []:
                _fields(item, _CONDITION_FIELDS, ("type", "status"), "status.conditions[]")
                _one_of(item["status"], ("True", "False", "Unknown"), "status.conditions[].status")
                for key in ("lastHeartbeatTime", "lastTransitionTime"):
                    _time(item.get(key), "status.conditions[]." + key)
            for item in obj["spec"].get("taints") or []:
                _fields(item, _TAINT_FIELDS, ("key", "effect"), "spec.taints[]")
                _one_of(item["effect"], ("NoSchedule", "PreferNoSchedule", "NoExecute"), "spec.taints[].effect")
                _time(item.get("timeAdded"), "spec.taints[].timeAdded")
            return None
        if obj.get("kind") == "ConfigMap":
            _fields(obj, _CONFIGMAP_FIELDS, ("metadata",), "ConfigMap")
            if not obj["metadata"].get("name"):
                return "ConfigMap: metadata.name is required"
            if not all(isinstance(key, str) and isinstance(value, str) for key, value in (obj.get("data") or {}).items()):
                return "ConfigMap: data must map strings to strings"
            return None
        if obj.get("kind") == "Event":
            _fields(obj, _EVENT_FIELDS, ("metadata", "involvedObject"), "Event")
            if not obj["metadata"].get("name"):
                return "Event: metadata.name is required"
            _fields(obj["involvedObject"], _REFERENCE_FIELDS, (), "involvedObject")
            _one_of(obj.get("type", "Normal"), ("Normal", "Warning"), "type")
            for key in ("firstTimestamp", "lastTimestamp"):
                _time(obj.get(key), key)
            if not isinstance(obj.get("count", 1), int):
                return "Event: count must be an integer"
            return None
    except _Invalid as exc:
        return str(exc)
    except (KeyError, TypeError, AttributeError) as exc:
        return "{}: malformed ({} {})".format(obj.get("kind"), type(exc).__name__, exc)
    return "unknown kind {!r}".format(obj.get("kind"))


_CONFIGMAP_FIELDS = {"apiVersion", "kind", "metadata", "data", "binaryData", "immutable"}


class _Invalid(Exception):
    pass


def _fields(item: Any, allowed: set, required: Sequence[str], where: str) -> None:
    if not isinstance(item, dict):
        raise _Invalid("{}: expected an object".format(where))
    unknown = sorted(set(item) - allowed)
    if unknown:
        raise _Invalid("{}: unknown field {!r}".format(where, unknown[0]))
    for key in required:
        if key not in item:
            raise _Invalid("{}: {} is required".format(where, key))
    for key, value in item.items():
        if key not in ("metadata", "involvedObject", "source", "series", "related", "count") \
                and not isinstance(value, str):
            raise _Invalid("{}.{}: expected a string".format(where, key))


def _one_of(value: Any, allowed: Tuple[str, ...], where: str) -> None:
    if value not in allowed:
        raise _Invalid("{}: unsupported value {!r}: supported values: {}".format(where, value, ", ".join(allowed)))


def _time(value: Any, where: str) -> None:
    if value is not None and not (isinstance(value, str) and _TIME.match(value)):
        raise _Invalid("{}: {!r} is not an RFC 3339 time".format(where, value))


def schema_checker() -> Tuple[Callable[[Dict[str, Any]], Optional[str]], str]:
    """The check the stand-in applies to what it stores, and its name for the log."""
    if kubernetes_validate is not None:
        return validate, "the Kubernetes {} schema (kubernetes-validate)".format(KUBERNETES_VERSION)
    return structural_problem, "a structural check (kubernetes-validate not installed)"


class ApiServer:
    """The stand-in: `url` to reach it, `nodes` by name, `events` in the order created, `invalid` the problems of
    the bodies it refused."""

    def __init__(self, node_names: Sequence[str] = ("node-a",), token: str = TOKEN):
        self.nodes: Dict[str, Dict[str, Any]] = {name: node_object(name) for name in node_names}
        self.events: List[Dict[str, Any]] = []
        self.configmaps: Dict[Tuple[str, str], Dict[str, Any]] = {}
        self.on_configmap: Callable[[Dict[str, Any]], None] = lambda configmap: None  # each ConfigMap written
        self.requests: List[Tuple[str, str, Optional[str]]] = []  # (method, path, content type)
        self.invalid: List[str] = []
        self.token = token
        self.check, self.checked_against = schema_checker()
        self._failures: List[Tuple[int, Dict[str, str]]] = []
        self.lose_answers: List[str] = []  # paths ending so: carried out once, then answered 503 instead
        self.lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                stub._handle(self, "GET")

            def do_PATCH(self):
                stub._handle(self, "PATCH")

            def do_POST(self):
                stub._handle(self, "POST")

            def do_PUT(self):
                stub._handle(self, "PUT")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = "http://127.0.0.1:{}".format(self.server.server_address[1])
        self._thread = threading.Thread(target=self.server.serve_forever, name="sim-apiserver", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail_next(self, status: int, count: int = 1, headers: Optional[Dict[str, str]] = None) -> None:
        with self.lock:
            self._failures.extend([(status, dict(headers or {}))] * count)

    def condition(self, node: str, kind: str) -> Optional[Dict[str, Any]]:
        with self.lock:
            found = next((c for c in self.nodes[node]["status"]["conditions"] if c["type"] == kind), None)
            return copy.deepcopy(found)

    def snapshot(self) -> Dict[str, Any]:
        """What it holds, as JSON data: every node's conditions and taints, the Events, the refused bodies."""
        with self.lock:
            return {"nodes": [{"name": name, "conditions": copy.deepcopy(node["status"]["conditions"]),
                               "taints": copy.deepcopy(node["spec"].get("taints") or [])}
                              for name, node in sorted(self.nodes.items())],
                    "events": copy.deepcopy(self.events), "invalid": list(self.invalid)}

    # -- the API ---------------------------------------------------------------------------------------------
    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        try:
            length = int(handler.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        raw = handler.rfile.read(length) if 0 < length <= MAX_BODY_BYTES else b""
        content_type = handler.headers.get("Content-Type")
        with self.lock:
            self.requests.append((method, handler.path, content_type))
            del self.requests[:-MAX_REQUESTS]
            headers: Dict[str, str] = {}
            if handler.headers.get("Authorization") != "Bearer " + self.token:
                status, answer = 401, _status(401, "Unauthorized")
            elif self._failures:
                code, headers = self._failures.pop(0)
                status, answer = code, _status(code, "injected failure")
            elif not 0 <= length <= MAX_BODY_BYTES:
                status, answer = 413, _status(413, "request body missing a length or larger than 1 MiB")
            else:
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    status, answer = 400, _status(400, "the body is not JSON")
                else:
                    status, answer = self._route(method, handler.path, body, content_type)
                lost = [end for end in self.lose_answers if handler.path.endswith(end)]
                if lost:
                    self.lose_answers.remove(lost[0])
                    status, answer = 503, _status(503, "answer lost after the write")
        data = json.dumps(answer).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            handler.send_header(key, value)
        handler.end_headers()
        handler.wfile.write(data)

    def _route(self, method: str, path: str, body: Any, content_type: Optional[str]) -> Tuple[int, Dict[str, Any]]:
        parts = path.split("?")[0].strip("/").split("/")
        if method == "GET" and parts == ["api", "v1", "nodes"]:
            return 200, {"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "1"},
                         "items": copy.deepcopy(list(self.nodes.values()))}
        if parts[:3] == ["api", "v1", "nodes"] and len(parts) >= 4:
            node = self.nodes.get(parts[3])
            if node is None:
                return 404, _status(404, "nodes {!r} not found".format(parts[3]))
            if method == "GET" and len(parts) == 4:
                return 200, copy.deepcopy(node)
            if method == "PATCH" and content_type == STRATEGIC and isinstance(body, dict):
                return self._patch(node, body, status=len(parts) == 5 and parts[4] == "status")
        if len(parts) == 5 and parts[:3] == ["api", "v1", "namespaces"] and parts[4] == "events":
            if method == "GET":
                return 200, {"apiVersion": "v1", "kind": "EventList", "metadata": {"resourceVersion": "1"},
                             "items": [e for e in self.events if e["metadata"]["namespace"] == parts[3]]}
            if method == "POST" and isinstance(body, dict):
                return self._event(parts[3], body)
        if parts[:3] == ["api", "v1", "namespaces"] and len(parts) in (5, 6) and parts[4] == "configmaps" \
                and (method == "GET" or isinstance(body, dict)):
            return self._configmap(method, parts[3], parts[5] if len(parts) == 6 else None, body)
        return 404, _status(404, "not served by the stand-in: {} {}".format(method, path))

    def _patch(self, node: Dict[str, Any], body: Dict[str, Any], status: bool) -> Tuple[int, Dict[str, Any]]:
        updated = copy.deepcopy(node)
        if status:
            if set(body) != {"status"} or not isinstance(body["status"], dict) or set(body["status"]) != {"conditions"} \
                    or not isinstance(body["status"]["conditions"], list) \
                    or not all(isinstance(c, dict) and "type" in c for c in body["status"]["conditions"]):
                return 422, _status(422, "a status patch that is not conditions only")
            merged = {c["type"]: c for c in updated["status"]["conditions"]}  # patchMergeKey: type
            for condition in body["status"]["conditions"]:
                merged[condition["type"]] = dict(merged.get(condition["type"], {}), **condition)
            updated["status"]["conditions"] = list(merged.values())
        else:
            wanted = (body.get("metadata") or {}).get("resourceVersion")
            if wanted is not None and wanted != node["metadata"]["resourceVersion"]:
                return 409, _status(409, "the object has been modified")
            if not isinstance(body.get("spec"), dict) or "taints" not in body["spec"]:
                return 422, _status(422, "a node patch that is not spec.taints")
            updated["spec"]["taints"] = body["spec"]["taints"]  # listType atomic: replaced whole
        problem = self.check(updated)
        if problem:
            self.invalid.append(problem)
            del self.invalid[:-MAX_EVENTS]
            return 422, _status(422, problem)
        updated["metadata"]["resourceVersion"] = str(int(node["metadata"]["resourceVersion"]) + 1)
        node.clear()
        node.update(updated)
        return 200, copy.deepcopy(node)

    def _event(self, namespace: str, body: Dict[str, Any]) -> Tuple[int, Dict[str, Any]]:
        problem = self.check(body)
        if problem or (body.get("metadata") or {}).get("namespace") != namespace:
            self.invalid.append(problem or "namespace mismatch")
            del self.invalid[:-MAX_EVENTS]
            return 422, _status(422, problem or "namespace mismatch")
        if any(event["metadata"]["name"] == body["metadata"]["name"] for event in self.events):
            return 409, _status(409, "already exists")
        self.events.append(body)
        del self.events[:-MAX_EVENTS]
        return 201, body


    def _configmap(self, method: str, namespace: str, name: Optional[str], body: Any) -> Tuple[int, Dict[str, Any]]:
        if method == "GET" and name is not None:
            held = self.configmaps.get((namespace, name))
            return (200, copy.deepcopy(held)) if held else (404, _status(404, "configmaps {!r} not found".format(name)))
        if method not in ("POST", "PUT") or (method == "PUT") != (name is not None):
            return 405, _status(405, "method not allowed")
        meta = body.get("metadata") or {}
        key = (namespace, meta.get("name"))
        if (method == "PUT" and meta.get("name") != name) or meta.get("namespace") != namespace:
            self.invalid.append("configmap name or namespace mismatch")
            del self.invalid[:-MAX_EVENTS]
            return 400, _status(400, "name or namespace mismatch")
        if method == "POST" and key in self.configmaps:
            return 409, _status(409, "already exists")
        if method == "POST" and len(self.configmaps) >= MAX_EVENTS:  # what it keeps is bounded, as a quota would
            return 403, _status(403, "exceeded quota: at most {} configmaps".format(MAX_EVENTS))
        if method == "PUT" and key not in self.configmaps:
            return 404, _status(404, "configmaps {!r} not found".format(name))
        problem = self.check(body)
        if problem:
            self.invalid.append(problem)
            del self.invalid[:-MAX_EVENTS]
            return 422, _status(422, problem)
        stored = copy.deepcopy(body)
        version = int(self.configmaps[key]["metadata"]["resourceVersion"]) + 1 if key in self.configmaps else 1
        stored["metadata"]["resourceVersion"] = str(version)
        self.configmaps[key] = stored
        self.on_configmap(stored)
        return (201 if method == "POST" else 200), stored


def _status(code: int, message: str) -> Dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Status", "status": "Failure", "message": message, "code": code}
