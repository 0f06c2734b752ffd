"""The campaign's on-call: one webhook receiver on 127.0.0.1 that every campaign host notifies (its URL ends in
the host's name), recording when each alert arrived, for the scorer's time to notification.

    receiver = NotificationReceiver()              # bound on 127.0.0.1, a port the kernel picks
    receiver.url_for("campaign-01")                  # http://127.0.0.1:PORT/campaign-01
    receiver.start()                                 # serves until stop()
    receiver.events()                                # [{host, time, kind: "notified", subject, rule, status}]

The payload is Alertmanager's webhook form (npumon's `webhook` receiver type): each alert's `status` and its
`alertname` and `subject` labels. Bounded: MAX_BODY_BYTES a request, MAX_EVENTS kept.
"""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, List

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_EVENTS = 1000000
NOTIFIED = "notified"


def notified_events(host: str, when: float, payload: Any) -> List[Dict[str, Any]]:
    """The scorer's events for one webhook delivery. Pure; a payload of another shape gives none."""
    alerts = payload.get("alerts") if isinstance(payload, dict) else None
    events = []
    for alert in alerts if isinstance(alerts, list) else []:
        labels = alert.get("labels") if isinstance(alert, dict) else None
        if isinstance(labels, dict):
            events.append({"host": host, "time": when, "kind": NOTIFIED, "subject": labels.get("subject"),
                           "rule": labels.get("alertname"), "status": alert.get("status")})
    return events


class NotificationReceiver:
    def __init__(self, clock: Callable[[], float] = time.time):
        self._events: List[Dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (the http.server name)
                length = int(self.headers.get("Content-Length") or 0)
                if not 0 <= length <= MAX_BODY_BYTES:
                    self.send_response(413)
                    self.end_headers()
                    return
                body = self.rfile.read(length)
                try:
                    payload = json.loads(body.decode("utf-8"))
                except ValueError:
                    payload = None
                receiver._add(notified_events(self.path.strip("/"), clock(), payload))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):  # the campaign's output is its report, not an access log
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="campaign-receiver", daemon=True)

    def _add(self, events: List[Dict[str, Any]]) -> None:
        with self._lock:
            self._events.extend(events[:max(0, MAX_EVENTS - len(self._events))])

    def url_for(self, host: str) -> str:
        return "http://127.0.0.1:{}/{}".format(self._server.server_address[1], host)

    def events(self) -> List[Dict[str, Any]]:
        with self._lock:
            return list(self._events)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
