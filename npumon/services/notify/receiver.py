"""A configured receiver, ready to send: its flavour, effective timing, resolved secrets and HTTP
transport -- and `send()`, the real path every notification takes (the daemon's delivery and
`npumon notify test` alike): fit the alerts into one message, sign, POST, read the answer."""

import os
from dataclasses import dataclass, replace
from typing import Dict, List, Optional, Sequence, Tuple, Type

from .alert import Alert
from .alertmanager import AlertmanagerPush
from .config import ReceiverConfig, receiver_line
from .dingtalk import DingTalk
from .feishu import Feishu
from .flavour import RETRY, Flavour, Request, SendContext, Timing
from .pagerduty import EVENTS_URL, PagerDuty
from .redact import Redactor, error_text
from .secrets import SecretError, resolve_secrets, safe_endpoint
from .slack import Slack
from .transport import Transport, TransportError
from .webhook import Webhook
from .wecom import WeCom

FLAVOURS: Dict[str, Type[Flavour]] = {flavour.kind: flavour for flavour in (
    Webhook, AlertmanagerPush, DingTalk, Feishu, WeCom, Slack, PagerDuty)}


@dataclass(frozen=True)
class Answer:
    """What came of one message: delivered, retry (worth trying again) or failed (final)."""

    outcome: str
    detail: str  # "HTTP 200: {...}" or "cannot connect: Connection refused"; secrets masked, capped (redact.py)
    sent: int  # how many of the offered alerts the message carried
    status: Optional[int] = None
    retry_after: Optional[float] = None


class Receiver:
    def __init__(self, config: ReceiverConfig, secrets: Dict[str, str]):
        self.name = config.name
        self.kind = config.type
        self.flavour = FLAVOURS[config.type]()
        self.timing = effective_timing(config, self.flavour.timing)
        self.secrets = dict(secrets)
        self.endpoint = safe_endpoint(secrets.get("url", EVENTS_URL if config.type == "pagerduty" else None))
        self.redact = Redactor(secrets.values())
        verify = False if config.insecure_skip_verify else (config.ca_file or True)
        self.transport = Transport(config.timeout_seconds, verify)

    @classmethod
    def from_config(cls, config: ReceiverConfig, index: int, config_path: str) -> "Receiver":
        """Raises SecretError when a secret file or variable, or the CA file, cannot be read."""
        secrets = resolve_secrets(config, index, config_path)
        if config.ca_file is not None and not os.access(config.ca_file, os.R_OK):
            raise SecretError("{}: notify.receivers[{}].ca_file: receiver {!r}: cannot read {}".format(
                receiver_line(config_path, index, "ca_file"), index, config.name, config.ca_file))
        return cls(config, secrets)

    def send(self, alerts: Sequence[Alert], host: str, now: float, external_url: Optional[str]) -> Answer:
        context = SendContext(receiver=self.name, host=host, now=now, secrets=self.secrets,
                              external_url=external_url, repeat_seconds=self.timing.repeat_seconds)
        request, count = self._fit(list(alerts[:self.flavour.max_alerts]), context)
        redact = self.redact.extended(_request_credentials(request))
        try:
            response = self.transport.post(request)
        except TransportError as exc:
            return Answer(RETRY, error_text(str(exc), redact), count)
        outcome = self.flavour.outcome(response.status, response.text)
        detail = "HTTP {}: {}".format(response.status, response.text if response.text.strip() else "(empty)")
        return Answer(outcome, error_text(detail, redact), count, response.status, response.retry_after)

    def _fit(self, alerts: List[Alert], context: SendContext) -> Tuple[Request, int]:
        """The largest leading part of `alerts` whose message is within the service's size limit; the
        rest wait for the next message. A single alert too big on its own has its hint, then its
        summary, shortened until it fits."""
        request = self.flavour.build(alerts, context)
        while self._too_big(request) and len(alerts) > 1:
            alerts = alerts[:-1]
            request = self.flavour.build(alerts, context)
        alert = alerts[0]
        for text_field in ("hint", "summary"):
            while self._too_big(request) and getattr(alert, text_field):
                alert = replace(alert, **{text_field: _shorten(getattr(alert, text_field))})
                request = self.flavour.build([alert], context)
        return request, len(alerts)

    def _too_big(self, request: Request) -> bool:
        return bool(self.flavour.max_bytes) and request.size > self.flavour.max_bytes

    def close(self) -> None:
        self.transport.close()


def _request_credentials(request: Request) -> List[str]:
    """What this one request carries that is a credential: its signature and its Authorization header
    (a bearer token, or the Basic value requests derives from user:password in the URL)."""
    values = list(request.credentials)
    for name, value in (request.headers or {}).items():
        if name.lower() == "authorization":
            values += [value, value.partition(" ")[2]]
    return values


def effective_timing(config: ReceiverConfig, defaults: Timing) -> Timing:
    def pick(name):
        value = getattr(config, name)
        return getattr(defaults, name) if value is None else value

    return Timing(group_wait_seconds=pick("group_wait_seconds"),
                  group_interval_seconds=pick("group_interval_seconds"),
                  repeat_seconds=pick("repeat_seconds"), max_per_minute=int(pick("max_per_minute")))


def _shorten(text: str) -> str:
    keep = len(text) // 2
    return text[:keep].rstrip() + "..." if keep > 3 else ""

