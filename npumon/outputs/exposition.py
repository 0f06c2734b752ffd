"""/metrics rendered once per change and served from memory.

Most of the exposition (the snapshot's few hundred series, the npu-smi call counts) changes only when the
daemon publishes a new Snapshot or its calls finish, while Prometheus (or twenty dashboards) may scrape it
many times in between. ExpositionRegistry keeps, per negotiated format, the rendered bytes of every collector
that can say what its next render depends on (a `render_state()`, see below), and renders such a collector
again only when that state changed: lazily, on the first scrape after the change, under one lock, so that
concurrent scrapers share one render; or ahead, right after the daemon publishes (`published()`), where
scrapers have been taking every publication, so that their scrape does not wait for it. Collectors without
`render_state()` (the HTTP server's own counters, auth failures, the services' counters) form a small tail
rendered on every scrape, so per-scrape counters stay exact; the tail follows the cached families, each
family stays whole, and OpenMetrics' `# EOF` ends the body once.

gzip: the cached prefix is compressed once into a zlib stream flushed at a byte boundary; each scrape copies
that compressor, feeds it the tail and finishes it, which yields one ordinary gzip member (what every client
reads) for the cost of compressing the tail.

A cacheable collector has `render_state()`, returning what its output depends on (compared with ==, so a
state object may define identity comparison), and `collect_state(state)`, yielding the families for exactly
that state: the state is taken outside the lock (it may be slow) and the render uses that same state. It
may also have `encode_state(state, encoder, openmetrics)`, which writes those families' bytes itself (the
snapshot's collector does, reusing its previous render's lines).
"""

import gzip
import threading
import zlib
from collections import OrderedDict, deque
from typing import Deque, List, NamedTuple, Optional, Tuple

from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry

from .encode import OPENMETRICS_EOF, encode_families

# Level 1: for the A3's ~330 KB, 0.7 ms of CPU and 27.5 KB instead of 2.0 ms and 21.8 KB at zlib's default 6;
# a scrape crosses a LAN, and the CPU is the host's.
GZIP_LEVEL = 1
MAX_FORMATS = 4  # negotiated formats kept rendered (Accept headers could name arbitrary versions)
OPENMETRICS_TYPE = "application/openmetrics-text"
RENDER_AHEAD_AFTER = 2  # publications in a row that scrapers took before the next one is rendered ahead


class Exposition(NamedTuple):
    content_type: str
    body: bytes  # gzipped when `gzipped`
    gzipped: bool


class _Part(NamedTuple):
    collector: object
    state: object
    body: bytes  # OpenMetrics without its `# EOF`


class _Format:
    """One negotiated format: the cached parts, their concatenation and its gzip stream, built lazily."""

    def __init__(self, parts: Tuple[_Part, ...]) -> None:
        self.parts = parts
        self.prefix = b"".join(part.body for part in parts)
        self._gzip: Optional[Tuple[bytes, "zlib._Compress"]] = None
        self._gzip_lock = threading.Lock()

    def gzip_prefix(self) -> Tuple[bytes, "zlib._Compress"]:
        with self._gzip_lock:
            if self._gzip is None:
                compressor = zlib.compressobj(GZIP_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS)  # 16+: a gzip header
                self._gzip = (compressor.compress(self.prefix) + compressor.flush(zlib.Z_SYNC_FLUSH), compressor)
            return self._gzip


