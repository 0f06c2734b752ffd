"""Secrets of a receiver (webhook URLs with tokens in them, signing secrets, routing keys, bearer
tokens): where they come from. How they are kept out of every text npumon writes is redact.py's job.

A secret is given inline, in a file (`<name>_file`, surrounding whitespace stripped) or in an
environment variable (`<name>_env`). Variables named by `<name>_env` are withheld from every child
process npumon starts (npumon/childenv.py).
"""

import os
import re
from typing import Dict, Optional
from urllib.parse import urlsplit

from .config import SECRET_NAMES, ReceiverConfig, receiver_line, secret_fields

_VISIBLE_ASCII = re.compile(r"[\x21-\x7e]+")  # what an HTTP header value can carry unchanged


class SecretError(ValueError):
    """A one-line `file:line: key: problem` naming where the secret was configured."""


def resolve_secrets(receiver: ReceiverConfig, index: int, config_path: str) -> Dict[str, str]:
    """{"url": ..., "secret": ..., "routing_key": ..., "bearer_token": ...} for the secrets this receiver
    has configured."""
    values = {}
    for name in SECRET_NAMES:
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
    token = values.get("bearer_token")
    if token is not None and not _VISIBLE_ASCII.fullmatch(token):
        key = next(key for key in secret_fields("bearer_token") if getattr(receiver, key) is not None)
        raise _error(receiver, index, config_path, key, "a bearer token is one word of visible ASCII characters")
    if url is not None and token is not None and urlsplit(url).username is not None:
        key = next(key for key in secret_fields("bearer_token") if getattr(receiver, key) is not None)
        raise _error(receiver, index, config_path, key,
                     "give either a bearer token or user:password in the URL, not both")
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
