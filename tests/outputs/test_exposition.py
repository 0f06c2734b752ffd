"""/metrics is rendered once per published view and served from memory; per-scrape counters stay exact.

Everything goes through the real WebServer on loopback, with the daemon's own collectors (snapshot, HTTP
server counters, npu-smi call counts). Renders are counted through a source's export function, the hook
every source's families go through on each render of the snapshot.
"""

import gzip
import shutil
import subprocess
import zlib
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client import generate_latest
from prometheus_client.exposition import choose_encoder
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families

from npumon.outputs.call_metrics import CallStatsCollector
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.exposition import MAX_FORMATS
from npumon.outputs.http_metrics import HttpStatsCollector
from npumon.outputs.web import WebServer
from npumon.sources import registry as sources
from npumon.sources.base import SourceSpec
from npumon.sources.runner import CallStats, CommandResult
from test_exporter import FINDINGS, rich_snapshot

PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;"
                     "q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
FORMATS = [  # (Accept, Accept-Encoding)
    (PROMETHEUS_ACCEPT, "gzip"),
    (PROMETHEUS_ACCEPT, "identity"),
    ("", "gzip"),
    ("text/plain", "identity"),
]


class Host:
    """The daemon's side: the published view, replaced as a whole on every publish, and its call counts."""

    def __init__(self):
        self.view = ExporterView(snapshot=rich_snapshot(), findings=list(FINDINGS))
        self.calls = CallStats()
        self.exports = 0

    def publish(self):
        self.view = ExporterView(snapshot=rich_snapshot(), findings=list(FINDINGS))

    def export(self, snapshot, families):
        self.exports += 1


@pytest.fixture
def host(monkeypatch):
    host = Host()
    spec = SourceSpec("render-counter", lambda context: None, export=host.export)
    monkeypatch.setattr(sources, "SOURCES", sources.SOURCES + (spec,))
    return host


@pytest.fixture
def server(host):
    registry = build_registry(lambda: host.view, npu_exporter_compat=True)
    web = WebServer("127.0.0.1:0", registry, lambda: {}, lambda: (True, ""), workers=8)
    registry.register(HttpStatsCollector(lambda: web.stats))  # as the daemon registers them
    registry.register(CallStatsCollector(lambda: host.calls))
    web.start()
    yield web
    web.stop()


def scrape(server, accept=PROMETHEUS_ACCEPT, encoding="gzip"):
    response = requests.get("http://127.0.0.1:{}/metrics".format(server.port), timeout=10,
                            headers={"Accept": accept, "Accept-Encoding": encoding})
    assert response.status_code == 200
    return response


def samples(text, openmetrics):
    """{(name, labels): value}, checking that no family and no series appears twice."""
    parse = parse_openmetrics if openmetrics else text_string_to_metric_families
    out, names = {}, set()
    for family in parse(text):
        assert family.name not in names, "family {} split or repeated".format(family.name)
        names.add(family.name)
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in out, "duplicate series {}".format(key)
            out[key] = sample.value
    return out


def test_concurrent_scrapes_of_one_view_share_one_render(server, host):
    with ThreadPoolExecutor(max_workers=20) as pool:
        bodies = list(pool.map(lambda _: scrape(server).text, range(20)))
    assert host.exports == 1
    assert len({body.split("# HELP npumon_http")[0] for body in bodies}) == 1  # the cached part, identical
    host.publish()
    with ThreadPoolExecutor(max_workers=20) as pool:
        list(pool.map(lambda _: scrape(server), range(20)))
    assert host.exports == 2


@pytest.mark.parametrize("accept,encoding", FORMATS)
def test_served_body_holds_what_a_fresh_render_holds(server, host, accept, encoding):
    scrape(server, accept, encoding)  # fills the cache
    response = scrape(server, accept, encoding)
    encoder, content_type = choose_encoder(accept)
    openmetrics = content_type.startswith("application/openmetrics-text")
    assert response.headers["Content-Type"] == content_type
    assert (response.headers.get("Content-Encoding") == "gzip") == (encoding == "gzip")
    text = response.text  # requests has undone the gzip
    fresh = encoder(server.registry).decode("utf-8")
    served, expected = samples(text, openmetrics), samples(fresh, openmetrics)
    for moment in ("npumon_http_connections_open", "npumon_http_workers_busy"):  # the scrape itself, then none
        served.pop((moment, frozenset()))
        expected.pop((moment, frozenset()))
    assert served == expected
    assert len(expected) > 200
    if openmetrics:
        assert text.endswith("# EOF\n") and text.count("# EOF") == 1


def test_gzip_is_one_ordinary_member(server):
    raw = requests.get("http://127.0.0.1:{}/metrics".format(server.port), timeout=10, stream=True,
                       headers={"Accept": PROMETHEUS_ACCEPT, "Accept-Encoding": "gzip"}).raw.read()
    reader = zlib.decompressobj(16 + zlib.MAX_WBITS)  # what curl and most clients do: one member
    text = reader.decompress(raw) + reader.flush()
    assert reader.eof and reader.unused_data == b""
    assert text == gzip.decompress(raw) and text.endswith(b"# EOF\n")


