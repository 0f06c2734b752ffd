"""The serving-queue source: how many requests wait in the local inference server's queue.

It reads the server's own Prometheus endpoint and sums one gauge over all its series (Triton has one per
model, vLLM one per model and engine), optionally only the series whose labels match a filter. The result
goes to `snapshot.host.serving_queue_depth`, which the cpu-bottleneck and serving-saturated rules use to
tell a starved NPU from an idle one.

Presets (the metric names are the servers' documented ones):

* vllm   - `vllm:num_requests_waiting` on the API server's port, http://127.0.0.1:8000/metrics
           (vllm-ascend serves the same metrics).
* triton - `nv_inference_pending_request_count` on Triton's metrics port, http://127.0.0.1:8002/metrics.
* mindie - `num_requests_waiting` (MindIE Service's Prometheus-format monitoring interface, which is only
           served when the server starts with MIES_SERVICE_MONITOR_MODE=1) on the management IP and
           metricsPort of MindIE's config.json, by default http://127.0.0.2:1027/metrics; with its
           `httpsEnabled` on, use https:// and point `ca_file` at the CA that signed its certificate.
* custom - no defaults: `url` and `metric` are required.

One poll is one HTTP GET with a deadline: connecting, waiting for the headers and each read of the body
may take the time left of `timeout_seconds`, and the deadline is checked again between reads, so a server
that trickles its answer is cut off too. The body is cut off past `max_body_bytes`; redirects are followed
only within the same scheme, host and port; proxy variables are ignored (the endpoint is local). Every failure becomes a one-line status error; `poll` never raises. URLs in messages are shown
without credentials or query string, since either may hold a token.
"""

import dataclasses
import math
import os
import re
import socket
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union
from urllib.parse import urljoin, urlsplit

import requests
import urllib3
from prometheus_client.parser import text_string_to_metric_families

from .. import __version__
from ..model import ChipSample, Snapshot
from ..outputs.families import Families, MetricSpec
from .base import Parts, Section, SingleTierSource, SourceContext, SourceError, SourceSpec

SOURCE_NAME = "serving-queue"
CUSTOM_PRESET = "custom"
MAX_REDIRECTS = 3
READ_CHUNK_BYTES = 8192

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


# --- fetching -------------------------------------------------------------------------------------------


class ServingError(Exception):
    """A one-line description of why the queue depth could not be read."""


def fetch_metrics_text(session: requests.Session, url: str, timeout_seconds: float, max_body_bytes: int,
                       verify: Union[bool, str] = True,
                       clock: Callable[[], float] = time.monotonic) -> str:
    """GET the metrics page: one deadline for the whole exchange, a size limit, same-origin redirects only.
    Raises ServingError; its message does not repeat the URL (the source puts it in front)."""
    deadline = clock() + timeout_seconds
    late = "no complete answer within {:g}s".format(timeout_seconds)
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        remaining = deadline - clock()
        if remaining <= 0:
            raise ServingError(late)
        try:
            with session.get(current, stream=True, allow_redirects=False, timeout=remaining, verify=verify,
                             headers=_REQUEST_HEADERS) as response:
                if response.is_redirect:
                    current = _same_origin_redirect(url, current, response.headers["location"])
                    continue
                if not 200 <= response.status_code < 300:
                    raise ServingError("answered HTTP {} {}".format(
                        response.status_code, _one_line(response.reason or "", 60)).rstrip())
                body = _read_body(response, max_body_bytes, deadline, clock, late)
                content_type = response.headers.get("content-type", "")
        except requests.RequestException as exc:
            raise ServingError(_describe_request_failure(exc, late)) from None
        return _decode_body(body, content_type)
    raise ServingError("more than {} redirects".format(MAX_REDIRECTS))


# identity: the body limit then counts the bytes that really arrive, and no decompression bomb can pass it.
_REQUEST_HEADERS = {
    "Accept": "text/plain;version=0.0.4;q=1, */*;q=0.1",
    "Accept-Encoding": "identity",
    "User-Agent": "npumon/" + __version__,
}