class ExpositionRegistry(CollectorRegistry):
    """A CollectorRegistry (generate_latest and the textfile use it as ever) that also serves /metrics
    from its cache (`exposition()`). `renders` counts the renders of cacheable collectors."""

    def __init__(self) -> None:
        super().__init__()
        self._collectors: List[object] = []  # registration order
        self._render_lock = threading.Lock()
        self._formats: "OrderedDict[str, _Format]" = OrderedDict()
        self.renders = 0
        # Whether a scrape came after each of the last publications (published()), and what it asked for.
        self._taken: Deque[bool] = deque(maxlen=RENDER_AHEAD_AFTER + 1)
        self._last_request: Optional[Tuple[str, bool]] = None

    def register(self, collector) -> None:
        super().register(collector)  # refuses duplicate names, as ever
        with self._render_lock:
            self._collectors.append(collector)

    def unregister(self, collector) -> None:
        super().unregister(collector)
        with self._render_lock:
            self._collectors = [known for known in self._collectors if known is not collector]

    def exposition(self, accept: str, gzip_wanted: bool) -> Exposition:
        """The body for one scrape with these request headers (Accept; gzip from Accept-Encoding)."""
        encoder, content_type, openmetrics, rendered, live = self._prepared(accept, gzip_wanted)
        with self._render_lock:
            self._last_request = (accept, gzip_wanted)
            if self._taken:
                self._taken[-1] = True
        # written as the cached part is (prometheus_client's encoder checks every name and label again on each
        # scrape, about half of a scrape's CPU); OpenMetrics ends with `# EOF`, even when the tail is empty
        tail = encode_families((metric for collector in live for metric in collector.collect()), encoder,
                               openmetrics) + (OPENMETRICS_EOF if openmetrics else b"")
        if not gzip_wanted:
            return Exposition(content_type, rendered.prefix + tail, False)
        compressed_prefix, compressor = rendered.gzip_prefix()
        finishing = compressor.copy()
        return Exposition(content_type, compressed_prefix + finishing.compress(tail) + finishing.flush(), True)

    def published(self) -> bool:
        """The daemon published a new Snapshot. When scrapers took each of the last RENDER_AHEAD_AFTER
        publications, they will take this one too: render it now, in the publishing thread, so that the scrape
        finds it ready instead of rendering while Prometheus waits. Scrapes rarer than publications (every
        15 s against a table every 5 s) leave it to the first scrape, so no render is made for nobody. True
        when it rendered ahead."""
        with self._render_lock:
            taken = list(self._taken)
            self._taken.append(False)
            request = self._last_request
        if request is None or len(taken) < RENDER_AHEAD_AFTER or not all(taken[-RENDER_AHEAD_AFTER:]):
            return False
        self._prepared(*request)
        return True

    def _prepared(self, accept: str, gzip_wanted: bool):
        """(encoder, content type, whether it is OpenMetrics, cached part, live collectors) for these request
        headers, the cached part rendered (and compressed, for gzip) where its state changed."""
        encoder, content_type = choose_encoder(accept)
        openmetrics = content_type.startswith(OPENMETRICS_TYPE)
        with self._render_lock:
            collectors = list(self._collectors)
        cached = [(collector, collector.render_state()) for collector in collectors if _cacheable(collector)]
        live = [collector for collector in collectors if not _cacheable(collector)]
        rendered = self._rendered(content_type, encoder, openmetrics, cached)
        if gzip_wanted:
            rendered.gzip_prefix()
        return encoder, content_type, openmetrics, rendered, live

    def _rendered(self, content_type: str, encoder, openmetrics: bool, cached: List[Tuple[object, object]]) -> _Format:
        """The cached parts for these states, rendering again only the collectors whose state changed."""
        with self._render_lock:
            known = self._formats.get(content_type)
            if known is not None and len(known.parts) == len(cached) and all(
                    part.collector is collector and part.state == state
                    for part, (collector, state) in zip(known.parts, cached)):
                self._formats.move_to_end(content_type)
                return known
            previous = {id(part.collector): part for part in (known.parts if known is not None else ())}
            parts = []
            for collector, state in cached:
                part = previous.get(id(collector))
                if part is None or part.collector is not collector or not part.state == state:
                    part = _Part(collector, state, _body(encoder, collector, state, openmetrics))
                    self.renders += 1
                parts.append(part)
            rendered = self._formats[content_type] = _Format(tuple(parts))
            self._formats.move_to_end(content_type)
            while len(self._formats) > MAX_FORMATS:
                self._formats.popitem(last=False)
            return rendered


def _cacheable(collector) -> bool:
    return hasattr(collector, "render_state") and hasattr(collector, "collect_state")


def _body(encoder, collector, state, openmetrics: bool) -> bytes:
    """The collector's families for `state`, without `# EOF` (the tail ends the whole body): written by the
    collector itself where it can (`encode_state`), else from its families."""
    if hasattr(collector, "encode_state"):
        return collector.encode_state(state, encoder, openmetrics)
    return encode_families(collector.collect_state(state), encoder, openmetrics)


def serve_metrics(registry: CollectorRegistry, accept: str, gzip_wanted: bool) -> Exposition:
    """/metrics from an ExpositionRegistry's cache, or rendered anew from any other registry."""
    if isinstance(registry, ExpositionRegistry):
        return registry.exposition(accept, gzip_wanted)
    encoder, content_type = choose_encoder(accept)
    body = encoder(registry)
    return Exposition(content_type, gzip.compress(body, GZIP_LEVEL) if gzip_wanted else body, gzip_wanted)
