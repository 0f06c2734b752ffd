"""Metric families as every exporting module declares and fills them: a MetricSpec per family (name, labels,
help) and Families, which collects gauge samples for one scrape. A leaf module: sources declare their families
with it without importing the exporter.
"""

import math
from collections import namedtuple
from typing import Dict, List, Sequence, Tuple

from prometheus_client.core import GaugeMetricFamily, Metric

MetricSpec = namedtuple("MetricSpec", "name labels help")

# One family's samples: label values (as strings, in the spec's order) -> value, in first-use order.
Rows = Dict[Tuple[str, ...], float]


class Families:
    """Gauge families in first-use order. A missing or non-finite value adds no sample, and a label set
    seen before keeps its first value, so the exposition never carries NaN or duplicate series.

    The samples are kept as plain rows (`rows()`), which outputs/encode.py writes straight into the exposition;
    prometheus_client's objects are built only for those who ask for them (`families()`)."""

    def __init__(self, specs: Dict[str, MetricSpec]) -> None:
        self._specs = specs
        self._rows: Dict[str, Rows] = {}

    def add(self, name: str, value, labels: Sequence = ()) -> None:
        spec = self._specs[name]
        if len(labels) != len(spec.labels):
            raise ValueError("{} takes labels {}, got {!r}".format(name, spec.labels, labels))
        if value is None or not math.isfinite(value):
            return
        # a list, not a generator: this runs for every series of every render
        label_values = tuple(["" if label is None else str(label) for label in labels])
        rows = self._rows.get(name)
        if rows is None:
            self._rows[name] = {label_values: float(value)}
        elif label_values not in rows:
            rows[label_values] = float(value)

    def rows(self) -> List[Tuple[str, MetricSpec, Rows]]:
        """Every family with at least one sample: its name, spec and rows, in first-use order."""
        return [(name, self._specs[name], rows) for name, rows in self._rows.items()]

    def families(self) -> List[Metric]:
        families = []
        for name, spec, rows in self.rows():
            family = GaugeMetricFamily(name, spec.help, labels=spec.labels)
            for label_values, value in rows.items():
                family.add_metric(label_values, value)
            families.append(family)
        return families
