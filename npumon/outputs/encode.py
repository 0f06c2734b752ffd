"""The text and OpenMetrics bytes of gauge, counter and histogram families, written out directly.

prometheus_client's encoders look at every sample's name and label names again on every scrape (the
OpenMetrics one walks each name character by character), which made them most of what a render cost: about
24 ms of CPU for the A3's ~3,000 series. npumon's own families are plain gauges, counters and histograms with
valid names, so their lines can be joined straight from the samples. The output is byte for byte what the installed
prometheus_client writes for the same families (tests/outputs/test_encode.py compares the two on every
built-in family and on hostile label values and help texts); any family this module does not know the shape
of (a histogram, an info, a unit, a timestamp, an exemplar, a name outside the legacy character set, an
escaping that rewrites names) goes through prometheus_client's encoder as before.

The snapshot's own families (outputs/families.py) skip prometheus_client's objects altogether: `encode_rows`
writes their rows, and a LineCache keeps each series' line start (name and labels, escaped) and each value's
text from one render to the next, since most series and many values are the same at every render.
"""

import math
import operator
import re
from typing import Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from .families import Families, Rows

# No ":": prometheus_client's OpenMetrics encoder writes a sample name's ":" as "_" under "underscores".
_METRIC_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
# Escapings under which a name in the legacy character set is written as it is (not "dots": it doubles "_").
_NAME_KEEPING_ESCAPINGS = ("underscores", "allow-utf-8")
_OPENMETRICS_VERSIONS = ("1.0.0",)
# The sample names (after the family's name) of each type written here. Not `_created`: OpenMetrics writes it
# with the family, the text format as a gauge family of its own, so such a family goes through prometheus_client.
_SAMPLE_SUFFIXES = {"gauge": ("",), "counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
OPENMETRICS_EOF = b"# EOF\n"
_ZERO, _NEGATIVE_ZERO = floatToGoString(0.0), floatToGoString(-0.0)


class _Encoder(object):
    """One format: where the two differ is the HELP escaping and the family name of a counter."""

    def __init__(self, openmetrics: bool) -> None:
        self.openmetrics = openmetrics

    def family(self, metric: Metric) -> Optional[str]:
        """The family's text, or None when its shape is not one this encoder writes."""
        suffixes = _SAMPLE_SUFFIXES.get(metric.type)
        if suffixes is None or getattr(metric, "unit", "") or not _METRIC_NAME.match(metric.name):
            return None
        sample_names = [metric.name + suffix for suffix in suffixes]
        # the text format names a counter family after its samples (`_total`); OpenMetrics without
        family_name = sample_names[0] if metric.type == "counter" and not self.openmetrics else metric.name
        lines = ["# HELP ", family_name, " ", self._help(metric.documentation), "\n# TYPE ", family_name, " ",
                 metric.type, "\n"]
        line_of: Optional[_SampleLines] = None
        for sample in metric.samples:
            if sample.name not in sample_names or sample.value is None or sample.timestamp is not None or \
                    sample.exemplar is not None or getattr(sample, "native_histogram", None) is not None:
                return None
            if line_of is None or line_of.sample_name != sample.name or not line_of.fits(sample.labels):
                line_of = _SampleLines.of(sample.name, sample.labels)
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
        self.sample_name = sample_name
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


class _Written(NamedTuple):
    """One family as the last render wrote it."""
    help: str
    rows: Rows
    heads: Dict[Tuple[str, ...], str]  # label values -> the series' line start
    text: str


class FormatLines(object):
    """What the last render in one format wrote: each family's rows and text, each series' line start
    (`name{labels} `) and each value's text. A render keeps only what it used, so this never holds more than
    one render's families."""

    def __init__(self) -> None:
        self.families: Dict[Tuple[str, Tuple[str, ...]], _Written] = {}
        self.values: Dict[float, str] = {}


class LineCache(object):
    """What the last render of a set of Families wrote, in each format. A family whose rows are those of the
    last render in the same format is written as it was (the network's families change once a minute or less,
    the table's every 15 s); a family that changed reuses its series' line starts. The formats are kept apart
    because their texts differ (OpenMetrics escapes a `"` in HELP, the text format does not), and Prometheus
    (OpenMetrics) and a curl (text) may alternate."""

    def __init__(self) -> None:
        self.formats: Dict[bool, FormatLines] = {False: FormatLines(), True: FormatLines()}
        # (family name, label names) -> the label names' order in a line, or None where a family is not written
        # here; a family's names do not change, so this holds one entry per family the collector ever wrote
        self.orders: Dict[Tuple[str, Tuple[str, ...]], Optional[Tuple[int, ...]]] = {}


def encode_rows(families: Families, encoder: Callable[[object], bytes], openmetrics: bool,
                cache: LineCache) -> bytes:
    """The same bytes as encode_families(families.families(), ...), written from the rows."""
    if not writes_directly(encoder, openmetrics):
        return encode_families(families.families(), encoder, openmetrics)
    direct = _Encoder(openmetrics)
    last = cache.formats[bool(openmetrics)]
    old_families, old_values = last.families, last.values
    written_now: Dict[Tuple[str, Tuple[str, ...]], _Written] = {}
    values: Dict[float, str] = {}
    parts: List[str] = []
    for name, spec, rows in families.rows():
        labels = tuple(spec.labels)
        key = (name, labels)
        if key not in cache.orders:
            cache.orders[key] = _label_order(name, labels)
        order = cache.orders[key]
        if order is None:
            metric = GaugeMetricFamily(name, spec.help, labels=spec.labels)
            for label_values, value in rows.items():
                metric.add_metric(label_values, value)
            parts.append(encode_families([metric], encoder, openmetrics).decode("utf-8"))
            continue
        before = old_families.get(key)
        negative_zero = name in families.negative_zero
        # equal rows: the same text, unless a zero changed its sign (0.0 == -0.0), so -0.0 is never reused
        if before is not None and not negative_zero and before.help == spec.help and before.rows == rows:
            written_now[key] = before
            parts.append(before.text)
            continue
        old_heads = before.heads if before is not None else {}
        heads: Dict[Tuple[str, ...], str] = {}
        lines = ["# HELP {0} {1}\n# TYPE {0} gauge\n".format(name, direct._help(spec.help))]
        for label_values, value in rows.items():
            head = old_heads.get(label_values)
            if head is None:
                head = _head(name, labels, order, label_values)
            heads[label_values] = head
            if value == 0:  # 0.0 and -0.0 are one key, two texts
                text = _NEGATIVE_ZERO if math.copysign(1.0, value) < 0 else _ZERO
            else:
                text = old_values.get(value)
                if text is None:
                    text = floatToGoString(value)
                values[value] = text
            lines.append(head + text + "\n")
        text = "".join(lines)
        # no rows kept where a -0.0 was written: the next render's equal rows may hold 0.0
        written_now[key] = _Written(spec.help, {} if negative_zero else rows, heads, text)
        parts.append(text)
    last.families, last.values = written_now, values
    return "".join(parts).encode("utf-8")


def _label_order(name: str, labels: Tuple[str, ...]) -> Optional[Tuple[int, ...]]:
    """Where each label goes in a sample line (prometheus_client sorts them), as indexes into `labels`; None
    when the family's names are not written here (outside the legacy character set, or a label twice)."""
    if not _METRIC_NAME.match(name) or not all(_LABEL_NAME.match(label) for label in labels) or \
            len(set(labels)) != len(labels):
        return None
    return tuple(sorted(range(len(labels)), key=labels.__getitem__))


def _head(name: str, labels: Tuple[str, ...], order: Tuple[int, ...], label_values: Tuple[str, ...]) -> str:
    """`name{a="x",b="y"} `: a sample line up to its value, as _SampleLines writes it."""
    if not labels:
        return name + " "
    pairs = []
    for index in order:
        value = label_values[index]
        if "\\" in value or "\n" in value or '"' in value:
            value = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        pairs.append('{}="{}"'.format(labels[index], value))
    return name + "{" + ",".join(pairs) + "} "
