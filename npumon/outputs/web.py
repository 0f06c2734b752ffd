"""The daemon's HTTP endpoints: /metrics, /healthz, /status, the health API (/v1/health, /v1/events,
POST /v1/ack: health_api.py) and a small index page.

Everything is served from memory and nothing changes state, so only GET and HEAD are allowed, except POST
/v1/ack, which is answered only where the web config requires authentication. The server
(httpserver.py) is bounded: a fixed pool of workers, a cap on open connections and a deadline for the
whole request, so slow or stuck clients (including ones stuck in a TLS handshake) cost a file descriptor
each, never a thread, and never hold up a scraper or the poll loop. Errors are logged one line each, at
most a few a minute; successful requests are not logged.
"""

import json
import logging
import socket
import ssl
import threading
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, List, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

from prometheus_client.exposition import gzip_accepted
from prometheus_client.registry import CollectorRegistry

from .. import __version__
from .exposition import serve_metrics
from .http_metrics import ServerStats
from .httpconn import DeadlineIO
from .httpserver import (DEFAULT_MAX_CONNECTIONS, DEFAULT_REQUEST_TIMEOUT_SECONDS, DEFAULT_WORKERS,
                         BoundedHTTPServer, Limits)
from . import health_api
from .health_api import HealthApi
from .webauth import Guard, authenticated_user
from .webconfig import WebSecurity

log = logging.getLogger(__name__)

DEFAULT_CLIENT_TIMEOUT_SECONDS = DEFAULT_REQUEST_TIMEOUT_SECONDS
LISTEN_BACKLOG = 128  # socketserver's default of 5 drops SYNs (1 s retries) under a burst
TEXT = "text/plain; charset=utf-8"

INDEX_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>npumon</title></head>
<body><h1>npumon {version}</h1>
<ul>
<li><a href="/metrics">/metrics</a> Prometheus metrics</li>
<li><a href="/status">/status</a> latest snapshot and findings (JSON)</li>
<li><a href="/v1/health">/v1/health</a> host and chip verdicts: 200 in service, 503 out (JSON)</li>
<li><a href="/v1/events">/v1/events</a> the event history, newest 100 (JSON)</li>
<li><a href="/healthz">/healthz</a> daemon health</li>
</ul></body></html>
""".format(version=__version__)


class WebServerError(Exception):
    """A one-line reason the server cannot be set up or cannot listen."""


def parse_listen(listen: str) -> Tuple[str, int]:
    """'127.0.0.1:9464' -> ('127.0.0.1', 9464); '[::1]:9464' -> ('::1', 9464); ':9464' -> ('', 9464)."""
    host, sep, port_text = listen.strip().rpartition(":")
    if not sep:
        raise WebServerError("listen address {!r} has no port (expected host:port)".format(listen))
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise WebServerError("listen address {!r}: write IPv6 addresses in brackets, e.g. [::1]:9464".format(listen))
    if not port_text.isdigit():
        raise WebServerError("listen address {!r}: port {!r} is not a number".format(listen, port_text))
    if int(port_text) > 65535:
        raise WebServerError("listen address {!r}: port must be 0..65535".format(listen))
    return host, int(port_text)


def _resolve(host: str, port: int) -> Tuple[int, tuple, bool]:
    """(address family, socket address, dual-stack) to bind. An empty host means every address: IPv6 and
    IPv4 on one dual-stack socket where the kernel allows it, else IPv4 only."""
    if not host:
        if socket.has_dualstack_ipv6():
            return socket.AF_INET6, ("::", port), True
        return socket.AF_INET, ("0.0.0.0", port), False
    try:
        infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise WebServerError("cannot resolve listen host {!r}: {}".format(host, exc.strerror)) from None
    family, _, _, _, address = infos[0]
    return family, address, False


def _tls_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        reason = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
        raise WebServerError(
            "cannot load TLS certificate {} / key {}: {}".format(cert_file, key_file, reason)) from None
    return context


def limits_problems(workers: int, max_connections: int, request_timeout: float) -> List[Tuple[str, str]]:
    """(key under exporter, problem) for limits no server could run with."""
    problems = []
    if workers < 1:
        problems.append(("http_workers", "must be at least 1"))
    if max_connections < workers:
        problems.append(("max_connections", "must be at least http_workers ({})".format(workers)))
    if request_timeout <= 0:
        problems.append(("request_timeout_seconds", "must be greater than 0"))
    return problems


def exporter_config_problems(config: Any) -> List[Tuple[str, str]]:
    """The exporter's own checks of the whole config: its listeners, TLS files and limits, as [(dotted key,
    problem)]."""
    exporter = config.exporter
    problems: List[Tuple[str, str]] = []
    if bool(exporter.tls_cert_file) != bool(exporter.tls_key_file):
        problems.append(("exporter.tls_cert_file", "TLS needs both tls_cert_file and tls_key_file"))
    try:
        parse_listen(exporter.listen)
    except WebServerError as exc:
        problems.append(("exporter.listen", str(exc)))
    if exporter.npu_exporter_listen is not None:
        try:
            parse_listen(exporter.npu_exporter_listen)
        except WebServerError as exc:
            problems.append(("exporter.npu_exporter_listen", str(exc)))
        if not exporter.npu_exporter_compat:
            problems.append(("exporter.npu_exporter_listen", "needs npu_exporter_compat: true"))
    if not 0 <= exporter.process_series_per_chip <= 1000:
        problems.append(("exporter.process_series_per_chip", "must be 0..1000 (series per chip)"))
    problems.extend(("exporter." + key, problem) for key, problem in limits_problems(
        exporter.http_workers, exporter.max_connections, exporter.request_timeout_seconds))
    return problems


def _listening_socket(family: int, address: tuple, dualstack: bool) -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if dualstack:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(address)  # no getfqdn() as HTTPServer does: a reverse DNS lookup can hang
        sock.listen(LISTEN_BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class _Response(NamedTuple):
    status: int
    content_type: str
    body: bytes
    headers: Tuple[Tuple[str, str], ...] = ()


def _json(answer: health_api.Answer) -> _Response:
    status, body = answer
    return _Response(status, "application/json", (json.dumps(body, indent=2) + "\n").encode("utf-8"))


class _App:
    """What the endpoints read: the metrics registry and the daemon's two callbacks."""

    def __init__(self, registry: CollectorRegistry, get_status: Callable[[], dict],
                 get_health: Callable[[], Tuple[bool, str]], api: Optional[HealthApi] = None) -> None:
        self.registry = registry
        self.get_status = get_status
        self.get_health = get_health
        self.api = api  # /v1/*; None: not served (npu-exporter's listener)


