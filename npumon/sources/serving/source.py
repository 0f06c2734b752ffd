"""The serving-queue source: how many requests wait in the local inference server's queue, and the server's
own figures beside it (running batch, latency, throughput, model load time; engines.py, figures.py).

It reads the server's own Prometheus endpoint and sums one gauge over all its series (Triton has one per
model, vLLM one per model and engine), optionally only the series whose labels match a filter. The result
goes to `snapshot.host.serving_queue_depth`, which the cpu-bottleneck and serving-saturated rules use to
tell a starved NPU from an idle one. The figures, read from the same answer by the preset's metric names
(none with the custom preset), go to `snapshot.host.extra["serving"]` and the `serving_*` host facts.

Presets (the metric names are the servers' documented ones):

* vllm   - `vllm:num_requests_waiting` on the API server's port, http://127.0.0.1:8000/metrics
           (vllm-ascend serves the same metrics).
* triton - `nv_inference_pending_request_count` on Triton's metrics port, http://127.0.0.1:8002/metrics.
* mindie - `num_requests_waiting` (MindIE Service's Prometheus-format monitoring interface, which is only
           served when the server starts with MIES_SERVICE_MONITOR_MODE=1) on the management IP and
           metricsPort of MindIE's config.json, by default http://127.0.0.2:1027/metrics; with its
           `httpsEnabled` on, use https:// and point `ca_file` at the CA that signed its certificate.
* custom - no defaults: `url` and `metric` are required.

One poll is one HTTP GET with a deadline (fetch.py); proxy variables are ignored (the endpoint is local).
Every failure becomes a one-line status error; `poll` never raises. URLs in messages are shown without
credentials or query string, since either may hold a token.
"""

import dataclasses
import time
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import requests

from ...model import ChipSample, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Parts, Section, SingleTierSource, SourceContext, SourceError, SourceSpec
from .config import ServingConfig, display_url, serving_config_problems
from .engines import ENGINES, metric_names
from .fetch import ServingError, fetch_metrics_text
from .figures import Exposition, Figures, figures, parse_exposition

SOURCE_NAME = "serving-queue"


# --- the source -----------------------------------------------------------------------------------------


Fetch = Callable[[requests.Session, str, float, int, Union[bool, str]], str]


ServingReading = Tuple[float, Figures]  # the queue depth, the figures


class ServingQueueSource(SingleTierSource[ServingReading]):
    """The serving queue depth and figures as a source: one tier, `serving-queue`, into
    Snapshot.host.serving_queue_depth and Snapshot.host.extra["serving"]."""

    name = SOURCE_NAME

    def __init__(self, config: ServingConfig, url: Optional[str] = None, fetch: Fetch = fetch_metrics_text,
                 clock: Callable[[], float] = time.time, max_age: float = 120.0):
        super().__init__(config.interval_seconds, max_age, clock)
        self.config = config
        self.url = url or config.resolved_url()
        self.metric = config.resolved_metric()
        self.engine = ENGINES.get(config.preset)
        self._wanted = metric_names(self.engine) if self.engine is not None else ()
        self._previous: Optional[Tuple[float, Exposition]] = None  # the last answer and when it was read
        self._fetch = fetch
        self._session = requests.Session()
        self._session.trust_env = False  # the endpoint is local: no proxy variables, no .netrc credentials

    def read(self, chips: Sequence[ChipSample]) -> ServingReading:
        try:
            text = self._fetch(self._session, self.url, self.config.timeout_seconds, self.config.max_body_bytes,
                               self.config.ca_file or True)
            exposition = parse_exposition(text, self.metric, self.config.labels, self._wanted)
        except ServingError as exc:
            raise SourceError("{}: {}".format(display_url(self.url), exc)) from None
        now = self.clock()
        result = figures(self.engine, exposition, now, self._previous)
        self._previous = (now, exposition)
        return exposition.queue_depth, result

    def contribute(self, parts: Parts, now: float) -> Parts:
        reading = self.reading.value(now)
        if reading is None:
            return parts
        depth, found = reading
        host = dataclasses.replace(parts.host, serving_queue_depth=depth,
                                   extra=dict(parts.host.extra, serving=dataclasses.asdict(found)))
        return dataclasses.replace(parts, host=host)

    def close(self) -> None:
        self._session.close()


def build(context: SourceContext) -> Optional[ServingQueueSource]:
    """The serving source if the config turns it on; a queue endpoint the target serves itself (a simulated
    host's) always turns it on, read with the vLLM preset (the format the simulator serves) and the config's
    timing settings."""
    config, max_age = context.config.serving, context.config.max_age_seconds
    served_url = context.target.serving_url
    if served_url is not None:
        return ServingQueueSource(ServingConfig(
            enabled=True, preset=context.target.serving_preset, interval_seconds=config.interval_seconds,
            timeout_seconds=config.timeout_seconds, max_body_bytes=config.max_body_bytes), url=served_url,
            clock=context.clock, max_age=max_age)
    if not config.enabled:
        return None
    return ServingQueueSource(config, clock=context.clock, max_age=max_age)


# figure -> (metric family, help); host facts are named serving_<figure>
_FIGURE_METRICS = (
    ("running_requests", "npumon_host_serving_running_requests",
     "Requests the inference server runs now (its running batch; vLLM, MindIE)."),
    ("batch_size", "npumon_host_serving_batch_size",
     "Requests per batch: the running batch (vLLM, MindIE), the mean executed batch since the last poll (Triton)."),
    ("request_latency_seconds", "npumon_host_serving_request_latency_seconds",
     "Mean end-to-end request latency of the requests finished since the last poll."),
    ("time_to_first_token_seconds", "npumon_host_serving_time_to_first_token_seconds",
     "Mean time to first token of the requests finished since the last poll (vLLM, MindIE)."),
    ("requests_per_second", "npumon_host_serving_requests_per_second",
     "Requests completed per second since the last poll."),
    ("generation_tokens_per_second", "npumon_host_serving_generation_tokens_per_second",
     "Tokens generated per second since the last poll (vLLM, MindIE)."),
    ("model_load_seconds", "npumon_host_serving_model_load_seconds",
     "Seconds the slowest model's last load took (Triton)."),
)

METRICS = (MetricSpec("npumon_host_serving_queue_depth", (), "Requests waiting in the inference server's queue."),) \
    + tuple(MetricSpec(name, (), text) for _figure, name, text in _FIGURE_METRICS)

FIGURE_NAMES = tuple(field.name for field in dataclasses.fields(Figures))


def serving_figures(snapshot: Snapshot) -> Dict[str, Any]:
    """The serving figures of a Snapshot, every key present (None where unknown)."""
    found = snapshot.host.extra.get("serving") or {}
    return {name: found.get(name) for name in FIGURE_NAMES}


def host_facts(snapshot: Snapshot) -> Dict[str, Any]:
    """serving_engine, serving_batch_size, ...: what the rules may use."""
    return {"serving_" + name: value for name, value in serving_figures(snapshot).items()}


def export(snapshot: Snapshot, out: Families) -> None:
    out.add("npumon_host_serving_queue_depth", snapshot.host.serving_queue_depth)
    found = serving_figures(snapshot)
    for figure, name, _help in _FIGURE_METRICS:
        out.add(name, found[figure])


SPEC = SourceSpec(SOURCE_NAME, build, section=Section("serving", ServingConfig,
                                                      lambda section, config: serving_config_problems(section)),
                  host_facts=host_facts, metrics=METRICS, export=export)
