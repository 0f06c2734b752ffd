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

One poll is one HTTP GET with a deadline (fetch.py); proxy variables are ignored (the endpoint is local).
Every failure becomes a one-line status error; `poll` never raises. URLs in messages are shown without
credentials or query string, since either may hold a token.
"""

import dataclasses
import math
import time
from typing import Callable, Dict, Optional, Sequence, Union

import requests
from prometheus_client.parser import text_string_to_metric_families

from ...model import ChipSample, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Parts, Section, SingleTierSource, SourceContext, SourceError, SourceSpec
from .config import ServingConfig, display_url, serving_config_problems
from .fetch import ServingError, fetch_metrics_text, one_line

SOURCE_NAME = "serving-queue"


# --- parsing (pure) -------------------------------------------------------------------------------------


def queue_depth_from_text(text: str, metric: str, labels: Dict[str, str]) -> float:
    """The sum of `metric` over its series whose labels include `labels`; raises ServingError."""
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on a bad body
        raise ServingError("not Prometheus text format: {}".format(one_line(str(exc), 100))) from None
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
