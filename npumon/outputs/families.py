"""Metric families as every exporting module declares and fills them: a MetricSpec per family (name, labels,
help) and Families, which collects gauge samples for one scrape. A leaf module: sources declare their families
with it without importing the exporter.
"""

import math
from collections import namedtuple
from typing import Dict, List, Sequence

from prometheus_client.core import GaugeMetricFamily, Metric

MetricSpec = namedtuple("MetricSpec", "name labels help")


class Families:
    """Gauge families in first-use order. A missing or non-finite value adds no sample, and a label set
    seen before keeps its first value, so the exposition never carries NaN or duplicate series."""

    def __init__(self, specs: Dict[str, MetricSpec]) -> None:
        self._specs = specs
        self._families = {}  # type: Dict[str, GaugeMetricFamily]
        self._seen = set()

    def add(self, name: str, value, labels: Sequence = ()) -> None:
        spec = self._specs[name]
        if len(labels) != len(spec.labels):
            raise ValueError("{} takes labels {}, got {!r}".format(name, spec.labels, labels))
        if value is None or not math.isfinite(value):
            return
        label_values = tuple("" if label is None else str(label) for label in labels)
        if (name, label_values) in self._seen:
            return
        self._seen.add((name, label_values))
        family = self._families.get(name)
        if family is None:
            family = self._families[name] = GaugeMetricFamily(name, spec.help, labels=spec.labels)
        family.add_metric(label_values, float(value))

    def families(self) -> List[Metric]:
        return list(self._families.values())
