"""The health API on the daemon's listener (gpud-style): `GET /v1/health[?devices=..|?pod=ns/name]`,
`GET /v1/events`, `POST /v1/ack`. Pure functions of what the daemon hands over; web.py does the HTTP.

/v1/health answers 200 while the host and every chip asked about are in service, 503 when one is out of
service (a readiness or liveness probe of a serving pod asks for its own chips only); 404 for a device or pod
this host does not have. Everything a client sends is bounded: the query, the device list, the ack's body.
"""

import json
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple
from urllib.parse import parse_qsl

from ..model import Snapshot
from ..rules.verdict import OUT_OF_SERVICE, HostVerdict, chip_key

MAX_QUERY_BYTES = 1024
MAX_DEVICES = 64
MAX_DEVICE_ID = 1 << 16
DEFAULT_EVENTS = 100
MAX_EVENTS = 1000
MAX_ACK_BODY_BYTES = 4096
MAX_NOTE_CHARS = 500

Answer = Tuple[int, Dict[str, Any]]  # (HTTP status, JSON body)


class Unavailable(Exception):
    """What a HealthApi callback raises when it cannot answer now (one line: the 503's error)."""


class HealthApi(NamedTuple):
    """What the daemon hands the web server for /v1/*."""

    state: Callable[[], Tuple[Optional[Snapshot], Optional[HostVerdict]]]  # the latest snapshot and verdicts
    # (newest n, since unix time) -> events oldest first; raises Unavailable when no history can be read
    events: Callable[[int, Optional[float]], List[Dict[str, Any]]]
    ack: Callable[[str, str, str, str], Answer]  # (rule, subject, user, note)


def _error(status: int, message: str) -> Answer:
    return status, {"error": message}


def _params(query: str, allowed: Sequence[str]) -> Dict[str, str]:
    """The query's parameters, each at most once; ValueError with a one-line reason otherwise."""
    if len(query) > MAX_QUERY_BYTES:
        raise ValueError("query longer than {} bytes".format(MAX_QUERY_BYTES))
    params = {}  # type: Dict[str, str]
    for name, value in parse_qsl(query, keep_blank_values=True, max_num_fields=len(allowed) + 1):
        if name not in allowed:
            raise ValueError("unknown parameter {!r} (known: {})".format(name[:40], ", ".join(allowed) or "none"))
        if name in params:
            raise ValueError("parameter {} given twice".format(name))
        params[name] = value
    return params


def _device_ids(text: str) -> List[int]:
    parts = text.split(",")
    if len(parts) > MAX_DEVICES:
        raise ValueError("devices: at most {} ids".format(MAX_DEVICES))
    ids = []
    for part in parts:
        if not part.strip().isdigit() or int(part) >= MAX_DEVICE_ID:
            raise ValueError("devices: expected device ids like 0,3, got {!r}".format(part[:20]))
        ids.append(int(part))
    return ids


def health(snapshot: Optional[Snapshot], verdict: Optional[HostVerdict], query: str) -> Answer:
    """GET /v1/health. `devices`: logical device ids (/dev/davinciN, what ASCEND_VISIBLE_DEVICES lists);
    `pod`: namespace/name, the chips the kubelet's pod map gives that pod."""
    try:
        params = _params(query, ("devices", "pod"))
        if len(params) > 1:
            raise ValueError("give devices or pod, not both")
        devices = _device_ids(params["devices"]) if "devices" in params else None
    except ValueError as exc:
        return _error(400, str(exc))
    if snapshot is None or verdict is None:
        return _error(503, "no poll has finished yet")
    chips = {chip.subject: chip for chip in snapshot.chips}
    subjects = [chip.subject for chip in verdict.chips]
    if devices is not None:
        by_device = {chip.device_id: chip.subject for chip in snapshot.chips if chip.device_id is not None}
        missing = [str(device) for device in devices if device not in by_device]
        if missing:
            return _error(404, "no chip with device id {} on this host".format(", ".join(missing)))
        subjects = [by_device[device] for device in devices]
    elif "pod" in params:
        pod = params["pod"]
        subjects = [chip.subject for chip in snapshot.chips
                    if any("{}/{}".format(entry.get("namespace"), entry.get("pod")) == pod
                           for entry in chip.extra.get("pods") or ())]
        if not subjects:
            return _error(404, "no pod {!r} holds a chip of this host (the kubelet's pod map)".format(pod[:300]))
    shown = [verdict.chip(subject) for subject in dict.fromkeys(subjects)]
    serving = verdict.state != OUT_OF_SERVICE and all(chip.state != OUT_OF_SERVICE for chip in shown)
    body = {"healthy": serving, "host": snapshot.host.hostname, "state": verdict.state, "since": verdict.since,
            "note": verdict.note, "reasons": [reason.to_json() for reason in verdict.reasons], "chips": []}
    for chip in shown:
        entry = chip.to_json()
        key = chip_key(chip.subject)
        sample = chips.get(chip.subject)
        entry.update(npu=None if key is None else key[0], chip=None if key is None else key[1],
                     device_id=None if sample is None else sample.device_id)
        body["chips"].append(entry)
    return (200 if serving else 503), body


def events(read: Callable[[int, Optional[float]], List[Dict[str, Any]]], query: str) -> Answer:
    """GET /v1/events[?limit=N&since=UNIX]: the newest `limit` events (default 100, at most 1000), oldest
    first."""
    try:
        params = _params(query, ("limit", "since"))
        limit = _number(params.get("limit", str(DEFAULT_EVENTS)), "limit", 1, MAX_EVENTS, int)
        since = _number(params["since"], "since", 0, 1e11, float) if "since" in params else None
    except ValueError as exc:
        return _error(400, str(exc))
    try:
        return 200, {"events": read(limit, since)}
    except Unavailable as exc:
        return _error(503, str(exc))


def _number(text: str, name: str, low: float, high: float, kind: type) -> Any:
    try:
        value = kind(text)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:  # also refuses nan
        raise ValueError("{}: a number from {:g} to {:g}, got {!r}".format(name, low, high, text[:20]))
    return value


def ack(api: HealthApi, body: bytes, user: Optional[str]) -> Answer:
    """POST /v1/ack with {"rule": ..., "subject": ..., "note": ...}. `user`: the authenticated user; None when
    the web config asks for no authentication, and then acknowledging is refused."""
    if user is None:
        return _error(403, "acknowledging needs authentication: set basic_auth_users in the web config")
    try:
        request = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return _error(400, "expected a JSON object {\"rule\": ..., \"subject\": ...}")
    if not isinstance(request, dict):
        return _error(400, "expected a JSON object {\"rule\": ..., \"subject\": ...}")
    rule, subject, note = request.get("rule"), request.get("subject"), request.get("note", "")
    if not isinstance(rule, str) or not 0 < len(rule) <= 200:
        return _error(400, "rule: a rule id")
    if not isinstance(subject, str) or not (subject == "host" or chip_key(subject) is not None):
        return _error(400, "subject: 'host' or npu<N>/chip<C>")
    if not isinstance(note, str) or len(note) > MAX_NOTE_CHARS:
        return _error(400, "note: text of at most {} characters".format(MAX_NOTE_CHARS))
    return api.ack(rule, subject, user, note)
