"""The inference server's figures from its Prometheus text: one parse of the answer, a family at a time, keeping
only the samples npumon reads (the queue gauge and the engine's metrics, engines.py); then the figures of one
poll from this answer and the one before. Pure functions, no I/O.

Counters and histograms are cumulative since the server started, so:

* a latency is the mean over the requests finished since the previous answer (Δsum / Δcount); on the first
  answer, or when none finished since, or after a restart (a counter went down), the mean since the start;
* a throughput needs two answers: None on the first and after a restart;
* Triton's batch is Δinferences / Δexecutions, likewise falling back to the whole run.
"""

import math
import re
from dataclasses import dataclass
from typing import Dict, Iterable, Iterator, Optional, Tuple

from prometheus_client.parser import text_fd_to_metric_families

from ..lines import iter_lines
from .engines import ENGINES, TRITON, Engine, Histogram
from .fetch import ServingError, one_line


@dataclass(frozen=True)
class Exposition:
    """What one answer holds for npumon: the queue depth, and each wanted metric summed over its matching,
    finite series (a metric the answer lacks is absent)."""

    queue_depth: float
    values: Dict[str, float]


@dataclass(frozen=True)
class Figures:
    """One poll's figures; None where the engine does not export it or one answer is not enough."""

    engine: Optional[str] = None
    running_requests: Optional[float] = None
    batch_size: Optional[float] = None  # mean requests per batch (per execution on Triton)
    request_latency_seconds: Optional[float] = None  # mean end-to-end latency
    time_to_first_token_seconds: Optional[float] = None  # mean
    requests_per_second: Optional[float] = None  # requests completed
    generation_tokens_per_second: Optional[float] = None
    model_load_seconds: Optional[float] = None  # the slowest model's last load
    batch_setting: Optional[str] = None  # what bounds the batch on this engine (for the rules' hints)


def parse_exposition(text: str, queue_metric: str, labels: Dict[str, str],
                     wanted: Iterable[str] = ()) -> Exposition:
    """The queue depth (the sum of `queue_metric` over its series whose labels include `labels`) and the
    `wanted` metrics likewise summed (Triton's model load time, the one gauge not summed, is the largest);
    raises ServingError (one line) when the answer is not metrics or has no usable queue gauge.

    Memory stays small whatever the answer: the parser holds a whole family at a time, so the sample lines of
    metrics npumon does not read are dropped before it sees them, at most MAX_SAMPLE_LINES of the others are
    given to it, and only running sums are kept (a server's whole answer as parsed samples takes some 13 times
    the text: an 8 MiB vLLM answer, 100 MiB)."""
    names = frozenset(wanted) | {queue_metric}
    line_filter = _LineFilter(names)
    families, queue_series = 0, 0
    found: Dict[str, Optional[float]] = {}  # name -> the finite values' sum (max) so far; None: none finite yet
    try:
        # (the parser's own text_string_to_metric_families first copies the text into a StringIO, at up to
        # 4 bytes a character)
        for family in text_fd_to_metric_families(line_filter.lines(text)):
            families += 1
            for sample in family.samples:
                # Match sample names, not family names: the parser renames a family (foo_total -> foo) by its
                # TYPE, and names a counter's sample foo_total although the text says foo (Triton's counters).
                name = _wanted_name(sample.name, family.type, names)
                if name is None:
                    continue
                queue_series += name == queue_metric
                if not all(sample.labels.get(k) == v for k, v in labels.items()):
                    continue
                so_far = found.get(name)
                if not math.isfinite(sample.value):
                    found[name] = so_far
                elif so_far is None:
                    found[name] = float(sample.value)
                else:
                    found[name] = max(so_far, sample.value) if name == _MAX_NAME else so_far + sample.value
    except ServingError:
        raise
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, IndexError, ... on a bad body
        raise ServingError("not Prometheus text format: {}".format(one_line(str(exc), 100))) from None
    families += line_filter.unannounced
    if not families:
        raise ServingError("the answer holds no metrics")
    if not queue_series:
        raise ServingError("no metric {} in the answer ({} other metric families; check serving.metric or "
                           "serving.preset)".format(queue_metric, families))
    if queue_metric not in found:
        raise ServingError("none of the {} series of {} has {}".format(queue_series, queue_metric,
                                                                      _label_text(labels)))
    # (a sum of huge values can overflow to infinity)
    values = {name: value for name, value in found.items() if value is not None and math.isfinite(value)}
    if queue_metric not in values:
        raise ServingError("{} is NaN or infinite in every matching series".format(queue_metric))
    return Exposition(values.pop(queue_metric), values)


# Sample lines of the metrics npumon reads (histogram buckets not among them): a real server writes a few per
# model and engine; more is not an inference server's answer.
MAX_SAMPLE_LINES = 10000

# A well-formed sample line: its name, then labels, a value and perhaps a timestamp. A line of another shape is
# given to the parser, which says what is wrong with it.
_SAMPLE_LINE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{.*\})?[ \t]+\S+(?:[ \t]+\S+)?[ \t]*\Z")


