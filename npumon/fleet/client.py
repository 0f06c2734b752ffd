"""Instant queries against Prometheus's HTTP API: the only I/O of `npumon fleet`.

Errors are one line and never carry credentials: the URL is shown without user, password or query string.
"""

import json
from typing import Dict, List, Optional, Tuple
from urllib.parse import urlsplit, urlunsplit

import requests
import requests.adapters

MAX_BODY_BYTES = 64 * 1024 * 1024

Labels = Dict[str, str]
Sample = Tuple[Labels, float]


class PrometheusError(Exception):
    """Prometheus could not be read; one line, without credentials."""


def redact_url(url: str) -> str:
    """The URL without user:password and query string, which may hold a token."""
    parts = urlsplit(url)
    netloc = parts.hostname or ""
    if ":" in netloc:
        netloc = "[{}]".format(netloc)
    if parts.port is not None:
        netloc += ":{}".format(parts.port)
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


class PrometheusClient:
    """Instant queries against Prometheus's HTTP API (/api/v1/query)."""

    def __init__(self, url: str, timeout_seconds: float = 10.0, ca_file: Optional[str] = None,
                 session: Optional[requests.Session] = None):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("expected an http:// or https:// URL, e.g. http://prometheus:9090, got {!r}"
                             .format(redact_url(url) if parts.hostname else url))
        self.url = url.rstrip("/")
        self.display_url = redact_url(self.url)
        self.timeout_seconds = timeout_seconds
        self.verify = ca_file if ca_file else True
        if session is None:
            # read.py queries from several threads at once: a connection each, kept for the next query
            session = requests.Session()
            adapter = requests.adapters.HTTPAdapter(pool_connections=1, pool_maxsize=16)
            session.mount("http://", adapter)
            session.mount("https://", adapter)
        self.session = session

    def query(self, expr: str, at: Optional[float] = None) -> List[Sample]:
        """The vector an instant query returns, as (labels, value) pairs."""
        data = {"query": expr}
        if at is not None:
            data["time"] = "{:.3f}".format(at)
        try:
            # POST: the per-host selectors can be long; Prometheus accepts form-encoded queries.
            response = self.session.post(self.url + "/api/v1/query", data=data, timeout=self.timeout_seconds,
                                         verify=self.verify, stream=True)
            body = response.raw.read(MAX_BODY_BYTES + 1, decode_content=True)
        except requests.RequestException as exc:
            raise PrometheusError("cannot reach Prometheus at {}: {}".format(self.display_url, _reason(exc))) from None
        if len(body) > MAX_BODY_BYTES:
            raise PrometheusError("Prometheus at {} answered more than {} MiB for {}".format(
                self.display_url, MAX_BODY_BYTES // 1048576, expr))
        try:
            document = json.loads(body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise PrometheusError("Prometheus at {} answered HTTP {} with a body that is not JSON: is this "
                                  "Prometheus's address?".format(self.display_url, response.status_code)) from None
        if not isinstance(document, dict) or document.get("status") not in ("success", "error"):
            # JSON, but not the query API's envelope: another service (or a proxy's page) at that address.
            raise PrometheusError("{} answered HTTP {} with JSON that is not a Prometheus query API answer: is "
                                  "this Prometheus's address?".format(self.display_url, response.status_code))
        if document.get("status") != "success":
            raise PrometheusError("Prometheus at {} refused the query {}: HTTP {}: {}".format(
                self.display_url, expr, response.status_code, _one_line(document.get("error")) or "no error text"))
        result = document.get("data")
        if not isinstance(result, dict) or result.get("resultType") != "vector":
            raise PrometheusError("Prometheus at {} answered {} for {}, expected a vector".format(
                self.display_url, result.get("resultType") if isinstance(result, dict) else "no data", expr))
        samples = []
        for item in result.get("result", []):
            try:
                samples.append((dict(item["metric"]), float(item["value"][1])))
            except (KeyError, IndexError, TypeError, ValueError):
                continue
        return samples


def _one_line(text: object) -> str:
    return " ".join(str(text).split())[:300] if text else ""


def _reason(exc: requests.RequestException) -> str:
    """What went wrong, without the exception text (it can quote the URL with its credentials)."""
    if isinstance(exc, requests.Timeout):
        return "timed out"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS error (use --ca-file for a private CA)"
    if isinstance(exc, requests.ConnectionError):
        return "connection failed"
    return type(exc).__name__
