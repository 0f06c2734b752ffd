"""The simulated inference server's figures: a scenario's `serving:` keys with their defaults, and the server's
/metrics answer at a moment, written with the metric names and types of the engine it imitates (vLLM,
Triton or MindIE; npumon/sources/serving/engines.py reads the same names).

Rates are constant, so the counters grow linearly: a server that had run `uptime_seconds` when the scenario
started, at `requests_per_second`, every request taking `request_latency_seconds`. `npumon check`'s one answer
then already has means since the start; the second answer of a daemon gives the rates.
"""

from typing import Any, Dict, List, Tuple

ENGINES = ("vllm", "triton", "mindie")
MODEL_NAME = "sim-model"

# key -> default; every key but `engine` is a number >= 0
DEFAULTS: Dict[str, Any] = {
    "engine": "vllm",
    "batch_size": 32,  # the running batch (vLLM, MindIE) or the mean executed batch (Triton)
    "request_latency_seconds": 2.5,
    "time_to_first_token_seconds": 0.35,
    "requests_per_second": 6.0,
    "generation_tokens_per_second": 1500.0,
    "model_load_seconds": 95.0,  # only Triton exports it
    "uptime_seconds": 3600.0,  # how long the server had run when the scenario started
}
NUMBER_KEYS = tuple(key for key in DEFAULTS if key != "engine")

# bucket bounds as the engines' own histograms use them (vLLM's e2e and TTFT buckets, in part)
_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0)


def with_defaults(serving: Dict[str, Any]) -> Dict[str, Any]:
    return dict(DEFAULTS, **serving)


def render(serving: Dict[str, Any], queue_depth: float, t: float) -> str:
    """The engine's /metrics answer at scenario time `t` with `queue_depth` requests waiting."""
    values = with_defaults(serving)
    elapsed = values["uptime_seconds"] + t
    completed = round(values["requests_per_second"] * elapsed)
    figures = {
        "waiting": float(round(queue_depth)),
        "running": float(round(values["batch_size"])),
        "completed": float(completed),
        "tokens": float(round(values["generation_tokens_per_second"] * elapsed)),
        "latency": values["request_latency_seconds"],
        "ttft": values["time_to_first_token_seconds"],
    }
    if values["engine"] == "triton":
        return _triton(values, figures)
    return _llm(figures, "vllm:" if values["engine"] == "vllm" else "")


def _llm(figures: Dict[str, float], prefix: str) -> str:
    """vLLM's families; MindIE serves the same names without the prefix."""
    labels = 'model_name="{}"'.format(MODEL_NAME)
    lines = _gauge(prefix + "num_requests_running", "Number of requests in model execution batches.", labels,
                   figures["running"])
    lines += _gauge(prefix + "num_requests_waiting", "Number of requests waiting to be processed.", labels,
                    figures["waiting"])
    lines += _counter(prefix + "request_success_total", "Count of successfully processed requests.",
                      labels + ',finished_reason="stop"' if prefix else labels, figures["completed"])
    lines += _counter(prefix + "generation_tokens_total", "Number of generation tokens processed.", labels,
                      figures["tokens"])
    lines += _histogram(prefix + "time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                        labels, figures["completed"], figures["ttft"])
    lines += _histogram(prefix + "e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.",
                        labels, figures["completed"], figures["latency"])
    return "".join(line + "\n" for line in lines)


def _triton(values: Dict[str, Any], figures: Dict[str, float]) -> str:
    """Triton's per-model families: each request one inference, dynamically batched `batch_size` at a time."""
    labels = 'model="{}",version="1"'.format(MODEL_NAME)
    completed = figures["completed"]
    lines = _counter("nv_inference_request_success", "Number of successful inference requests, all batch sizes",
                     labels, completed)
    lines += _counter("nv_inference_request_failure", "Number of failed inference requests, all batch sizes",
                      labels, 0.0)
    lines += _counter("nv_inference_count", "Number of inferences performed (does not include cached requests)",
                      labels, completed)
    lines += _counter("nv_inference_exec_count",
                      "Number of model executions performed (does not include cached requests)", labels,
                      float(round(completed / max(values["batch_size"], 1.0))))
    lines += _counter("nv_inference_request_duration_us",
                      "Cumulative inference request duration in microseconds (includes cached requests)", labels,
                      float(round(completed * figures["latency"] * 1e6)))
    lines += _gauge("nv_inference_pending_request_count",
                    "Instantaneous number of pending requests awaiting execution per-model.", labels,
                    figures["waiting"])
    lines += _gauge("nv_model_load_duration_secs", "Model load time in seconds", labels,
                    values["model_load_seconds"])
    return "".join(line + "\n" for line in lines)


def _gauge(name: str, text: str, labels: str, value: float) -> List[str]:
    return ["# HELP {} {}".format(name, text), "# TYPE {} gauge".format(name), "{}{{{}}} {}".format(name, labels,
                                                                                                   _num(value))]


def _counter(name: str, text: str, labels: str, value: float) -> List[str]:
    family = name[:-6] if name.endswith("_total") else name
    return ["# HELP {} {}".format(family, text), "# TYPE {} counter".format(family),
            "{}{{{}}} {}".format(name, labels, _num(value))]


def _histogram(name: str, text: str, labels: str, count: float, each: float) -> List[str]:
    """Every observation `each` seconds long: the buckets from the one that holds it up are full."""
    lines = ["# HELP {} {}".format(name, text), "# TYPE {} histogram".format(name)]
    for bound, shown in _bounds():
        lines.append('{}_bucket{{{},le="{}"}} {}'.format(name, labels, shown, _num(count if each <= bound else 0.0)))
    lines.append("{}_count{{{}}} {}".format(name, labels, _num(count)))
    lines.append("{}_sum{{{}}} {}".format(name, labels, _num(count * each)))
    return lines


def _bounds() -> List[Tuple[float, str]]:
    return [(bound, repr(bound)) for bound in _LATENCY_BUCKETS] + [(float("inf"), "+Inf")]


def _num(value: float) -> str:
    return repr(float(value))
