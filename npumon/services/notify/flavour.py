"""What every receiver flavour provides, and the defaults that differ between them.

A flavour turns a list of alerts into one HTTP request (`build`) and reads the service's answer
(`outcome`). It does no I/O: transport.py sends, delivery.py decides what to send when.
"""

import json
from dataclasses import dataclass, field, replace
from typing import Dict, Optional, Sequence, Tuple

from .alert import Alert

DELIVERED = "delivered"
RETRY = "retry"
FAILED = "failed"


@dataclass(frozen=True)
class SendContext:
    receiver: str
    host: str
    now: float  # unix time of this attempt (signatures, Alertmanager's endsAt)
    secrets: Dict[str, str] = field(repr=False)  # url, secret, routing_key as configured
    external_url: Optional[str]
    repeat_seconds: float  # the receiver's effective repeat interval


@dataclass(frozen=True)
class Request:
    url: str
    body: bytes
    size: int  # the bytes the service's size limit counts (the whole body, or one field of it)
    headers: Optional[Dict[str, str]] = field(default=None, repr=False)
    # Values of this request that are credentials besides the configured secrets (a signature): redacted too
    credentials: Tuple[str, ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class Timing:
    """Defaults of a receiver type; the config may override each."""

    group_wait_seconds: float
    group_interval_seconds: float
    repeat_seconds: float
    max_per_minute: int  # 0 = no limit


class Flavour:
    """Base: JSON over POST, 2xx is success, 408/429/5xx are worth retrying, other answers are final."""

    kind = ""
    max_alerts = 100  # alerts per message
    max_bytes = 0  # limit on Request.size; 0 = none
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=30.0, repeat_seconds=4 * 3600.0,
                    max_per_minute=0)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        raise NotImplementedError

    def outcome(self, status: int, text: str) -> str:
        return status_outcome(status)


def status_outcome(status: int) -> str:
    if 200 <= status < 300:
        return DELIVERED
    if status in (408, 429) or status >= 500:
        return RETRY
    return FAILED


def json_request(url: str, document, size_of: Optional[str] = None) -> Request:
    body = json.dumps(document, ensure_ascii=False).encode("utf-8")
    size = len(size_of.encode("utf-8")) if size_of is not None else len(body)
    return Request(url=url, body=body, size=size)


def with_bearer_token(request: Request, context: SendContext) -> Request:
    """`Authorization: Bearer <token>` when the receiver has a bearer_token (webhook, alertmanager)."""
    token = context.secrets.get("bearer_token")
    if token is None:
        return request
    return replace(request, headers=dict(request.headers or {}, Authorization="Bearer " + token))


def chat_outcome(status: int, text: str, code_field: str, retry_codes: Sequence[int]) -> str:
    """Chat robots answer HTTP 200 with an error code in the body: 0 is success, a rate-limit code is
    worth retrying, any other code is final (bad token, bad signature, bad body)."""
    outcome = status_outcome(status)
    if outcome != DELIVERED:
        return outcome
    try:
        code = json.loads(text).get(code_field)
    except (ValueError, AttributeError):
        return FAILED  # not the answer this service gives: most likely the wrong URL
    if code == 0:
        return DELIVERED
    return RETRY if code in retry_codes else FAILED
