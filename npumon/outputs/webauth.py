"""Enforcing the web config (webconfig.py) on the exporter's connections and requests.

The Guard holds the WebSecurity in force (a reload swaps it; a connection keeps the one it started with for
its TLS handshake) and answers three questions for the web server (httpserver.py): which TLS context a new
connection's handshake uses and whether its verified client certificate has an allowed SAN (the server runs
the handshake itself, non-blocking in its loop thread under the connection's deadline, and asks right after
it, before a worker sees the connection); whether a request passes basic auth (asked by the worker before
dispatch; `/healthz` stays open, so a liveness check needs no password); which extra headers every answer
carries. Every rejection is counted in npumon_http_auth_failures_total{reason}.

bcrypt is slow by design (about 70 ms at cost 10), so a verified (user, hash, password) is remembered, as
exporter-toolkit does, under an HMAC with a key made at start: the cache holds no password, and a lookup's
timing tells nothing about one. Failures are not remembered. A password that is not remembered gets a
bcrypt only when the throttle (auththrottle.py) allows one now: guessing is slowed per client address
(429 with Retry-After), at most a few checks run at once and none waits in a queue (503 when all are
taken), so guessing never holds the workers a scraper needs, and a remembered password never waits.
"""

import base64
import hashlib
import hmac
import logging
import os
import ssl
import struct
import threading
from collections import OrderedDict
from typing import Dict, Iterator, NamedTuple, Optional, Tuple, Union
from urllib.parse import urlsplit

from prometheus_client.core import CounterMetricFamily

from ..logrepeat import Repeats
from .auththrottle import Refusal, Throttle, client_key
from .webconfig import WebSecurity, peer_sans

log = logging.getLogger("npumon.outputs.web")  # the web server's log name

HEALTH_PATH = "/healthz"
CACHE_ENTRIES = 64  # a handful of scrapers and users; bounded, whatever clients send
MAX_AUTHORIZATION_BYTES = 4096

# reason label -> what it means (docs/exporter.md, "Securing the exporter")
REASONS = ("missing", "malformed", "wrong_credentials", "throttled", "busy", "client_cert_missing",
           "client_cert_invalid", "client_cert_san")

UNAUTHORIZED = (401, (("WWW-Authenticate", 'Basic realm="npumon", charset="UTF-8"'),), b"unauthorized\n")
BUSY = (503, (("Retry-After", "1"),), b"authentication busy, try again\n")
THROTTLED_BODY = b"too many wrong passwords from this address, try again later\n"

# A denial: (HTTP status, extra headers, body).
Denial = Tuple[int, Tuple[Tuple[str, str], ...], bytes]


class ClientRejected(OSError):
    """A connection refused after its TLS handshake (client certificate without an allowed SAN)."""


class Handshake(NamedTuple):
    """What one connection's TLS handshake uses, taken when it is accepted: a reload during the handshake
    does not change the rules it is checked by."""

    context: ssl.SSLContext
    security: WebSecurity


