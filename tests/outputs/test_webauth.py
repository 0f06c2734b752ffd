"""The web config enforced by the real HTTP server on 127.0.0.1: basic auth, client certificates, headers,
and the npumon_http_auth_failures_total counter."""

import logging
import socket
import ssl
import threading
import time

import bcrypt
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from npumon.outputs import webauth
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.web import WebServer
from npumon.outputs.webconfig import load_web_config
from pki import make_pki

PASSWORD = "correct horse"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.fixture
def serve(tmp_path):
    servers = []

    def start(web_config_text, **kwargs):
        path = tmp_path / "web-{}.yml".format(len(servers))
        path.write_text(web_config_text)
        registry = build_registry(lambda: ExporterView(snapshot=None, findings=[]))
        server = WebServer("127.0.0.1:0", registry, lambda: {"schema": "x"}, lambda: (True, ""),
                           security=load_web_config(str(path)), **kwargs)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def users(**hashes):
    return "basic_auth_users:\n" + "".join("  {}: '{}'\n".format(user, hashed) for user, hashed in hashes.items())


def url(server, path, scheme="http"):
    return "{}://127.0.0.1:{}{}".format(scheme, server.port, path)


def failures(text):
    """npumon_http_auth_failures_total by reason, from a /metrics text."""
    for family in text_string_to_metric_families(text):
        if family.name == "npumon_http_auth_failures":
            return {s.labels["reason"]: s.value for s in family.samples if s.name.endswith("_total")}
    return None


def test_basic_auth_refuses_with_401_and_counts_each_reason(serve):
    server = serve(users(prometheus=HASH, alice=HASH))
    get = lambda path="/metrics", **kw: requests.get(url(server, path), timeout=5, **kw)  # noqa: E731
    response = get()
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"].startswith("Basic realm=")
    assert get(auth=("prometheus", "wrong")).status_code == 401
    assert get(auth=("mallory", PASSWORD)).status_code == 401  # an unknown user, with a real user's password
    assert get(headers={"Authorization": "Basic !!!"}).status_code == 401
    assert get(headers={"Authorization": "Bearer abc"}).status_code == 401
    assert get("/status").status_code == 401 and get("/").status_code == 401
    # /healthz stays open: a liveness check needs no password
    assert get("/healthz").status_code == 200 and get("/healthz").text == "ok\n"
    ok = get(auth=("prometheus", PASSWORD))
    assert ok.status_code == 200
    assert get("/status", auth=("alice", PASSWORD)).json() == {"schema": "x"}
    assert failures(ok.text) == {"missing": 3, "malformed": 2, "wrong_credentials": 2, "busy": 0,
                                 "client_cert_missing": 0, "client_cert_invalid": 0, "client_cert_san": 0}


def test_an_exporter_without_web_config_serves_no_auth_series(serve):
    server = serve("")
    assert failures(requests.get(url(server, "/metrics"), timeout=5).text) is None


def test_a_remembered_password_never_waits_for_bcrypt_and_new_ones_get_503_when_it_is_busy(serve, monkeypatch):
    monkeypatch.setattr(webauth, "BCRYPT_WAIT_SECONDS", 0.3)
    server = serve(users(prometheus=HASH))
    auth = ("prometheus", PASSWORD)
    assert requests.get(url(server, "/metrics"), auth=auth, timeout=5).status_code == 200  # verified once
    guard = server._guard
    with guard._bcrypt_lock:  # bcrypt busy, e.g. with someone guessing passwords
        started = time.monotonic()
        assert requests.get(url(server, "/metrics"), auth=auth, timeout=5).status_code == 200
        assert time.monotonic() - started < 0.3
        busy = requests.get(url(server, "/metrics"), auth=("prometheus", "a guess"), timeout=5)
        assert busy.status_code == 503 and busy.headers["Retry-After"] == "1"
        # an unknown user waits for a bcrypt like a known one: no quick 401 tells that the user does not exist
        assert requests.get(url(server, "/metrics"), auth=("mallory", PASSWORD), timeout=5).status_code == 503
    assert guard.failures()["busy"] == 2
    # the cache holds keyed digests, never a password
    assert all(len(key) == 32 and PASSWORD.encode() not in key for key in guard._cache)


