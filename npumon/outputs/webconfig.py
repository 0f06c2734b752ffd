"""The exporter's web config: Prometheus exporter-toolkit's web-config.yml (what node_exporter reads with
--web.config.file), so one file serves both.

load_web_config() reads and checks a file and returns the WebSecurity to enforce (webauth.Guard does that):
a TLS context (server certificate, client certificates), the basic-auth users with their bcrypt hashes and
the extra response headers. Every key of the format is either honoured or refused with a one-line error
naming the file, line and key: a security setting is never silently dropped. What Python's ssl cannot do
(accept a client certificate without verifying it, several curves, an inline key) is refused.
"""

import ipaddress
import os
import re
import ssl
from dataclasses import dataclass, field
from typing import Dict, FrozenSet, List, Optional, Tuple

import yaml

from ..config.errors import ConfigError, line_of
from ..config.load import key_path, load_yaml_as


class WebConfigError(ConfigError):
    """A one-line message: `file:line: key: problem`."""


@dataclass(frozen=True)
class TLSServerSection:
    cert: Optional[str] = None
    key: Optional[str] = None
    client_ca: Optional[str] = None
    cert_file: Optional[str] = None
    key_file: Optional[str] = None
    client_auth_type: Optional[str] = None
    client_ca_file: Optional[str] = None
    client_allowed_sans: Optional[List[str]] = None
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: List[str] = field(default_factory=list)
    prefer_server_cipher_suites: bool = True
    curve_preferences: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class HTTPServerSection:
    http2: bool = True  # npumon never speaks HTTP/2, with or without it: HTTP/1.0, one request per connection
    headers: Dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RateLimitSection:
    interval: Optional[str] = None
    burst: int = 0


@dataclass(frozen=True)
class WebConfigFile:
    """The file's keys, as exporter-toolkit names them."""

    tls_server_config: Optional[TLSServerSection] = None
    http_server_config: HTTPServerSection = field(default_factory=HTTPServerSection)
    basic_auth_users: Dict[str, str] = field(default_factory=dict)
    rate_limit: Optional[RateLimitSection] = None


@dataclass(frozen=True)
class WebSecurity:
    """What the web server enforces, from one web config file."""

    source: str
    tls: Optional[ssl.SSLContext] = None
    client_allowed_sans: FrozenSet[str] = frozenset()  # empty: any verified client certificate
    users: Tuple[Tuple[bytes, bytes], ...] = ()  # (user name, bcrypt hash), UTF-8
    headers: Tuple[Tuple[str, str], ...] = ()


AUTH_EXTRA_HINT = "pip install 'npumon[auth]'"

# Go's client auth policies -> Python's verify mode. Go's RequestClientCert and RequireAnyClientCert take a
# certificate without verifying it; OpenSSL verifies every certificate it asks for, so they cannot be honoured.
CLIENT_AUTH = {"NoClientCert": ssl.CERT_NONE, "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
               "RequireAndVerifyClientCert": ssl.CERT_REQUIRED}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")

TLS_VERSIONS = {"TLS10": ssl.TLSVersion.TLSv1, "TLS11": ssl.TLSVersion.TLSv1_1,
                "TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}

# Go's tls.CipherSuites() names (what exporter-toolkit accepts) -> OpenSSL's. Like Go's cipher_suites, they
# apply up to TLS 1.2; the TLS 1.3 suites are accepted and, as in Go, not configurable.
TLS12_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
}
TLS13_CIPHERS = ("TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256")

CURVES = {"CurveP256": "prime256v1", "CurveP384": "secp384r1", "CurveP521": "secp521r1", "X25519": "X25519"}

# exporter-toolkit's headers and, where it has them, their only accepted values.
HEADERS = {"Strict-Transport-Security": None, "X-Content-Type-Options": ("nosniff",),
           "X-Frame-Options": ("deny", "sameorigin"), "X-XSS-Protection": None, "Content-Security-Policy": None}

BCRYPT_HASH = re.compile(r"^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$")


def load_web_config(path: str) -> WebSecurity:
    """Read and check a web config file; raises WebConfigError with one line."""
    try:
        document, node = load_yaml_as(path, WebConfigFile, "web config")
    except WebConfigError:
        raise
    except ConfigError as exc:
        raise WebConfigError(str(exc)) from None
    return build_security(document, node, path)


