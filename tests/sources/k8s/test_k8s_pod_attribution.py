"""Pod attribution end to end: a real gRPC server on a unix socket serving the kubelet's pod-resources v1 List and
GetAllocatableResources with Ascend devices, against `npumon check --simulate --json` and a real `npumon run`
daemon's /metrics (native and npu-exporter compat families). Single-pod, one pod on two chips, two pods on one
chip (share mode), static vNPUs (one and two on a chip), a dynamic vNPU core unit and chips without pods; then
a hung kubelet and an absent socket, which leave every other source as it was and this one down with why."""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

pytest.importorskip("grpc", reason="the k8s extra is not installed (pip install -e '.[k8s]')")

from daemon_harness import DaemonProcess, sample, wait_until  # noqa: E402
from npumon.sim.kubelet import FakeKubelet  # noqa: E402
from npumon.cli.main import main as npumon_main  # noqa: E402
from npumon.sources.k8s.client import PodResourcesError, ask_kubelet  # noqa: E402
from npumon.sources.k8s.config import KubernetesConfig  # noqa: E402

pytestmark = pytest.mark.integration

A910 = "huawei.com/Ascend910"
PODS = [
    ("default", "infer-a", [("server", [(A910, ["Ascend910-0"])])]),  # chip 0: one pod
    ("train", "job-b", [("worker", [(A910, ["Ascend910-1", "Ascend910-2"])])]),  # chips 1, 2: one pod on two
    ("team1", "share-c", [("app", [(A910, ["Ascend910-3-0"])])]),  # chip 3: share mode, two pods
    ("team2", "share-d", [("app", [(A910, ["Ascend910-3-1"])]), ("sidecar", [])]),
    ("vnpu", "small-e", [("model", [("huawei.com/Ascend910-2c", ["Ascend910-2c-100-4"])])]),  # chip 4: one vNPU
    ("vnpu", "small-f", [("model", [("huawei.com/Ascend910-2c", ["Ascend910-2c-101-5"])])]),  # chip 5: two vNPUs
    ("vnpu", "small-g", [("model", [("huawei.com/Ascend910-4c", ["Ascend910-4c-102-5"])])]),
    ("dyn", "cores-h", [("model", [("huawei.com/npu-core", ["npu-core-3"])])]),  # names no chip
    ("kube-system", "no-npu", [("dns", [("example.com/other", ["x-1"])])]),  # not an Ascend resource
]
ALLOCATABLE = {A910: ["Ascend910-{}".format(n) for n in range(7)]}  # chip 7 unhealthy to the device plugin
CONTAINER_ID = "a" * 64
CHIP0_PID = 2290156  # the healthy scenario's process on npu 0 (npumon/sim)
TIMEOUT = 30


@pytest.fixture()
def socket_dir():
    path = tempfile.mkdtemp(prefix="k8s", dir="/tmp")  # a unix socket path must stay under 108 bytes
    yield path
    shutil.rmtree(path, ignore_errors=True)


def write_config(tmp_path, socket, timeout=2.0, interval=3.0, section=""):
    config = tmp_path / "npumon.yaml"
    config.write_text("kubernetes:\n  enabled: true\n  socket: {}\n  interval_seconds: {}\n  timeout_seconds: {}\n{}"
                      "exporter:\n  npu_exporter_compat: true\npoll:\n  table_seconds: {}\n".format(
                          socket, interval, timeout, section, min(interval, 15.0)))
    return str(config)


def check_json(capsys, config):
    code = npumon_main(["check", "--simulate", "--json", "--config", config])
    return code, json.loads(capsys.readouterr().out)


def pods_by_chip(document):
    return {chip["npu"]: [(p["namespace"], p["pod"], p["container"]) for p in chip.get("pods") or []]
            for chip in document["chips"]}


EXPECTED = {
    0: [("default", "infer-a", "server")],
    1: [("train", "job-b", "worker")],
    2: [("train", "job-b", "worker")],
    3: [("team1", "share-c", "app"), ("team2", "share-d", "app")],
    4: [("vnpu", "small-e", "model")],
    5: [("vnpu", "small-f", "model"), ("vnpu", "small-g", "model")],
    6: [],
    7: [],
}