def test_failures_are_never_remembered(serve):
    server = serve(users(prometheus=HASH))
    for _ in range(3):
        assert requests.get(url(server, "/metrics"), auth=("prometheus", "nope"), timeout=5).status_code == 401
    assert len(server._guard._cache) == 0
    assert server._guard.failures()["wrong_credentials"] == 3


def test_a_reload_with_a_new_hash_drops_the_old_password(serve, tmp_path):
    server = serve(users(prometheus=HASH))
    old = ("prometheus", PASSWORD)
    assert requests.get(url(server, "/metrics"), auth=old, timeout=5).status_code == 200
    new_path = tmp_path / "new.yml"
    new_path.write_text(users(prometheus=bcrypt.hashpw(b"rotated", bcrypt.gensalt(4)).decode()))
    server.use_security(load_web_config(str(new_path)))
    assert requests.get(url(server, "/metrics"), auth=old, timeout=5).status_code == 401
    assert requests.get(url(server, "/metrics"), auth=("prometheus", "rotated"), timeout=5).status_code == 200


def test_headers_go_on_every_response(serve):
    server = serve("http_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n    X-Frame-Options: deny\n"
                   + users(prometheus=HASH))
    for response in (requests.get(url(server, "/metrics"), timeout=5),
                     requests.get(url(server, "/healthz"), timeout=5),
                     requests.get(url(server, "/nope"), auth=("prometheus", PASSWORD), timeout=5)):
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["X-Frame-Options"] == "deny"


def mtls(pki, extra=""):
    return ("tls_server_config:\n  cert_file: {}\n  key_file: {}\n  client_auth_type: RequireAndVerifyClientCert\n"
            "  client_ca_file: {}\n{}").format(pki.server_cert, pki.server_key, pki.ca, extra)


def tls_get(server, pki, cert=None, path="/metrics"):
    return requests.get(url(server, path, "https"), verify=pki.ca, cert=cert, timeout=5)