class _Handler(DeadlineIO, BaseHTTPRequestHandler):
    server_version = "npumon/" + __version__
    protocol_version = "HTTP/1.0"  # one request per connection: a timeout always means a stuck client

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

    def do_POST(self) -> None:
        split = urlsplit(self.path)
        if split.path != "/v1/ack" or self.server.app.api is None:
            self._method_not_allowed()
            return
        guard = self.server.guard
        denied = guard.check(split.path, self.headers.get("Authorization"), self.client_address[0])
        if denied is not None:
            status, headers, body = denied
            self._send(_Response(status, TEXT, body, headers), send_body=True)
            return
        body = self._request_body()
        if isinstance(body, _Response):
            self._send(body, send_body=True)
            return
        try:
            answer = health_api.ack(self.server.app.api, body,
                                    authenticated_user(guard, self.headers.get("Authorization")))
        except Exception as exc:  # a failing callback costs one 500 and one log line
            log.warning("http: /v1/ack failed: %s: %s", type(exc).__name__, exc)
            answer = (500, {"error": "internal error"})
        self._send(_json(answer), send_body=True)

    def _request_body(self):
        """The request's body (bytes), or the 4xx answer that refuses it: a length is required and bounded."""
        length = self.headers.get("Content-Length")
        if length is None or not length.strip().isdigit():
            return _Response(411, TEXT, b"a Content-Length is required\n")
        if int(length) > health_api.MAX_ACK_BODY_BYTES:
            return _Response(413, TEXT, b"request body too large\n")
        body = self.rfile.read(int(length))
        if len(body) != int(length):
            return _Response(400, TEXT, b"request body shorter than its Content-Length\n")
        return body

    def __getattr__(self, name: str):
        # BaseHTTPRequestHandler answers methods it has no do_<METHOD> for with 501; every method other
        # than GET and HEAD gets 405 instead.
        if name.startswith("do_"):
            return self._method_not_allowed
        raise AttributeError(name)

    def _method_not_allowed(self) -> None:
        self._send(_Response(405, TEXT, b"method not allowed\n", (("Allow", "GET, HEAD"),)), send_body=True)

    def _serve(self, send_body: bool) -> None:
        path = urlsplit(self.path).path
        denied = self.server.guard.check(path, self.headers.get("Authorization"), self.client_address[0])
        if denied is not None:  # basic auth (webauth.py): 401 with WWW-Authenticate, 429 or 503, counted
            status, headers, body = denied
            self._send(_Response(status, TEXT, body, headers), send_body)
            return
        try:
            response = self._respond(path, self.server.app)
        except Exception as exc:  # a failing callback must cost one 500 and one log line, not the thread
            log.warning("http: %s failed: %s: %s", path, type(exc).__name__, exc)
            response = _Response(500, TEXT, b"internal error\n")
        self._send(response, send_body)

    def _respond(self, path: str, app: "_App") -> "_Response":
        if app.api is not None and path == "/v1/health":
            snapshot, verdict = app.api.state()
            return _json(health_api.health(snapshot, verdict, urlsplit(self.path).query))
        if app.api is not None and path == "/v1/events":
            return _json(health_api.events(app.api.events, urlsplit(self.path).query))
        if path == "/metrics":  # rendered once per change, served from memory (exposition.py)
            exposition = serve_metrics(app.registry, self.headers.get("Accept", ""),
                                       gzip_accepted(self.headers.get("Accept-Encoding", "")))
            if exposition.gzipped:
                return _Response(200, exposition.content_type, exposition.body, (("Content-Encoding", "gzip"),))
            return _Response(200, exposition.content_type, exposition.body)
        if path == "/healthz":
            ok, reason = app.get_health()
            if ok:
                return _Response(200, TEXT, b"ok\n")
            return _Response(503, TEXT, (reason or "unhealthy").encode("utf-8") + b"\n")
        if path == "/status":
            return _Response(200, "application/json", (json.dumps(app.get_status(), indent=2) + "\n").encode())
        if path == "/":
            return _Response(200, "text/html; charset=utf-8", INDEX_HTML.encode())
        return _Response(404, TEXT, b"not found\n")

    def _send(self, response: "_Response", send_body: bool) -> None:
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(response.body)))
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(response.body)

    def end_headers(self) -> None:
        # here rather than in _send, so that the handler's own errors (400, 414...) carry them too
        for name, value in self.server.guard.headers():  # http_server_config.headers
            self.send_header(name, value)
        super().end_headers()

    def log_request(self, code="-", size="-") -> None:
        """Successful requests are not logged (one line per scrape would flood the journal)."""

    def log_error(self, format: str, *args) -> None:
        self.server.warn("http: %s: %s", self.client_address[0], format % args)