def _same_origin_redirect(original: str, current: str, location: str) -> str:
    target = urljoin(current, location)
    if _origin(target) != _origin(original):
        raise ServingError("redirects to {}; not following a redirect to another host, port or scheme "
                           "(set serving.url to the final address)".format(display_url(target)))
    return target


def _origin(url: str) -> Tuple[str, str, Optional[int]]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default_port = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port or default_port


def _read_body(response: requests.Response, max_body_bytes: int, deadline: float, clock: Callable[[], float],
               late: str) -> bytes:
    too_large = "answer larger than {} bytes (serving.max_body_bytes)".format(max_body_bytes)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body_bytes:
        raise ServingError(too_large)
    chunks = []
    size = 0
    for chunk in _body_chunks(response):
        size += len(chunk)
        if size > max_body_bytes:
            raise ServingError(too_large)
        if clock() > deadline:
            raise ServingError(late)
        chunks.append(chunk)
    return b"".join(chunks)


def _body_chunks(response: requests.Response) -> Iterator[bytes]:
    """The body as it arrives. Each socket read has the request's timeout; the caller checks the whole
    deadline between chunks, which also cuts off a server that trickles its answer byte by byte. That needs
    urllib3 2's read1 (return what has arrived); urllib3 1.26 only has reads that wait for a full chunk."""
    read1 = getattr(response.raw, "read1", None)
    if read1 is None:
        yield from response.iter_content(READ_CHUNK_BYTES)
        return
    try:
        while True:
            data = read1(READ_CHUNK_BYTES, decode_content=True)
            if not data:
                return
            yield data
    # Raise what iter_content would have raised, so _describe_request_failure sees one family of errors.
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.ConnectionError(exc) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from exc


def _decode_body(body: bytes, content_type: str) -> str:
    if content_type.lower().startswith("text/html") or body.lstrip()[:1] == b"<":
        raise ServingError("answered with an HTML page, not Prometheus metrics (is this the server's metrics "
                           "endpoint?)")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise ServingError("the answer is not UTF-8 text, so not Prometheus metrics") from None


def _describe_request_failure(exc: requests.RequestException, late: str) -> str:
    # requests' own messages repeat the full URL (query string included): build our own from the cause.
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS handshake failed (untrusted certificate? set serving.ca_file)"
    if _caused_by(exc, ConnectionRefusedError):
        return "connection refused (is the inference server running, with its metrics on?)"
    if isinstance(exc, requests.Timeout) or _caused_by(exc, _TIMEOUTS):
        return late
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "the connection broke while reading the answer"
    if isinstance(exc, requests.ConnectionError):
        cause = _innermost_os_error(exc)
        reason = cause.strerror if cause is not None and cause.strerror else "connection failed"
        return "cannot connect: {}".format(_one_line(reason, 80))
    return "request failed ({})".format(type(exc).__name__)


# A read timeout in the body surfaces as requests.ConnectionError wrapping one of these. (Not urllib3's
# TimeoutError base class: in urllib3 1.26 a refused connection is a subclass of it.)
_TIMEOUTS = (socket.timeout, TimeoutError, urllib3.exceptions.ReadTimeoutError)


def _causes(exc: BaseException):
    """The exception and everything it wraps (urllib3 keeps the cause in `reason`, requests in args[0])."""
    seen = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        todo.extend(arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException))


def _caused_by(exc: BaseException, kind: type) -> bool:
    return any(isinstance(cause, kind) for cause in _causes(exc))


def _innermost_os_error(exc: BaseException) -> Optional[OSError]:
    found = None
    for cause in _causes(exc):
        if isinstance(cause, OSError) and not isinstance(cause, requests.RequestException):
            found = cause
    return found


def _one_line(text: str, limit: int) -> str:
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


# --- parsing (pure) -------------------------------------------------------------------------------------


