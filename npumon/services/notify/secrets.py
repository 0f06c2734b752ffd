"""Secrets of a receiver (webhook URLs with tokens in them, signing secrets, routing keys): where they
come from, and how they are kept out of every text npumon writes.

A secret is given inline, in a file (`<name>_file`, surrounding whitespace stripped) or in an
environment variable (`<name>_env`). `Redactor` replaces every secret value -- and, for URLs, every
query value and the path, where services put their tokens -- by `<secret>` in error texts and service
answers before they reach a log, the outbox, the event history or the terminal.
"""

import os
from typing import Dict, Iterable, List, Optional
from urllib.parse import parse_qsl, urlsplit

from .config import ReceiverConfig, receiver_line, secret_fields

MASK = "<secret>"
_SHORTEST_REDACTED = 4  # shorter strings ("v2", "1") would mangle ordinary text, and guess nothing


class SecretError(ValueError):
    """A one-line `file:line: key: problem` naming where the secret was configured."""


def resolve_secrets(receiver: ReceiverConfig, index: int, config_path: str) -> Dict[str, str]:
    """{"url": ..., "secret": ..., "routing_key": ...} for the secrets this receiver has configured."""
    values = {}
    for name in ("url", "secret", "routing_key"):
        inline, file_key, env_key = secret_fields(name)
        if getattr(receiver, inline) is not None:
            values[name] = getattr(receiver, inline).strip()
        elif getattr(receiver, file_key) is not None:
            values[name] = _read_secret_file(getattr(receiver, file_key), receiver, index, config_path, file_key)
        elif getattr(receiver, env_key) is not None:
            values[name] = _read_secret_env(getattr(receiver, env_key), receiver, index, config_path, env_key)
    url = values.get("url")
    if url is not None and not url.startswith(("http://", "https://")):
        key = next(key for key in secret_fields("url") if getattr(receiver, key) is not None)
        raise _error(receiver, index, config_path, key, "the URL must start with http:// or https://")
    return values


def _read_secret_file(path: str, receiver: ReceiverConfig, index: int, config_path: str, key: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            value = handle.read().strip()
    except OSError as exc:
        raise _error(receiver, index, config_path, key,
                     "cannot read {}: {}".format(path, exc.strerror or exc)) from None
    except UnicodeDecodeError:
        raise _error(receiver, index, config_path, key, "{} is not UTF-8 text".format(path)) from None
    if not value:
        raise _error(receiver, index, config_path, key, "{} is empty".format(path))
    return value


def _read_secret_env(variable: str, receiver: ReceiverConfig, index: int, config_path: str, key: str) -> str:
    value = os.environ.get(variable, "").strip()
    if not value:
        raise _error(receiver, index, config_path, key, "environment variable {} is not set".format(variable))
    return value


def _error(receiver: ReceiverConfig, index: int, config_path: str, key: str, problem: str) -> SecretError:
    return SecretError("{}: notify.receivers[{}].{}: receiver {!r}: {}".format(
        receiver_line(config_path, index, key), index, key, receiver.name, problem))


class Redactor:
    """Replaces secret values in any text by `<secret>`."""

    def __init__(self, secrets: Iterable[str]):
        parts = set()
        for value in secrets:
            parts.add(value)
            parts.update(_url_parts(value))
        # Longest first, so a URL is masked whole before its parts are.
        self._parts: List[str] = sorted((p for p in parts if len(p) >= _SHORTEST_REDACTED), key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for part in self._parts:
            text = text.replace(part, MASK)
        return text


def _url_parts(value: str) -> List[str]:
    """The path, query values and password of a URL: DingTalk and WeCom put the token in the query,
    Slack and Feishu in the path. Not a URL: nothing."""
    if not value.startswith(("http://", "https://")):
        return []
    parts = urlsplit(value)
    found = [parts.path, parts.query, parts.password or ""] + [v for _, v in parse_qsl(parts.query)]
    found += [segment for segment in parts.path.split("/") if len(segment) >= 8]  # tokens, not "api", "send"
    return [part for part in found if part and part != "/"]


def safe_endpoint(url: Optional[str]) -> str:
    """`scheme://host:port` of a URL: enough to say where a message went, never a token."""
    if not url:
        return "-"
    parts = urlsplit(url)
    host = parts.hostname or "?"
    if ":" in host:
        host = "[{}]".format(host)
    try:
        port = parts.port
    except ValueError:
        port = None
    return "{}://{}{}".format(parts.scheme, host, ":{}".format(port) if port else "")