def build_security(document: WebConfigFile, node: Optional[yaml.Node], path: str) -> WebSecurity:
    """The WebSecurity of a parsed file; relative file names are relative to the file's directory."""

    def fail(key: str, problem: str) -> WebConfigError:
        return WebConfigError("{}:{}: {}: {}".format(path, line_of(node, key_path(key)), key, problem))

    if document.rate_limit is not None:
        raise fail("rate_limit", "not supported by npumon (its web server caps connections itself); remove it")
    headers = _headers(document.http_server_config.headers, fail)
    users = _users(document.basic_auth_users, fail)
    tls, sans = None, frozenset()  # type: Optional[ssl.SSLContext], FrozenSet[str]
    section = document.tls_server_config
    if section is not None and _tls_enabled(section):
        tls, sans = _tls_context(section, os.path.dirname(os.path.abspath(path)), fail)
    return WebSecurity(source=path, tls=tls, client_allowed_sans=sans, users=users, headers=headers)


def _headers(headers: Dict[str, str], fail) -> Tuple[Tuple[str, str], ...]:
    for name, value in headers.items():
        if name not in HEADERS:
            raise fail("http_server_config.headers." + name,
                       "this header cannot be set (known: {})".format(", ".join(sorted(HEADERS))))
        allowed = HEADERS[name]
        if allowed is not None and value not in allowed:
            raise fail("http_server_config.headers." + name, "must be one of {}, got {!r}".format(
                ", ".join(allowed), value))
        if "\r" in value or "\n" in value:
            raise fail("http_server_config.headers." + name, "must be one line")
    return tuple((name, value) for name, value in headers.items() if value)  # blank: unset, as in the toolkit


def _users(users: Dict[str, str], fail) -> Tuple[Tuple[bytes, bytes], ...]:
    if not users:
        return ()
    for name, hashed in users.items():
        key = "basic_auth_users." + name
        if ":" in name:
            raise fail(key, "a user name cannot contain ':' (basic auth splits user:password at the first one)")
        match = BCRYPT_HASH.match(hashed)
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise fail(key, "not a bcrypt hash ($2y$10$ and 53 more characters; make one with "
                            "htpasswd -nBC 10 \"\" | tr -d ':\\n')")
    try:
        import bcrypt  # noqa: F401  (checked here, so that a missing package stops the start, not a scrape)
    except ImportError:
        raise fail("basic_auth_users", "needs the bcrypt package: {}".format(AUTH_EXTRA_HINT)) from None
    return tuple((name.encode("utf-8"), hashed.encode("ascii")) for name, hashed in users.items())


def _tls_enabled(section: TLSServerSection) -> bool:
    """As exporter-toolkit decides: any certificate, key, CA or policy setting turns TLS on."""
    return any(value is not None for value in (section.cert, section.key, section.cert_file, section.key_file,
                                                section.client_ca, section.client_ca_file,
                                                section.client_auth_type))


def _file(base_dir: str, name: str) -> str:
    return os.path.join(base_dir, name)  # an absolute name stays as it is


def _ssl_reason(exc: Exception) -> str:
    return getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)


