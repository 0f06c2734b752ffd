"""The web config enforced by the real HTTP server on 127.0.0.1: basic auth, client certificates, headers,
and the npumon_http_auth_failures_total counter."""

import base64
import http.client
import logging
import socket
import ssl
import threading
import time

import bcrypt
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from npumon.outputs import auththrottle, webauth
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
    assert failures(ok.text) == {"missing": 3, "malformed": 2, "wrong_credentials": 2, "throttled": 0, "busy": 0,
                                 "client_cert_missing": 0, "client_cert_invalid": 0, "client_cert_san": 0}


def test_an_exporter_without_web_config_serves_no_auth_series(serve):
    server = serve("")
    assert failures(requests.get(url(server, "/metrics"), timeout=5).text) is None


def test_a_remembered_password_never_waits_for_bcrypt_and_new_ones_get_503_when_all_checks_are_taken(serve,
                                                                                                    monkeypatch):
    server = serve(users(prometheus=HASH))
    auth = ("prometheus", PASSWORD)
    assert requests.get(url(server, "/metrics"), auth=auth, timeout=5).status_code == 200  # verified once
    guard = server._guard
    held = []
    with BcryptGate(monkeypatch) as gate:  # every check slot taken, e.g. by people guessing from three addresses
        threads = [threading.Thread(target=lambda source=source: held.append(get_from(
            server, source, ("prometheus", "a guess")))) for source in ("127.0.0.2", "127.0.0.3", "127.0.0.5")]
        for thread in threads:
            thread.start()
        assert wait_for(lambda: gate.entered == auththrottle.SLOTS == 3)
        started = time.monotonic()
        assert requests.get(url(server, "/metrics"), auth=auth, timeout=5).status_code == 200
        status, headers, _ = get_from(server, "127.0.0.4", ("prometheus", "another guess"))
        assert status == 503 and headers["Retry-After"] == "1"
        # an unknown user is refused like a known one: no quick 401 tells that the user does not exist
        assert get_from(server, "127.0.0.4", ("mallory", PASSWORD))[0] == 503
        assert time.monotonic() - started < 1.0  # answered at once, not queued behind the checks
    for thread in threads:
        thread.join(10)
    assert [status for status, _, _ in held] == [401, 401, 401]
    assert guard.failures()["busy"] == 2
    # the cache holds keyed digests, never a password
    assert all(len(key) == 32 and PASSWORD.encode() not in key for key in guard._cache)


def test_wrong_passwords_from_one_address_get_429_at_once_and_other_addresses_are_unaffected(serve):
    server = serve(users(prometheus=HASH))
    guesses = [get_from(server, "127.0.0.2", ("prometheus", "guess{}".format(i)))[0]
               for i in range(auththrottle.FREE_FAILURES)]
    assert guesses == [401] * auththrottle.FREE_FAILURES
    started = time.monotonic()
    status, headers, body = get_from(server, "127.0.0.2", ("prometheus", "one more"))
    assert status == 429 and headers["Retry-After"] == "1" and b"too many wrong passwords" in body
    assert time.monotonic() - started < 0.5  # no bcrypt, no wait: the answer comes at once
    # another address: its wrong password is a plain 401, its right one passes
    assert get_from(server, "127.0.0.3", ("prometheus", "typo"))[0] == 401
    assert get_from(server, "127.0.0.3", ("prometheus", PASSWORD))[0] == 200
    counts = server._guard.failures()
    assert counts["throttled"] == 1 and counts["wrong_credentials"] == auththrottle.FREE_FAILURES + 1
    # and the address is free again once its time is up
    time.sleep(1.1)
    assert get_from(server, "127.0.0.2", ("prometheus", PASSWORD))[0] == 200


def test_a_remembered_password_passes_from_a_throttled_address_and_a_new_one_waits_its_turn(serve, tmp_path):
    server = serve(users(prometheus=HASH, alice=HASH))
    assert get_from(server, "127.0.0.2", ("prometheus", PASSWORD))[0] == 200  # remembered from now on
    for i in range(auththrottle.FREE_FAILURES):
        get_from(server, "127.0.0.2", ("prometheus", "guess{}".format(i)))
    assert get_from(server, "127.0.0.2", ("prometheus", "guess"))[0] == 429
    # the Prometheus on that address keeps scraping: its password needs no bcrypt, so no turn
    assert get_from(server, "127.0.0.2", ("prometheus", PASSWORD))[0] == 200
    # a right password not yet remembered cannot be told from a guess without a bcrypt: it waits like one
    assert get_from(server, "127.0.0.2", ("alice", PASSWORD))[0] == 429


def test_one_password_check_at_a_time_from_an_address_that_guessed_wrong(serve, monkeypatch):
    server = serve(users(prometheus=HASH))
    assert get_from(server, "127.0.0.2", ("prometheus", "a typo"))[0] == 401
    held = []
    with BcryptGate(monkeypatch) as gate:
        thread = threading.Thread(target=lambda: held.append(get_from(server, "127.0.0.2", ("prometheus", "x"))))
        thread.start()
        assert wait_for(lambda: gate.entered == 1)
        status, headers, _ = get_from(server, "127.0.0.2", ("prometheus", PASSWORD))
        assert status == 429 and headers["Retry-After"] == "1"
        assert get_from(server, "127.0.0.3", ("prometheus", PASSWORD))[0] == 200  # the other slot
    thread.join(10)
    assert held[0][0] == 401


