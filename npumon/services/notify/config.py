"""The `notify:` section of the config: receivers, routes and outbox limits.

The dataclasses below are the schema (npumon/config.py turns YAML into them by their type hints);
`notify_config_problems` adds the checks that types cannot express; config/load.py names file, line and key.
Secrets (`url`, `secret`, `routing_key`, `bearer_token`) are given inline, as `<name>_file` or as `<name>_env`; they are
only read when the daemon or `npumon notify test` starts (see secrets.py), so `npumon check` never needs
them. Inline secrets are kept out of `repr()` so a logged config cannot leak them.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple, Union

import yaml

from ...config.errors import line_of
from ...model import SEVERITIES

RECEIVER_TYPES = ("webhook", "alertmanager", "dingtalk", "feishu", "wecom", "slack", "pagerduty")
SECRET_NAMES = ("url", "secret", "routing_key", "bearer_token")
_RECEIVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
# Which secrets each type needs ("required") or may have ("optional"); anything else is an error.
SECRETS_BY_TYPE = {
    "webhook": {"url": "required", "bearer_token": "optional"},
    "alertmanager": {"url": "required", "bearer_token": "optional"},
    "dingtalk": {"url": "required", "secret": "optional"},
    "feishu": {"url": "required", "secret": "optional"},
    "wecom": {"url": "required"},
    "slack": {"url": "required"},
    "pagerduty": {"url": "optional", "routing_key": "required"},
}


@dataclass(frozen=True)
class ReceiverConfig:
    """One place notifications go. Unset timing knobs take the defaults of the receiver's type
    (flavours.py), e.g. 20 messages a minute for DingTalk and WeCom."""

    name: str = ""
    type: str = ""
    url: Optional[str] = field(default=None, repr=False)
    url_file: Optional[str] = None
    url_env: Optional[str] = None
    secret: Optional[str] = field(default=None, repr=False)  # DingTalk / Feishu signing secret
    secret_file: Optional[str] = None
    secret_env: Optional[str] = None
    routing_key: Optional[str] = field(default=None, repr=False)  # PagerDuty integration key
    routing_key_file: Optional[str] = None
    routing_key_env: Optional[str] = None
    # `Authorization: Bearer <token>` (webhook, alertmanager); basic auth is user:password in the URL
    bearer_token: Optional[str] = field(default=None, repr=False)
    bearer_token_file: Optional[str] = None
    bearer_token_env: Optional[str] = None
    ca_file: Optional[str] = None  # CA bundle for a private CA; certificates are verified either way
    insecure_skip_verify: bool = False
    timeout_seconds: float = 10.0
    group_wait_seconds: Optional[float] = None  # how long a notification waits for company
    group_interval_seconds: Optional[float] = None  # least time between two messages
    repeat_seconds: Optional[float] = None  # re-send a firing alert this often; 0 = never
    max_per_minute: Optional[int] = None  # 0 = no limit
    send_resolved: bool = True


@dataclass(frozen=True)
class RouteConfig:
    """Alerts matching every given condition go to `receivers`. Every matching route adds its receivers."""

    receivers: List[str] = field(default_factory=list)
    severity: List[str] = field(default_factory=list)  # empty = any
    rule: List[str] = field(default_factory=list)  # rule ids or shell-style patterns (`temperature-*`)
    labels: Dict[str, str] = field(default_factory=dict)  # exact label values


@dataclass(frozen=True)
class NotifyConfig:
    receivers: List[ReceiverConfig] = field(default_factory=list)
    routes: List[RouteConfig] = field(default_factory=list)  # none: every alert to every receiver
    labels: Dict[str, str] = field(default_factory=dict)  # added to every alert (cluster, datacenter, ...)
    external_url: Optional[str] = None  # a link shown in messages and sent as generatorURL
    outbox_max_notifications: int = 10000
    retry_initial_seconds: float = 2.0
    retry_max_seconds: float = 300.0
    # After a restart or reload, a finding that was firing before counts as resolved only when it has
    # not come back within its rule's `for` plus this long (the slow polls need a moment to run once).
    restart_grace_seconds: float = 60.0


def secret_fields(name: str) -> Tuple[str, str, str]:
    return name, name + "_file", name + "_env"


def secret_variables(notify: NotifyConfig) -> List[str]:
    """The environment variables the receivers read secrets from (`<name>_env`): withheld from children."""
    return sorted({getattr(receiver, name + "_env") for receiver in notify.receivers for name in SECRET_NAMES
                   if getattr(receiver, name + "_env")})


def notify_config_problems(notify: NotifyConfig) -> List[Tuple[str, str]]:
    """(dotted key, problem) for the first problem in the notify section, e.g. ("notify.receivers[2].url", ...)."""
    problem = _first_problem(notify)
    if problem is None:
        return []
    keys, message = problem
    return [(dotted(keys), message)]


def dotted(keys: List[Union[str, int]]) -> str:
    text = ""
    for key in keys:
        text += "[{}]".format(key) if isinstance(key, int) else ("." if text else "") + key
    return text


def receiver_line(config_path: str, index: int, key: str) -> str:
    """`file:line` of a receiver's key, read again from the file; for errors found after loading
    (an unreadable secret file), so they too name the line."""
    try:
        with open(config_path, encoding="utf-8") as handle:
            root = yaml.compose(handle.read(), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        root = None
    return "{}:{}".format(config_path, line_of(root, ["notify", "receivers", index, key]))


def _first_problem(notify: NotifyConfig) -> Optional[Tuple[List[Any], str]]:
    top = ["notify"]
    if notify.outbox_max_notifications < 1:
        return top + ["outbox_max_notifications"], "must be at least 1"
    if notify.retry_initial_seconds <= 0:
        return top + ["retry_initial_seconds"], "must be greater than 0"
    if notify.retry_max_seconds < notify.retry_initial_seconds:
        return top + ["retry_max_seconds"], "must be at least retry_initial_seconds"
    if notify.restart_grace_seconds < 0:
        return top + ["restart_grace_seconds"], "must be 0 or more"
    if notify.external_url is not None and not notify.external_url.startswith(("http://", "https://")):
        return top + ["external_url"], "must be an http:// or https:// URL"
    names = set()
    for index, receiver in enumerate(notify.receivers):
        where = top + ["receivers", index]
        problem = _receiver_problem(receiver)
        if problem is not None:
            return where + [problem[0]], problem[1]
        if receiver.name in names:
            return where + ["name"], "receiver {!r} is defined twice".format(receiver.name)
        names.add(receiver.name)
    for index, route in enumerate(notify.routes):
        where = top + ["routes", index]
        if not route.receivers:
            return where + ["receivers"], "a route needs at least one receiver"
        for name in route.receivers:
            if name not in names:
                return where + ["receivers"], "unknown receiver {!r} (known: {})".format(
                    name, ", ".join(sorted(names)) or "none")
        for severity in route.severity:
            if severity not in SEVERITIES:
                return where + ["severity"], "unknown severity {!r} (known: {})".format(
                    severity, ", ".join(SEVERITIES))
        if any(not pattern.strip() for pattern in route.rule):
            return where + ["rule"], "rule patterns must not be empty"
    return None


def _receiver_problem(receiver: ReceiverConfig) -> Optional[Tuple[str, str]]:
    if not receiver.name:
        return "name", "every receiver needs a name"
    if not _RECEIVER_NAME.fullmatch(receiver.name):
        return "name", "use letters, digits, '_', '.' and '-' (got {!r})".format(receiver.name)
    if receiver.type not in RECEIVER_TYPES:
        return "type", "must be one of {} (got {!r})".format(", ".join(RECEIVER_TYPES), receiver.type)
    allowed = SECRETS_BY_TYPE[receiver.type]
    for name in SECRET_NAMES:
        given = [key for key in secret_fields(name) if getattr(receiver, key) is not None]
        if len(given) > 1:
            return given[1], "give only one of {}".format(", ".join(secret_fields(name)))
        if given and name not in allowed:
            return given[0], "a {} receiver takes no {}".format(receiver.type, name)
        if not given and allowed.get(name) == "required":
            return "type", "a {} receiver needs one of {}".format(receiver.type, ", ".join(secret_fields(name)))
        if given and not str(getattr(receiver, given[0])).strip():
            return given[0], "must not be empty"
    if receiver.url is not None and not receiver.url.startswith(("http://", "https://")):
        return "url", "must be an http:// or https:// URL"
    if receiver.timeout_seconds <= 0:
        return "timeout_seconds", "must be greater than 0"
    for knob in ("group_wait_seconds", "group_interval_seconds", "repeat_seconds", "max_per_minute"):
        value = getattr(receiver, knob)
        if value is not None and value < 0:
            return knob, "must be 0 or more"
    if receiver.type == "alertmanager" and receiver.repeat_seconds == 0:
        return "repeat_seconds", "must be more than 0: Alertmanager forgets firing alerts that are not re-sent"
    if receiver.type == "alertmanager" and not receiver.send_resolved:
        return "send_resolved", "must be true: Alertmanager would keep a resolved alert firing until it expires"
    if receiver.insecure_skip_verify and receiver.ca_file:
        return "insecure_skip_verify", "give either ca_file or insecure_skip_verify, not both"
    return None