class WebServer:
    """Serves /metrics, /healthz, /status, /v1/* and / until stop()."""

    def __init__(self, listen: str, registry: CollectorRegistry, get_status: Callable[[], dict],
                 get_health: Callable[[], Tuple[bool, str]], tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None,
                 client_timeout: float = DEFAULT_CLIENT_TIMEOUT_SECONDS, workers: int = DEFAULT_WORKERS,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS, security: Optional[WebSecurity] = None,
                 api: Optional[HealthApi] = None) -> None:
        """Checks the listen address, the limits and the TLS files now, so a bad config fails before start().
        client_timeout: the deadline of a whole request (TLS handshake, head, body and answer).
        `security`: what a web config file (webconfig.py) asks for: TLS, client certificates, basic auth.
        `api`: what /v1/health, /v1/events and POST /v1/ack answer from (health_api.py); None: not served."""
        self._listen = listen
        self._host, self._requested_port = parse_listen(listen)
        problems = limits_problems(workers, max_connections, client_timeout)
        if problems:
            raise WebServerError("exporter.{}: {}".format(*problems[0]))
        if (tls_cert is None) != (tls_key is None):
            raise WebServerError("TLS needs both a certificate and a key file")
        tls = _tls_context(tls_cert, tls_key) if tls_cert is not None else None
        self._guard = Guard(tls, security)
        self.registry = registry  # what it serves (the daemon tells it of each publication)
        self._app = _App(registry, get_status, get_health, api)
        self._limits = Limits(workers=workers, max_connections=max_connections, request_timeout=client_timeout)
        self.stats = ServerStats(workers, max_connections)  # replaced by the server's own once it starts
        self._server = None  # type: Optional[BoundedHTTPServer]
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> None:
        """Binds and starts serving on threads of its own; returns at once. Raises WebServerError."""
        if self._server is not None:
            raise RuntimeError("WebServer already started")
        family, address, dualstack = _resolve(self._host, self._requested_port)
        try:
            listener = _listening_socket(family, address, dualstack)
        except OSError as exc:
            raise WebServerError("cannot listen on {}: {}".format(self._listen, exc.strerror or exc)) from None
        server = BoundedHTTPServer(listener, _Handler, self._limits, self._guard)
        server.app = self._app
        self.registry.register(self._guard)  # npumon_http_auth_failures_total
        server.start()
        with self._lock:
            self._server, self.stats = server, server.stats

    def stop(self) -> None:
        """Stops accepting, closes the listening socket and the connections still sending their request.
        Requests being answered finish (by their deadline at the latest) on their own daemon threads."""
        with self._lock:
            server, self._server = self._server, None
            self._stopped = True
        if server is not None:
            server.stop()
            self.registry.unregister(self._guard)

    def use_security(self, security: Optional[WebSecurity]) -> None:
        """Enforce another web config (a reload) from the next connection or request on."""
        self._guard.use(security)

    def health(self) -> Tuple[bool, str]:
        """(can serve, reason); see BoundedHTTPServer.health."""
        server = self._server
        if server is None:
            return (False, "http server stopped") if self._stopped else (True, "starting: http server not started yet")
        return server.health()

    @property
    def url(self) -> str:
        """Where it serves, for the start-up line: scheme, bound address and port; a wildcard address says so."""
        if self._server is None:
            raise RuntimeError("WebServer not started")
        address, port = self._server.server_address[:2]
        scheme = "http" if self._guard.handshake() is None else "https"
        shown = "[{}]".format(address) if ":" in address else address
        everywhere = " (every address)" if address in ("::", "0.0.0.0") else ""
        return "{}://{}:{}{}".format(scheme, shown, port, everywhere)

    @property
    def port(self) -> int:
        """The bound port (useful with listen port 0, which picks a free one)."""
        if self._server is None:
            raise RuntimeError("WebServer not started")
        return self._server.server_address[1]
