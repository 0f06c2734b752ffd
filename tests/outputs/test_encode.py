"""The direct writer of gauge, counter and histogram families gives prometheus_client's own bytes, in both formats and under
every Accept header a scraper sends, for every built-in family and for hostile names, help texts and values."""

import dataclasses
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, InfoMetricFamily
from prometheus_client.exposition import choose_encoder

from npumon.model import ProcessSample
from npumon.outputs import encode
from npumon.outputs.exporter import ExporterView, render_families, render_rows
from npumon.outputs.families import Families, MetricSpec
from simulated_pass import judged_pass

ACCEPT_HEADERS = [
    "",  # curl: the text format
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;q=0.9,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",  # Prometheus
    "application/openmetrics-text; version=1.0.0; escaping=allow-utf-8",
    "application/openmetrics-text; version=1.0.0; escaping=dots",  # rewrites names: prometheus_client writes it
    "text/plain; version=1.0.0; escaping=underscores",
]


class _Registry:
    def __init__(self, families):
        self.families = families

    def collect(self):
        return self.families


def _both(families, accept):
    encoder, content_type = choose_encoder(accept)
    openmetrics = content_type.startswith("application/openmetrics-text")
    expected = encoder(_Registry(families))
    if openmetrics:
        expected = expected[:-len(b"# EOF\n")]
    return encode.encode_families(families, encoder, openmetrics), expected


@pytest.fixture(scope="module")
def a3_alarm_pass(tmp_path_factory):
    """(snapshot, findings) of one pass over a simulated A3 with an alarm: made once, read by both fixtures below."""
    return judged_pass(tmp_path_factory.mktemp("encode"), "health-alarm", product="atlas-a3")


@pytest.fixture(scope="module")
def built_in_families(a3_alarm_pass):
    """Every family the exporter renders for a simulated A3 with an alarm, native and npu-exporter's."""
    snapshot, findings = a3_alarm_pass
    return render_families(ExporterView(snapshot=snapshot, findings=findings), npu_exporter_compat=True)


@pytest.mark.parametrize("accept", ACCEPT_HEADERS)
def test_built_in_families_are_written_as_prometheus_client_writes_them(built_in_families, accept):
    assert len(built_in_families) > 100
    written, expected = _both(built_in_families, accept)
    assert written == expected


def test_the_built_in_families_are_written_directly():
    encoder, _ = choose_encoder("application/openmetrics-text;version=1.0.0")
    assert encode.writes_directly(encoder, True)
    assert encode.writes_directly(choose_encoder("")[0], False)
    assert not encode.writes_directly(choose_encoder("application/openmetrics-text; version=1.0.0; escaping=dots")[0],
                                      True)


def test_histograms_are_written_directly_as_prometheus_client_writes_them():
    histogram = HistogramMetricFamily("npumon_h_seconds", 'h "quoted"\\ help', labels=("source",))
    histogram.add_metric(("x",), buckets=[("0.1", 1), ("2.5", 2), ("+Inf", 2)], sum_value=0.3)
    histogram.add_metric(('y"\\',), buckets=[("0.1", 0), ("2.5", 0), ("+Inf", 0)], sum_value=0.0)
    for openmetrics in (True, False):
        assert encode._Encoder(openmetrics).family(histogram) is not None  # not handed to prometheus_client
    for accept in ACCEPT_HEADERS:
        written, expected = _both([histogram], accept)
        assert written == expected


def test_shapes_it_does_not_write_go_through_prometheus_client():
    histogram = HistogramMetricFamily("npumon_h_seconds", "h", labels=("a",), unit="seconds")
    histogram.add_metric(("x",), buckets=[("0.1", 1), ("+Inf", 2)], sum_value=0.3)
    info = InfoMetricFamily("npumon_i", "i", labels=("a",))
    info.add_metric(("x",), {"v": "1"})
    with_unit = GaugeMetricFamily("npumon_u_seconds", "u", unit="seconds", value=1)
    with_timestamp = GaugeMetricFamily("npumon_t", "t", labels=("a",))
    with_timestamp.add_metric(("x",), 1, timestamp=1700000000.5)
    colon = GaugeMetricFamily("npumon:recorded", "recorded", value=2)
    created = CounterMetricFamily("npumon_c", "c", value=3, created=1700000000.0)
    for accept in ACCEPT_HEADERS:
        written, expected = _both([histogram, info, with_unit, with_timestamp, colon, created], accept)
        assert written == expected


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
_VALUE = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-2 ** 70, 2 ** 70).map(float),
                   st.sampled_from([0.0, -0.0, 1e6, 123456789.0, 1e-7, 65536.0 * 1024 * 1024]))
_LABEL_NAME = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,6}", fullmatch=True).filter(lambda n: not n.startswith("__"))


@settings(max_examples=500, deadline=None)  # each example encodes and parses twice: 2,000 took 19 s
@given(documentation=_TEXT, label_names=st.lists(_LABEL_NAME, min_size=0, max_size=3, unique=True),
       rows=st.lists(st.tuples(st.lists(_TEXT, min_size=3, max_size=3), _VALUE), max_size=4),
       counter=st.booleans(), accept=st.sampled_from(ACCEPT_HEADERS))
