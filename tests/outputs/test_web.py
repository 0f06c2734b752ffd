"""The real HTTP server on 127.0.0.1 with an ephemeral port."""

import gzip
import json
import logging
import socket
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from prometheus_client.openmetrics.parser import text_string_to_metric_families as openmetrics_families
from prometheus_client.parser import text_string_to_metric_families

from npumon.outputs.exporter import ExporterView, build_registry
from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.outputs.web import WebServer, WebServerError, _resolve, parse_listen

STATUS = {"schema": "npumon.status/v1", "chips": [{"npu": 0, "chip": 0, "health": "OK"}], "findings": []}


def snapshot():
    return Snapshot(time=1767225600.0, host=HostSample(cpu_ratio=0.5),
                    chips=[ChipSample(npu=0, chip=0, name="910B3", health="OK", temperature_celsius=41.0)],
                    sources={"npusmi_info": SourceStatus(ok=True, duration_seconds=0.3)})


class Daemon:
    """Stands in for the daemon's state: what /metrics, /status and /healthz read."""

    def __init__(self):
        self.view = ExporterView(snapshot=snapshot(), findings=[])
        self.health = (True, "")
        self.view_delay = 0.0

    def get_view(self):
        time.sleep(self.view_delay)
        return self.view

    def get_status(self):
        return STATUS

    def get_health(self):
        return self.health


@pytest.fixture
def daemon():
    return Daemon()


@pytest.fixture
def serve(daemon):
    servers = []

    def start(**kwargs):
        # lambdas, so a test can swap the daemon's callbacks after the server started
        server = WebServer("127.0.0.1:0", build_registry(daemon.get_view), lambda: daemon.get_status(),
                           lambda: daemon.get_health(), **kwargs)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def url(server, path, scheme="http"):
    return "{}://127.0.0.1:{}{}".format(scheme, server.port, path)


