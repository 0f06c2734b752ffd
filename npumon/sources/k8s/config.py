"""The `kubernetes:` section: where the kubelet's pod-resources socket is and how often to ask it."""

import os
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
DEFAULT_MAX_MESSAGE_BYTES = 4 * 1024 * 1024
MAX_MESSAGE_BYTES_LIMIT = 64 * 1024 * 1024  # past this one answer would take a large part of the unit's 256M
SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


@dataclass(frozen=True)
class KubernetesConfig:
    """The `kubernetes:` section of the config file."""

    # unset: on when the socket exists at start (a Kubernetes node with it mounted), off elsewhere
    enabled: Optional[bool] = None
    socket: str = DEFAULT_SOCKET
    interval_seconds: float = 30.0  # pods change at human pace; the kubelet allows 100 calls/s over all clients
    timeout_seconds: float = 5.0  # one poll's deadline: List and GetAllocatableResources together
    # the largest pod-resources answer read (a pod with one container takes some 100-200 bytes of it); a bigger
    # one fails, naming this key. Held while it is read, decoded and parsed: it must fit the unit's MemoryMax.
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    # read each NPU process's container from /proc/<pid>/cgroup (needs the host's PID namespace: hostPID)
    process_containers: bool = True
    # correct the kubelet's device ids with the Ascend device plugin's pod annotations (huawei.com/AscendReal,
    # huawei.com/npu-core), read from the API server: needed under Volcano scheduling (docs/kubernetes.md)
    annotations: bool = False
    api_server: Optional[str] = None  # unset: in-cluster, https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT
    node_name: str = "$NODE_NAME"  # this node's name; "$VAR" reads environment VAR (the downward API sets it)
    token_file: str = SERVICE_ACCOUNT + "/token"
    ca_file: Optional[str] = SERVICE_ACCOUNT + "/ca.crt"  # for an https api_server; null: the system CAs


def kubernetes_config_problems(config: KubernetesConfig) -> List[Tuple[str, str]]:
    problems: List[Tuple[str, str]] = []
    if not config.socket.startswith("/"):
        problems.append(("kubernetes.socket", "must be an absolute path, e.g. " + DEFAULT_SOCKET))
    if config.interval_seconds <= 0:
        problems.append(("kubernetes.interval_seconds", "must be greater than 0 (use enabled: false to turn it off)"))
    if config.timeout_seconds <= 0:
        problems.append(("kubernetes.timeout_seconds", "must be greater than 0"))
    elif config.timeout_seconds >= config.interval_seconds:
        problems.append(("kubernetes.timeout_seconds", "must be less than kubernetes.interval_seconds"))
    if not 0 < config.max_message_bytes <= MAX_MESSAGE_BYTES_LIMIT:
        problems.append(("kubernetes.max_message_bytes", "must be greater than 0 and at most {} (64 MiB)".format(
            MAX_MESSAGE_BYTES_LIMIT)))
    if config.api_server is not None and not config.api_server.startswith(("http://", "https://")):
        problems.append(("kubernetes.api_server", "expected an https:// URL, e.g. https://10.96.0.1:443"))
    if not config.node_name:
        problems.append(("kubernetes.node_name", "must not be empty (e.g. $NODE_NAME)"))
    return problems


def resolve(setting: str, environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """A "$VAR" setting's value from the environment (None when unset); any other string as it is."""
    if setting.startswith("$"):
        return (os.environ if environ is None else environ).get(setting[1:].strip("{}")) or None
    return setting