def test_any_gauge_or_counter_is_written_as_prometheus_client_writes_it(documentation, label_names, rows, counter,
                                                                        accept):
    kind = CounterMetricFamily if counter else GaugeMetricFamily
    family = kind("npumon_any", documentation, labels=label_names)
    for values, value in rows:
        if counter and (math.isnan(value) or value < 0):
            continue  # prometheus_client refuses them
        family.add_metric(values[:len(label_names)], value)
    written, expected = _both([family], accept)
    assert written == expected


# -- the snapshot's rows, written without prometheus_client's objects ---------------------------------------

def _rows_and_expected(families, accept, cache):
    encoder, content_type = choose_encoder(accept)
    openmetrics = content_type.startswith("application/openmetrics-text")
    return (encode.encode_rows(families, encoder, openmetrics, cache),
            encode.encode_families(families.families(), encoder, openmetrics))


@pytest.fixture(scope="module")
def two_renders(a3_alarm_pass):
    """The rows of two renders of a simulated A3 with an alarm, native and npu-exporter's: the second with
    other values, another process and a finding gone, as the next poll would have them."""
    snapshot, findings = a3_alarm_pass
    first = render_rows(ExporterView(snapshot=snapshot, findings=findings), npu_exporter_compat=True)
    chips = [dataclasses.replace(chip, temperature_celsius=(chip.temperature_celsius or 0) + 1.5, power_watts=-0.0)
             for chip in snapshot.chips]
    chips[0] = dataclasses.replace(chips[0], processes=list(chips[0].processes) + [
        ProcessSample(npu=chips[0].npu, chip=chips[0].chip, pid=4242, name='py "x"\\\n', memory_bytes=1 << 30)])
    later = dataclasses.replace(snapshot, chips=tuple(chips), time=snapshot.time + 15)
    second = render_rows(ExporterView(snapshot=later, findings=findings[1:]), npu_exporter_compat=True)
    return first, second


@pytest.mark.parametrize("accept", ACCEPT_HEADERS)
def test_rows_are_written_as_their_families_are_render_after_render(two_renders, accept):
    cache = encode.LineCache()
    for rows in two_renders + two_renders[:1]:  # a cold cache, then lines and values of the render before
        written, expected = _rows_and_expected(rows, accept, cache)
        assert written == expected
    assert written.count(b"\n") > 2000


def test_one_cache_serves_scrapers_of_both_formats_in_turn(two_renders):
    """Prometheus asks for OpenMetrics, a curl for the text format, from the same collector and its one cache;
    a `"` in a help text is escaped in one and not in the other."""
    specs = {"npumon_quoted": MetricSpec("npumon_quoted", ("a",), 'the "quoted" help')}
    quoted = Families(specs)
    quoted.add("npumon_quoted", 1, ("x",))
    cache = encode.LineCache()
    for rows in (quoted, two_renders[0]):
        for accept in ACCEPT_HEADERS * 2:
            written, expected = _rows_and_expected(rows, accept, cache)
            assert written == expected, accept


def test_the_line_cache_holds_one_render_and_tells_zero_from_negative_zero():
    specs = {"npumon_z": MetricSpec("npumon_z", ("a",), "z")}
    cache = encode.LineCache()
    encoder, _ = choose_encoder("")
    for round_ in range(3):
        rows = Families(specs)
        rows.add("npumon_z", 0.0, ("zero",))
        rows.add("npumon_z", -0.0, ("negative zero {}".format(round_),))
        rows.add("npumon_z", 2.5, ("x",))
        written = encode.encode_rows(rows, encoder, False, cache)
        assert written == encode.encode_families(rows.families(), encoder, False)
        assert b'npumon_z{a="negative zero %d"} -0.0\n' % round_ in written
        # the previous round's label is gone
        text_lines = cache.formats[False]
        assert len(text_lines.families[("npumon_z", ("a",))].heads) == 3 and set(text_lines.values) == {2.5}


def test_a_family_with_the_rows_of_the_last_render_is_written_as_it_was_and_a_zero_keeps_its_sign():
    specs = {"npumon_same": MetricSpec("npumon_same", ("a",), "same"),
             "npumon_z": MetricSpec("npumon_z", ("a",), "z")}
    cache = encode.LineCache()
    encoder, _ = choose_encoder("")
    kept = []
    for zero in (-0.0, 0.0, 0.0, -0.0, -0.0, 0.0):  # rows that compare equal, written with two texts
        rows = Families(specs)
        rows.add("npumon_same", 7, ("x",))
        rows.add("npumon_z", zero, ("x",))
        written = encode.encode_rows(rows, encoder, False, cache)
        assert written == encode.encode_families(rows.families(), encoder, False)
        kept.append(cache.formats[False].families[("npumon_same", ("a",))])
    assert all(family is kept[0] for family in kept)  # written once, then reused


def test_rows_of_names_it_does_not_write_go_through_prometheus_client():
    specs = {"npumon:recorded": MetricSpec("npumon:recorded", ("a",), "colon"),
             "npumon_ok": MetricSpec("npumon_ok", (), "no labels")}
    rows = Families(specs)
    rows.add("npumon:recorded", 1, ("x",))
    rows.add("npumon_ok", 3, ())
    for accept in ACCEPT_HEADERS:
        written, expected = _rows_and_expected(rows, accept, encode.LineCache())
        assert written == expected
    assert b"npumon_ok 3.0\n" in _rows_and_expected(rows, "", encode.LineCache())[0]
