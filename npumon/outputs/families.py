"""Metric families as every exporting module declares and fills them: a MetricSpec per family (name, labels,
help) and Families, which collects gauge samples for one scrape. A leaf module: sources declare their families
with it without importing the exporter.
"""

import math
import threading
from collections import OrderedDict, namedtuple
from typing import Any, Callable, Dict, Hashable, List, Sequence, Set, Tuple

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
        # families with a -0.0 among their values: rows compare equal to the same rows with 0.0, their text does not
        self.negative_zero: Set[str] = set()

    def add(self, name: str, value, labels: Sequence = ()) -> None:
        spec = self._specs[name]
        if len(labels) != len(spec.labels):
            raise ValueError("{} takes labels {}, got {!r}".format(name, spec.labels, labels))
        if value is None or not math.isfinite(value):
            return
        # a list, not a generator: this runs for every series of every render
        label_values = tuple(["" if label is None else str(label) for label in labels])
        if value == 0 and math.copysign(1.0, value) < 0:
            self.negative_zero.add(name)
        rows = self._rows.get(name)
        if rows is None:
            self._rows[name] = {label_values: float(value)}
        elif label_values not in rows:
            rows[label_values] = float(value)

    def part(self) -> "Families":
        """An empty Families of the same specs: filled apart, then merged (a RowsMemo keeps such parts)."""
        return Families(self._specs)

    def merge(self, part: "Families") -> None:
        """Every row of `part`, as if its adds had been made here, in their order."""
        for name, rows in part._rows.items():
            mine = self._rows.get(name)
            if mine is None:
                self._rows[name] = dict(rows)  # a copy: this render's later adds must not reach the part
            elif mine.keys().isdisjoint(rows):  # the usual case: another chip's rows of the family
                mine.update(rows)
            else:
                for label_values, value in rows.items():
                    mine.setdefault(label_values, value)
        self.negative_zero |= part.negative_zero

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


class RowsMemo:
    """The rows a fill function added for one subject (a chip), kept with the inputs it read. A render whose
    inputs for the subject equal (==) the last ones merges the kept rows instead of adding them one by one:
    a chip's network and link values change once a minute or less, its table values every 15 s, and each
    render adds a few hundred rows per chip. Thread-safe (two servers may render at once); holds at most
    `limit` subjects."""

    def __init__(self, limit: int = 512) -> None:
        self._limit = limit
        self._kept: "OrderedDict[Hashable, Tuple[Any, Families]]" = OrderedDict()
        self._lock = threading.Lock()

    def add(self, out: Families, subject: Hashable, inputs: Any, fill: Callable[[Families], None]) -> None:
        with self._lock:
            kept = self._kept.get(subject)
        if kept is None or kept[1]._specs is not out._specs or kept[0] != inputs:
            part = out.part()
            fill(part)
            kept = (inputs, part)
            with self._lock:
                self._kept[subject] = kept
                self._kept.move_to_end(subject)
                while len(self._kept) > self._limit:
                    self._kept.popitem(last=False)
        out.merge(kept[1])
