"""The one place npumon's notifications touch the network: POST a Request, return what came back.

TLS certificates are verified (against the system store, or `ca_file`), redirects are not followed (a
POST must not silently turn into a GET elsewhere), and every failure becomes a short description built
from the error's kind and cause -- never from the exception's text, which repeats the URL and its token.
The answer is read up to ANSWER_READ_LIMIT_BYTES and within `timeout_seconds` of its headers: a service
that answers megabytes, or trickles, costs neither memory nor a delivery thread. The caller redacts it
and keeps far less (redact.error_text).
"""

import codecs
import errno
import logging
import os
import re
import socket
import ssl
import time
from dataclasses import dataclass
from typing import Optional, Union

import requests
import urllib3

from ... import __version__
from .flavour import Request

# Bytes of an answer read: the robots' JSON answers are well within it. Far more than the part kept
# (redact.ERROR_TEXT_LIMIT_BYTES), so a secret echoed anywhere in the kept part is read whole and masked.
ANSWER_READ_LIMIT_BYTES = 64 * 1024
_CHUNK_BYTES = 4096
_CHARSET = re.compile(r"charset=[\"']?([A-Za-z0-9._:-]+)", re.IGNORECASE)

# urllib3 logs every request line -- path and query, where the tokens are -- at DEBUG: keep it quiet even
# when npumon runs with log_level debug.
logging.getLogger("urllib3").setLevel(logging.WARNING)


@dataclass(frozen=True)
class Response:
    status: int
    text: str
    retry_after: Optional[float]  # seconds, from a Retry-After header


class TransportError(Exception):
    """The request did not get an HTTP answer; the message says why in a few words."""


class Transport:
    def __init__(self, timeout_seconds: float, verify: Union[bool, str]):
        self.timeout_seconds = timeout_seconds
        self.verify = verify
        self._session = requests.Session()

    def post(self, request: Request) -> Response:
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "npumon/" + __version__}
        headers.update(request.headers or {})
        try:
            reply = self._session.post(request.url, data=request.body, headers=headers, stream=True,
                                       timeout=self.timeout_seconds, verify=self.verify, allow_redirects=False)
            try:
                text = self._read_answer(reply)
            finally:
                reply.close()
        except requests.exceptions.Timeout:
            raise TransportError("timed out after {:g}s".format(self.timeout_seconds)) from None
        except requests.exceptions.SSLError as exc:
            raise TransportError("TLS error: {}".format(_cause(exc))) from None
        except requests.exceptions.ConnectionError as exc:
            raise TransportError("cannot connect: {}".format(_cause(exc))) from None
        except requests.exceptions.RequestException as exc:
            raise TransportError("request failed: {}".format(type(exc).__name__)) from None
        except OSError as exc:  # e.g. the CA file went away since start
            raise TransportError("request failed: {}".format(exc.strerror or exc)) from None
        except (ValueError, UnicodeError) as exc:  # a header value http.client refuses; its text may quote it
            raise TransportError("request failed: {}".format(type(exc).__name__)) from None
        return Response(reply.status_code, text, _retry_after(reply.headers.get("Retry-After")))

    def _read_answer(self, reply: requests.Response) -> str:
        """At most ANSWER_READ_LIMIT_BYTES of the body, read within timeout_seconds; decoded leniently."""
        deadline = time.monotonic() + self.timeout_seconds
        # read1 returns what one receive brought (urllib3 2), so the deadline holds against a trickle too
        read = getattr(reply.raw, "read1", None) or reply.raw.read
        body = bytearray()
        try:
            while len(body) < ANSWER_READ_LIMIT_BYTES and time.monotonic() < deadline:
                chunk = read(_CHUNK_BYTES, decode_content=True)
                if not chunk:
                    break
                body += chunk
        except urllib3.exceptions.ReadTimeoutError:
            raise TransportError("timed out reading the answer after {:g}s".format(self.timeout_seconds)) from None
        except urllib3.exceptions.HTTPError as exc:
            raise TransportError("the answer broke off: {}".format(type(exc).__name__)) from None
        return bytes(body[:ANSWER_READ_LIMIT_BYTES]).decode(_charset(reply.headers.get("Content-Type", "")),
                                                            "replace")

    def close(self) -> None:
        self._session.close()


def _cause(exc: BaseException) -> str:
    """The innermost OS or TLS reason in an exception's chain (urllib3 wraps it two or three times)."""
    seen = set()
    pending = [exc]
    reason = type(exc).__name__
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, ssl.SSLCertVerificationError):
            return "certificate verify failed: {}".format(current.verify_message)
        if isinstance(current, ssl.SSLError):
            reason = current.reason or type(current).__name__
        elif isinstance(current, socket.gaierror):
            reason = "cannot resolve the host name"
        elif isinstance(current, OSError) and current.errno in errno.errorcode:
            reason = os.strerror(current.errno)
        pending.extend(arg for arg in getattr(current, "args", ()) if isinstance(arg, BaseException))
        for linked in (current.__cause__, current.__context__, getattr(current, "reason", None)):
            if isinstance(linked, BaseException):
                pending.append(linked)
    return reason


def _charset(content_type: str) -> str:
    """The declared charset if Python knows it, else UTF-8 (what these services send)."""
    match = _CHARSET.search(content_type)
    if match:
        try:
            codecs.lookup(match.group(1))
            return match.group(1)
        except LookupError:
            pass
    return "utf-8"


def _retry_after(value: Optional[str]) -> Optional[float]:
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None  # the HTTP-date form; rare for these services, the backoff covers it
    return seconds if seconds >= 0 else None