def queue_depth_from_text(text: str, metric: str, labels: Dict[str, str]) -> float:
    """The sum of `metric` over its series whose labels include `labels`; raises ServingError."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on a bad body
        raise ServingError("not Prometheus text format: {}".format(_one_line(str(exc), 100))) from None
    if not families:
        raise ServingError("the answer holds no metrics")
    # Match sample names, not family names: the parser renames a family (foo_total -> foo) by its TYPE.
    series = [sample for family in families for sample in family.samples if sample.name == metric]
    if not series:
        raise ServingError("no metric {} in the answer ({} other metric families; check serving.metric or "
                           "serving.preset)".format(metric, len(families)))
    matching = [sample for sample in series if all(sample.labels.get(k) == v for k, v in labels.items())]
    if not matching:
        raise ServingError("none of the {} series of {} has {}".format(len(series), metric, _label_text(labels)))
    values = [sample.value for sample in matching if math.isfinite(sample.value)]
    if not values:
        raise ServingError("{} is NaN or infinite in every matching series".format(metric))
    return float(sum(values))


def _label_text(labels: Dict[str, str]) -> str:
    return "{" + ",".join('{}="{}"'.format(name, value) for name, value in sorted(labels.items())) + "}"


# --- the source -----------------------------------------------------------------------------------------


Fetch = Callable[[requests.Session, str, float, int, Union[bool, str]], str]


class ServingQueueSource(SingleTierSource[float]):
    """The serving queue depth as a source: one tier, `serving-queue`, into Snapshot.host.serving_queue_depth."""

    name = SOURCE_NAME

    def __init__(self, config: ServingConfig, url: Optional[str] = None, fetch: Fetch = fetch_metrics_text,
                 clock: Callable[[], float] = time.time, max_age: float = 120.0):
        super().__init__(config.interval_seconds, max_age, clock)
        self.config = config
        self.url = url or config.resolved_url()
        self.metric = config.resolved_metric()
        self._fetch = fetch
        self._session = requests.Session()
        self._session.trust_env = False  # the endpoint is local: no proxy variables, no .netrc credentials

    def read(self, chips: Sequence[ChipSample]) -> float:
        try:
            text = self._fetch(self._session, self.url, self.config.timeout_seconds, self.config.max_body_bytes,
                               self.config.ca_file or True)
            return queue_depth_from_text(text, self.metric, self.config.labels)
        except ServingError as exc:
            raise SourceError("{}: {}".format(display_url(self.url), exc)) from None

    def contribute(self, parts: Parts, now: float) -> Parts:
        depth = self.reading.value(now)
        if depth is None:
            return parts
        return dataclasses.replace(parts, host=dataclasses.replace(parts.host, serving_queue_depth=depth))

    def close(self) -> None:
        self._session.close()


def build(context: SourceContext) -> Optional[ServingQueueSource]:
    """The serving source if the config turns it on; a simulated host's queue endpoint always turns it on,
    read with the vLLM preset (the format the simulator serves) and the config's timing settings."""
    config, max_age = context.config.serving, context.config.max_age_seconds
    simulated_url = context.target.serving_url
    if simulated_url is not None:
        return ServingQueueSource(ServingConfig(
            enabled=True, preset="vllm", interval_seconds=config.interval_seconds,
            timeout_seconds=config.timeout_seconds, max_body_bytes=config.max_body_bytes), url=simulated_url,
            clock=context.clock, max_age=max_age)
    if not config.enabled:
        return None
    return ServingQueueSource(config, clock=context.clock, max_age=max_age)


METRICS = (MetricSpec("npumon_host_serving_queue_depth", (), "Requests waiting in the inference server's queue."),)


def export(snapshot: Snapshot, out: Families) -> None:
    out.add("npumon_host_serving_queue_depth", snapshot.host.serving_queue_depth)


SPEC = SourceSpec(SOURCE_NAME, build, section=Section("serving", ServingConfig,
                                                      lambda section, config: serving_config_problems(section)),
                  metrics=METRICS, export=export)