def test_check_json_lists_each_chips_pods_from_a_real_kubelet_socket(tmp_path, socket_dir, capsys):
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, PODS, ALLOCATABLE) as kubelet:
        code, document = check_json(capsys, write_config(tmp_path, socket))
    assert kubelet.calls == ["List", "GetAllocatableResources"]
    status = document["sources"]["kubernetes"]
    assert status["ok"] is True
    assert "npu-core-N" in status["error"]  # the dynamic vNPU core unit is named as not attributed
    assert pods_by_chip(document) == EXPECTED
    chips = {chip["npu"]: chip for chip in document["chips"]}
    assert chips[5]["pods"][1] == {"namespace": "vnpu", "pod": "small-g", "container": "model",
                                   "resource": "huawei.com/Ascend910-4c", "device_ids": ["Ascend910-4c-102-5"]}
    assert chips[1]["pods"][0]["device_ids"] == ["Ascend910-1"]
    assert [chips[n]["kubelet_allocatable"] for n in range(8)] == [True] * 7 + [False]
    assert code in (0, 1)


def test_without_get_allocatable_the_pods_still_show_and_allocatable_is_null(tmp_path, socket_dir, capsys):
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, PODS[:1], allocatable=None):  # kubelets before 1.21: UNIMPLEMENTED
        _, document = check_json(capsys, write_config(tmp_path, socket))
    assert document["sources"]["kubernetes"]["ok"] is True
    assert document["sources"]["kubernetes"]["error"] is None
    assert pods_by_chip(document)[0] == [("default", "infer-a", "server")]
    assert {chip["kubelet_allocatable"] for chip in document["chips"]} == {None}


def test_a_kubelet_without_the_ascend_device_plugin_gives_no_allocatable_verdict(tmp_path, socket_dir, capsys):
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, PODS[:1], {"example.com/other": ["x-1"], A910: []}):
        _, document = check_json(capsys, write_config(tmp_path, socket))
    status = document["sources"]["kubernetes"]
    assert status["ok"] is True
    assert status["error"] == "GetAllocatableResources lists no Ascend device (is the Ascend device plugin running?)"
    assert {chip["kubelet_allocatable"] for chip in document["chips"]} == {None}  # not 8 "unhealthy" chips
    assert pods_by_chip(document)[0] == [("default", "infer-a", "server")]


def test_a_hung_kubelet_costs_one_deadline_and_takes_only_this_source_down(tmp_path, socket_dir, capsys):
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, PODS, ALLOCATABLE, hang=True):
        started = time.monotonic()
        _, document = check_json(capsys, write_config(tmp_path, socket, timeout=1.0))
        elapsed = time.monotonic() - started
    status = document["sources"]["kubernetes"]
    assert (status["ok"], status["error"]) == (False, "List: no answer within 1s")
    assert elapsed < 8, elapsed
    assert document["sources"]["npu-smi"]["ok"] is True
    assert len(document["chips"]) == 8 and all("pods" not in chip for chip in document["chips"])
    assert all(chip["temperature_celsius"] is not None for chip in document["chips"])


def many_pods(count):
    return [("batch", "job-{:05d}".format(n), [("worker", [(A910, ["Ascend910-{}".format(n % 8)])])])
            for n in range(count)]


def test_an_answer_over_the_configured_cap_is_refused_naming_the_cap_and_the_key(socket_dir):
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, many_pods(200), ALLOCATABLE):
        with pytest.raises(PodResourcesError) as refused:
            ask_kubelet(socket, 5.0, 4096)
        answer = ask_kubelet(socket, 5.0, KubernetesConfig().max_message_bytes)  # the default holds them
    assert re.fullmatch(r"List: the kubelet's answer of \d+ bytes is over the 4096 byte cap: raise "
                        r"kubernetes\.max_message_bytes if the node has that many pods", str(refused.value))
    assert answer.pods == 200


