"""What each inference server exports for the figures npumon reads besides its queue, by the names on its
/metrics page (docs/serving.md lists each name with the document it comes from). Data only.

A figure an engine does not export is None here and null in npumon's output: vLLM and MindIE export no model
load time, Triton no time to first token or generated tokens (its generic metrics know inferences, not tokens).

* vllm (also vllm-ascend, which serves vLLM's own metrics): the running batch is `vllm:num_requests_running`
  (continuous batching: the requests running now are the batch), latencies are histograms in seconds.
* triton: the batch is the mean executed batch, `nv_inference_count` / `nv_inference_exec_count` (Triton's
  own reading of them); latency is the counter `nv_inference_request_duration_us` (microseconds, summed
  over requests) over the requests handled; model load time the gauge `nv_model_load_duration_secs`.
* mindie: vLLM's names without the `vllm:` prefix (MindIE Service's Prometheus interface).
"""

from dataclasses import dataclass
from typing import Dict, Optional, Tuple


@dataclass(frozen=True)
class Histogram:
    """A latency as a sum and a count of observations (a histogram's, or two counters'): the mean is
    Δsum / Δcount, in seconds after `scale`."""

    sum_name: str
    count_names: Tuple[str, ...]  # summed: Triton counts successes and failures apart
    scale: float = 1.0  # to seconds


@dataclass(frozen=True)
class Engine:
    name: str
    running: Optional[str] = None  # gauge: requests in the running batch
    batch: Optional[Tuple[str, str]] = None  # counters (inferences, executions): mean batch = Δfirst / Δsecond
    e2e: Optional[Histogram] = None
    ttft: Optional[Histogram] = None
    completed: Optional[str] = None  # counter: requests completed
    generation_tokens: Optional[str] = None  # counter: tokens generated
    model_load: Optional[str] = None  # gauge: seconds the last load of each model took
    # the setting that bounds the batch, for the hint of the serving-small-batch rule
    batch_setting: str = ""


VLLM = Engine(
    "vllm",
    running="vllm:num_requests_running",
    e2e=Histogram("vllm:e2e_request_latency_seconds_sum", ("vllm:e2e_request_latency_seconds_count",)),
    ttft=Histogram("vllm:time_to_first_token_seconds_sum", ("vllm:time_to_first_token_seconds_count",)),
    completed="vllm:request_success_total",
    generation_tokens="vllm:generation_tokens_total",
    batch_setting="vLLM's --max-num-seqs, and --max-num-batched-tokens where it caps the tokens of one step",
)

TRITON = Engine(
    "triton",
    batch=("nv_inference_count", "nv_inference_exec_count"),
    e2e=Histogram("nv_inference_request_duration_us", ("nv_inference_request_success", "nv_inference_request_failure"),
                  scale=1e-6),
    completed="nv_inference_request_success",
    model_load="nv_model_load_duration_secs",
    batch_setting="max_batch_size in the model's config.pbtxt, with dynamic_batching on (preferred_batch_size, "
                  "max_queue_delay_microseconds)",
)

MINDIE = Engine(
    "mindie",
    running="num_requests_running",
    e2e=Histogram("e2e_request_latency_seconds_sum", ("e2e_request_latency_seconds_count",)),
    ttft=Histogram("time_to_first_token_seconds_sum", ("time_to_first_token_seconds_count",)),
    completed="request_success_total",
    generation_tokens="generation_tokens_total",
    batch_setting="maxBatchSize, and maxPrefillBatchSize, in ScheduleConfig of MindIE Service's config.json",
)

ENGINES: Dict[str, Engine] = {engine.name: engine for engine in (VLLM, TRITON, MINDIE)}


def metric_names(engine: Engine) -> Tuple[str, ...]:
    """Every metric name the engine's figures are read from."""
    names = [engine.running, engine.completed, engine.generation_tokens, engine.model_load]
    names += list(engine.batch or ())
    for histogram in (engine.e2e, engine.ttft):
        if histogram is not None:
            names += [histogram.sum_name] + list(histogram.count_names)
    return tuple(name for name in names if name is not None)