def _tls_context(section: TLSServerSection, base_dir: str, fail) -> Tuple[ssl.SSLContext, FrozenSet[str]]:
    prefix = "tls_server_config."
    for inline, file_key in (("cert", "cert_file"), ("key", "key_file")):
        if getattr(section, inline) is not None:
            raise fail(prefix + inline, "inline certificates and keys are not supported by npumon; "
                                        "put it in a file and set {}".format(file_key))
    if section.cert_file is None:
        raise fail(prefix + "cert_file", "TLS needs cert_file (the server certificate, PEM)")
    if section.key_file is None:
        raise fail(prefix + "key_file", "TLS needs key_file (the server certificate's key, PEM)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _versions(context, section, fail)
    cert_file, key_file = _file(base_dir, section.cert_file), _file(base_dir, section.key_file)
    try:
        context.load_cert_chain(cert_file, key_file)
    except (OSError, ssl.SSLError) as exc:
        raise fail(prefix + "cert_file", "cannot load certificate {} / key {}: {}".format(
            cert_file, key_file, _ssl_reason(exc))) from None
    policy = section.client_auth_type or "NoClientCert"
    if policy in UNVERIFIED_CLIENT_AUTH:
        raise fail(prefix + "client_auth_type", "{} takes client certificates without verifying them, which "
                   "Python's ssl cannot do; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with "
                   "client_ca_file".format(policy))
    if policy not in CLIENT_AUTH:
        raise fail(prefix + "client_auth_type", "unknown policy {!r} (known: {})".format(
            policy, ", ".join(list(CLIENT_AUTH) + list(UNVERIFIED_CLIENT_AUTH[:2]))))
    context.verify_mode = CLIENT_AUTH[policy]
    has_ca = section.client_ca_file is not None or section.client_ca is not None
    if has_ca and policy == "NoClientCert":
        raise fail(prefix + "client_auth_type", "client CAs are set but the policy is NoClientCert; "
                                                "set RequireAndVerifyClientCert")
    if policy != "NoClientCert" and not has_ca:
        raise fail(prefix + "client_ca_file", "{} needs client_ca_file (the CA that signs the client "
                                              "certificates)".format(policy))
    if has_ca:
        _client_cas(context, section, base_dir, fail)
    sans = frozenset()  # type: FrozenSet[str]
    if section.client_allowed_sans is not None:
        if policy != "RequireAndVerifyClientCert":
            raise fail(prefix + "client_allowed_sans", "needs client_auth_type RequireAndVerifyClientCert")
        sans = frozenset(section.client_allowed_sans)
        if not sans:
            raise fail(prefix + "client_allowed_sans", "is empty: no client could connect")
    _ciphers(context, section, fail)
    _curves(context, section, fail)
    return context, sans


def _versions(context: ssl.SSLContext, section: TLSServerSection, fail) -> None:
    for key in ("min_version", "max_version"):
        if getattr(section, key) not in TLS_VERSIONS:
            raise fail("tls_server_config." + key, "unknown TLS version {!r} (known: {})".format(
                getattr(section, key), ", ".join(TLS_VERSIONS)))
    low, high = TLS_VERSIONS[section.min_version], TLS_VERSIONS[section.max_version]
    if low > high:
        raise fail("tls_server_config.min_version", "is above max_version")
    try:
        context.minimum_version, context.maximum_version = low, high
    except (ValueError, ssl.SSLError) as exc:
        raise fail("tls_server_config.min_version", "this Python's OpenSSL refuses it: {}".format(exc)) from None


def _client_cas(context: ssl.SSLContext, section: TLSServerSection, base_dir: str, fail) -> None:
    key = "tls_server_config.client_ca_file" if section.client_ca_file is not None else "tls_server_config.client_ca"
    try:
        if section.client_ca_file is not None:
            context.load_verify_locations(cafile=_file(base_dir, section.client_ca_file))
        else:
            context.load_verify_locations(cadata=section.client_ca)
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise fail(key, "cannot load the client CA: {}".format(_ssl_reason(exc))) from None
    if not context.get_ca_certs():
        raise fail(key, "holds no CA certificate")


def _ciphers(context: ssl.SSLContext, section: TLSServerSection, fail) -> None:
    key = "tls_server_config.cipher_suites"
    if section.prefer_server_cipher_suites:
        context.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    else:
        context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
    names = []
    for name in section.cipher_suites:
        if name in TLS13_CIPHERS:
            continue
        if name not in TLS12_CIPHERS:
            raise fail(key, "unknown cipher suite {!r} (Go's names, e.g. TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)"
                       .format(name))
        names.append(TLS12_CIPHERS[name])
    if not names:
        return
    try:
        context.set_ciphers(":".join(names))
    except ssl.SSLError:
        raise fail(key, "none of them is available in this Python's OpenSSL") from None
    available = {cipher["name"] for cipher in context.get_ciphers()}
    missing = [name for name in section.cipher_suites if name in TLS12_CIPHERS and TLS12_CIPHERS[name] not in available]
    if missing:
        raise fail(key, "not available in this Python's OpenSSL: {}".format(", ".join(missing)))


def _curves(context: ssl.SSLContext, section: TLSServerSection, fail) -> None:
    key = "tls_server_config.curve_preferences"
    if not section.curve_preferences:
        return
    for name in section.curve_preferences:
        if name not in CURVES:
            raise fail(key, "unknown curve {!r} (known: {})".format(name, ", ".join(CURVES)))
    if len(section.curve_preferences) > 1:
        raise fail(key, "Python's ssl can restrict the key exchange to one curve only; list one")
    try:
        context.set_ecdh_curve(CURVES[section.curve_preferences[0]])
    except (ValueError, ssl.SSLError) as exc:
        raise fail(key, "this Python's OpenSSL refuses {}: {}".format(section.curve_preferences[0], exc)) from None


def peer_sans(certificate: dict) -> List[str]:
    """The subject alternative names of a verified peer certificate (ssl's getpeercert()) as Go prints
    them, for client_allowed_sans: DNS names, e-mail addresses, URIs and IP addresses (compressed form)."""
    names = []
    for kind, value in certificate.get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                value = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        elif kind not in ("DNS", "email", "URI"):
            continue
        names.append(value)
    return names