def wait_for(condition, seconds=3.0):
    """Server threads log after they close the socket, so a test may see the close first."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return condition()


def metric_names(text):
    return {family.name for family in text_string_to_metric_families(text)}


def test_metrics_text_format(serve):
    server = serve()
    response = requests.get(url(server, "/metrics?ignored=1"), headers={"Accept-Encoding": "identity"}, timeout=5)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert "Content-Encoding" not in response.headers
    assert {"npumon_build_info", "npumon_chip_temperature_celsius", "npumon_source_up"} <= \
        metric_names(response.text)


def test_metrics_gzip_when_asked(serve):
    server = serve()
    request = urllib.request.Request(url(server, "/metrics"), headers={"Accept-Encoding": "gzip"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.headers["Content-Encoding"] == "gzip"
        text = gzip.decompress(response.read()).decode("utf-8")
    assert "npumon_chip_temperature_celsius" in metric_names(text)


def test_metrics_openmetrics_when_prometheus_asks_for_it(serve):
    server = serve()
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    response = requests.get(url(server, "/metrics"), headers={"Accept": accept}, timeout=5)
    assert response.headers["Content-Type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")
    assert "npumon_chip_temperature_celsius" in {family.name for family in openmetrics_families(response.text)}


def test_metrics_reflect_the_current_view(serve, daemon):
    server = serve()
    daemon.view = ExporterView(snapshot=None, findings=[])
    assert metric_names(requests.get(url(server, "/metrics"), timeout=5).text) == {"npumon_build_info"}


def test_healthz_ok_and_unhealthy(serve, daemon):
    server = serve()
    response = requests.get(url(server, "/healthz"), timeout=5)
    assert (response.status_code, response.text) == (200, "ok\n")
    daemon.health = (False, "npu-smi has failed for 300 s")
    response = requests.get(url(server, "/healthz"), timeout=5)
    assert (response.status_code, response.text) == (503, "npu-smi has failed for 300 s\n")


def test_status_is_json(serve):
    server = serve()
    response = requests.get(url(server, "/status"), timeout=5)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == STATUS


def test_index_links_the_endpoints(serve):
    response = requests.get(url(serve(), "/"), timeout=5)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/html; charset=utf-8"
    for path in ("/metrics", "/status", "/healthz"):
        assert 'href="{}"'.format(path) in response.text


def test_unknown_path_is_404(serve):
    assert requests.get(url(serve(), "/metrics/extra"), timeout=5).status_code == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"])
def test_other_methods_are_405(serve, method):
    response = requests.request(method, url(serve(), "/metrics"), data=b"x", timeout=5)
    assert response.status_code == 405
    assert response.headers["Allow"] == "GET, HEAD"


def test_head_sends_headers_only(serve):
    server = serve()
    identity = {"Accept-Encoding": "identity"}
    full = requests.get(url(server, "/status"), headers=identity, timeout=5)
    head = requests.head(url(server, "/status"), headers=identity, timeout=5)
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["Content-Length"] == str(len(full.content))


def test_failing_callback_is_a_500_and_one_log_line(serve, daemon, caplog):
    server = serve()

    def broken():
        raise RuntimeError("state lock poisoned")

    daemon.get_status = broken
    with caplog.at_level(logging.WARNING, logger="npumon.outputs.web"):
        response = requests.get(url(server, "/status"), timeout=5)
    assert response.status_code == 500
    assert [record.getMessage() for record in caplog.records] == [
        "http: /status failed: RuntimeError: state lock poisoned"]
    assert requests.get(url(server, "/healthz"), timeout=5).status_code == 200


def test_successful_requests_are_not_logged(serve, caplog):
    server = serve()
    with caplog.at_level(logging.DEBUG, logger="npumon.outputs.web"):
        for path in ("/", "/metrics", "/status", "/healthz"):
            assert requests.get(url(server, path), timeout=5).status_code == 200
    assert caplog.records == []


def test_twenty_concurrent_scrapes_run_in_parallel(serve, daemon):
    server = serve()
    daemon.view_delay = 0.2  # 20 scrapes one after another would take 4 s

    def scrape(_):
        response = requests.get(url(server, "/metrics"), timeout=10)
        return response.status_code, "npumon_chip_temperature_celsius" in metric_names(response.text)

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(scrape, range(20)))
    assert results == [(200, True)] * 20
    # well under 4 s, and under the 1 s SYN retry a too-short listen backlog would cost
    assert time.monotonic() - started < 1.0


def test_stuck_client_does_not_block_a_scrape_and_is_dropped_after_the_timeout(serve, caplog):
    server = serve(client_timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="npumon.outputs.web"):
        stuck = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        try:
            started = time.monotonic()
            assert requests.get(url(server, "/metrics"), timeout=5).status_code == 200
            assert time.monotonic() - started < 0.4  # served while the stuck client still holds its socket
            assert stuck.recv(1) == b""  # the server closed it after client_timeout
        finally:
            stuck.close()
    assert wait_for(lambda: len(caplog.records) >= 1)
    assert len(caplog.records) == 1
    assert "timed out" in caplog.records[0].getMessage()


def test_stop_is_fast_with_a_stuck_client_and_frees_the_port(daemon):
    server = WebServer("127.0.0.1:0", build_registry(daemon.get_view), daemon.get_status, daemon.get_health)
    server.start()
    port = server.port
    stuck = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        started = time.monotonic()
        server.stop()
        assert time.monotonic() - started < 1.0
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
    finally:
        stuck.close()
    server.stop()  # a second stop is harmless


def test_port_in_use_is_a_one_line_error(daemon):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        listen = "127.0.0.1:{}".format(taken.getsockname()[1])
        server = WebServer(listen, build_registry(daemon.get_view), daemon.get_status, daemon.get_health)
        with pytest.raises(WebServerError, match="^cannot listen on {}: Address already in use$".format(listen)):
            server.start()


@pytest.mark.parametrize("listen, expected", [
    ("127.0.0.1:9464", ("127.0.0.1", 9464)),
    ("0.0.0.0:9842", ("0.0.0.0", 9842)),
    ("[::1]:9464", ("::1", 9464)),
    (":9464", ("", 9464)),
    ("localhost:0", ("localhost", 0)),
])
def test_parse_listen(listen, expected):
    assert parse_listen(listen) == expected


@pytest.mark.parametrize("listen", ["9464", "::1:9464", "127.0.0.1:http", "127.0.0.1:70000", "127.0.0.1:"])
def test_parse_listen_rejects(listen):
    with pytest.raises(WebServerError, match="listen address"):
        parse_listen(listen)


def test_empty_host_means_every_address():
    family, address, dualstack = _resolve("", 9464)
    if socket.has_dualstack_ipv6():
        assert (family, address, dualstack) == (socket.AF_INET6, ("::", 9464), True)
    else:
        assert (family, address, dualstack) == (socket.AF_INET, ("0.0.0.0", 9464), False)
    assert _resolve("127.0.0.1", 9464) == (socket.AF_INET, ("127.0.0.1", 9464), False)


# --- TLS --------------------------------------------------------------------------------------------------


def test_tls_serves_metrics_and_survives_plain_http_and_stuck_handshakes(serve, certificate, caplog):
    cert, key = certificate
    server = serve(tls_cert=cert, tls_key=key, client_timeout=0.5)
    with caplog.at_level(logging.WARNING, logger="npumon.outputs.web"):
        stuck = socket.create_connection(("127.0.0.1", server.port), timeout=5)  # never starts the handshake
        try:
            started = time.monotonic()
            response = requests.get(url(server, "/metrics", "https"), verify=cert, timeout=5)
            assert time.monotonic() - started < 0.4  # the stuck handshake holds only its own thread
            assert response.status_code == 200
            assert "npumon_build_info" in metric_names(response.text)
            with pytest.raises(requests.exceptions.ConnectionError):
                requests.get(url(server, "/healthz"), timeout=5)  # plain HTTP to the TLS port
            assert requests.get(url(server, "/healthz", "https"), verify=cert, timeout=5).text == "ok\n"
            assert stuck.recv(1) == b""
        finally:
            stuck.close()
    # the plain-HTTP client and the stuck handshake, one line each
    assert wait_for(lambda: len(caplog.records) >= 2)
    time.sleep(0.1)
    assert len(caplog.records) == 2


def test_tls_needs_readable_cert_and_key(daemon, tmp_path):
    registry = build_registry(daemon.get_view)
    with pytest.raises(WebServerError, match="TLS needs both"):
        WebServer("127.0.0.1:0", registry, daemon.get_status, daemon.get_health, tls_cert="cert.pem")
    missing = str(tmp_path / "missing.pem")
    with pytest.raises(WebServerError, match="^cannot load TLS certificate .*missing.pem.*: No such file"):
        WebServer("127.0.0.1:0", registry, daemon.get_status, daemon.get_health, tls_cert=missing, tls_key=missing)


def test_status_json_keeps_the_daemons_key_order(serve, daemon):
    server = serve()
    ordered = {"schema": "npumon.status/v1", "host": "atlas-01", "chips": []}
    daemon.get_status = lambda: ordered
    assert list(json.loads(requests.get(url(server, "/status"), timeout=5).text)) == ["schema", "host", "chips"]