class Guard:
    """The web server's one entry point to authentication; thread-safe."""

    def __init__(self, fallback_tls: Optional[ssl.SSLContext] = None,
                 security: Optional[WebSecurity] = None, throttle: Optional[Throttle] = None) -> None:
        """`fallback_tls`: the context of exporter.tls_cert_file/tls_key_file, used while the web config
        (if any) sets no TLS of its own. `throttle`: who may have a password checked now."""
        self._fallback_tls = fallback_tls
        self._security = security or WebSecurity(source="<none>")
        self._cache_key = os.urandom(32)
        self._cache = OrderedDict()  # type: OrderedDict[bytes, None]
        self._cache_lock = threading.Lock()
        self.throttle = throttle or Throttle()
        self._repeats = Repeats(log)
        self._dummy_hashes = {}  # type: Dict[bytes, bytes]
        self._failures = dict.fromkeys(REASONS, 0)
        self._failures_lock = threading.Lock()

    def use(self, security: Optional[WebSecurity]) -> None:
        """Enforce another web config from the next connection or request on (a reload)."""
        self._security = security or WebSecurity(source="<none>")
        with self._cache_lock:
            self._cache.clear()  # users and hashes may have changed; entries are keyed by them anyway

    @property
    def security(self) -> WebSecurity:
        return self._security

    # -- connections ----------------------------------------------------------------------------------

    def handshake(self) -> Optional[Handshake]:
        """The TLS a new connection gets: the web config's, else exporter.tls_cert_file's; None: plain HTTP."""
        security = self._security
        context = security.tls or self._fallback_tls
        return None if context is None else Handshake(context, security)

    def handshake_failed(self, exc: ssl.SSLError) -> None:
        """Count a failed handshake that was about the client certificate (the server logs every one)."""
        if isinstance(exc, ssl.SSLCertVerificationError):
            self._count("client_cert_invalid")
        elif exc.reason == "PEER_DID_NOT_RETURN_A_CERTIFICATE":
            self._count("client_cert_missing")

    def admit(self, tls_sock: ssl.SSLSocket, handshake: Handshake) -> None:
        """Right after a completed handshake: the client_allowed_sans check (cheap, no I/O). Raises
        ClientRejected, counted; the server then closes the connection."""
        security = handshake.security
        if not security.client_allowed_sans or handshake.context is not security.tls:
            return
        names = peer_sans(tls_sock.getpeercert() or {})
        if not security.client_allowed_sans.intersection(names):
            self._count("client_cert_san")
            raise ClientRejected("client certificate has none of client_allowed_sans (it has: {})".format(
                ", ".join(names) or "no SAN"))

    # -- requests -------------------------------------------------------------------------------------

    def check(self, path: str, authorization: Optional[str], client: str = "") -> Optional[Denial]:
        """None when the request may be served, else the answer that refuses it. `client`: the peer's
        address, which wrong passwords are counted by."""
        security = self._security
        if not security.users or path == HEALTH_PATH:
            return None
        credentials = _basic_credentials(authorization)
        if credentials is None:
            self._count("missing" if authorization is None else "malformed")
            return UNAUTHORIZED
        verdict = self._verify(security, client_key(client), *credentials)
        if verdict is None:
            return None
        if isinstance(verdict, Refusal):
            self._count(verdict.reason)
            if verdict.reason == "busy":
                return BUSY
            return _throttled(verdict.retry_after)
        self._count(verdict)
        return UNAUTHORIZED

    def refuse_early(self, client: str, head: bytes) -> Optional[Denial]:
        """Asked by the server's loop thread once a request head is in: the 429 for a shut-out address whose
        password is not remembered, so that guessing costs no worker and no parsing; None for every other
        request (the worker's check() decides those)."""
        security = self._security
        if not security.users:
            return None
        retry_after = self.throttle.shut_out(client_key(client))
        if not retry_after:
            return None
        path, authorization = _path_and_authorization(head)
        if path == HEALTH_PATH:
            return None
        credentials = _basic_credentials(authorization)
        if credentials is not None and self._remembered(security, *credentials)[2]:
            return None
        self._count("throttled")
        return _throttled(retry_after)

    def headers(self) -> Tuple[Tuple[str, str], ...]:
        """Headers every response carries (http_server_config.headers)."""
        return self._security.headers

    def _verify(self, security: WebSecurity, client: str, user: bytes,
                password: bytes) -> Union[None, str, Refusal]:
        """None when the password is right, else "wrong_credentials" or the throttle's Refusal."""
        hashed, digest, remembered = self._remembered(security, user, password)
        if remembered:
            return None
        refusal = self.throttle.begin(client)
        if refusal is not None:
            return refusal
        ok = False
        try:
            if hashed is None:
                # an unknown user costs a bcrypt too, so that timing does not tell which users exist
                _checkpw(password, self._dummy_hash(security.users[0][1]))
            else:
                ok = _checkpw(password, hashed)
        finally:
            shut_out = self.throttle.end(client, ok)
        if shut_out:
            self._repeats.log(logging.WARNING, "throttled", "http: wrong passwords from %s: its passwords are "
                              "answered 429 for %gs (npumon_http_auth_failures_total{reason=\"throttled\"} "
                              "counts them)", client, shut_out)
        if not ok:
            return "wrong_credentials"
        with self._cache_lock:
            self._cache[digest] = None
            while len(self._cache) > CACHE_ENTRIES:
                self._cache.popitem(last=False)
        return None

    def _remembered(self, security: WebSecurity, user: bytes,
                    password: bytes) -> Tuple[Optional[bytes], Optional[bytes], bool]:
        """(the user's hash or None, the cache key or None, whether this password was verified before)."""
        hashed = None
        for name, user_hash in security.users:  # every user compared, in constant time: no early exit
            if hmac.compare_digest(name, user):
                hashed = user_hash
        if hashed is None:
            return None, None, False
        digest = hmac.new(self._cache_key, _framed(user, hashed, password), hashlib.sha256).digest()
        with self._cache_lock:
            if digest in self._cache:
                self._cache.move_to_end(digest)
                return hashed, digest, True
        return hashed, digest, False

    def _dummy_hash(self, like: bytes) -> bytes:
        """A hash of a random password with the cost of a real one (made once per cost, lazily; called
        with a throttle slot held, so making it counts against the checks at once too)."""
        cost = like[4:6]
        if cost not in self._dummy_hashes:
            import bcrypt

            self._dummy_hashes[cost] = bcrypt.hashpw(os.urandom(16).hex().encode(), bcrypt.gensalt(int(cost)))
        return self._dummy_hashes[cost]

    # -- metrics --------------------------------------------------------------------------------------

    def _count(self, reason: str) -> None:
        with self._failures_lock:
            self._failures[reason] += 1

    def failures(self) -> Dict[str, int]:
        with self._failures_lock:
            return dict(self._failures)

    def collect(self) -> Iterator[CounterMetricFamily]:
        """Only while authentication is on (or something was refused): a plain exporter serves no such series."""
        security, failures = self._security, self.failures()
        checks_clients = security.tls is not None and security.tls.verify_mode != ssl.CERT_NONE
        if not (security.users or checks_clients or any(failures.values())):
            return
        family = CounterMetricFamily(
            "npumon_http_auth_failures", "Requests and connections the exporter refused for authentication, "
            "by reason (missing, malformed, wrong_credentials, throttled, busy, client_cert_missing, "
            "client_cert_invalid, client_cert_san)", labels=["reason"])
        for reason, count in failures.items():
            family.add_metric([reason], count)
        yield family


