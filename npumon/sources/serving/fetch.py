"""One HTTP GET of a local metrics page under one deadline: connecting, the headers and each read of the body
share the time left, a trickled answer is cut off too; the body is cut past a size limit; redirects are
followed only within the same scheme, host and port; proxy variables are the caller's to ignore.
"""

import socket
import time
from typing import Callable, Iterator, Optional, Tuple, Union
from urllib.parse import urljoin, urlsplit

import requests
import urllib3

from ... import __version__
from .config import display_url

MAX_REDIRECTS = 3
READ_CHUNK_BYTES = 8192


class ServingError(Exception):
    """A one-line description of why the queue depth could not be read."""


def fetch_metrics_text(session: requests.Session, url: str, timeout_seconds: float, max_body_bytes: int,
                       verify: Union[bool, str] = True,
                       clock: Callable[[], float] = time.monotonic) -> str:
    """GET the metrics page: one deadline for the whole exchange, a size limit, same-origin redirects only.
    Raises ServingError; its message does not repeat the URL (the source puts it in front)."""
    deadline = clock() + timeout_seconds
    late = "no complete answer within {:g}s".format(timeout_seconds)
    current = url
    for _hop in range(MAX_REDIRECTS + 1):
        remaining = deadline - clock()
        if remaining <= 0:
            raise ServingError(late)
        try:
            with session.get(current, stream=True, allow_redirects=False, timeout=remaining, verify=verify,
                             headers=_REQUEST_HEADERS) as response:
                if response.is_redirect:
                    current = _same_origin_redirect(url, current, response.headers["location"])
                    continue
                if not 200 <= response.status_code < 300:
                    raise ServingError("answered HTTP {} {}".format(
                        response.status_code, one_line(response.reason or "", 60)).rstrip())
                body = _read_body(response, max_body_bytes, deadline, clock, late)
                content_type = response.headers.get("content-type", "")
        except requests.RequestException as exc:
            raise ServingError(_describe_request_failure(exc, late)) from None
        return _decode_body(body, content_type)
    raise ServingError("more than {} redirects".format(MAX_REDIRECTS))


# identity: the body limit then counts the bytes that really arrive, and no decompression bomb can pass it.
_REQUEST_HEADERS = {
    "Accept": "text/plain;version=0.0.4;q=1, */*;q=0.1",
    "Accept-Encoding": "identity",
    "User-Agent": "npumon/" + __version__,
}


def _same_origin_redirect(original: str, current: str, location: str) -> str:
    target = urljoin(current, location)
    if _origin(target) != _origin(original):
        raise ServingError("redirects to {}; not following a redirect to another host, port or scheme "
                           "(set serving.url to the final address)".format(display_url(target)))
    return target


def _origin(url: str) -> Tuple[str, str, Optional[int]]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    default_port = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), port or default_port


def _read_body(response: requests.Response, max_body_bytes: int, deadline: float, clock: Callable[[], float],
               late: str) -> bytes:
    too_large = "answer larger than {} bytes (serving.max_body_bytes)".format(max_body_bytes)
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > max_body_bytes:
        raise ServingError(too_large)
    chunks = []
    size = 0
    for chunk in _body_chunks(response):
        size += len(chunk)
        if size > max_body_bytes:
            raise ServingError(too_large)
        if clock() > deadline:
            raise ServingError(late)
        chunks.append(chunk)
    return b"".join(chunks)


def _body_chunks(response: requests.Response) -> Iterator[bytes]:
    """The body as it arrives. Each socket read has the request's timeout; the caller checks the whole
    deadline between chunks, which also cuts off a server that trickles its answer byte by byte. That needs
    urllib3 2's read1 (return what has arrived); urllib3 1.26 only has reads that wait for a full chunk."""
    read1 = getattr(response.raw, "read1", None)
    if read1 is None:
        yield from response.iter_content(READ_CHUNK_BYTES)
        return
    try:
        while True:
            data = read1(READ_CHUNK_BYTES, decode_content=True)
            if not data:
                return
            yield data
    # Raise what iter_content would have raised, so _describe_request_failure sees one family of errors.
    except urllib3.exceptions.ReadTimeoutError as exc:
        raise requests.ConnectionError(exc) from exc
    except urllib3.exceptions.HTTPError as exc:
        raise requests.exceptions.ChunkedEncodingError(exc) from exc


def _decode_body(body: bytes, content_type: str) -> str:
    if content_type.lower().startswith("text/html") or body.lstrip()[:1] == b"<":
        raise ServingError("answered with an HTML page, not Prometheus metrics (is this the server's metrics "
                           "endpoint?)")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        raise ServingError("the answer is not UTF-8 text, so not Prometheus metrics") from None


def _describe_request_failure(exc: requests.RequestException, late: str) -> str:
    # requests' own messages repeat the full URL (query string included): build our own from the cause.
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS handshake failed (untrusted certificate? set serving.ca_file)"
    if _caused_by(exc, ConnectionRefusedError):
        return "connection refused (is the inference server running, with its metrics on?)"
    if isinstance(exc, requests.Timeout) or _caused_by(exc, _TIMEOUTS):
        return late
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return "the connection broke while reading the answer"
    if isinstance(exc, requests.ConnectionError):
        cause = _innermost_os_error(exc)
        reason = cause.strerror if cause is not None and cause.strerror else "connection failed"
        return "cannot connect: {}".format(one_line(reason, 80))
    return "request failed ({})".format(type(exc).__name__)


# A read timeout in the body surfaces as requests.ConnectionError wrapping one of these. (Not urllib3's
# TimeoutError base class: in urllib3 1.26 a refused connection is a subclass of it.)
_TIMEOUTS = (socket.timeout, TimeoutError, urllib3.exceptions.ReadTimeoutError)


def _causes(exc: BaseException):
    """The exception and everything it wraps (urllib3 keeps the cause in `reason`, requests in args[0])."""
    seen = set()
    todo = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        todo.extend([current.__cause__, current.__context__, getattr(current, "reason", None)])
        todo.extend(arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException))


def _caused_by(exc: BaseException, kind: type) -> bool:
    return any(isinstance(cause, kind) for cause in _causes(exc))


def _innermost_os_error(exc: BaseException) -> Optional[OSError]:
    found = None
    for cause in _causes(exc):
        if isinstance(cause, OSError) and not isinstance(cause, requests.RequestException):
            found = cause
    return found


def one_line(text: str, limit: int) -> str:
    flat = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."
