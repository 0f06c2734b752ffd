"""Where `npumon top` gets its documents (npumon.check/v1): a running daemon's /status, or its own collection.

Both answer `latest()` at once with (document or None, error or None), so the screen never waits on npu-smi
or the network: a background thread reads every `interval` seconds. The local collection walks the same
source list as `npumon check` and the daemon (sources/collection.py) and judges the rules as the daemon does
(a rule's `for` must hold before its finding shows); it writes nothing anywhere.
"""

import logging
import threading
import time
from typing import Any, Dict, Optional, Tuple

import requests

from ..outputs.report import SCHEMA, status_document
from ..outputs.web import WebServerError, parse_listen
from ..settings import Config
from ..sources.collection import SourceSet
from ..sources.target import Target

log = logging.getLogger(__name__)

Reading = Tuple[Optional[Dict[str, Any]], Optional[str]]
FETCH_TIMEOUT_SECONDS = 5.0
MAX_DOCUMENT_BYTES = 32 * 1024 * 1024  # a 16-chip /status is some hundred kilobytes


def default_url(config: Config) -> str:
    """The local daemon's /status: its listen address, with 127.0.0.1 (::1) for a wildcard host."""
    try:
        host, port = parse_listen(config.exporter.listen)
    except WebServerError:
        host, port = "", 9842
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    if ":" in host:
        host = "[{}]".format(host)
    scheme = "https" if config.exporter.tls_cert_file else "http"
    return "{}://{}:{}/status".format(scheme, host, port)


def fetch_status(url: str, timeout: float = FETCH_TIMEOUT_SECONDS) -> Dict[str, Any]:
    """The document at `url`; ValueError with one line on any failure."""
    try:
        with requests.get(url, timeout=timeout, stream=True) as response:
            body = response.raw.read(MAX_DOCUMENT_BYTES + 1, decode_content=True)
            status = response.status_code
    except requests.RequestException as exc:
        raise ValueError("cannot read {}: {}".format(url, _reason(exc))) from None
    if status != 200:
        raise ValueError("cannot read {}: HTTP {}".format(url, status))
    if len(body) > MAX_DOCUMENT_BYTES:
        raise ValueError("{}: answer larger than {} bytes".format(url, MAX_DOCUMENT_BYTES))
    try:
        import json

        document = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise ValueError("{} did not answer JSON (is it npumon's /status?)".format(url)) from None
    if not isinstance(document, dict) or document.get("schema") != SCHEMA:
        raise ValueError("{} is not an npumon /status document (no schema {})".format(url, SCHEMA))
    return document


def _reason(exc: Exception) -> str:
    text = str(exc)
    for marker in ("Connection refused", "timed out", "Name or service not known", "No route to host"):
        if marker in text:
            return marker.lower() if marker != "Connection refused" else "connection refused (is `npumon run` up?)"
    return type(exc).__name__


class _Feed:
    """The background reader: `read()` in a thread every `interval` seconds; `latest()` never blocks."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._lock = threading.Lock()
        self._reading: Reading = (None, None)
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.readings = 0

    def read(self) -> Dict[str, Any]:
        raise NotImplementedError

    def read_now(self) -> Reading:
        """One read in the caller's thread (--once, the plain table)."""
        try:
            document = self.read()
        except ValueError as exc:
            with self._lock:
                self._reading = (self._reading[0], str(exc))
        except Exception as exc:  # noqa: BLE001 - a bug must cost one reading, not the live view
            log.exception("top: reading failed")
            with self._lock:
                self._reading = (self._reading[0], "reading failed: {}: {}".format(type(exc).__name__, exc))
        else:
            with self._lock:
                self._reading = (document, None)
                self.readings += 1
        return self.latest()

    def latest(self) -> Reading:
        with self._lock:
            return self._reading

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="top-feed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.read_now()
            self._stop.wait(max(0.05, self.interval - (time.monotonic() - started)))

    def close(self) -> None:
        self._stop.set()


class DaemonFeed(_Feed):
    def __init__(self, url: str, interval: float) -> None:
        super().__init__(interval)
        self.url = url

    def read(self) -> Dict[str, Any]:
        return fetch_status(self.url, timeout=max(1.0, min(FETCH_TIMEOUT_SECONDS, self.interval * 2)))


class LocalFeed(_Feed):
    """Collects on this host (or the simulated one): the main table every `interval`, every other tier at the
    config's interval in a thread of its own, so a slow query never holds up the table."""

    def __init__(self, config: Config, target: Target, engine, interval: float, probe: bool,
                 one_pass: bool = False) -> None:
        """`one_pass` (--once): one quick pass as `npumon check` makes it."""
        super().__init__(interval)
        skip = () if probe else ("probe",)
        # someone is watching: npu-smi calls at a time as `npumon check` makes them, not as few as the daemon
        self.collection = SourceSet(config, target, skip=skip, quick_pass=one_pass, one_pass=one_pass,
                                    max_concurrent=config.check_max_concurrent)
        self.engine = engine
        self._last_started: Dict[str, float] = {}
        self._running: Dict[str, threading.Thread] = {}

    def read(self) -> Dict[str, Any]:
        collection = self.collection
        primary = collection.primary()
        collection.poll(primary.name)
        now = time.monotonic()
        for tier in collection.tiers():
            if tier.primary or tier.interval <= 0:
                continue
            running = self._running.get(tier.name)
            if running is not None and running.is_alive():
                continue
            if now - self._last_started.get(tier.name, -1e18) < tier.interval:
                continue
            self._last_started[tier.name] = now
            thread = threading.Thread(target=collection.poll, args=(tier.name,), name="top-" + tier.name,
                                      daemon=True)
            self._running[tier.name] = thread
            thread.start()
        return self.judge()

    def judge(self) -> Dict[str, Any]:
        """The document of what the sources hold now, the rules judged on it."""
        snapshot = self.collection.snapshot()
        return status_document(snapshot, self.engine.evaluate(snapshot, now=snapshot.time))

    def read_complete(self, within: float, probe: bool) -> Reading:
        """One pass of the quick tiers, as `npumon check` makes it (--once): no npu-smi call runs past
        `within` seconds; a tier whose calls could not all start says so in its status."""
        self.collection.collect_once(full=False, also=("probe",) if probe else (), within=within)
        return self.judge(), None

    def close(self) -> None:
        super().close()
        self.collection.close()
