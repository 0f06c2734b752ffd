"""The HTTP server's limits against slow and too many clients, on 127.0.0.1 with small limits: slowloris
clients hold no thread, a trickling client is dropped at the whole-request deadline, connections over the
cap are refused at once, and accept() out of file descriptors backs off instead of spinning."""

import json
import re
import os
import select
import socket
import subprocess
import sys
import threading
import time

import psutil
import pytest
import requests

from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.outputs.exporter import ExporterView, build_registry

HERE = os.path.dirname(os.path.abspath(__file__))
HEAD_START = b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n"


def view():
    snapshot = Snapshot(time=1767225600.0, host=HostSample(cpu_ratio=0.5),
                        chips=[ChipSample(npu=0, chip=0, name="910B3", health="OK", temperature_celsius=41.0)],
                        sources={"npu-smi": SourceStatus(ok=True, duration_seconds=0.3)})
    return ExporterView(snapshot=snapshot, findings=[])


@pytest.fixture
def serve():
    from npumon.outputs.web import WebServer

    servers = []

    def start(**kwargs):
        server = WebServer("127.0.0.1:0", build_registry(view), lambda: {}, lambda: (True, "ok"), **kwargs)
        server.start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def clients():
    """Raw client sockets, all closed when the test ends."""
    opened = []

    def connect(port):
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        opened.append(sock)
        return sock

    yield connect
    for sock in opened:
        sock.close()


def metrics_url(server):
    return "http://127.0.0.1:{}/metrics".format(server.port)


def closed_by_server(sock, wait):
    """True when the server closed (or reset) the connection within `wait` seconds."""
    readable, _, _ = select.select([sock], [], [], wait)
    if not readable:
        return False
    try:
        return sock.recv(4096) == b""
    except ConnectionResetError:
        return True


def read_all(sock):
    chunks = []
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def test_slowloris_clients_hold_no_thread_and_scrapes_keep_answering(serve, clients):
    server = serve(client_timeout=5.0)  # the default limits: 60 slow clients are more than its workers
    slow = [clients(server.port) for _ in range(60)]
    for sock in slow:
        sock.sendall(HEAD_START)
    threads_before = threading.active_count()
    stop = threading.Event()

    def trickle():  # one header line per client every 0.2 s, for at most 4 s
        deadline = time.monotonic() + 4.0
        while not stop.is_set() and time.monotonic() < deadline:
            for index, sock in enumerate(slow):
                try:
                    sock.sendall("X-Slow-{}: 1\r\n".format(index).encode())
                except OSError:
                    pass
            stop.wait(0.2)

    trickler = threading.Thread(target=trickle, daemon=True)
    trickler.start()
    try:
        durations, most_threads = [], 0
        for _ in range(20):
            started = time.monotonic()
            response = requests.get(metrics_url(server), timeout=3)
            durations.append(time.monotonic() - started)
            assert response.status_code == 200 and "npumon_chip_temperature_celsius" in response.text
            most_threads = max(most_threads, threading.active_count())
            time.sleep(0.05)
    finally:
        stop.set()
        trickler.join(5)
    assert max(durations) < 1.0, durations
    # the trickler is the only thread more: 60 slow clients cost the server none (a thread each before)
    assert most_threads <= threads_before + 1
    assert server.stats.snapshot()["open"] >= 60  # all still connected: none was dropped to make room


def test_a_client_that_trickles_its_head_forever_is_closed_at_the_request_deadline(serve, clients):
    server = serve(client_timeout=0.6)
    sock = clients(server.port)
    sock.sendall(HEAD_START)
    started, closed_at = time.monotonic(), None
    while time.monotonic() - started < 3.0:  # a header line every 0.1 s: no single read waits 0.6 s
        try:
            sock.sendall(b"X-Trickle: 1\r\n")
        except OSError:
            closed_at = time.monotonic() - started
            break
        if closed_by_server(sock, 0.1):
            closed_at = time.monotonic() - started
            break
    assert closed_at is not None, "still open after 3 s"
    assert 0.5 <= closed_at < 1.5
    assert server.stats.snapshot()["timeouts"] == 1


