"""A simulated Kubernetes node around a simulated host: the API-server stand-in (sim/apiserver.py) holding the
host's Node, and the fake kubelet (sim/kubelet.py) listing the scenario's pods on the host's chips.

`--simulate` starts one when the config turns on the Kubernetes sink (`handoff.kubernetes.enabled`) or the
Kubernetes source (`kubernetes.enabled: true`), and `simulation_config` (sim/target.py) points the config at it
as the simulator points the sources at its other stand-ins: the sink's kubeconfig (unless one is set) and node
name (unless a literal one is set), and the source's socket (unless another than the default is set). Nothing
outside npumon/sim knows the difference. The kubelet needs grpcio (`npumon[k8s]`); without it only the API
server runs and the source says the socket is missing.

Files, under the simulation's state directory: k8s/kubeconfig (0600: the stand-in's address and its token, for
the sink and `npumon sim k8s`) and k8s/kubelet.sock (in a private temporary directory when that path would be
longer than a unix socket's 107 bytes).
"""

import logging
import os
import secrets
import shutil
import tempfile
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import yaml

from ..sources.k8s.client import grpc_available
from .products import Product, get_product
from .state import read_state

log = logging.getLogger(__name__)

K8S_DIR = "k8s"
KUBECONFIG_FILE = "kubeconfig"
SOCKET_FILE = "kubelet.sock"
MAX_SOCKET_PATH = 107  # sun_path holds 108 bytes with the terminating NUL
DEFAULT_NAMESPACE = "default"


class ClusterError(Exception):
    """The simulated cluster could not start (a socket or port not available): one line."""


@dataclass(frozen=True)
class ClusterAddresses:
    """Where the simulated node's cluster answers: what simulation_config hands the config."""

    kubeconfig: str
    node: str
    socket: str  # the kubelet's pod-resources socket (absent without grpcio)


def wanted(config: Any) -> bool:
    """Whether a simulated host needs the simulated cluster: the Kubernetes sink or source turned on."""
    return bool(config.handoff.kubernetes.enabled) or config.kubernetes.enabled is True


def node_name(config: Any, host_name: str) -> str:
    """The Node the stand-in holds: the sink's node_name when it is a literal, else the simulated host's name."""
    setting = config.handoff.kubernetes.node_name
    return setting if not setting.startswith("$") else host_name.lower()


def default_pods(product: Product) -> List[Dict[str, Any]]:
    """Without a scenario's `pods:`: two serving pods, one on each half of the chips (one pod on a one-chip host)."""
    devices = [slot.device_id for slot in product.slots()]
    half = (len(devices) + 1) // 2
    halves = [devices[:half], devices[half:]]
    return [{"namespace": DEFAULT_NAMESPACE, "name": "llm-serving-{}".format(index), "container": "server",
             "devices": held} for index, held in enumerate(halves) if held]


class SimulatedCluster:
    """The stand-ins of one simulated node; `addresses` for the config, `api` for what the API server holds."""

    def __init__(self, state_dir: str, node: str, product: Product, pods: Optional[Sequence[Dict[str, Any]]]):
        directory = os.path.join(os.path.abspath(state_dir), K8S_DIR)
        os.makedirs(directory, mode=0o700, exist_ok=True)
        self._socket_dir: Optional[str] = None
        socket = os.path.join(directory, SOCKET_FILE)
        if len(socket.encode()) > MAX_SOCKET_PATH:
            self._socket_dir = tempfile.mkdtemp(prefix="npumon-k8s-")
            socket = os.path.join(self._socket_dir, SOCKET_FILE)
        if os.path.exists(socket):
            os.unlink(socket)  # an earlier run's, in a kept --sim-state directory
        from .apiserver import ApiServer  # late: its schema check imports jsonschema, which a simulated host
        # without Kubernetes (the daemon's process, asking only `wanted`) has no use for

        token = secrets.token_hex(16)
        self.api = ApiServer((node,), token=token)
        self.kubelet = None
        try:
            if grpc_available():
                from .kubelet import FakeKubelet, allocatable_devices, scenario_pods  # late: needs grpcio

                held = default_pods(product) if pods is None else pods
                self.kubelet = FakeKubelet(socket, scenario_pods(held, product), allocatable_devices(product))
                self.kubelet.__enter__()
            kubeconfig = os.path.join(directory, KUBECONFIG_FILE)
            _write_private(kubeconfig, yaml.safe_dump(_kubeconfig(self.api.url, token), sort_keys=False))
        except BaseException:
            self.close()
            raise
        self.addresses = ClusterAddresses(kubeconfig, node, socket)
        log.info("simulated Kubernetes node %s: API server %s (bodies checked against %s), kubelet %s", node,
                 self.api.url, self.api.checked_against,
                 socket if self.kubelet is not None else "not started (grpcio not installed)")

    def close(self) -> None:
        if self.kubelet is not None:
            self.kubelet.stop()
        self.api.close()
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)

    def __enter__(self) -> "SimulatedCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def simulated_cluster(sim: Any, state_dir: str, config: Any, host_name: str) -> SimulatedCluster:
    """The cluster of the simulated host `sim` (a Simulation): its scenario's pods on its product's chips."""
    scenario = read_state(os.path.abspath(state_dir))["scenario"]
    try:
        return SimulatedCluster(state_dir, node_name(config, host_name), get_product(sim.product), scenario["pods"])
    except (OSError, RuntimeError) as exc:
        raise ClusterError("the simulated Kubernetes node could not start: {}".format(exc)) from None


def _kubeconfig(server: str, token: str) -> Dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Config", "current-context": "npumon-sim",
            "clusters": [{"name": "npumon-sim", "cluster": {"server": server}}],
            "users": [{"name": "npumon-sim", "user": {"token": token}}],
            "contexts": [{"name": "npumon-sim", "context": {"cluster": "npumon-sim", "user": "npumon-sim"}}]}


def _write_private(path: str, text: str) -> None:
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as handle:
        handle.write(text)


def read_kubeconfig(state_dir: str) -> Dict[str, str]:
    """The stand-in's address and token from a running simulation's state directory: {"server", "token"}.
    Raises OSError (no simulated cluster there) or ValueError (a damaged file)."""
    with open(os.path.join(state_dir, K8S_DIR, KUBECONFIG_FILE), encoding="utf-8") as handle:
        try:
            doc = yaml.safe_load(handle)
            return {"server": doc["clusters"][0]["cluster"]["server"], "token": doc["users"][0]["user"]["token"]}
        except (yaml.YAMLError, KeyError, IndexError, TypeError) as exc:
            raise ValueError("damaged simulated kubeconfig: {}".format(exc)) from None
