"""A bounded HTTP server for the exporter: a fixed pool of workers, a cap on open connections and a deadline
for the whole request, with the standard library's handler contract (BaseHTTPRequestHandler subclasses).

Why not ThreadingHTTPServer: it starts a thread per connection without a cap and its timeout is per read,
so a client that trickles a header line every few seconds holds a thread forever, and enough of them use
up the process's threads (the poll loop's too) or its file descriptors.

How it stays bounded:
* One loop thread accepts and reads every request head without blocking (a selector over all the
  connections still sending their head; TLS handshakes run there too, non-blocking, and the guard's client
  certificate check right after one completes). A slow client costs a file descriptor and a few bytes,
  never a thread.
* A connection whose head is complete goes to a fixed pool of workers started once, so nothing creates a
  thread under load. The worker runs the handler; its reads and writes re-arm the socket timeout with
  what is left of the connection's deadline, so head, body and answer together never take longer.
* At `max_connections` open connections the one that has sent no complete request for longest makes room
  if it has stalled a while (EVICT_AFTER_SECONDS); else the new one is answered 503 at once by the loop
  (closed, on TLS) and costs no worker. A connection not answered by its deadline is closed and counted.
* accept() failing for lack of file descriptors (EMFILE, ENFILE) pauses accepting with a growing backoff
  instead of spinning on a listener that stays readable.

`health()` says whether the server can serve: the loop runs, accept() works, and no request has waited
longer than a deadline for a worker. One place turns an accepted socket into a connection (`_open`, where
TLS wraps it with the context the guard gives), and the handler reads only through the connection
(`DeadlineIO.setup`). The guard (webauth.Guard, the web config) decides TLS, client certificates and the
extra headers; basic auth is the handler's, in the worker, except that the loop answers 429 at once to a
request from an address shut out for guessing passwords (guard.refuse_early), so guessing holds no worker.
"""

import errno
import logging
import selectors
import socket
import ssl
import threading
import time
from collections import deque
from http import HTTPStatus
from typing import Deque, Dict, NamedTuple, Optional, Tuple

from .http_metrics import ServerStats
from .httpconn import Connection
from .httplog import LineBudget
from .webauth import Guard

log = logging.getLogger("npumon.outputs.web")  # one log name for everything the HTTP server says

DEFAULT_WORKERS = 10  # a Prometheus pair and a few probes at once; 20 concurrent scrapes in two rounds
DEFAULT_MAX_CONNECTIONS = 512  # well under the usual 1024 open files, leaving room for everything else
DEFAULT_REQUEST_TIMEOUT_SECONDS = 10.0
MAX_HEAD_BYTES = 32 * 1024  # a scrape's head is a few hundred bytes
EVICT_AFTER_SECONDS = 2.0  # at the cap, a connection without a complete request after this long makes room
_WAKE = object()  # the selector key data of the socket stop() writes to, so the loop never has to tick
ACCEPT_BATCH = 64  # accepts per wake-up, so a burst of connections cannot starve the heads being read
ACCEPT_BACKOFF_SECONDS = (0.05, 1.0)  # first and longest pause after accept() ran out of file descriptors
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


def _answer(status: int, body: bytes, headers: Tuple[Tuple[str, str], ...] = ()) -> bytes:
    """A whole plain-text answer, sent without a handler; `headers`: its own, then the web config's, which
    every answer carries."""
    extra = b"".join("{}: {}\r\n".format(name, value).encode("latin-1") for name, value in headers)
    return (b"HTTP/1.0 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n%s\r\n%s" % (status, HTTPStatus(status).phrase.encode(), len(body), extra, body))


def _unavailable(reason: bytes, headers: Tuple[Tuple[str, str], ...] = ()) -> bytes:
    """A whole 503 answer, sent without a handler."""
    return _answer(503, reason, (("Retry-After", "1"),) + headers)


REFUSAL = b"too many open connections\n"  # at max_connections, from the loop
OVERDUE = b"no free worker within the request timeout\n"  # from a worker, when it is too late


class Limits(NamedTuple):
    workers: int = DEFAULT_WORKERS
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT_SECONDS


