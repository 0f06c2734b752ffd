"""This node's pods and their Ascend annotations from the Kubernetes API server: one bounded GET of
/api/v1/pods?fieldSelector=spec.nodeName=<node> with the pod's service-account token (RBAC: list pods).

In-cluster by default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, verified against the
service account's CA. One deadline for the whole exchange and a cap on the body; proxy variables are ignored.
"""

import json
import os
import time
from typing import Dict, Optional
from urllib.parse import quote

import requests

from .annotations import PodAnnotations, PodKey, pods_from_list
from .config import KubernetesConfig, resolve

MAX_BODY_BYTES = 64 * 1024 * 1024  # a node's pods (the kubelet allows 110 by default, big specs included)
CHUNK_BYTES = 65536


class ApiServerError(Exception):
    """A one-line reason the annotations could not be read."""


def api_server_url(config: KubernetesConfig, environ: Optional[Dict[str, str]] = None) -> str:
    if config.api_server:
        return config.api_server.rstrip("/")
    env = os.environ if environ is None else environ
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ApiServerError("not in a pod (KUBERNETES_SERVICE_HOST unset): set kubernetes.api_server")
    return "https://{}:{}".format("[{}]".format(host) if ":" in host else host, port)


def node_pod_annotations(session: requests.Session, config: KubernetesConfig, timeout_seconds: float
                         ) -> Dict[PodKey, PodAnnotations]:
    """The annotated pods on this node; raises ApiServerError."""
    node = resolve(config.node_name)
    if not node:
        raise ApiServerError("no node name ({} is unset)".format(config.node_name))
    url = "{}/api/v1/pods?fieldSelector={}".format(api_server_url(config), quote("spec.nodeName=" + node, safe=""))
    try:
        with open(config.token_file, encoding="utf-8") as handle:
            token = handle.read().strip()
    except OSError as exc:
        raise ApiServerError("cannot read the token {}: {}".format(config.token_file, exc.strerror or exc)) from None
    verify = config.ca_file if config.ca_file and os.path.exists(config.ca_file) else True
    deadline = time.monotonic() + timeout_seconds
    try:
        with session.get(url, headers={"Authorization": "Bearer " + token, "Accept": "application/json"},
                         timeout=timeout_seconds, stream=True, verify=verify, allow_redirects=False) as response:
            if response.status_code != 200:
                hint = " (the service account needs RBAC: list pods)" if response.status_code in (401, 403) else ""
                raise ApiServerError("API server answered HTTP {}{}".format(response.status_code, hint))
            body = bytearray()
            for chunk in response.iter_content(CHUNK_BYTES):
                body.extend(chunk)
                if len(body) > MAX_BODY_BYTES:
                    raise ApiServerError("API server answer larger than {} bytes".format(MAX_BODY_BYTES))
                if time.monotonic() > deadline:
                    raise ApiServerError("API server: no complete answer within {:g}s".format(timeout_seconds))
    except requests.Timeout:
        raise ApiServerError("API server: no answer within {:g}s".format(timeout_seconds)) from None
    except requests.RequestException as exc:
        raise ApiServerError("API server unreachable ({})".format(type(exc).__name__)) from None
    try:
        return pods_from_list(json.loads(body.decode("utf-8")))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiServerError("API server answer unreadable: {}".format(str(exc)[:100])) from None