def test_per_scrape_counters_stay_exact_while_the_rest_is_cached(server, host):
    def connections(body):
        return samples(body, True)[("npumon_http_connections_total", frozenset())]

    first = connections(scrape(server).text)
    second = connections(scrape(server).text)
    assert second == first + 1
    assert host.exports == 1


def test_call_counts_are_rendered_again_when_a_call_finishes(server, host):
    def calls(body):
        return samples(body, True).get(("npumon_source_calls_total", frozenset({("source", "npu-smi")})))

    assert calls(scrape(server).text) is None
    host.calls.record("npu-smi", CommandResult(["npu-smi", "info"], 0, "", "", 0.2))
    assert calls(scrape(server).text) == 1.0
    host.calls.record("npu-smi", CommandResult(["npu-smi", "info"], 0, "", "", 0.2))
    assert calls(scrape(server).text) == 2.0
    assert host.exports == 1  # the snapshot's part was not rendered again for it


def test_a_published_view_is_served_at_the_next_scrape(server, host):
    assert ("npumon_finding_active", frozenset({("rule", "numa_balancing_on"), ("severity", "warning"),
                                                ("subject", "host")})) in samples(scrape(server).text, True)
    host.view = ExporterView(snapshot=None, findings=[])
    names = {name for name, _ in samples(scrape(server).text, True)}
    assert "npumon_build_info" in names and "npumon_finding_active" not in names
    assert not any(name.startswith("npumon_chip_") for name in names)


def test_any_number_of_accept_versions_keeps_a_bounded_cache(server, host):
    for minor in range(3 * MAX_FORMATS):
        response = scrape(server, "application/openmetrics-text;version=1.{}.0".format(minor), "identity")
        assert response.headers["Content-Type"].startswith("application/openmetrics-text; version=1.{}.0".format(minor))
    assert len(server.registry._formats) == MAX_FORMATS


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool not on PATH (Debian: apt-get install prometheus)")
def test_promtool_finds_nothing_in_the_served_body_but_npu_exporters_own_names(server):
    scrape(server, "", "identity")
    body = scrape(server, "", "identity").content
    result = subprocess.run(["promtool", "check", "metrics"], input=body, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, timeout=30)
    assert result.stdout == b""
    # npu-exporter's own names, kept as its consumers read them: two camelCase labels, and the 950's UB
    # counters whose names end in "_sum" (collector_for_ub.go)
    assert set(result.stderr.decode().splitlines()) == {
        "node_base_info label names should be written in 'snake_case' not 'camelCase'",
        "npu_exporter_version_info label names should be written in 'snake_case' not 'camelCase'"} | {
        'npu_chip_info_{} non-histogram and non-summary metrics should not have "_sum" suffix'.format(name)
        for name in ("crc_error_sum", "retry_ack_sum", "retry_req_sum")}


def test_textfile_and_one_shot_renders_still_read_the_registry(host):
    registry = build_registry(lambda: host.view)
    assert samples(generate_latest(registry).decode(), False)
    assert host.exports == 1


def test_a_scraper_that_takes_every_publication_finds_the_next_one_rendered_ahead(server, host):
    registry = server.registry
    for _ in range(2):  # two publications, each scraped, as Prometheus every 5 s scrapes a table polled every 5 s
        host.publish()
        assert not registry.published()
        scrape(server)
    rendered = host.exports
    host.publish()
    assert registry.published() and host.exports == rendered + 1  # rendered by the publishing thread
    scrape(server)
    assert host.exports == rendered + 1  # the scrape found it ready


def test_scrapes_rarer_than_publications_leave_the_render_to_the_scrape(server, host):
    registry = server.registry
    for _ in range(4):
        for _ in range(3):  # three publications per scrape: a 15 s scrape of a table polled every 5 s
            host.publish()
            assert not registry.published()
        scrape(server)
    assert host.exports == 4  # one render per scrape, none for a publication nobody took


@pytest.mark.parametrize("accept", [PROMETHEUS_ACCEPT, "", "text/plain", "application/openmetrics-text"])
def test_the_per_scrape_tail_is_written_byte_for_byte_as_prometheus_client_writes_it(accept):
    """The live collectors' families are written by npumon's encoder; the same bytes as prometheus_client's,
    including a family it hands back (a counter with `_created`)."""
    from prometheus_client import Counter, Histogram
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from npumon.outputs.exposition import ExpositionRegistry

    class Live:
        def collect(self):
            yield GaugeMetricFamily("npumon_t_open", 'open "now"\nhere', value=2)
            counter = CounterMetricFamily("npumon_t_requests", "requests", labels=("code",))
            counter.add_metric(("200",), 7)
            counter.add_metric(('a"b\\c',), 1)
            yield counter

    registry = ExpositionRegistry()
    registry.register(Live())
    Counter("npumon_t_with_created", "a counter with _created", registry=registry).inc(3)
    Histogram("npumon_t_seconds", "a histogram", ("source",), buckets=(0.1, 1.0), registry=registry).labels(
        "x").observe(0.5)
    encoder, _ = choose_encoder(accept)
    assert registry.exposition(accept, False).body == encoder(registry)
    assert gzip.decompress(registry.exposition(accept, True).body) == encoder(registry)
