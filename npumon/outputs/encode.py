"""The text and OpenMetrics bytes of gauge and counter families, written out directly.

prometheus_client's encoders look at every sample's name and label names again on every scrape (the
OpenMetrics one walks each name character by character), which made them most of what a render cost: about
24 ms of CPU for the A3's ~3,000 series. npumon's own families are plain gauges and counters with valid names,
so their lines can be joined straight from the samples. The output is byte for byte what the installed
prometheus_client writes for the same families (tests/outputs/test_encode.py compares the two on every
built-in family and on hostile label values and help texts); any family this module does not know the shape
of (a histogram, an info, a unit, a timestamp, an exemplar, a name outside the legacy character set, an
escaping that rewrites names) goes through prometheus_client's encoder as before.
"""

import operator
import re
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

# No ":": prometheus_client's OpenMetrics encoder writes a sample name's ":" as "_" under "underscores".
_METRIC_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Escapings under which a name in the legacy character set is written as it is (not "dots": it doubles "_").
_NAME_KEEPING_ESCAPINGS = ("underscores", "allow-utf-8")
_OPENMETRICS_VERSIONS = ("1.0.0",)
OPENMETRICS_EOF = b"# EOF\n"


class _Encoder(object):
    """One format: where the two differ is the HELP escaping and the family name of a counter."""

    def __init__(self, openmetrics: bool) -> None:
        self.openmetrics = openmetrics

    def family(self, metric: Metric) -> Optional[str]:
        """The family's text, or None when its shape is not one this encoder writes."""
        if metric.type not in ("gauge", "counter") or getattr(metric, "unit", "") or \
                not _METRIC_NAME.match(metric.name):
            return None
        sample_name = metric.name + "_total" if metric.type == "counter" else metric.name
        family_name = metric.name if self.openmetrics else sample_name
        lines = ["# HELP ", family_name, " ", self._help(metric.documentation), "\n# TYPE ", family_name, " ",
                 metric.type, "\n"]
        line_of: Optional[_SampleLines] = None
        for sample in metric.samples:
            if sample.name != sample_name or sample.value is None or sample.timestamp is not None or \
                    sample.exemplar is not None or getattr(sample, "native_histogram", None) is not None:
                return None
            if line_of is None or not line_of.fits(sample.labels):
                line_of = _SampleLines.of(sample_name, sample.labels)
                if line_of is None:
                    return None
            lines.append(line_of.line(sample.labels, sample.value))
        return "".join(lines)

    def _help(self, documentation: str) -> str:
        escaped = documentation.replace("\\", r"\\").replace("\n", r"\n")
        return escaped.replace('"', r"\"") if self.openmetrics else escaped


class _SampleLines(object):
    """The lines of samples with one set of label names: a %-template with the names in sorted order, as
    prometheus_client writes them, filled with each sample's values."""

    def __init__(self, sample_name: str, keys: Tuple[str, ...]) -> None:
        self.keys = frozenset(keys)
        labels = ",".join(key + '="%s"' for key in keys)
        self.template = sample_name + ("{" + labels + "}" if keys else "") + " %s\n"
        if len(keys) > 1:
            self.values = operator.itemgetter(*keys)  # a tuple, in the template's order
        else:
            self.values = lambda labels: tuple(labels[key] for key in keys)

    @classmethod
    def of(cls, sample_name: str, labels: Dict[str, str]) -> "Optional[_SampleLines]":
        keys = tuple(sorted(labels))
        if not all(_LABEL_NAME.match(key) for key in keys):
            return None
        return cls(sample_name, keys)

    def fits(self, labels: Dict[str, str]) -> bool:
        return labels.keys() == self.keys

    def line(self, labels: Dict[str, str], value: float) -> str:
        values = self.values(labels)
        joined = "".join(values)
        if "\\" in joined or "\n" in joined or '"' in joined:
            values = tuple(v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"") for v in values)
        return self.template % (values + (floatToGoString(value),))


class _OneFamily(object):
    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterable[Metric]:
        return [self._metric]


def writes_directly(encoder: Callable[[object], bytes], openmetrics: bool) -> bool:
    """True when `encoder` (from prometheus_client's choose_encoder) writes names as they are, so the direct
    writer gives the same bytes; False for an escaping that rewrites names or an OpenMetrics version it does
    not know."""
    keywords = getattr(encoder, "keywords", None) or {}
    if keywords.get("escaping", "underscores") not in _NAME_KEEPING_ESCAPINGS:
        return False
    return not openmetrics or keywords.get("version", "1.0.0") in _OPENMETRICS_VERSIONS


def encode_families(families: Iterable[Metric], encoder: Callable[[object], bytes], openmetrics: bool) -> bytes:
    """The families in `encoder`'s format without OpenMetrics' `# EOF`: written directly where they can be,
    by `encoder` family by family where not."""
    direct = _Encoder(openmetrics) if writes_directly(encoder, openmetrics) else None
    parts: List[bytes] = []
    for metric in families:
        text = direct.family(metric) if direct is not None else None
        if text is not None:
            parts.append(text.encode("utf-8"))
            continue
        body = encoder(_OneFamily(metric))
        parts.append(body[:-len(OPENMETRICS_EOF)] if openmetrics and body.endswith(OPENMETRICS_EOF) else body)
    return b"".join(parts)