@pytest.mark.parametrize("version", [ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_client_certificates_are_required_and_verified(serve, pki, version):
    server = serve(mtls(pki), client_timeout=2)

    def handshake(cert=None):
        context = ssl.create_default_context(cafile=pki.ca)
        context.maximum_version = version
        if cert:
            context.load_cert_chain(*cert)
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
            with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
                tls.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
                return tls.recv(12)

    assert handshake((pki.client_cert, pki.client_key)) == b"HTTP/1.0 200"
    for cert in (None, (pki.foreign_client_cert, pki.foreign_client_key)):
        with pytest.raises((ssl.SSLError, ConnectionError)):
            handshake(cert)
    counts = failures(tls_get(server, pki, (pki.client_cert, pki.client_key)).text)
    assert (counts["client_cert_missing"], counts["client_cert_invalid"]) == (1, 1)


def test_client_allowed_sans_refuses_other_verified_clients(serve, pki):
    server = serve(mtls(pki, "  client_allowed_sans: [prometheus]\n"))
    with pytest.raises(requests.exceptions.ConnectionError):
        tls_get(server, pki, (pki.other_client_cert, pki.other_client_key))
    response = tls_get(server, pki, (pki.client_cert, pki.client_key))
    assert response.status_code == 200
    assert failures(response.text)["client_cert_san"] == 1


def test_an_ip_san_matches_in_gos_form(serve, pki):
    server = serve(mtls(pki, "  client_allowed_sans: ['127.0.0.1']\n"))
    assert tls_get(server, pki, (pki.client_cert, pki.client_key)).status_code == 200


def test_a_stuck_handshake_holds_no_worker(serve, pki):
    server = serve(mtls(pki), client_timeout=0.5)
    stuck = socket.create_connection(("127.0.0.1", server.port), timeout=5)  # never sends a ClientHello
    try:
        started = time.monotonic()
        assert tls_get(server, pki, (pki.client_cert, pki.client_key)).status_code == 200
        assert time.monotonic() - started < 0.4
        assert stuck.recv(1) == b""  # dropped after the client timeout
    finally:
        stuck.close()


def test_basic_auth_and_client_certificates_together(serve, pki):
    server = serve(mtls(pki) + users(prometheus=HASH))
    cert = (pki.client_cert, pki.client_key)
    assert tls_get(server, pki, cert).status_code == 401
    assert requests.get(url(server, "/metrics", "https"), verify=pki.ca, cert=cert, auth=("prometheus", PASSWORD),
                        timeout=5).status_code == 200
    assert tls_get(server, pki, cert, "/healthz").status_code == 200


def test_concurrent_logins_verify_correctly(serve):
    server = serve(users(prometheus=HASH))
    results = []

    def scrape(password):
        results.append((password, requests.get(url(server, "/metrics"), auth=("prometheus", password),
                                                timeout=10).status_code))

    threads = [threading.Thread(target=scrape, args=(PASSWORD if i % 2 else "bad{}".format(i),)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(15)
    assert sorted(code for password, code in results if password == PASSWORD) == [200] * 4
    assert sorted(code for password, code in results if password != PASSWORD) == [401] * 4


# -- on the bounded server: handshakes and client checks in its loop thread, never in a worker -------------------

def test_failed_handshakes_are_all_counted_and_logged_within_the_line_budget(serve, pki, caplog):
    server = serve(mtls(pki), client_timeout=2)
    with caplog.at_level(logging.WARNING, logger="npumon.outputs.web"):
        for _ in range(8):  # no client certificate: each handshake fails
            with pytest.raises(requests.exceptions.ConnectionError):
                tls_get(server, pki)
        counts = failures(tls_get(server, pki, (pki.client_cert, pki.client_key)).text)
    assert counts["client_cert_missing"] == 8
    lines = [record.getMessage() for record in caplog.records]
    assert 1 <= len(lines) <= 5, lines  # the server's budget for connection failure lines: 5 a minute
    assert all(line.startswith("http: connection from 127.0.0.1 failed: SSL") for line in lines), lines


def test_a_refused_client_certificate_is_closed_while_the_only_worker_is_busy(serve, pki, monkeypatch):
    monkeypatch.setattr(webauth, "BCRYPT_WAIT_SECONDS", 3.0)
    server = serve(mtls(pki, "  client_allowed_sans: [prometheus]\n") + users(prometheus=HASH), workers=1,
                   max_connections=4)
    cert = (pki.client_cert, pki.client_key)
    held = []
    with server._guard._bcrypt_lock:  # the one worker waits for bcrypt on the request below
        thread = threading.Thread(target=lambda: held.append(requests.get(
            url(server, "/metrics", "https"), verify=pki.ca, cert=cert, auth=("prometheus", "a guess"), timeout=10)))
        thread.start()
        assert wait_for(lambda: server.stats.snapshot()["busy"] == 1)
        started = time.monotonic()
        with pytest.raises(requests.exceptions.ConnectionError):
            tls_get(server, pki, (pki.other_client_cert, pki.other_client_key))
        assert time.monotonic() - started < 1.5  # refused by the loop thread, not after a worker got free
        assert server._guard.failures()["client_cert_san"] == 1
        assert server.stats.snapshot()["busy"] == 1
    thread.join(10)
    assert held[0].status_code == 401  # the held request, answered once bcrypt was free


def test_headers_go_on_the_handlers_errors_and_the_servers_own_503(serve):
    server = serve("http_server_config:\n  headers:\n    X-Frame-Options: deny\n", workers=1, max_connections=1)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as raw:
        raw.sendall(b"GET / / HTTP/1.0\r\n\r\n")  # the handler's own 400
        answer = read_answer(raw)
    assert answer.startswith(b"HTTP/1.0 400") and b"\r\nX-Frame-Options: deny\r\n" in answer
    # the 400's connection gone first, so "one open" below is the idle one and not that one lingering
    assert wait_for(lambda: server.stats.snapshot()["open"] == 0)
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as idle:  # holds the one connection
        assert wait_for(lambda: server.stats.snapshot()["open"] == 1)
        refused = requests.get(url(server, "/metrics"), timeout=5)  # at the cap, answered by the loop
        assert refused.status_code == 503 and refused.headers["X-Frame-Options"] == "deny"
        assert idle.fileno() >= 0


def read_answer(sock):
    chunks = []
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()
