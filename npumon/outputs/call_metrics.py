"""npumon_source_call*: how the npu-smi calls of each source tier went, from the one npu-smi runner's counts.

Read at scrape time (counters since start, so rates work across polls): calls that ran, failures and timeouts
among them, calls that found no free slot in time, the time spent waiting for a slot, polls that left calls out
(the tier cannot finish within its interval at this npu-smi speed), and a histogram of call durations. With
the runner's call budget (sources/budget.py): how busy its shared slots were, and the stretch it set.
"""

from typing import Callable, Dict, Iterator, Optional, Tuple

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from ..sources.budget import BudgetState
from ..sources.runner import DURATION_BUCKETS, CallStats, LabelStats

OTHER = "other"  # calls made without a label (the fan driver)


class CallStatsCollector(Collector):
    def __init__(self, get_stats: Callable[[], CallStats], get_budget: Optional[Callable[[], BudgetState]] = None):
        self._get_stats = get_stats  # the daemon's current runner: a reload replaces it
        self._get_budget = get_budget

    def collect(self) -> Iterator[Metric]:
        return self.collect_state(self.render_state())

    def render_state(self) -> Tuple[Dict[str, LabelStats], Optional[BudgetState]]:
        """The counts now: /metrics renders these families again only when a call changed them."""
        return self._get_stats().snapshot(), None if self._get_budget is None else self._get_budget()

    def collect_state(self, state: Tuple[Dict[str, LabelStats], Optional[BudgetState]]) -> Iterator[Metric]:
        stats, budget = state
        if budget is not None:
            yield GaugeMetricFamily("npumon_call_slots_busy_ratio", "Share of the shared npu-smi/hccn_tool call "
                                    "slots' time held by calls over the last budget window.", value=budget.busy_share)
            yield GaugeMetricFamily("npumon_poll_interval_stretch", "Times their configured intervals that the "
                                    "npu-smi query and hccn_tool tiers poll at (1: as configured; more: the call "
                                    "slots are too busy for them).", value=budget.stretch)
        counters = (
            ("npumon_source_calls_total", "npu-smi calls the source made that ran.", "calls"),
            ("npumon_source_call_failures_total", "npu-smi calls that ran and did not answer normally "
                                                  "(timeouts included).", "failures"),
            ("npumon_source_call_timeouts_total", "npu-smi calls killed at their deadline.", "timeouts"),
            ("npumon_source_calls_not_started_total", "npu-smi calls that found no free slot or no time left.",
             "not_started"),
            ("npumon_source_call_queue_seconds_total", "Time the source's npu-smi calls waited for a free slot.",
             "queue_seconds"),
            ("npumon_source_overruns_total", "Polls that left calls out: the tier could not finish within its "
                                             "interval.", "overruns"),
        )
        for name, help_text, attribute in counters:
            family = CounterMetricFamily(name[:-len("_total")], help_text, labels=("source",))
            for label, counts in sorted(stats.items()):
                family.add_metric((label or OTHER,), getattr(counts, attribute))
            yield family
        histogram = HistogramMetricFamily("npumon_source_call_duration_seconds",
                                          "Duration of the source's npu-smi calls that ran.", labels=("source",))
        for label, counts in sorted(stats.items()):
            buckets = [(str(bound), count) for bound, count in zip(DURATION_BUCKETS, counts.buckets)]
            buckets.append(("+Inf", counts.calls))
            histogram.add_metric((label or OTHER,), buckets, counts.duration_sum)
        yield histogram
