"""The Kubernetes source's failures in the log: a kubelet whose answer cannot be decoded is one line in the
source's status and nothing in the log, on every poll (a real gRPC server on a unix socket that answers bytes
that are no pod-resources message); a client that cannot start threads (the unit's task limit) is one line
per 10 minutes."""

import logging
import os
import shutil
import tempfile
from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc", reason="the k8s extra is not installed (pip install -e '.[k8s]')")

from npumon.sources.k8s import podresources_v1_pb2 as pb  # noqa: E402
from npumon.sources.k8s.client import ask_kubelet  # noqa: E402
from npumon.sources.k8s.config import DEFAULT_MAX_MESSAGE_BYTES, KubernetesConfig  # noqa: E402
from npumon.sources.k8s.source import KubernetesSource  # noqa: E402

CORRUPT = b"\x0a\xff\xff\xff\xff\x0fnot a message"  # a length-delimited field longer than the answer


@pytest.fixture()
def kubelet():
    """Serves `answers[method]` (raw bytes) for List and GetAllocatableResources; yields (socket, answers)."""
    directory = tempfile.mkdtemp(prefix="k8s", dir="/tmp")  # a unix socket path must stay under 108 bytes
    path = os.path.join(directory, "kubelet.sock")
    valid = pb.ListPodResourcesResponse(pod_resources=[pb.PodResources(name="p", namespace="n")])
    answers = {"List": valid.SerializeToString(), "GetAllocatableResources": b""}
    handlers = {method: grpc.unary_unary_rpc_method_handler(lambda request, context, method=method: answers[method])
                for method in answers}
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("v1.PodResourcesLister", handlers),))
    assert server.add_insecure_port("unix:" + path) != 0
    server.start()
    yield path, answers
    server.stop(grace=0).wait(5)
    shutil.rmtree(directory, ignore_errors=True)


def test_a_corrupt_list_answer_is_one_status_line_and_no_traceback_on_any_poll(kubelet, caplog):
    path, answers = kubelet
    answers["List"] = CORRUPT
    source = KubernetesSource(KubernetesConfig(enabled=True, socket=path, timeout_seconds=5.0,
                                               process_containers=False), "/", max_age=60.0, clock=lambda: 1000.0)
    with caplog.at_level(logging.INFO):
        for _ in range(3):
            source.poll("kubernetes", [])
    status = source.statuses(1000.0)["kubernetes"]
    assert not status.ok
    assert status.error.startswith("List: the kubelet's answer ({} bytes) cannot be decoded: ".format(len(CORRUPT)))
    assert "\n" not in status.error
    assert [(r.name, r.levelname, r.getMessage()) for r in caplog.records] == []  # grpc's own logger included


def test_a_corrupt_allocatable_answer_keeps_the_pod_list_and_says_why(kubelet, caplog):
    path, answers = kubelet
    answers["GetAllocatableResources"] = CORRUPT
    with caplog.at_level(logging.INFO):
        answer = ask_kubelet(path, 5.0, DEFAULT_MAX_MESSAGE_BYTES)
    assert answer.pods == 1 and answer.allocatable is None
    assert answer.allocatable_problem.startswith("GetAllocatableResources: the kubelet's answer ({} bytes) cannot "
                                                 "be decoded: ".format(len(CORRUPT)))
    assert caplog.records == []


def test_a_client_that_cannot_start_threads_is_one_line_per_interval(caplog):
    def ask(path, timeout, max_message_bytes):
        raise RuntimeError("can't start new thread")  # what the task limit does to a thread start under grpc

    now = [1000.0]
    source = KubernetesSource(KubernetesConfig(enabled=True, socket="/nonexistent", process_containers=False),
                              "/", max_age=60.0, clock=lambda: now[0], ask=ask)
    with caplog.at_level(logging.INFO):
        for _ in range(121):  # every 5 s for ten minutes
            source.poll("kubernetes", [])
            now[0] += 5.0
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("ERROR", "source kubernetes failed: internal error: RuntimeError: can't start new thread", None),
        ("ERROR", "source kubernetes failed: internal error: RuntimeError: can't start new thread (repeated 119 "
                  "times in the last 10 min)", None)]