def body_reader():
    """A handler that reads a request body, as an endpoint taking a POST would."""
    from http.server import BaseHTTPRequestHandler

    from npumon.outputs.httpconn import DeadlineIO

    class BodyReader(DeadlineIO, BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format, *args):
            pass

    return BodyReader


def test_the_deadline_covers_the_body_too(clients):
    from npumon.outputs.httpserver import BoundedHTTPServer, Limits

    listener = socket.create_server(("127.0.0.1", 0))
    server = BoundedHTTPServer(listener, body_reader(), Limits(workers=1, max_connections=4, request_timeout=0.6))
    server.start()
    try:
        port = listener.getsockname()[1]
        whole = clients(port)
        whole.sendall(b"POST / HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello")
        assert read_all(whole).endswith(b"\r\n\r\nhello")

        sock = clients(port)
        sock.sendall(b"POST / HTTP/1.0\r\nContent-Length: 1000\r\n\r\n")
        started, closed_at = time.monotonic(), None
        while time.monotonic() - started < 3.0:  # one body byte every 0.1 s
            try:
                sock.sendall(b"x")
            except OSError:
                closed_at = time.monotonic() - started
                break
            if closed_by_server(sock, 0.1):
                closed_at = time.monotonic() - started
                break
        assert closed_at is not None and 0.5 <= closed_at < 1.5
        assert server.stats.snapshot()["timeouts"] == 1
    finally:
        server.stop()


def test_connections_over_the_cap_are_refused_at_once_without_a_worker(serve, clients):
    server = serve(workers=1, max_connections=4, client_timeout=5.0)
    idle = [clients(server.port) for _ in range(4)]
    deadline = time.monotonic() + 3
    while server.stats.snapshot()["open"] < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert server.stats.snapshot()["open"] == 4

    started = time.monotonic()
    refused = clients(server.port)
    refused.settimeout(1.0)
    assert refused.recv(4096).startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
    assert time.monotonic() - started < 0.5
    assert closed_by_server(refused, 0.5)
    try:
        response = requests.get(metrics_url(server), timeout=2)
        assert response.status_code == 503 and response.headers["Connection"] == "close"
    except requests.exceptions.ConnectionError:
        pass  # the 503 raced the request: a reset is a refusal too
    assert server.stats.snapshot()["refused"] >= 2

    for sock in idle:
        sock.close()
    deadline = time.monotonic() + 3
    while server.stats.snapshot()["open"] > 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert requests.get(metrics_url(server), timeout=2).status_code == 200


def test_at_the_cap_a_connection_stalled_without_a_request_makes_room_for_a_scrape(serve, clients):
    server = serve(workers=1, max_connections=4, client_timeout=1.0)  # stalled after 0.5 s
    idle = [clients(server.port) for _ in range(4)]
    for sock in idle:
        sock.sendall(b"GET /metrics HTTP/1.0\r\n")
    time.sleep(0.7)
    assert requests.get(metrics_url(server), timeout=2).status_code == 200
    assert closed_by_server(idle[0], 0.5)  # the oldest went
    assert not any(closed_by_server(sock, 0.0) for sock in idle[1:])
    assert server.stats.snapshot()["evicted"] == 1 and server.stats.snapshot()["refused"] == 0


def test_the_servers_threads_are_started_once_and_stay_so_many(serve, clients):
    before = threading.active_count()
    server = serve(workers=3, max_connections=50, client_timeout=5.0)
    assert threading.active_count() == before + 4  # three workers and the loop
    for _ in range(40):
        clients(server.port).sendall(b"GET /metrics HTTP/1.0\r\n")
    statuses = []
    for _ in range(5):
        statuses.append(requests.get(metrics_url(server), timeout=3).status_code)
    assert statuses == [200] * 5
    assert threading.active_count() == before + 4