def test_a_shut_out_address_is_answered_by_the_loop_without_waiting_for_a_worker(serve, monkeypatch):
    server = serve("http_server_config:\n  headers:\n    X-Frame-Options: deny\n" + users(prometheus=HASH),
                   workers=1)
    for i in range(auththrottle.FREE_FAILURES):
        get_from(server, "127.0.0.2", ("prometheus", "guess{}".format(i)))
    held = []
    with BcryptGate(monkeypatch) as gate:  # the one worker is busy with a password from another address
        thread = threading.Thread(target=lambda: held.append(get_from(server, "127.0.0.3", ("prometheus", "x"))))
        thread.start()
        assert wait_for(lambda: gate.entered == 1)
        started = time.monotonic()
        status, headers, body = get_from(server, "127.0.0.2", ("prometheus", "one more guess"))
        assert time.monotonic() - started < 1.0
        assert (status, headers["Retry-After"], headers["X-Frame-Options"]) == (429, "1", "deny")
        assert body == webauth.THROTTLED_BODY
    thread.join(10)
    assert held[0][0] == 401
    assert get_from(server, "127.0.0.2", path="/healthz")[0] == 200  # open to all, shut out or not
    assert server._guard.failures()["throttled"] == 1


def test_the_loop_reads_the_path_and_authorization_of_a_head():
    head = b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nauthorization:  Basic abc \r\nAuthorization: Basic def\r\n\r\n"
    assert webauth._path_and_authorization(head) == ("/metrics", "Basic abc")  # the first, as the handler reads
    assert webauth._path_and_authorization(b"GET /healthz HTTP/1.0\n\n") == ("/healthz", None)
    assert webauth._path_and_authorization(b"\r\n\r\n") == ("", None)
    assert webauth._path_and_authorization(b"GET / HTTP/1.0\r\n\r\nAuthorization: Basic in-a-body") == ("/", None)


def test_throttling_is_logged_once_not_per_guess(serve, caplog):
    server = serve(users(prometheus=HASH))
    with caplog.at_level(logging.WARNING, logger="npumon.outputs.web"):
        for i in range(auththrottle.FREE_FAILURES + 5):
            get_from(server, "127.0.0.2", ("prometheus", "guess{}".format(i)))
    lines = [record.getMessage() for record in caplog.records]
    assert lines == ["http: wrong passwords from 127.0.0.2: its passwords are answered 429 for 1s "
                     "(npumon_http_auth_failures_total{reason=\"throttled\"} counts them)"]


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
    server._guard.throttle = auththrottle.Throttle(slots=8)  # all eight checked at once, each from its own address
    results = []

    def scrape(i, password):
        results.append((password, get_from(server, "127.0.0.{}".format(10 + i), ("prometheus", password))[0]))

    threads = [threading.Thread(target=scrape, args=(i, PASSWORD if i % 2 else "bad{}".format(i))) for i in range(8)]
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
    server = serve(mtls(pki, "  client_allowed_sans: [prometheus]\n") + users(prometheus=HASH), workers=1,
                   max_connections=4)
    cert = (pki.client_cert, pki.client_key)
    held = []
    with BcryptGate(monkeypatch) as gate:  # the one worker is in a bcrypt on the request below
        thread = threading.Thread(target=lambda: held.append(requests.get(
            url(server, "/metrics", "https"), verify=pki.ca, cert=cert, auth=("prometheus", "a guess"), timeout=10)))
        thread.start()
        assert wait_for(lambda: gate.entered == 1 and server.stats.snapshot()["busy"] == 1)
        started = time.monotonic()
        with pytest.raises(requests.exceptions.ConnectionError):
            tls_get(server, pki, (pki.other_client_cert, pki.other_client_key))
        assert time.monotonic() - started < 1.5  # refused by the loop thread, not after a worker got free
        assert server._guard.failures()["client_cert_san"] == 1
        assert server.stats.snapshot()["busy"] == 1
    thread.join(10)
    assert held[0].status_code == 401  # the held request, answered once bcrypt was done


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


class BcryptGate:
    """While entered, every bcrypt check of a wrong password waits (counted in `entered`) until the block is
    left: a guess whose check takes as long as the test needs, without burning CPU on a real high cost."""

    def __init__(self, monkeypatch):
        self._open = threading.Event()
        self.entered = 0
        real = webauth._checkpw

        def gated(password, hashed):
            if password != PASSWORD.encode():
                self.entered += 1
                self._open.wait(10)
            return real(password, hashed)

        monkeypatch.setattr(webauth, "_checkpw", gated)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._open.set()


def get_from(server, source, auth=None, path="/metrics"):
    """(status, headers, body) of a GET sent from the loopback address `source` (127.0.0.2 ...): another
    client address for the server."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10, source_address=(source, 0))
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode("{}:{}".format(*auth).encode()).decode()
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()
