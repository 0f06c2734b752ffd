"""A real HTTP server on 127.0.0.1 that records what npumon's notifiers send and answers as told (the
notification tests and `npumon notify test` use it)."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, List, NamedTuple, Optional, Tuple
from urllib.parse import urlsplit

class Recorded(NamedTuple):
    method: str
    path: str
    query: str
    headers: dict
    body: bytes

    def json(self):
        return json.loads(self.body.decode("utf-8"))


Reply = Tuple[int, dict, bytes]


class RecordingServer:
    """A real HTTP(S) server on 127.0.0.1 that records every request and answers with `reply(request)`."""

    def __init__(self, reply: Optional[Callable[[Recorded], Reply]] = None, port: int = 0,
                 tls: Optional[Tuple[str, str]] = None, delay: float = 0.0):
        self.requests: List[Recorded] = []
        self.reply = reply or (lambda request: (200, {}, b"ok"))
        self.delay = delay
        self._arrived = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self._record_and_answer("POST")

            def do_GET(self):
                self._record_and_answer("GET")

            def _record_and_answer(self, method):
                length = int(self.headers.get("Content-Length") or 0)
                parts = urlsplit(self.path)
                recorded = Recorded(method, parts.path, parts.query, dict(self.headers), self.rfile.read(length))
                # Recorded before answering: the client may look at `requests` as soon as it has the answer.
                with server._arrived:
                    server.requests.append(recorded)
                    server._arrived.notify_all()
                time.sleep(server.delay)
                status, headers, body = server.reply(recorded)
                try:
                    self.send_response(status)
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                    pass

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        if tls is not None:
            import ssl

            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if tls else "http"
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    def url(self, path: str = "/") -> str:
        return "{}://127.0.0.1:{}{}".format(self.scheme, self.port, path)

    def wait_for(self, count: int, timeout: float = 10.0) -> List[Recorded]:
        deadline = time.monotonic() + timeout
        with self._arrived:
            while len(self.requests) < count and time.monotonic() < deadline:
                self._arrived.wait(deadline - time.monotonic())
            return list(self.requests)


def json_reply(document, status: int = 200) -> Callable[[Recorded], Reply]:
    body = json.dumps(document).encode()
    return lambda request: (status, {"Content-Type": "application/json"}, body)