def test_the_cap_comes_from_the_kubernetes_section(tmp_path, socket_dir, capsys):
    socket = os.path.join(socket_dir, "kubelet.sock")
    config = write_config(tmp_path, socket, section="  max_message_bytes: 2048\n")
    with FakeKubelet(socket, many_pods(100), ALLOCATABLE):
        _, document = check_json(capsys, config)
    status = document["sources"]["kubernetes"]
    assert status["ok"] is False and "over the 2048 byte cap: raise kubernetes.max_message_bytes" in status["error"]
    assert document["sources"]["npu-smi"]["ok"] is True and len(document["chips"]) == 8


def test_an_absent_socket_says_so_and_changes_nothing_else(tmp_path, socket_dir, capsys):
    _, document = check_json(capsys, write_config(tmp_path, os.path.join(socket_dir, "missing.sock")))
    status = document["sources"]["kubernetes"]
    assert status["ok"] is False
    assert status["error"].startswith("no kubelet pod-resources socket at ")
    assert document["sources"]["npu-smi"]["ok"] is True and len(document["chips"]) == 8


def test_a_socket_nobody_serves_is_one_line_not_a_traceback(tmp_path, socket_dir, capsys):
    import socket as sockets
    path = os.path.join(socket_dir, "stale.sock")
    stale = sockets.socket(sockets.AF_UNIX)
    stale.bind(path)  # bound, never listening: what a dead kubelet leaves behind
    try:
        _, document = check_json(capsys, write_config(tmp_path, path))
    finally:
        stale.close()
    error = document["sources"]["kubernetes"]["error"]
    assert error.startswith("List: kubelet not answering on the socket (") and "\n" not in error


def test_unset_enabled_follows_the_socket_and_false_turns_it_off(tmp_path, socket_dir, capsys):
    missing = tmp_path / "auto.yaml"
    missing.write_text("kubernetes:\n  socket: {}\n".format(os.path.join(socket_dir, "none.sock")))
    _, document = check_json(capsys, str(missing))
    assert "kubernetes" not in document["sources"]
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, PODS[:1], ALLOCATABLE):
        present = tmp_path / "present.yaml"
        present.write_text("kubernetes:\n  socket: {}\n".format(socket))
        _, document = check_json(capsys, str(present))
        assert document["sources"]["kubernetes"]["ok"] is True
        off = tmp_path / "off.yaml"
        off.write_text("kubernetes:\n  enabled: false\n  socket: {}\n".format(socket))
        _, document = check_json(capsys, str(off))
        assert "kubernetes" not in document["sources"]


def test_without_grpcio_the_source_says_how_to_install_it(tmp_path, socket_dir):
    socket = os.path.join(socket_dir, "kubelet.sock")
    code = ("import sys; sys.modules['grpc'] = None\n"  # what an install without the k8s extra looks like
            "from npumon.cli.main import main; sys.exit(main(sys.argv[1:]))")
    result = subprocess.run([sys.executable, "-c", code, "check", "--simulate", "--json", "--config",
                             write_config(tmp_path, socket)], capture_output=True, text=True, timeout=60)
    document = json.loads(result.stdout)
    assert document["sources"]["kubernetes"]["error"] == "grpcio not installed (pip install 'npumon[k8s]')"
    assert document["sources"]["npu-smi"]["ok"] is True


def _series(text, name):
    from prometheus_client.parser import text_string_to_metric_families
    return sorted(tuple(sorted(s.labels.items())) for f in text_string_to_metric_families(text)
                  for s in f.samples if s.name == name)


