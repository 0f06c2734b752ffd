"""The two ways a public-fault message reaches ClusterD: a labelled ConfigMap through the API server, or
ClusterD's gRPC `SendPublicFault`. Each says what request it sends (`request`, also what a dry run records)
and sends it (`deliver`, raising ApiError: `status` the HTTP status or ClusterD's RespStatus code, 0 for no
answer). grpcio comes with the `npumon[k8s]` extra and is imported on first use, as the kubelet source does."""

from typing import Any, Callable, Dict, Optional
from urllib.parse import quote

from .kubeapi import ApiError, ConfigProblem
from .kubesink import Send
from .publicfault import encode

LABEL = "mc-consumer-publicfault"  # the label ClusterD's informer selects public-fault ConfigMaps by
DATA_KEY = "PublicFault"
RPC = "/PubFault/SendPublicFault"
GRPC_MISSING = "grpcio not installed (pip install 'npumon[k8s]')"
MAX_ANSWER_BYTES = 64 * 1024  # a RespStatus is a code and a line of text

# count(action, result): the sink's request counters
Count = Callable[[str, str], None]


def configmap_name(node: str) -> str:
    """npumon-fault-<node>, as MindCluster names its own (pingmesh-fault-<node>), within 253 characters."""
    return ("npumon-fault-" + node)[:253].rstrip("-.")


class ConfigMapRoute:
    """One ConfigMap per node, its `PublicFault` key replaced by each message: ClusterD takes every add and
    update event of a labelled ConfigMap as one message, and ignores its deletion."""

    name = "configmap"

    def __init__(self, namespace: str, node: str, send: Optional[Send]):
        self._namespace = namespace
        self._name = configmap_name(node)
        self._send = send
        self._exists: Optional[bool] = None  # unknown until read or written

    @property
    def path(self) -> str:
        return "/api/v1/namespaces/{}/configmaps".format(self._namespace)

    def request(self, body: Dict[str, Any]) -> Dict[str, Any]:
        configmap = {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": self._name, "namespace": self._namespace,
                                  "labels": {LABEL: "true", "app.kubernetes.io/name": "npumon"}},
                     "data": {DATA_KEY: encode(body)}}
        if self._exists is False:
            return {"method": "POST", "path": self.path, "body": configmap}
        return {"method": "PUT", "path": "{}/{}".format(self.path, quote(self._name, safe="")), "body": configmap}

    def read(self, count: Count) -> Optional[str]:
        """The message the ConfigMap holds (what ClusterD last took from npumon on this node); None if none."""
        try:
            answer = self._call(count, "read_configmap", "GET", "{}/{}".format(self.path, quote(self._name, safe="")),
                                None)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self._exists = False
            return None
        self._exists = True
        text = (answer.get("data") or {}).get(DATA_KEY)
        return text if isinstance(text, str) else None

    def deliver(self, body: Dict[str, Any], count: Count) -> None:
        request = self.request(body)
        try:
            self._call(count, "write_configmap", request["method"], request["path"], request["body"])
        except ApiError as exc:
            # someone deleted it (404 on update) or created it meanwhile (409 on create): the other verb once
            if (request["method"], exc.status) not in (("PUT", 404), ("POST", 409)):
                raise
            self._exists = exc.status == 409
            request = self.request(body)
            self._call(count, "write_configmap", request["method"], request["path"], request["body"])
        self._exists = True

    def _call(self, count: Count, action: str, method: str, path: str,
              body: Optional[Dict[str, Any]]) -> Dict[str, Any]:
        assert self._send is not None, "a dry run sends nothing"
        try:
            answer = self._send(method, path, body, "application/json")
        except ApiError:
            count(action, "failed")
            raise
        count(action, "ok")
        return answer


def grpc_modules():
    """(grpc, pubfault_pb2, pubfault_pb2_grpc); ConfigProblem where grpcio is missing."""
    try:
        import grpc  # noqa: PLC0415 - optional dependency
        from . import pubfault_pb2, pubfault_pb2_grpc  # noqa: PLC0415 - needs protobuf
    except ImportError:
        raise ConfigProblem(GRPC_MISSING) from None
    return grpc, pubfault_pb2, pubfault_pb2_grpc


class GrpcRoute:
    """ClusterD's SendPublicFault, without TLS (ClusterD's server has no credentials configured). A fresh
    channel per message, closed after it: messages are rare, and nothing stays open between them."""

    name = "grpc"
    action = "send_public_fault"

    def __init__(self, target: str, timeout: float):
        self._target = target
        self._timeout = timeout

    def request(self, body: Dict[str, Any]) -> Dict[str, Any]:
        return {"rpc": RPC, "target": self._target, "body": body}

    def read(self, count: Count) -> Optional[str]:
        """ClusterD's gRPC service has no read: nothing to resynchronise from."""
        return None

    def deliver(self, body: Dict[str, Any], count: Count) -> None:
        grpc, pb, pb_grpc = grpc_modules()
        from google.protobuf.json_format import ParseDict  # noqa: PLC0415 - present with grpcio

        request = ParseDict(body, pb.PublicFaultRequest())
        channel = grpc.insecure_channel(self._target, options=[
            ("grpc.max_receive_message_length", MAX_ANSWER_BYTES), ("grpc.enable_retries", 0)])
        try:
            answer = pb_grpc.PubFaultStub(channel).SendPublicFault(request, timeout=self._timeout)
        except grpc.RpcError as exc:
            count(self.action, "failed")
            code = exc.code()
            # ClusterD's server-wide limit answers with a gRPC error, not a RespStatus: a throttle all the same
            status = 429 if code == grpc.StatusCode.RESOURCE_EXHAUSTED else 0
            raise ApiError("ClusterD {}: {}".format(self._target, code.name if code else "error"), status) from None
        finally:
            channel.close()
        if answer.code != 0:
            count(self.action, "failed")
            raise ApiError("ClusterD answered {} ({})".format(answer.code, " ".join(answer.info.split())[:200]),
                           answer.code)
        count(self.action, "ok")