class BoundedHTTPServer:
    """Serves `handler_class` (httpconn.DeadlineIO mixed into a BaseHTTPRequestHandler) on a listening socket."""

    def __init__(self, listener: socket.socket, handler_class: type, limits: Limits,
                 guard: Optional[Guard] = None) -> None:
        """`guard`: TLS, client certificates and extra headers (webauth.Guard); None serves plain HTTP."""
        self.listener = listener
        self.RequestHandlerClass = handler_class
        self.limits = limits
        self.guard = guard if guard is not None else Guard()
        self.stats = ServerStats(limits.workers, limits.max_connections)
        self.server_address = listener.getsockname()
        self.server_name, self.server_port = self.server_address[:2]
        self.app = None  # what the handler reads; set by the owner
        self._log = LineBudget(log)
        self._selector = selectors.DefaultSelector()
        self._wake_reader, self._wake_writer = socket.socketpair()
        self._reading: Dict[int, Connection] = {}  # connections still sending their head (loop thread only)
        self._ready: Deque[Connection] = deque()  # heads complete, waiting for a worker
        self._ready_changed = threading.Condition()
        self._stopping = threading.Event()
        self._threads = []  # type: list
        self._loop = None  # type: Optional[threading.Thread]
        self._accept_paused_until = None  # type: Optional[float]
        self._accept_backoff = ACCEPT_BACKOFF_SECONDS[0]
        self._accept_failing = None  # type: Optional[Tuple[float, int, str]]  # since, attempts, error
        self._long_wait_at = None  # type: Optional[Tuple[float, float]]  # when a request waited too long, how long

    # -- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the workers (all of them, once) and the loop."""
        self.listener.setblocking(False)
        self._selector.register(self.listener, selectors.EVENT_READ, None)
        self._wake_reader.setblocking(False)
        self._selector.register(self._wake_reader, selectors.EVENT_READ, _WAKE)
        for index in range(self.limits.workers):
            worker = threading.Thread(target=self._work, name="npumon-web-{}".format(index), daemon=True)
            worker.start()
            self._threads.append(worker)
        self._loop = threading.Thread(target=self._run_loop, name="npumon-web", daemon=True)
        self._loop.start()

    def stop(self) -> None:
        """Stop accepting and close the listener and every connection not yet with a worker. Requests being
        answered end by their deadline on their own daemon threads."""
        self._stopping.set()
        try:
            self._wake_writer.send(b"x")
        except OSError:
            pass  # the buffer is full: the loop is awake already
        with self._ready_changed:
            self._ready_changed.notify_all()
        if self._loop is not None:
            self._loop.join()
        for worker in self._threads:
            worker.join(0.05)
        self._selector.close()
        self.listener.close()
        self._wake_reader.close()
        self._wake_writer.close()

    def warn(self, message: str, *args) -> None:
        """One line about a failed connection or request, within the server's log budget."""
        self._log.warn(message, *args)

    # -- health ------------------------------------------------------------------------------------------

    def health(self) -> Tuple[bool, str]:
        """(can serve, reason): the loop runs, accept() works, no request waited a deadline for a worker."""
        now, stall = time.monotonic(), self.limits.request_timeout
        if self._loop is None or not self._loop.is_alive():
            return False, "http server not running: its accept loop ended"
        failing = self._accept_failing
        if failing is not None and now - failing[0] > stall:
            return False, "http server cannot accept connections for {:.0f}s ({} attempts): {}".format(
                now - failing[0], failing[1], failing[2])
        with self._ready_changed:
            waited = now - self._ready[0].ready_at if self._ready else 0.0
        long_wait = self._long_wait_at
        if waited <= stall and long_wait is not None and now - long_wait[0] <= stall:
            waited = long_wait[1]
        if waited > stall:
            return False, "http server has no free worker: a request waited {:.1f}s ({} of {} busy)".format(
                waited, self.stats.busy, self.limits.workers)
        return True, "ok"

    # -- the loop: accept, read heads, refuse, expire ----------------------------------------------------

    def _run_loop(self) -> None:
        while not self._stopping.is_set():
            for key, _ in self._selector.select(self._wait_seconds(time.monotonic())):
                if key.data is _WAKE:
                    continue  # stop(): the while condition sees it
                try:
                    if key.data is None:
                        self._accept()
                    else:
                        self._advance(key.data)
                except Exception as exc:  # noqa: BLE001 - a bug costs one connection, not the server
                    log.exception("http: serving loop failed on one event")
                    if key.data is not None:
                        self._drop(key.data, "{}: {}".format(type(exc).__name__, exc))
            now = time.monotonic()
            if self._accept_paused_until is not None and now >= self._accept_paused_until:
                self._accept_paused_until = None
                self._selector.register(self.listener, selectors.EVENT_READ, None)
            for connection in [c for c in self._reading.values() if c.deadline <= now]:
                self._drop(connection, "timed out: no complete request within {:g}s".format(
                    self.limits.request_timeout))
        for connection in list(self._reading.values()):
            self._close_reading(connection)
        with self._ready_changed:
            while self._ready:
                self._close(self._ready.popleft())

    def _wait_seconds(self, now: float) -> Optional[float]:
        """How long the loop may wait for a socket: until the nearest deadline it keeps (a connection still
        sending its head, the end of an accept pause), or without end (None) when there is none."""
        deadlines = [connection.deadline for connection in self._reading.values()]
        if self._accept_paused_until is not None:
            deadlines.append(self._accept_paused_until)
        return max(0.0, min(deadlines) - now) if deadlines else None

    def _accept(self) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                sock, address = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client gave up while queued: nothing to do
                self._pause_accept(exc)
                return
            self._accept_works()
            with self.stats.lock:
                self.stats.accepted += 1
            if self._take_slot() or (self._evict_stalled() and self._take_slot()):
                self._open(sock, address)
            else:
                self._refuse(sock)

    def _take_slot(self) -> bool:
        with self.stats.lock:
            if self.stats.open >= self.limits.max_connections:
                return False
            self.stats.open += 1
            return True

    def _evict_stalled(self) -> bool:
        """At the cap, make room by closing the connection that has sent no complete request for longest, if
        that is longer than an honest client takes (a slowloris client, not a scraper on a slow link)."""
        oldest = next(iter(self._reading.values()), None)  # dicts keep insertion order: accept order
        if oldest is None:
            return False
        stalled = time.monotonic() - oldest.opened
        if stalled < min(EVICT_AFTER_SECONDS, self.limits.request_timeout / 2):
            return False
        with self.stats.lock:
            self.stats.evicted += 1
        self._log.warn("http: connection from %s dropped to make room: no complete request after %.1fs, "
                       "%d connections open (exporter.max_connections)", oldest.address[0], stalled,
                       self.limits.max_connections)
        self._close_reading(oldest)
        return True

    def _open(self, sock: socket.socket, address: tuple) -> None:
        """The one place an accepted socket becomes a connection (TLS wraps it here; the handshake runs in
        _advance, non-blocking, under the connection's deadline)."""
        connection = Connection(sock, address, time.monotonic() + self.limits.request_timeout)
        sock.setblocking(False)
        handshake = self.guard.handshake()
        if handshake is not None:
            try:
                connection.sock = handshake.context.wrap_socket(sock, server_side=True,
                                                                do_handshake_on_connect=False)
            except (OSError, ValueError) as exc:
                self._close(connection)
                self._log.warn("http: connection from %s failed: %s: %s", address[0], type(exc).__name__, exc)
                return
            connection.handshake = handshake
            connection.handshaking = True
        self._reading[connection.sock.fileno()] = connection
        self._selector.register(connection.sock, selectors.EVENT_READ, connection)

    def _advance(self, connection: Connection) -> None:
        """Read what the connection sent (after the TLS handshake); hand it to a worker once the head is in."""
        try:
            if connection.handshaking:
                self._handshake(connection)
            while True:
                chunk = connection.sock.recv(16 * 1024)
                if not chunk:  # closed before sending a whole head: a port check, a client that gave up
                    self._close_reading(connection)
                    return
                start = max(0, len(connection.head) - 3)
                connection.head += chunk
                if connection.head.find(b"\r\n\r\n", start) >= 0 or connection.head.find(b"\n\n", start) >= 0:
                    self._dispatch(connection)
                    return
                if len(connection.head) > MAX_HEAD_BYTES:
                    self._drop(connection, "request head longer than {} bytes".format(MAX_HEAD_BYTES))
                    return
        except (BlockingIOError, ssl.SSLWantReadError):
            self._selector.modify(connection.sock, selectors.EVENT_READ, connection)
        except ssl.SSLWantWriteError:
            self._selector.modify(connection.sock, selectors.EVENT_WRITE, connection)
        except OSError as exc:  # ssl.SSLError included: plain HTTP on the TLS port, a failed handshake
            self._drop(connection, "{}: {}".format(type(exc).__name__, exc))

    def _handshake(self, connection: Connection) -> None:
        """One step of the TLS handshake; once it is complete, the client certificate check, so that a
        refused client never reaches a worker. Raises what _advance handles (want read/write, OSError)."""
        try:
            connection.sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise
        except ssl.SSLError as exc:
            self.guard.handshake_failed(exc)  # counted by reason; _advance logs it within the budget
            raise
        connection.handshaking = False
        self.guard.admit(connection.sock, connection.handshake)  # ClientRejected is an OSError: dropped

    def _dispatch(self, connection: Connection) -> None:
        del self._reading[connection.sock.fileno()]
        self._selector.unregister(connection.sock)
        denial = self.guard.refuse_early(connection.address[0], bytes(connection.head))
        if denial is not None:  # password guessing from a shut-out address: answered here, without a worker
            status, headers, body = denial
            try:
                connection.sock.send(_answer(status, body, headers + self.guard.headers()))  # small, cannot block
            except OSError:
                pass
            self._close(connection)
            return
        connection.ready_at = time.monotonic()
        with self._ready_changed:
            self._ready.append(connection)
            self._ready_changed.notify()

    def _refuse(self, sock: socket.socket) -> None:
        """At the cap: answer 503 (on TLS only close) without a worker, and without waiting for the client."""
        with self.stats.lock:
            self.stats.refused += 1
        try:
            sock.setblocking(False)
            if self.guard.handshake() is None:
                try:
                    sock.recv(MAX_HEAD_BYTES)  # what already came: closing with unread data would reset
                except OSError:
                    pass
                sock.send(_unavailable(REFUSAL, self.guard.headers()))
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        sock.close()

    def _pause_accept(self, exc: OSError) -> None:
        """Out of file descriptors (or another accept error): stop watching the listener for a while, since
        it stays readable and select() would return at once, forever."""
        now = time.monotonic()
        with self.stats.lock:
            self.stats.accept_errors += 1
            open_now = self.stats.open
        if self._accept_failing is None:
            self._accept_failing = (now, 1, str(exc))
            log.warning("http: cannot accept connections: %s (%d open); retrying with a backoff up to %gs%s",
                        exc, open_now, ACCEPT_BACKOFF_SECONDS[1],
                        "" if exc.errno in OUT_OF_DESCRIPTORS else " (unexpected error)")
        else:
            self._accept_failing = (self._accept_failing[0], self._accept_failing[1] + 1, str(exc))
        self._selector.unregister(self.listener)
        self._accept_paused_until = now + self._accept_backoff
        self._accept_backoff = min(self._accept_backoff * 2, ACCEPT_BACKOFF_SECONDS[1])

    def _accept_works(self) -> None:
        if self._accept_failing is not None:
            since, attempts, _ = self._accept_failing
            self._accept_failing = None
            log.info("http: accepting connections again after %d failed attempts over %.1fs",
                     attempts, time.monotonic() - since)
        self._accept_backoff = ACCEPT_BACKOFF_SECONDS[0]

    def _drop(self, connection: Connection, reason: str) -> None:
        if reason.startswith("timed out"):
            with self.stats.lock:
                self.stats.timeouts += 1
        self._log.warn("http: connection from %s failed: %s", connection.address[0], reason)
        self._close_reading(connection)

    def _close_reading(self, connection: Connection) -> None:
        self._reading.pop(connection.sock.fileno(), None)
        try:
            self._selector.unregister(connection.sock)
        except (KeyError, ValueError):
            pass
        self._close(connection)

    # -- workers -----------------------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            with self._ready_changed:
                while not self._ready and not self._stopping.is_set():
                    self._ready_changed.wait()
                if self._stopping.is_set():
                    return
                connection = self._ready.popleft()
            now = time.monotonic()
            waited = now - connection.ready_at
            if waited > self.limits.request_timeout:
                self._long_wait_at = (now, waited)
            with self.stats.lock:
                self.stats.busy += 1
            try:
                if connection.remaining() > 0:
                    self._serve(connection)
                else:
                    self._answer_overdue(connection, waited)
            finally:
                with self.stats.lock:
                    self.stats.busy -= 1
                self._close(connection)

    def _answer_overdue(self, connection: Connection, waited: float) -> None:
        """Its deadline passed while it waited for a worker: not the client's fault, so say 503 rather than
        close in silence (one short send that cannot block; a health probe sees why)."""
        with self.stats.lock:
            self.stats.timeouts += 1
        self._log.warn("http: request from %s waited %.1fs for a free worker; answered 503", connection.address[0],
                       waited)
        try:
            connection.sock.setblocking(False)
            connection.sock.send(_unavailable(OVERDUE, self.guard.headers()))
        except OSError:
            pass

    def _serve(self, connection: Connection) -> None:
        try:
            self.RequestHandlerClass(connection, connection.address, self)
        except Exception as exc:  # noqa: BLE001 - one line for a failed connection, never a dead worker
            self._log.warn("http: connection from %s failed: %s: %s", connection.address[0],
                           type(exc).__name__, exc)
        finally:
            if connection.timed_out:
                with self.stats.lock:
                    self.stats.timeouts += 1

    def _close(self, connection: Connection) -> None:
        if connection.closed:  # once: the open count must not go down twice
            return
        connection.closed = True
        try:
            connection.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        connection.sock.close()
        with self.stats.lock:
            self.stats.open -= 1
