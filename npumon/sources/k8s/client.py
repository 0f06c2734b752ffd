"""One bounded exchange with the kubelet's pod-resources API over its unix socket.

grpcio and protobuf come with the optional extra `npumon[k8s]` and are imported here, on first use, so npumon
without them works and this source says what is missing. A fresh channel per poll, closed after it (as the
Ascend device plugin and dcgm-exporter do): a kubelet restart re-creates the socket, which is why a pod
mounts its directory rather than the file. Both calls share one deadline; nothing is retried inside a poll.
"""

import os
import re
import stat
import time
from dataclasses import dataclass
from typing import List, Optional, Tuple

from .devices import PodDevices, is_ascend_resource

GRPC_MISSING = "grpcio not installed (pip install 'npumon[k8s]')"
CAP_KEY = "kubernetes.max_message_bytes"
# grpc's words for an answer over max_receive_message_length: "Received message larger than max (N vs. M)"
_OVER_CAP = re.compile(r"larger than max \((\d+) vs\. (\d+)\)")


def grpc_thread_bound() -> int:
    """The threads grpc starts for one exchange, all native (a unary call starts no Python thread): its
    event engine's workers, as many as the host's configured CPUs but at least 4 and at most 16 (grpcio has no
    option or variable that changes it), its timer, its lifeguard, and the one that shuts grpc down when the
    poll's channel is closed; only when every worker stays busy for a second does grpc's lifeguard add one more
    per such second. They end with the poll (the channel is the process's only one), before the next one starts."""
    try:
        cpus = os.sysconf("SC_NPROCESSORS_CONF")  # what grpc counts: configured, not only online, CPUs
    except (ValueError, OSError):
        cpus = os.cpu_count() or 1
    return min(max(cpus, 4), 16) + 3


class PodResourcesError(Exception):
    """A one-line reason the kubelet gave no pod list."""


@dataclass(frozen=True)
class KubeletAnswer:
    containers: Tuple[PodDevices, ...]  # the containers that hold Ascend devices
    pods: int  # all pods listed
    # GetAllocatableResources' Ascend devices; None where the kubelet does not serve it (or it failed)
    allocatable: Optional[Tuple[Tuple[str, Tuple[str, ...]], ...]]
    allocatable_problem: Optional[str] = None


def _modules():
    try:
        import grpc  # noqa: PLC0415 - optional dependency
        from . import podresources_v1_pb2, podresources_v1_pb2_grpc  # noqa: PLC0415 - needs protobuf
    except ImportError:
        raise PodResourcesError(GRPC_MISSING) from None
    return grpc, podresources_v1_pb2, podresources_v1_pb2_grpc


def grpc_available() -> bool:
    try:
        _modules()
    except PodResourcesError:
        return False
    return True


def socket_problem(path: str) -> Optional[str]:
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return "no kubelet pod-resources socket at {} (is /var/lib/kubelet/pod-resources mounted?)".format(path)
    except OSError as exc:
        return "cannot reach {}: {}".format(path, exc.strerror or exc)
    if not stat.S_ISSOCK(mode):
        return "{} is not a socket".format(path)
    return None


def ask_kubelet(path: str, timeout_seconds: float, max_message_bytes: int) -> KubeletAnswer:
    """List (and GetAllocatableResources, with the time left) within timeout_seconds, each answer at most
    max_message_bytes; raises PodResourcesError."""
    grpc, pb, _ = _modules()
    problem = socket_problem(path)
    if problem is not None:
        raise PodResourcesError(problem)
    deadline = time.monotonic() + timeout_seconds
    channel = grpc.insecure_channel("unix://" + path, options=[
        ("grpc.max_receive_message_length", max_message_bytes), ("grpc.enable_retries", 0)])
    try:
        try:
            listed = _call(channel, "List", pb.ListPodResourcesRequest(), pb.ListPodResourcesResponse,
                           timeout_seconds)
        except grpc.RpcError as exc:
            raise PodResourcesError("List: " + _describe(grpc, exc, timeout_seconds, max_message_bytes)) from None
        allocatable, allocatable_problem = None, None
        left = deadline - time.monotonic()
        if left > 0:
            try:
                answer = _call(channel, "GetAllocatableResources", pb.AllocatableResourcesRequest(),
                               pb.AllocatableResourcesResponse, left)
                allocatable = _ascend_devices(answer.devices)
                if not any(ids for _, ids in allocatable):  # no Ascend device plugin: unknown, not "all unhealthy"
                    allocatable = None
                    allocatable_problem = ("GetAllocatableResources lists no Ascend device (is the Ascend device "
                                           "plugin running?)")
            except grpc.RpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:  # kubelets before 1.21 (or with the gate off)
                    allocatable_problem = "GetAllocatableResources: " + _describe(grpc, exc, left,
                                                                                  max_message_bytes)
            except PodResourcesError as exc:
                allocatable_problem = str(exc)
        else:
            allocatable_problem = "GetAllocatableResources: no time left after List"
    finally:
        channel.close()
    return KubeletAnswer(containers=_containers(listed), pods=len(listed.pod_resources), allocatable=allocatable,
                         allocatable_problem=allocatable_problem)


def _call(channel, method: str, request, answer_type, timeout_seconds: float):
    """One call of the pod-resources service, its answer decoded here rather than by grpc: grpc logs an
    answer it cannot decode at ERROR with a traceback, on every poll, where one line in the source's status
    says it all. Raises grpc.RpcError, or PodResourcesError for an answer that is not `answer_type`."""
    from google.protobuf.message import DecodeError  # noqa: PLC0415 - present with grpcio (_modules)

    call = channel.unary_unary("/v1.PodResourcesLister/" + method, request_serializer=type(request).SerializeToString)
    raw = call(request, timeout=timeout_seconds)  # bytes: no response_deserializer
    try:
        return answer_type.FromString(raw)
    except DecodeError as exc:
        raise PodResourcesError("{}: the kubelet's answer ({} bytes) cannot be decoded: {}".format(
            method, len(raw), exc)) from None


def _ascend_devices(devices) -> Tuple[Tuple[str, Tuple[str, ...]], ...]:
    return tuple((device.resource_name, tuple(device.device_ids)) for device in devices
                 if is_ascend_resource(device.resource_name))


def _containers(listed) -> Tuple[PodDevices, ...]:
    found: List[PodDevices] = []
    for pod in listed.pod_resources:
        for container in pod.containers:
            devices = _ascend_devices(container.devices)
            if devices:
                found.append(PodDevices(pod.namespace, pod.name, container.name, devices))
    return tuple(found)


def _describe(grpc, exc, timeout_seconds: float, max_message_bytes: int) -> str:
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "no answer within {:g}s".format(timeout_seconds)
    details = " ".join(str(exc.details() or "").split())[:160]
    over = _OVER_CAP.search(details) if code == grpc.StatusCode.RESOURCE_EXHAUSTED else None
    if over is not None:
        return "the kubelet's answer of {} bytes is over the {} byte cap: raise {} if the node has that many " \
               "pods".format(over.group(1), max_message_bytes, CAP_KEY)
    if code == grpc.StatusCode.UNAVAILABLE:
        return "kubelet not answering on the socket ({})".format(details or "unavailable")
    return "{} {}".format(code.name if code is not None else "error", details).strip()
