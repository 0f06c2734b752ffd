"""One HTTP connection under a deadline for the whole request: the socket, what was read before a worker
took it, and the rfile/wfile a BaseHTTPRequestHandler reads and writes it through.

StreamRequestHandler's timeout is per read, so a client that sends a byte just before each timeout holds a
connection forever; here every read and write re-arms the socket timeout with what is left of one
monotonic deadline, set when the connection was accepted.
"""

import io
import socket
import time


class Connection:
    """One accepted connection: its socket (TLS-wrapped when TLS is on), peer, monotonic deadline for the
    whole request, and the bytes read before a worker took it (the head, perhaps the start of a body)."""

    def __init__(self, sock: socket.socket, address: tuple, deadline: float) -> None:
        self.sock = sock
        self.address = address
        self.deadline = deadline
        self.opened = time.monotonic()
        self.head = bytearray()
        self.handshaking = False
        self.ready_at = 0.0  # when the head was complete
        self.timed_out = False
        self.closed = False

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def expire(self) -> socket.timeout:
        self.timed_out = True
        return socket.timeout("no complete request and answer within the request timeout")


class _DeadlineReader(io.RawIOBase):
    """What the loop read first, then the socket, each read bounded by what is left of the deadline."""

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self._connection = connection
        self._prefix = memoryview(bytes(connection.head))

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._prefix:
            count = min(len(buffer), len(self._prefix))
            buffer[:count] = self._prefix[:count]
            self._prefix = self._prefix[count:]
            return count
        left = self._connection.remaining()
        if left <= 0:
            raise self._connection.expire()
        self._connection.sock.settimeout(left)
        try:
            return self._connection.sock.recv_into(buffer)
        except socket.timeout:
            raise self._connection.expire() from None


class _DeadlineWriter(io.BufferedIOBase):
    """socketserver's _SocketWriter, with every send bounded by what is left of the deadline."""

    def __init__(self, connection: Connection) -> None:
        super().__init__()
        self._connection = connection

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        left = self._connection.remaining()
        if left <= 0:
            raise self._connection.expire()
        self._connection.sock.settimeout(left)
        try:
            self._connection.sock.sendall(data)
        except socket.timeout:
            raise self._connection.expire() from None
        with memoryview(data) as view:
            return view.nbytes

    def fileno(self) -> int:
        return self._connection.sock.fileno()


class DeadlineIO:
    """Mix in before BaseHTTPRequestHandler: its rfile and wfile read and write the Connection under its
    deadline, instead of StreamRequestHandler's per-read timeout."""

    def setup(self) -> None:
        connection = self.request  # type: ignore[attr-defined]
        self.connection = connection.sock
        self.rfile = io.BufferedReader(_DeadlineReader(connection), 64 * 1024)
        self.wfile = _DeadlineWriter(connection)
