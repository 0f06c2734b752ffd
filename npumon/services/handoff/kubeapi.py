"""A small Kubernetes API client for the hand-off sink: in-cluster service account or a kubeconfig file.

http.client and ssl, no proxy: one deadline per request, a cap on the answer. The service account's token is
re-read before every request, because the kubelet rotates it (a token read once gets 401 after about an hour).
"""

import base64
import http.client
import json
import os
import ssl
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple
from urllib.parse import urlsplit

import yaml

SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
MAX_ANSWER_BYTES = 32 * 1024 * 1024  # a NodeList of a few thousand nodes


class ApiError(Exception):
    """A request that failed: `status` is the HTTP status (0: no answer), `retry_after` the server's wish."""

    def __init__(self, message: str, status: int = 0, retry_after: Optional[float] = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after


class ConfigProblem(Exception):
    """The connection cannot be set up (not in a pod, unreadable kubeconfig): a one-line reason."""


@dataclass(frozen=True)
class Endpoint:
    server: str  # https://host:port
    token: Optional[str] = None
    token_file: Optional[str] = None  # read before each request
    ssl_context: Optional[ssl.SSLContext] = None  # None for http://

    def headers(self) -> Dict[str, str]:
        token = self.token
        if self.token_file:
            try:
                with open(self.token_file, encoding="utf-8") as handle:
                    token = handle.read().strip()
            except OSError as exc:
                raise ApiError("cannot read the token {}: {}".format(self.token_file, exc.strerror or exc)) from None
        return {"Authorization": "Bearer " + token} if token else {}


def in_cluster(environ: Mapping[str, str], account_dir: str = SERVICE_ACCOUNT) -> Endpoint:
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigProblem("not in a pod (KUBERNETES_SERVICE_HOST/PORT unset): set handoff.kubernetes.kubeconfig")
    context = ssl.create_default_context()
    ca = os.path.join(account_dir, "ca.crt")
    try:
        context.load_verify_locations(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigProblem("cannot read the service account's CA {}: {}".format(ca, exc)) from None
    server = "https://{}:{}".format("[{}]".format(host) if ":" in host else host, port)
    return Endpoint(server, token_file=os.path.join(account_dir, "token"), ssl_context=context)


def from_kubeconfig(path: str) -> Endpoint:
    """The current context's cluster and user: a bearer token (token or tokenFile) or a client certificate."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigProblem("cannot read kubeconfig {}: {}".format(path, str(exc).splitlines()[0])) from None
    try:
        current = doc["current-context"]
        context = _named(doc, "contexts", current)["context"]
        cluster = _named(doc, "clusters", context["cluster"])["cluster"]
        user = _named(doc, "users", context["user"]).get("user") or {}
        server = str(cluster["server"]).rstrip("/")
    except (KeyError, TypeError) as exc:
        raise ConfigProblem("kubeconfig {}: missing {}".format(path, exc)) from None
    base = os.path.dirname(os.path.abspath(path))
    for plugin in ("exec", "auth-provider"):
        if user.get(plugin):
            raise ConfigProblem("kubeconfig {}: the user's {} plugin is not supported: use a token, tokenFile or a "
                                "client certificate".format(path, plugin))
    if not server.startswith(("https://", "http://")):
        raise ConfigProblem("kubeconfig {}: server {!r} is not an http(s) URL".format(path, server))
    ssl_context = None
    if server.startswith("https://"):
        ssl_context = ssl.create_default_context()
        try:
            if cluster.get("insecure-skip-tls-verify"):
                ssl_context.check_hostname = False
                ssl_context.verify_mode = ssl.CERT_NONE
            elif cluster.get("certificate-authority-data"):
                ssl_context.load_verify_locations(
                    cadata=base64.b64decode(cluster["certificate-authority-data"]).decode("ascii"))
            elif cluster.get("certificate-authority"):
                ssl_context.load_verify_locations(cafile=os.path.join(base, cluster["certificate-authority"]))
            _client_certificate(ssl_context, user, base)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ConfigProblem("kubeconfig {}: {}".format(path, exc)) from None
    token_file = os.path.join(base, user["tokenFile"]) if user.get("tokenFile") else None
    return Endpoint(server, token=user.get("token"), token_file=token_file, ssl_context=ssl_context)


def _named(doc: Dict[str, Any], kind: str, name: str) -> Dict[str, Any]:
    for item in doc.get(kind) or []:
        if item.get("name") == name:
            return item
    raise KeyError("{} entry {!r}".format(kind, name))


def _client_certificate(context: ssl.SSLContext, user: Dict[str, Any], base: str) -> None:
    if user.get("client-certificate"):
        context.load_cert_chain(os.path.join(base, user["client-certificate"]),
                                os.path.join(base, user["client-key"]) if user.get("client-key") else None)
    elif user.get("client-certificate-data"):
        # ssl loads a certificate from files only: a private directory that lives for this call
        with tempfile.TemporaryDirectory() as directory:
            cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
            for name, field in ((cert, "client-certificate-data"), (key, "client-key-data")):
                with open(os.open(name, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as handle:
                    handle.write(base64.b64decode(user.get(field) or ""))
            context.load_cert_chain(cert, key)


def request(endpoint: Endpoint, method: str, path: str, timeout: float, body: Optional[Dict[str, Any]] = None,
            content_type: str = "application/json") -> Dict[str, Any]:
    """One request; the decoded JSON answer, or ApiError."""
    parts = urlsplit(endpoint.server)
    headers = dict(endpoint.headers(), Accept="application/json")
    data = None
    if body is not None:
        data = json.dumps(body, separators=(",", ":")).encode("utf-8")
        headers["Content-Type"] = content_type
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname, parts.port or 443, timeout=timeout, context=endpoint.ssl_context)
    else:
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout)
    try:
        connection.request(method, parts.path.rstrip("/") + path, body=data, headers=headers)
        response = connection.getresponse()
        answer = response.read(MAX_ANSWER_BYTES + 1)
        status, retry_after = response.status, _seconds(response.getheader("Retry-After"))
    except (OSError, http.client.HTTPException) as exc:
        raise ApiError("API server unreachable ({})".format(type(exc).__name__)) from None
    finally:
        connection.close()
    if len(answer) > MAX_ANSWER_BYTES:
        raise ApiError("API server answer larger than {} bytes".format(MAX_ANSWER_BYTES), status)
    if not 200 <= status < 300:
        raise ApiError("{} {}: HTTP {}{}".format(method, path.split("?")[0], status, _status_message(answer)),
                       status, retry_after)
    try:
        decoded = json.loads(answer.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise ApiError("{} {}: answer is not JSON".format(method, path.split("?")[0]), status) from None
    if not isinstance(decoded, dict):
        raise ApiError("{} {}: answer is not a JSON object".format(method, path.split("?")[0]), status)
    return decoded


def _seconds(value: Optional[str]) -> Optional[float]:
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: the backoff decides


def _status_message(answer: bytes) -> str:
    """The Status object's message, when the server sent one."""
    try:
        message = json.loads(answer.decode("utf-8")).get("message")
    except (ValueError, UnicodeDecodeError, AttributeError):
        return ""
    return " ({})".format(str(message)[:200]) if message else ""


def endpoint_for(kubeconfig: Optional[str], environ: Mapping[str, str]) -> Tuple[Endpoint, str]:
    """The endpoint and a word on where it came from (for the journal)."""
    if kubeconfig:
        return from_kubeconfig(kubeconfig), "kubeconfig " + kubeconfig
    return in_cluster(environ), "in-cluster service account"