class _LineFilter:
    """The answer's lines without the samples of metrics not in `names` (`lines`); raises ServingError past
    MAX_SAMPLE_LINES of those in it. `unannounced` counts the families whose samples it dropped with no
    # HELP or # TYPE line before them (the parser, which sees those lines, counts the others)."""

    def __init__(self, names: frozenset):
        self.names = names
        self.unannounced = 0

    def lines(self, text: str) -> Iterator[str]:
        kept, announced, dropped = 0, "", ""
        for line in iter_lines(text, keepends=True):
            if line.startswith("#"):
                words = line.split(None, 3)
                announced = words[2] if len(words) > 2 and words[1] in ("HELP", "TYPE") else announced
                yield line
                continue
            match = _SAMPLE_LINE.match(line.rstrip("\n"))
            if match is None:
                yield line  # the parser says what is wrong with it
                continue
            name = match.group(1)
            if name not in self.names and not (name.endswith("_total") and name[:-6] in self.names):
                family = _SUFFIX.sub("", name)
                if family not in (announced, _SUFFIX.sub("", announced), dropped):
                    self.unannounced += 1
                dropped = family
                continue
            kept += 1
            if kept > MAX_SAMPLE_LINES:
                raise ServingError("more than {} series of the metrics npumon reads: not an inference server's "
                                   "answer (check serving.url)".format(MAX_SAMPLE_LINES))
            yield line


# what a family's sample names add to its name
_SUFFIX = re.compile(r"(_total|_bucket|_sum|_count|_created|_info)\Z")


_MAX_NAME = TRITON.model_load  # one gauge per model: the slowest load is the figure


def _wanted_name(sample_name: str, family_type: str, names: frozenset) -> Optional[str]:
    if sample_name in names:
        return sample_name
    if family_type == "counter" and sample_name.endswith("_total") and sample_name[:-6] in names:
        return sample_name[:-6]
    return None


def _label_text(labels: Dict[str, str]) -> str:
    return "{" + ",".join('{}="{}"'.format(name, value) for name, value in sorted(labels.items())) + "}"


def figures(engine: Optional[Engine], current: Exposition, now: float,
            previous: Optional[Tuple[float, Exposition]] = None) -> Figures:
    """The figures of the answer `current` read at `now`, given the previous answer (its time and itself)."""
    if engine is None:
        return Figures()
    values = current.values
    before = previous[1].values if previous is not None else None
    elapsed = now - previous[0] if previous is not None else 0.0
    if before is not None and (elapsed <= 0 or _restarted(before, values)):
        before = None
    return Figures(
        engine=engine.name,
        running_requests=_sane(values.get(engine.running) if engine.running else None),
        batch_size=_sane(_batch(engine, values, before)),
        request_latency_seconds=_sane(_mean(engine.e2e, values, before)),
        time_to_first_token_seconds=_sane(_mean(engine.ttft, values, before)),
        requests_per_second=_sane(_rate(engine.completed, values, before, elapsed)),
        generation_tokens_per_second=_sane(_rate(engine.generation_tokens, values, before, elapsed)),
        model_load_seconds=_sane(values.get(engine.model_load) if engine.model_load else None),
        batch_setting=engine.batch_setting,
    )


def _sane(value: Optional[float]) -> Optional[float]:
    """None for what no server means: a negative count, time or rate, or one that overflowed."""
    return value if value is not None and math.isfinite(value) and value >= 0 else None


# Every gauge any engine's figures read; all other names are counters or histogram sums and counts.
_GAUGES = frozenset(name for engine in ENGINES.values() for name in (engine.running, engine.model_load) if name)


def _restarted(before: Dict[str, float], values: Dict[str, float]) -> bool:
    """A cumulative value went down: the server restarted between the answers."""
    return any(values[name] < value for name, value in before.items() if name in values and name not in _GAUGES)


def _delta(name: str, values: Dict[str, float], before: Optional[Dict[str, float]]) -> Optional[float]:
    if name not in values:
        return None
    if before is None or name not in before:
        return values[name]
    return values[name] - before[name]


def _mean(histogram: Optional[Histogram], values: Dict[str, float],
          before: Optional[Dict[str, float]]) -> Optional[float]:
    """Mean over the requests since `before`, else since the start."""
    if histogram is None:
        return None
    for since in (before, None) if before is not None else (None,):
        total = _delta(histogram.sum_name, values, since)
        counts = [_delta(name, values, since) for name in histogram.count_names]
        known = [count for count in counts if count is not None]
        if total is None or not known:
            return None
        if sum(known) > 0:
            return total / sum(known) * histogram.scale
    return None


def _batch(engine: Engine, values: Dict[str, float], before: Optional[Dict[str, float]]) -> Optional[float]:
    if engine.running is not None:
        return values.get(engine.running)
    if engine.batch is None:
        return None
    inferences, executions = engine.batch
    for since in (before, None) if before is not None else (None,):
        done, runs = _delta(inferences, values, since), _delta(executions, values, since)
        if done is None or runs is None:
            return None
        if runs > 0:
            return done / runs
    return None


def _rate(name: Optional[str], values: Dict[str, float], before: Optional[Dict[str, float]],
          elapsed: float) -> Optional[float]:
    if name is None or before is None or name not in values or name not in before:
        return None
    return (values[name] - before[name]) / elapsed
