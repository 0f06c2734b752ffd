"""The daemon's HTTP endpoints: /metrics, /healthz, /status and a small index page.

Everything is served from memory and nothing changes state, so only GET and HEAD are allowed. Each
connection gets its own daemon thread with a socket timeout: a slow or stuck client (including one stuck
in a TLS handshake) holds only its own thread, never the accept loop or another scraper. Errors are
logged one line each; successful requests are not logged.
"""

import gzip
import json
import logging
import socket
import socketserver
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from .. import __version__
from .webauth import Guard
from .webconfig import WebSecurity

log = logging.getLogger(__name__)

DEFAULT_CLIENT_TIMEOUT_SECONDS = 10.0
TEXT = "text/plain; charset=utf-8"

INDEX_HTML = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>npumon</title></head>
<body><h1>npumon {version}</h1>
<ul>
<li><a href="/metrics">/metrics</a> Prometheus metrics</li>
<li><a href="/status">/status</a> latest snapshot and findings (JSON)</li>
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
    if not port_text.isdigit() or int(port_text) > 65535:
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a stuck client must never hold up stop() or interpreter exit
    allow_reuse_address = True
    request_queue_size = 128  # socketserver's default backlog of 5 drops SYNs (1 s retries) under a burst

    def __init__(self, address: tuple, family: int, dualstack: bool, handler: type,
                 guard: Guard, client_timeout: float, app: "_App") -> None:
        self.address_family = family  # read by TCPServer.__init__ when it creates the socket
        self._dualstack = dualstack
        self.guard = guard
        self.client_timeout = client_timeout
        self.app = app
        super().__init__(address, handler)

    def server_bind(self) -> None:
        if self._dualstack:
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        # TCPServer's bind, not HTTPServer's: that one calls getfqdn(), a reverse DNS lookup that can hang.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]

    def finish_request(self, request, client_address) -> None:
        # Runs in the connection's own thread, so the TLS handshake and the client certificate check
        # (bounded by the timeout) happen here rather than in the accept loop.
        request.settimeout(self.client_timeout)
        accepted = self.guard.accept(request)
        try:
            self.RequestHandlerClass(accepted, client_address, self)
        finally:
            if accepted is not request:
                # wrap_socket detached `request`, so the caller's shutdown_request() cannot close this one.
                self.shutdown_request(accepted)

    def handle_error(self, request, client_address) -> None:
        # Called from inside an `except` block by socketserver; one line instead of a traceback.
        exc = sys.exc_info()[1]
        log.warning("http: connection from %s failed: %s: %s", client_address[0], type(exc).__name__, exc)


class _Response(NamedTuple):
    status: int
    content_type: str
    body: bytes
    headers: Tuple[Tuple[str, str], ...] = ()


class _App:
    """What the endpoints read: the metrics registry and the daemon's two callbacks."""

    def __init__(self, registry: CollectorRegistry, get_status: Callable[[], dict],
                 get_health: Callable[[], Tuple[bool, str]]) -> None:
        self.registry = registry
        self.get_status = get_status
        self.get_health = get_health


class _Handler(BaseHTTPRequestHandler):
    server_version = "npumon/" + __version__
    protocol_version = "HTTP/1.0"  # one request per connection: a timeout always means a stuck client

    def do_GET(self) -> None:
        self._serve(send_body=True)

    def do_HEAD(self) -> None:
        self._serve(send_body=False)

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
        denied = self.server.guard.check(path, self.headers.get("Authorization"))
        if denied is not None:  # basic auth (webauth.py): 401 with WWW-Authenticate, counted
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
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            body = encoder(app.registry)
            if gzip_accepted(self.headers.get("Accept-Encoding", "")):
                return _Response(200, content_type, gzip.compress(body), (("Content-Encoding", "gzip"),))
            return _Response(200, content_type, body)
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
        for name, value in response.headers + self.server.guard.headers():
            self.send_header(name, value)
        self.end_headers()
        if send_body:
            self.wfile.write(response.body)

    def log_request(self, code="-", size="-") -> None:
        """Successful requests are not logged (one line per scrape would flood the journal)."""

    def log_error(self, format: str, *args) -> None:
        log.warning("http: %s: %s", self.client_address[0], format % args)


class WebServer:
    """Serves /metrics, /healthz, /status and / until stop()."""

    def __init__(self, listen: str, registry: CollectorRegistry, get_status: Callable[[], dict],
                 get_health: Callable[[], Tuple[bool, str]], tls_cert: Optional[str] = None,
                 tls_key: Optional[str] = None,
                 client_timeout: float = DEFAULT_CLIENT_TIMEOUT_SECONDS,
                 security: Optional[WebSecurity] = None) -> None:
        """Checks the listen address and loads the TLS files now, so a bad config fails before start().
        `security`: what a web config file (webconfig.py) asks for: TLS, client certificates, basic auth."""
        self._listen = listen
        self._host, self._requested_port = parse_listen(listen)
        if (tls_cert is None) != (tls_key is None):
            raise WebServerError("TLS needs both a certificate and a key file")
        tls = _tls_context(tls_cert, tls_key) if tls_cert is not None else None
        self._guard = Guard(tls, security)
        self._registry = registry
        self._app = _App(registry, get_status, get_health)
        self._client_timeout = client_timeout
        self._server = None  # type: Optional[_Server]
        self._thread = None  # type: Optional[threading.Thread]

    def start(self) -> None:
        """Binds and starts serving in a daemon thread; returns at once. Raises WebServerError."""
        if self._server is not None:
            raise RuntimeError("WebServer already started")
        family, address, dualstack = _resolve(self._host, self._requested_port)
        try:
            server = _Server(address, family, dualstack, _Handler, self._guard, self._client_timeout, self._app)
        except OSError as exc:
            raise WebServerError("cannot listen on {}: {}".format(self._listen, exc.strerror or exc)) from None
        self._server = server
        self._registry.register(self._guard)  # npumon_http_auth_failures_total
        # A short poll interval keeps stop() fast: shutdown() waits for the loop to notice.
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="npumon-web", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops accepting, closes the listening socket and joins the serving thread. Requests already
        being served finish on their own daemon threads."""
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.shutdown()
        server.server_close()
        thread.join()
        self._registry.unregister(self._guard)
        self._server = self._thread = None

    def use_security(self, security: Optional[WebSecurity]) -> None:
        """Enforce another web config (a reload) from the next connection or request on."""
        self._guard.use(security)

    @property
    def port(self) -> int:
        """The bound port (useful with listen port 0, which picks a free one)."""
        if self._server is None:
            raise RuntimeError("WebServer not started")
        return self._server.server_address[1]
