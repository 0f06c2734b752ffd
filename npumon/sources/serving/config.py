"""The `serving:` section: presets for the servers npumon knows, and the checks a type cannot express."""

import os
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit

CUSTOM_PRESET = "custom"

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


@dataclass(frozen=True)
class Preset:
    url: str
    metric: str


PRESETS = {
    "vllm": Preset("http://127.0.0.1:8000/metrics", "vllm:num_requests_waiting"),
    "triton": Preset("http://127.0.0.1:8002/metrics", "nv_inference_pending_request_count"),
    "mindie": Preset("http://127.0.0.2:1027/metrics", "num_requests_waiting"),
}


@dataclass(frozen=True)
class ServingConfig:
    """The `serving:` section of the config file."""

    enabled: bool = False
    preset: str = "vllm"  # vllm | triton | mindie | custom
    url: Optional[str] = None  # default: the preset's
    metric: Optional[str] = None  # default: the preset's
    labels: Dict[str, str] = field(default_factory=dict)  # only series with all these label values count
    interval_seconds: float = 15.0
    timeout_seconds: float = 5.0
    max_body_bytes: int = 8 * 1024 * 1024
    ca_file: Optional[str] = None  # CA bundle for an https:// endpoint with a private CA

    def resolved_url(self) -> Optional[str]:
        preset = PRESETS.get(self.preset)
        return self.url or (preset.url if preset else None)

    def resolved_metric(self) -> Optional[str]:
        preset = PRESETS.get(self.preset)
        return self.metric or (preset.metric if preset else None)


def serving_config_problems(config: ServingConfig) -> List[Tuple[str, str]]:
    """(dotted key, problem) for every setting that cannot work; config.py turns the first into its error."""
    problems: List[Tuple[str, str]] = []
    known = sorted(PRESETS) + [CUSTOM_PRESET]
    if config.preset not in known:
        problems.append(("serving.preset", "unknown preset {!r} (known: {})".format(config.preset, ", ".join(known))))
    url = config.resolved_url()
    if url is None:
        problems.append(("serving.url", "required with the custom preset"))
    else:
        problem = _url_problem(url)
        if problem:
            problems.append(("serving.url", problem))
    metric = config.resolved_metric()
    if metric is None:
        problems.append(("serving.metric", "required with the custom preset"))
    elif not _METRIC_NAME.match(metric):
        problems.append(("serving.metric", "{!r} is not a Prometheus metric name".format(metric)))
    for name in config.labels:
        if not _LABEL_NAME.match(name):
            problems.append(("serving.labels." + name, "not a Prometheus label name"))
    if config.interval_seconds <= 0:
        problems.append(("serving.interval_seconds", "must be greater than 0 (use enabled: false to turn it off)"))
    if config.timeout_seconds <= 0:
        problems.append(("serving.timeout_seconds", "must be greater than 0"))
    if config.max_body_bytes < 1:
        problems.append(("serving.max_body_bytes", "must be at least 1"))
    if config.ca_file is not None and not os.path.isfile(config.ca_file):
        problems.append(("serving.ca_file", "no such file: {}".format(config.ca_file)))
    return problems


def _url_problem(url: str) -> Optional[str]:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or out of range
    except ValueError as exc:
        return "not a valid URL: {}".format(exc)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "expected an http:// or https:// URL with a host, e.g. {}".format(PRESETS["vllm"].url)
    return None


def display_url(url: str) -> str:
    """The URL without user:password and query string, for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = "[{}]".format(host)
    try:
        port = parts.port
    except ValueError:
        port = None
    return "{}://{}{}{}".format(parts.scheme, host, "" if port is None else ":{}".format(port), parts.path)