def test_an_idle_server_waits_without_waking_and_stops_at_once(serve, clients):
    """The loop sleeps until a socket or stop() wakes it (an idle daemon pays nothing for it), and still keeps
    a half-sent request's deadline."""
    server = serve(workers=1, max_connections=4, client_timeout=0.5)
    loop = server._server
    selects = []
    select_once = loop._selector.select
    loop._selector.select = lambda timeout=None: selects.append(timeout) or select_once(timeout)
    time.sleep(1.0)
    assert len(selects) <= 1 and selects[-1:] in ([], [None])  # one wait without end, not a tick every 0.1 s

    sock = clients(server.port)
    sock.sendall(HEAD_START)  # never finished: the wait is bounded by its deadline now
    assert closed_by_server(sock, 3.0)
    assert any(timeout is not None and 0 < timeout <= 0.5 for timeout in selects)

    started = time.monotonic()
    server.stop()
    assert time.monotonic() - started < 0.5


def test_out_of_file_descriptors_accept_backs_off_and_health_says_so(tmp_path):
    """A subprocess uses up its own open-file limit; clients wait in the backlog, which keeps the listener
    readable: the accept loop must not spin, health must say it cannot accept, and it must recover."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fd_starved_server.py")], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)

    def ask(command):
        proc.stdin.write(command + "\n")
        proc.stdin.flush()
        return proc.stdout.readline().strip()

    waiting = []
    try:
        port = int(proc.stdout.readline())
        assert requests.get("http://127.0.0.1:{}/metrics".format(port), timeout=3).status_code == 200
        assert ask("starve").startswith("starved")
        for _ in range(5):
            waiting.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        process = psutil.Process(proc.pid)
        time.sleep(0.3)  # past the first failed accepts
        cpu = sum(process.cpu_times()[:2])
        time.sleep(2.0)
        cpu = sum(process.cpu_times()[:2]) - cpu
        assert cpu < 0.3, "the accept loop used {:.2f}s of CPU in 2s".format(cpu)
        healthy, reason = json.loads(ask("health"))
        assert not healthy and "cannot accept connections" in reason and "Too many open files" in reason
        assert ask("feed") == "fed"
        assert requests.get("http://127.0.0.1:{}/metrics".format(port), timeout=5).status_code == 200
        assert json.loads(ask("health")) == [True, "ok"]
    finally:
        for sock in waiting:
            sock.close()
        proc.stdin.close()
        proc.wait(10)
    assert "cannot accept connections: [Errno 24] Too many open files" in proc.stderr.read()


@pytest.mark.parametrize("exporter, message", [
    ("{http_workers: 0}", "exporter.http_workers: must be at least 1"),
    ("{http_workers: 4, max_connections: 2}", "exporter.max_connections: must be at least http_workers (4)"),
    ("{request_timeout_seconds: 0}", "exporter.request_timeout_seconds: must be greater than 0"),
])
def test_limits_no_server_could_run_with_are_one_line_config_errors(exporter, message):
    from npumon.config.errors import ConfigError
    from npumon.settings import parse_config

    with pytest.raises(ConfigError, match=r"^npumon.yaml:1: {}$".format(re.escape(message))):
        parse_config("exporter: {}\n".format(exporter), "npumon.yaml")


def test_the_configs_defaults_are_the_servers():
    from npumon.config.schema import ExporterConfig
    from npumon.outputs import httpserver

    defaults = ExporterConfig()
    assert (defaults.http_workers, defaults.max_connections, defaults.request_timeout_seconds) == (
        httpserver.DEFAULT_WORKERS, httpserver.DEFAULT_MAX_CONNECTIONS, httpserver.DEFAULT_REQUEST_TIMEOUT_SECONDS)


def test_clients_stuck_in_the_tls_handshake_hold_no_worker(serve, clients, certificate):
    cert, key = certificate
    server = serve(tls_cert=cert, tls_key=key, workers=1, max_connections=40, client_timeout=0.8)
    stuck = [clients(server.port) for _ in range(20)]  # none of them starts the handshake
    stuck[0].sendall(b"\x16\x03\x01")  # and one stops in the middle of its first record
    started = time.monotonic()
    for _ in range(3):
        response = requests.get(metrics_url(server).replace("http:", "https:"), verify=cert, timeout=3)
        assert response.status_code == 200
    assert time.monotonic() - started < 0.6  # the one worker was free for every scrape
    assert all(closed_by_server(sock, 2.0) for sock in stuck)  # dropped at the deadline
    assert server.stats.snapshot()["timeouts"] == 20