def test_a_daemon_serves_pod_labels_native_and_compat_and_joins_processes_to_containers(tmp_path, socket_dir):
    socket = os.path.join(socket_dir, "kubelet.sock")
    state = tmp_path / "sim"
    with FakeKubelet(socket, PODS, ALLOCATABLE):
        daemon = DaemonProcess(["--simulate", "--sim-state", str(state), "--listen", "127.0.0.1:0",
                                "--config", write_config(tmp_path, socket, timeout=0.5, interval=1)])
        try:
            daemon.wait_serving(TIMEOUT)
            # the simulated host's /proc: npu 0's process runs in a container (cgroup v2, systemd driver)
            proc = state / "root" / "proc" / str(CHIP0_PID)
            proc.mkdir(parents=True, exist_ok=True)
            (proc / "cgroup").write_text(
                "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1234abcd_0000_1111_2222_"
                "333344445555.slice/cri-containerd-{}.scope\n".format(CONTAINER_ID))
            # the compat chip series come once the die-id sweep has run (they never change identity)
            text = wait_until(lambda: (lambda text: text if text and "npu_chip_info_temperature{" in text else None)(
                _text_with(daemon, "npumon_chip_process_container_info")), TIMEOUT, what="the process join")
        finally:
            daemon.close()
    native = _series(text, "npumon_chip_pod_info")
    expected = sorted(tuple(sorted({"npu": str(npu), "chip": "0", "namespace": ns, "pod": pod,
                                    "container": container}.items()))
                      for npu, holders in EXPECTED.items() for ns, pod, container in holders)
    assert native == expected
    assert sample(text, "npumon_chip_kubelet_allocatable", npu="7", chip="0") == 0
    assert sample(text, "npumon_chip_kubelet_allocatable", npu="0", chip="0") == 1
    assert sample(text, "npumon_chip_process_container_info", npu="0", chip="0", pid=str(CHIP0_PID),
                  container_id=CONTAINER_ID, namespace="default", pod="infer-a", container="server") == 1
    # npu-exporter's labels: the one container's names, "" without one, the placeholder with several
    assert sample(text, "npu_chip_info_temperature", id="0", namespace="default", pod_name="infer-a",
                  container_name="server") is not None
    assert sample(text, "npu_chip_info_temperature", id="6", namespace="", pod_name="", container_name="") \
        is not None
    multi = "not_displayed_for_multi_pod"
    for chip_id in ("3", "5"):
        assert sample(text, "npu_chip_info_temperature", id=chip_id, namespace=multi, pod_name=multi,
                      container_name=multi) is not None
    assert sample(text, "npu_chip_info_process_info", id="0", process_id=str(CHIP0_PID),
                  container_id=CONTAINER_ID, container_name="default_infer-a_server") is not None
    # the container families exist only while exactly one container holds the chip
    container_info = _series(text, "npu_container_info")
    assert sorted(dict(labels)["npuID"] for labels in container_info) == ["0", "1", "2", "4"]
    assert sample(text, "npu_container_info", npuID="0", containerID=CONTAINER_ID,
                  containerName="default_infer-a_server") == 1
    for name in ("container_npu_total_memory", "container_npu_used_memory", "container_npu_utilization"):
        assert sorted(dict(labels)["id"] for labels in _series(text, name)) == ["0", "1", "2", "4"], name
    if shutil.which("promtool"):
        result = subprocess.run(["promtool", "check", "metrics"], input=text.encode(), capture_output=True,
                                timeout=30)
        problems = {line for line in result.stderr.decode().splitlines() if "camelCase" not in line}
        assert problems == set(), problems


def _text_with(daemon, name):
    text = daemon.get("/metrics").text
    return text if name + "{" in text else None


def test_a_daemon_with_a_hung_kubelet_keeps_serving_everything_else(tmp_path, socket_dir):
    socket = os.path.join(socket_dir, "kubelet.sock")
    with FakeKubelet(socket, PODS, ALLOCATABLE, hang=True):
        daemon = DaemonProcess(["--simulate", "--sim-state", str(tmp_path / "sim"), "--listen", "127.0.0.1:0",
                                "--config", write_config(tmp_path, socket, timeout=0.5, interval=1)])
        try:
            daemon.wait_serving(TIMEOUT)
            wait_until(lambda: daemon.get("/status").json()["sources"].get("kubernetes", {}).get("error")
                       == "List: no answer within 0.5s" and "npu_chip_info_temperature{" in daemon.get("/metrics").text,
                       TIMEOUT, what="kubernetes down after its deadline, the rest up")
            started = time.monotonic()
            text = daemon.get("/metrics").text
            assert time.monotonic() - started < 2  # the scrape never waits for the kubelet
            status = daemon.get("/status").json()
        finally:
            daemon.close()
    assert sample(text, "npumon_source_up", source="npu-smi") == 1
    assert sample(text, "npumon_source_up", source="kubernetes") == 0
    assert "npumon_chip_pod_info" not in text
    assert status["sources"]["kubernetes"]["error"] == "List: no answer within 0.5s"
