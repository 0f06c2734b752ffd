"""The simulated inference server's metrics endpoint: the scenario's serving queue depth and figures, served
the way the engine it imitates serves them (vLLM by default; sim/serving.py), so that the serving-queue source
goes through the same HTTP and parsing code as on a real host.

    with QueueServer(state_dir) as server:      # a simulation prepared in state_dir
        server.url                              # http://127.0.0.1:<ephemeral port>/metrics
        server.engine                           # "vllm", "triton" or "mindie": the preset to read it with

`npumon check/run --simulate` start one for the command's lifetime. It also runs on its own, next to a
simulated host prepared elsewhere (the fleet demo):

    python -m npumon.sim.queue_server --state DIR --port 8000
"""

import argparse
import http.server
import signal
import socket
import sys
import threading
from typing import Optional, Sequence

from .own_cpu import IN_PROCESS_CPU
from .simulation import serving_engine, serving_metrics
from .state import SimStateError, read_state

METRICS_PATH = "/metrics"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: "_Server"

    def handle(self) -> None:
        # a real engine answers from a process of its own: its CPU is the simulator's, not npumon's
        IN_PROCESS_CPU.timed("serving endpoint", super().handle)()

    def do_GET(self) -> None:  # noqa: N802 - the name http.server dispatches to
        if self.path.split("?", 1)[0] != METRICS_PATH:
            self._answer(404, "not found; metrics are at {}\n".format(METRICS_PATH))
            return
        try:
            text = serving_metrics(self.server.state_dir)
        except SimStateError as exc:  # the simulation was removed under us: answer like a broken server
            self._answer(500, "{}\n".format(exc))
            return
        self._answer(200, text, CONTENT_TYPE)

    def _answer(self, code: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        body = text.encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        """Quiet: one line per scrape on stderr would drown the command's own output."""


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, state_dir: str):
        self.state_dir = state_dir
        super().__init__(address, _Handler)


class QueueServer:
    """The endpoint in a daemon thread; `stop()` (or leaving the `with` block) shuts it down."""

    def __init__(self, state_dir: str, host: str = "127.0.0.1", port: int = 0):
        self.engine = serving_engine(state_dir)
        self._server = _Server((host, port), state_dir)
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        return "http://{}:{}{}".format("[{}]".format(host) if ":" in host else host, self.port, METRICS_PATH)

    def start(self) -> "QueueServer":
        # A long poll interval, so that an idle endpoint costs a simulated daemon nothing; stop() wakes the
        # loop with a connection of its own instead, so that `npumon check` does not linger on exit.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 5.0},
                                        name="sim-queue-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            stopping = threading.Thread(target=self._server.shutdown, name="sim-queue-server-stop", daemon=True)
            stopping.start()
            for _ in range(20):  # a connection wakes the loop; another one if it came before the shutdown flag
                try:
                    socket.create_connection(self._server.server_address[:2], timeout=1.0).close()
                except OSError:
                    pass  # the loop still ends within its poll interval
                self._thread.join(0.05)
                if not self._thread.is_alive():
                    break
            stopping.join()
            self._thread.join()
            self._thread = None
        self._server.server_close()

    def __enter__(self) -> "QueueServer":
        return self.start()

    def __exit__(self, *exc_info) -> None:
        self.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m npumon.sim.queue_server", allow_abbrev=False,
                                     description="Serve a simulated host's serving queue depth and figures "
                                                 "in its engine's metrics format until interrupted.")
    parser.add_argument("--state", required=True, metavar="DIR",
                        help="state directory of a simulation (npumon.sim.prepare_simulation)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port to listen on (default: any free port)")
    args = parser.parse_args(argv)
    if not 0 <= args.port <= 65535:
        parser.error("--port must be 0..65535")
    try:
        read_state(args.state)
    except SimStateError as exc:
        print("queue_server: {}".format(exc), file=sys.stderr)
        return 2
    try:
        server = QueueServer(args.state, args.host, args.port)
    except OSError as exc:
        print("queue_server: cannot listen on {}:{}: {}".format(args.host, args.port, exc.strerror or exc),
              file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with server:
        print(server.url, flush=True)
        stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