def _throttled(retry_after: int) -> Denial:
    return 429, (("Retry-After", str(retry_after)),), THROTTLED_BODY


def _path_and_authorization(head: bytes) -> Tuple[str, Optional[str]]:
    """The path and the first Authorization header of a raw request head (and perhaps the start of a body),
    as the handler reads them; "" and None for what is not there."""
    lines = head.split(b"\n")
    words = lines[0].split()
    path = urlsplit(words[1].decode("latin-1")).path if len(words) >= 2 else ""
    for line in lines[1:]:
        if not line.strip():  # the end of the head: what follows is a body
            break
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == b"authorization":
            return path, value.strip().decode("latin-1")
    return path, None


def authenticated_user(guard: "Guard", authorization: Optional[str]) -> Optional[str]:
    """The user a request that passed guard.check() authenticated as; None when the web config asks for no
    authentication (every request passes)."""
    if not guard.security.users:
        return None
    credentials = _basic_credentials(authorization)
    return None if credentials is None else credentials[0].decode("utf-8", "replace")


def _basic_credentials(authorization: Optional[str]) -> Optional[Tuple[bytes, bytes]]:
    """(user, password) of an `Authorization: Basic ...` header, or None when it is absent or malformed."""
    if authorization is None or len(authorization) > MAX_AUTHORIZATION_BYTES:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True)
    except (ValueError, TypeError):
        return None
    user, sep, password = decoded.partition(b":")
    return (user, password) if sep else None


def _framed(*parts: bytes) -> bytes:
    """Length-prefixed, so that no two different (user, hash, password) give the same bytes."""
    return b"".join(struct.pack(">I", len(part)) + part for part in parts)


def _checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt  # present: load_web_config() refused basic_auth_users without it

    # bcrypt reads 72 bytes of a password; Go's bcrypt and htpasswd compare those, bcrypt 5 raises instead
    try:
        return bcrypt.checkpw(password[:72], hashed)
    except ValueError:  # a hash this bcrypt cannot read (the file's hashes were checked only for their form)
        return False
