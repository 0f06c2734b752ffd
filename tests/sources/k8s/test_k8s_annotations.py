"""The device plugin's pod annotations over the kubelet's ids: Volcano's `huawei.com/AscendReal` and the dynamic
vNPU `huawei.com/npu-core`, parsed and applied (pure), then end to end: a real gRPC kubelet listing the
kubelet's ids and a real HTTP API server on loopback serving this node's PodList with the annotations."""

import json
import os
import shutil
import tempfile
from urllib.parse import parse_qs

import pytest

from recording_server import RecordingServer, json_reply
from npumon.sources.k8s.annotations import PodAnnotations, apply_annotations, parse_annotations, pods_from_list
from npumon.sources.k8s.devices import PodDevices

A910 = "huawei.com/Ascend910"
ALL_CHIPS = {A910: ["Ascend910-{}".format(n) for n in range(8)]}  # GetAllocatableResources


def test_parse_the_annotations_npumon_uses():
    assert parse_annotations({"huawei.com/AscendReal": "Ascend910-1,Ascend910-0", "predicate-time": "1"}) == \
        PodAnnotations(real=("Ascend910-1", "Ascend910-0"))
    assert parse_annotations({"huawei.com/npu-core": "0-vir02"}) == PodAnnotations(core_chips=("0-vir02",))
    assert parse_annotations({"huawei.com/npu-core": "2,3"}) == PodAnnotations(core_chips=("2", "3"))
    assert parse_annotations({"huawei.com/Ascend910": "Ascend910-0"}) is None  # the scheduler's wish, not the truth
    assert parse_annotations({}) is None


def test_apply_replaces_the_kubelet_ids_only_where_one_container_holds_the_resource():
    containers = (
        PodDevices("train", "job", "worker", ((A910, ("Ascend910-3", "Ascend910-4")),)),
        PodDevices("dyn", "small", "model", (("huawei.com/npu-core", ("npu-core-8", "npu-core-9")),)),
        PodDevices("two", "pod", "a", ((A910, ("Ascend910-5",)),)),
        PodDevices("two", "pod", "b", ((A910, ("Ascend910-6",)),)),
        PodDevices("plain", "pod", "c", ((A910, ("Ascend910-7",)),)),
    )
    pods = {("train", "job"): PodAnnotations(real=("Ascend910-0", "Ascend910-1")),
            ("dyn", "small"): PodAnnotations(core_chips=("2-vir02",)),
            ("two", "pod"): PodAnnotations(real=("Ascend910-5", "Ascend910-6"))}
    corrected, count, problems = apply_annotations(containers, pods)
    assert [entry.devices for entry in corrected] == [
        ((A910, ("Ascend910-0", "Ascend910-1")),), (("huawei.com/npu-core", ("2-vir02",)),),
        ((A910, ("Ascend910-5",)),), ((A910, ("Ascend910-6",)),), ((A910, ("Ascend910-7",)),)]
    assert count == 2
    assert problems == ["two/pod: 2 containers hold huawei.com/Ascend910; the annotation cannot say whose chip is "
                        "whose"] * 2


def test_a_pod_list_and_what_is_not_one():
    document = {"kind": "PodList", "items": [
        {"metadata": {"namespace": "a", "name": "p", "annotations": {"huawei.com/AscendReal": "Ascend910-2"}}},
        {"metadata": {"namespace": "a", "name": "q"}}, "garbage", {"metadata": None}]}
    assert pods_from_list(document) == {("a", "p"): PodAnnotations(real=("Ascend910-2",))}
    with pytest.raises(ValueError):
        pods_from_list({"kind": "Status"})


# --- end to end ----------------------------------------------------------------------------------------------

VOLCANO_PODS = [("train", "job", [("worker", [(A910, ["Ascend910-3", "Ascend910-4"])])]),  # kubelet's random ids
                ("dyn", "small", [("model", [("huawei.com/npu-core", ["npu-core-8", "npu-core-9"])])])]
POD_LIST = {"kind": "PodList", "items": [
    {"metadata": {"namespace": "train", "name": "job", "annotations": {
        "huawei.com/AscendReal": "Ascend910-0,Ascend910-1", "huawei.com/kltDev": "Ascend910-3,Ascend910-4"}}},
    {"metadata": {"namespace": "dyn", "name": "small", "annotations": {"huawei.com/npu-core": "6-vir02"}}}]}


@pytest.fixture()
def socket_dir():
    path = tempfile.mkdtemp(prefix="k8s", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_check(tmp_path, socket, api, capsys):
    from npumon.cli.main import main as npumon_main
    token = tmp_path / "token"
    token.write_text("secret-token\n")
    config = tmp_path / "npumon.yaml"
    config.write_text("kubernetes:\n  enabled: true\n  socket: {}\n  annotations: true\n  api_server: {}\n"
                      "  node_name: node-1\n  token_file: {}\n  ca_file: null\n".format(socket, api, token))
    npumon_main(["check", "--simulate", "--json", "--config", str(config)])
    document = json.loads(capsys.readouterr().out)
    return document, {chip["npu"]: chip["pods"] for chip in document["chips"]}


@pytest.mark.integration
def test_volcanos_real_chips_replace_the_kubelets_ids(tmp_path, socket_dir, capsys):
    pytest.importorskip("grpc")
    from npumon.sim.kubelet import FakeKubelet
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, VOLCANO_PODS, ALL_CHIPS), RecordingServer(json_reply(POD_LIST)) as api:
        document, pods = run_check(tmp_path, socket, api.url(""), capsys)
    request = api.requests[0]
    assert request.method == "GET" and request.path == "/api/v1/pods"
    assert parse_qs(request.query) == {"fieldSelector": ["spec.nodeName=node-1"]}
    assert request.headers["Authorization"] == "Bearer secret-token"
    assert document["sources"]["kubernetes"]["error"] is None
    for npu in (0, 1):  # each chip lists the id that names it, and what the kubelet had for the container
        assert pods[npu] == [{"namespace": "train", "pod": "job", "container": "worker", "resource": A910,
                              "device_ids": ["Ascend910-{}".format(npu)],
                              "kubelet_device_ids": ["Ascend910-3", "Ascend910-4"]}]
    assert pods[3] == pods[4] == []  # the kubelet's ids named these; the chips mounted were 0 and 1
    assert pods[6] == [{"namespace": "dyn", "pod": "small", "container": "model", "resource": "huawei.com/npu-core",
                        "device_ids": ["6-vir02"], "kubelet_device_ids": ["npu-core-8", "npu-core-9"]}]


@pytest.mark.integration
def test_an_api_server_that_refuses_leaves_the_kubelets_ids_and_says_why(tmp_path, socket_dir, capsys):
    pytest.importorskip("grpc")
    from npumon.sim.kubelet import FakeKubelet
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, VOLCANO_PODS, ALL_CHIPS), RecordingServer(json_reply({"kind": "Status"}, status=403)) as api:
        document, pods = run_check(tmp_path, socket, api.url(""), capsys)
    status = document["sources"]["kubernetes"]
    assert status["ok"] is True
    assert status["error"].startswith("annotations not read, kubelet ids shown: API server answered HTTP 403 (the "
                                      "service account needs RBAC: list pods)")
    assert [p["pod"] for p in pods[3]] == ["job"] and "kubelet_device_ids" not in pods[3][0]
