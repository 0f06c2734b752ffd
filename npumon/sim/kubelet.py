"""A stand-in kubelet, for `--simulate` and the Kubernetes source's tests: a real gRPC server (grpcio) on a unix
socket serving the pod-resources v1 service from the same generated modules, with Ascend devices as the device
plugin names them. It can answer, refuse GetAllocatableResources as kubelets before 1.21 do, or hang (accept
calls, never answer).

grpcio comes with the `npumon[k8s]` extra: import this module only where it is installed (sim/cluster.py asks
grpc_available first). `scenario_pods` turns a scenario's `pods:` (sim/scenario.py) into the kubelet's answer.
"""

import threading
from concurrent import futures
from typing import Any, Dict, List, Optional, Sequence, Tuple

import grpc

from ..sources.k8s import podresources_v1_pb2 as pb
from ..sources.k8s import podresources_v1_pb2_grpc as pb_grpc
from .products import FAMILY_310B, FAMILY_310P, FAMILY_950, Product

# (namespace, pod, [(container, [(resource, [device ids])])])
Pod = Tuple[str, str, Sequence[Tuple[str, Sequence[Tuple[str, Sequence[str]]]]]]
HANG_LIMIT_SECONDS = 60.0  # a hung handler gives up by itself even if a test forgets to stop the server
MAX_CALLS_KEPT = 1000
# the Ascend device plugin's resource and device-id name per family (shared/reference/k8s/PODRESOURCES.md s. 2);
# the 910 family (A1, A2, A3) shares one
_DEVICE_NAMES = {FAMILY_310P: "Ascend310P", FAMILY_310B: "Ascend310B", FAMILY_950: "npu"}


def device_name(product: Product) -> str:
    return _DEVICE_NAMES.get(product.family, "Ascend910")


def scenario_pods(pods: Sequence[Dict[str, Any]], product: Product) -> Tuple[Pod, ...]:
    """The pods a scenario puts on its chips (`devices`: logical device ids), with the device-plugin ids the
    kubelet lists: `<name>-<physical id>`, on the 950 `npu-<NPU id>`."""
    name = device_name(product)
    slots = {slot.device_id: slot for slot in product.slots()}
    result = []
    for pod in pods:
        ids = [slots[device] for device in pod["devices"] if device in slots]
        numbers = [slot.npu if product.family == FAMILY_950 else slot.phy_id for slot in ids]
        result.append((pod["namespace"], pod["name"], [(pod["container"], [
            ("huawei.com/" + name, ["{}-{}".format(name, number) for number in numbers])])]))
    return tuple(result)


def allocatable_devices(product: Product) -> Dict[str, List[str]]:
    """Every chip of the product as the device plugin advertises it (all healthy to the kubelet)."""
    name = device_name(product)
    numbers = sorted({slot.npu if product.family == FAMILY_950 else slot.phy_id for slot in product.slots()})
    return {"huawei.com/" + name: ["{}-{}".format(name, number) for number in numbers]}


class _Lister(pb_grpc.PodResourcesListerServicer):
    def __init__(self, owner: "FakeKubelet"):
        self.owner = owner

    def List(self, request, context):  # noqa: N802 - the generated servicer's method name
        self.owner.record("List")
        self.owner.maybe_hang()
        return pb.ListPodResourcesResponse(pod_resources=[_pod(pod) for pod in self.owner.pods])

    def GetAllocatableResources(self, request, context):  # noqa: N802
        self.owner.record("GetAllocatableResources")
        self.owner.maybe_hang()
        if self.owner.allocatable is None:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "method GetAllocatableResources not implemented")
        return pb.AllocatableResourcesResponse(devices=[
            pb.ContainerDevices(resource_name=resource, device_ids=list(ids))
            for resource, ids in self.owner.allocatable.items()])


def _pod(pod: Pod):
    namespace, name, containers = pod
    return pb.PodResources(name=name, namespace=namespace, containers=[
        pb.ContainerResources(name=container, devices=[
            pb.ContainerDevices(resource_name=resource, device_ids=list(ids)) for resource, ids in devices])
        for container, devices in containers])


class FakeKubelet:
    def __init__(self, path: str, pods: Sequence[Pod] = (), allocatable: Optional[Dict[str, List[str]]] = None,
                 hang: bool = False):
        self.path = path
        self.pods = list(pods)
        self.allocatable = allocatable
        self.hang = hang
        self.calls: List[str] = []
        self._release = threading.Event()
        self._lock = threading.Lock()
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        if self._server.add_insecure_port("unix:" + path) == 0:
            raise RuntimeError("cannot listen on " + path)

    def record(self, method: str) -> None:
        with self._lock:
            self.calls.append(method)
            del self.calls[:-MAX_CALLS_KEPT]

    def maybe_hang(self) -> None:
        if self.hang:
            self._release.wait(HANG_LIMIT_SECONDS)

    def __enter__(self) -> "FakeKubelet":
        self._server.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        self._release.set()
        self._server.stop(grace=0).wait(5)
