"""The `kubernetes:` section: where the kubelet's pod-resources socket is and how often to ask it."""

from dataclasses import dataclass
from typing import List, Optional, Tuple

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"


@dataclass(frozen=True)
class KubernetesConfig:
    """The `kubernetes:` section of the config file."""

    # unset: on when the socket exists at start (a Kubernetes node with it mounted), off elsewhere
    enabled: Optional[bool] = None
    socket: str = DEFAULT_SOCKET
    interval_seconds: float = 30.0  # pods change at human pace; the kubelet allows 100 calls/s over all clients
    timeout_seconds: float = 5.0  # one poll's deadline: List and GetAllocatableResources together
    # read each NPU process's container from /proc/<pid>/cgroup (needs the host's PID namespace: hostPID)
    process_containers: bool = True


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
    return problems
