"""The simulated Kubernetes node of `--simulate` (npumon/sim/cluster.py): the walkthrough of docs/handoff.md ("try
it without a cluster") on the simulator's clock, through the API-server stand-in over real HTTP, and the fake
kubelet answering the real pod-resources proto with the scenario's pods."""

import argparse
import os

import pytest

from clocked_host import ClockedHost
from npumon.cli.common import open_target
from npumon.rules.verdict import decide
from npumon.rules.verdict_tracker import VerdictTracker
from npumon.services.context import ServiceContext
from npumon.services.handoff.service import KubernetesHandoffService
from npumon.settings import parse_config
from npumon.sim import k8sview, prepare_simulation, set_scenario
from npumon.sim.apiserver import node_object, structural_problem
from npumon.sim.cluster import SimulatedCluster, default_pods, simulated_cluster, wanted
from npumon.sim.products import get_product
from npumon.sim.scenario import ScenarioError, load_scenario
from npumon.sim.target import simulation_config
from npumon.sources.k8s.config import DEFAULT_SOCKET
from npumon.sources.runner import CommandRunner

grpc = pytest.importorskip("grpc")
from npumon.sources.k8s.client import ask_kubelet  # noqa: E402 - needs grpc

SINK_ON = """
handoff:
  healthy_seconds: 120
  kubernetes:
    enabled: true
"""
FAULT_DEADLINE = 60.0  # issue 32: the condition True within a minute of the fault


class Walk:
    """A simulated host on a fake clock with its simulated cluster, judged and handed off as the daemon does:
    poll, rules, guarded verdict, the sink's offer and its job (run at every step: it sends only what changed)."""

    def __init__(self, tmp_path, scenario, config_text=SINK_ON):
        self.state_dir = str(tmp_path / "sim")
        self.sim = prepare_simulation(self.state_dir, scenario, time_scale=1.0, latency_scale=0)
        base = parse_config(config_text)
        self.cluster = simulated_cluster(self.sim, self.state_dir, base, "sim-host")
        self.config = simulation_config(base, self.state_dir, self.cluster.addresses)
        self.host = ClockedHost(self.config, self.sim)
        self.tracker = VerdictTracker(self.config.handoff, self.host.engine.for_seconds(), self.host.clock)
        context = ServiceContext.open(self.config, self.host.engine, self.host.collection.target,
                                      CommandRunner(["npu-smi"], 5.0), clock=self.host.clock)
        self.context = context
        self.service = KubernetesHandoffService(self.config.handoff.kubernetes, context, {})
        [(_, _, self.sync)] = self.service.jobs()

    def step(self):
        findings = self.host.step()
        chips = [chip.subject for chip in self.host.snapshot.chips]
        self.service.on_verdict(self.tracker.update(decide(findings, chips)))
        self.sync()

    def condition(self, kind="NpuOutOfService"):
        return self.cluster.api.condition(self.cluster.addresses.node, kind)

    def until(self, predicate, limit):
        """Step until `predicate()` holds; the clock time it took (fails past `limit` seconds)."""
        began = self.host.clock()
        while not predicate():
            assert self.host.clock() - began <= limit, "not within {} s".format(limit)
            self.step()
        return self.host.clock() - began

    def close(self):
        self.host.close()
        if self.context.events is not None:
            self.context.events.close()
        self.cluster.close()
        assert self.cluster.api.invalid == []  # every body fitted the schema


def test_hbm_ecc_fault_sets_the_condition_within_a_minute_then_recovers_after_the_healthy_time(tmp_path, capsys):
    walk = Walk(tmp_path, "healthy")
    try:
        walk.host.run_for(30)
        walk.step()
        assert walk.condition()["status"] == "False" and walk.cluster.api.events == []
        set_scenario(walk.state_dir, "hbm-ecc-fault")
        took = walk.until(lambda: walk.condition()["status"] == "True", FAULT_DEADLINE)
        assert took <= FAULT_DEADLINE
        condition = walk.condition()
        assert condition["reason"] == "ChipOutOfService" and "npu3/chip0" in condition["message"]
        [event] = out_of_service_events(walk)
        assert event["type"] == "Warning" and "npu3/chip0" in event["message"]
        # the pod source read the fake kubelet: the faulty chip's pod, for ?pod= and the npu-exporter labels
        [chip] = [chip for chip in walk.host.snapshot.chips if chip.subject == "npu3/chip0"]
        assert [(pod["namespace"], pod["pod"]) for pod in chip.extra["pods"]] == [("default", "llm-serving-0")]

        set_scenario(walk.state_dir, "healthy")
        back = walk.until(lambda: walk.condition()["status"] == "False", 600)
        assert back >= walk.config.handoff.healthy_seconds  # not before the healthy time
        events = [(e["type"], e["reason"]) for e in out_of_service_events(walk)]
        assert events[-1] == ("Normal", "NoNpuOutOfService")
        assert set(events[:-1]) == {("Warning", "ChipOutOfService")}
        # what `python -m npumon.sim.k8sview DIR` shows of the stand-in
        assert k8sview.main([walk.state_dir]) == 0
        shown = capsys.readouterr().out
        assert "node sim-host" in shown and "NpuOutOfService  False" in shown
        assert "Warning ChipOutOfService" in shown and "Normal  NoNpuOutOfService" in shown
    finally:
        walk.close()


def out_of_service_events(walk):
    """The Events of NpuOutOfService's transitions (the scenario's kernel-log line also makes the host degraded)."""
    return [e for e in walk.cluster.api.events if e["reason"].endswith("OutOfService")]


def test_k8sview_without_a_simulated_cluster_is_one_line(tmp_path, capsys):
    assert k8sview.main([str(tmp_path)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "no simulated Kubernetes node" in error


def test_healthy_sets_no_condition_true_and_posts_no_event(tmp_path):
    walk = Walk(tmp_path, "healthy")
    try:
        walk.host.run_for(120)
        walk.step()
        held = walk.cluster.api.snapshot()["nodes"][0]["conditions"]
        assert {c["type"]: c["status"] for c in held} == {"Ready": "True", "NpuOutOfService": "False",
                                                         "NpuDegraded": "False"}
        assert walk.cluster.api.events == []
    finally:
        walk.close()


def test_the_fake_kubelet_answers_the_real_proto_with_the_default_pods(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "hbm-ecc-fault", time_scale=0, latency_scale=0)
    with simulated_cluster(sim, str(tmp_path / "sim"), parse_config(SINK_ON), "sim-host") as cluster:
        answer = ask_kubelet(cluster.addresses.socket, 5.0, 4 * 1024 * 1024)
    assert answer.pods == 2
    assert [(c.namespace, c.pod, c.container, c.devices) for c in answer.containers] == [
        ("default", "llm-serving-0", "server", (("huawei.com/Ascend910", ("Ascend910-0", "Ascend910-1",
                                                                          "Ascend910-2", "Ascend910-3")),)),
        ("default", "llm-serving-1", "server", (("huawei.com/Ascend910", ("Ascend910-4", "Ascend910-5",
                                                                          "Ascend910-6", "Ascend910-7")),))]
    assert answer.allocatable == (("huawei.com/Ascend910", tuple("Ascend910-{}".format(n) for n in range(8))),)


def test_a_scenarios_pods_are_what_the_kubelet_lists_and_the_950_names_npu_ids(tmp_path):
    path = tmp_path / "pods.yaml"
    path.write_text("product: atlas-350\npods:\n  - {namespace: team-a, name: train-0, devices: [1]}\n")
    sim = prepare_simulation(str(tmp_path / "sim"), str(path), time_scale=0, latency_scale=0)
    with simulated_cluster(sim, str(tmp_path / "sim"), parse_config(SINK_ON), "sim-host") as cluster:
        answer = ask_kubelet(cluster.addresses.socket, 5.0, 4 * 1024 * 1024)
    slot = get_product("atlas-350").slots()[1]
    [container] = answer.containers
    assert (container.namespace, container.pod, container.container) == ("team-a", "train-0", "train-0")
    assert container.devices == (("huawei.com/npu", ("npu-{}".format(slot.npu),)),)


@pytest.mark.parametrize("pods, words", [
    ("[{name: Bad_Name, devices: [0]}]", "pods[0].name"),
    ("[{name: a}]", "pods[0].devices"),
    ("[{name: a, devices: [0], gpu: 1}]", "pods[0].gpu"),
    ("{name: a}", "pods: expected a list"),
])
def test_a_bad_pods_entry_is_one_line_naming_the_key(tmp_path, pods, words):
    path = tmp_path / "bad.yaml"
    path.write_text("product: atlas-800i-a2\npods: {}\n".format(pods))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_default_pods_split_the_chips_in_two():
    assert [pod["devices"] for pod in default_pods(get_product("atlas-800i-a2"))] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(default_pods(get_product("atlas-200i-a2"))) == 1  # one chip: one pod


def test_simulation_config_points_only_unset_settings_at_the_stand_ins(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0, latency_scale=0)
    with simulated_cluster(sim, str(tmp_path / "sim"), parse_config(SINK_ON), "sim-host") as cluster:
        config = simulation_config(parse_config(SINK_ON), str(tmp_path / "sim"), cluster.addresses)
        assert config.handoff.kubernetes.kubeconfig == cluster.addresses.kubeconfig
        assert config.handoff.kubernetes.node_name == "sim-host" and cluster.api.nodes.keys() == {"sim-host"}
        assert config.kubernetes.socket == cluster.addresses.socket != DEFAULT_SOCKET
        assert os.stat(cluster.addresses.kubeconfig).st_mode & 0o077 == 0  # it holds the token
        own = parse_config(SINK_ON + "    kubeconfig: /etc/k.yaml\n    node_name: node-7\n"
                                     "kubernetes:\n  socket: /run/k.sock\n")
        kept = simulation_config(own, str(tmp_path / "sim"), cluster.addresses)
        assert (kept.handoff.kubernetes.kubeconfig, kept.handoff.kubernetes.node_name, kept.kubernetes.socket) == (
            "/etc/k.yaml", "node-7", "/run/k.sock")


def test_only_a_config_with_kubernetes_on_starts_the_cluster(tmp_path):
    assert not wanted(parse_config("{}\n"))
    assert wanted(parse_config(SINK_ON)) and wanted(parse_config("kubernetes: {enabled: true}\n"))
    args = argparse.Namespace(simulate="healthy", sim_product=None, sim_state=str(tmp_path / "sim"))
    with open_target(args, parse_config("{}\n")) as host:
        assert host.config_for(parse_config("{}\n")).kubernetes.socket == DEFAULT_SOCKET
    with open_target(args, parse_config(SINK_ON)) as host:
        config = host.config_for(parse_config(SINK_ON))
        assert os.path.exists(config.kubernetes.socket) and os.path.exists(config.handoff.kubernetes.kubeconfig)
    assert not os.path.exists(config.kubernetes.socket)  # the kubelet is gone with the command


def test_a_long_state_directory_puts_the_socket_in_a_short_private_one(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    sim = prepare_simulation(str(deep), "healthy", time_scale=0, latency_scale=0)
    with SimulatedCluster(str(deep), "sim-host", get_product(sim.product), None) as cluster:
        assert len(cluster.addresses.socket) <= 107 and ask_kubelet(cluster.addresses.socket, 5.0, 1 << 20).pods == 2
    assert not os.path.exists(cluster.addresses.socket)


def test_the_structural_check_refuses_what_the_schema_refuses():
    node = node_object("n")
    assert structural_problem(node) is None
    node["status"]["conditions"].append({"type": "NpuOutOfService", "status": "Yes"})
    assert "status" in structural_problem(node)
    node["status"]["conditions"][-1] = {"type": "NpuOutOfService", "status": "True", "colour": "red"}
    assert "colour" in structural_problem(node)
    event = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
             "involvedObject": {"kind": "Node", "name": "n"}, "type": "Warning", "reason": "R", "message": "m",
             "firstTimestamp": "2027-01-01T00:00:00Z", "count": 1}
    assert structural_problem(event) is None
    assert "type" in structural_problem(dict(event, type="Error"))
    assert "RFC 3339" in structural_problem(dict(event, firstTimestamp="yesterday"))
    assert "metadata.name" in structural_problem(dict(event, metadata={"namespace": "default"}))


def test_without_kubernetes_validate_the_stand_in_takes_the_sinks_bodies_by_the_structural_check(monkeypatch):
    from npumon.rules.verdict import DEGRADED, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason
    from npumon.services.handoff.config import KubernetesHandoffConfig
    from npumon.services.handoff.kubeapi import Endpoint, request
    from npumon.services.handoff.kubesink import KubernetesSink
    from npumon.sim import apiserver

    monkeypatch.setattr(apiserver, "kubernetes_validate", None)
    stand_in = apiserver.ApiServer(("node-a",))
    try:
        assert "structural" in stand_in.checked_against
        endpoint = Endpoint(stand_in.url, token=apiserver.TOKEN)
        sink = KubernetesSink(KubernetesHandoffConfig(enabled=True), "node-a",
                              lambda method, path, body, kind: request(endpoint, method, path, 10.0, body, kind),
                              lambda: 1_800_000_000.0, lambda *args: None)
        reason = Reason("hbm-ecc-uncorrectable", "critical", "HBM uncorrectable ECC errors: 3", "isolate_and_reset")
        sink.offer(HostVerdict(DEGRADED, (), (ChipVerdict("npu3/chip0", OUT_OF_SERVICE, (reason,)),)))
        sink.sync()
        assert stand_in.condition("node-a", "NpuOutOfService")["status"] == "True"
        assert len(stand_in.events) == 1 and stand_in.invalid == []
    finally:
        stand_in.close()


def test_the_stand_in_keeps_a_bounded_number_of_configmaps(monkeypatch):
    from npumon.services.handoff.kubeapi import ApiError, Endpoint, request
    from npumon.sim import apiserver

    monkeypatch.setattr(apiserver, "MAX_EVENTS", 3)
    stand_in = apiserver.ApiServer(("node-a",))
    try:
        endpoint = Endpoint(stand_in.url, token=apiserver.TOKEN)

        def create(name):
            body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
                    "data": {"k": "v"}}
            return request(endpoint, "POST", "/api/v1/namespaces/default/configmaps", 10.0, body)

        for index in range(3):
            create("cm-{}".format(index))
        with pytest.raises(ApiError) as refused:
            create("cm-3")
        assert refused.value.status == 403 and len(stand_in.configmaps) == 3
    finally:
        stand_in.close()


def test_check_simulate_with_kubernetes_on_names_the_pods_of_the_chips_and_of_a_job_fault(tmp_path, capsys):
    import json

    from npumon.cli.main import main

    config = tmp_path / "npumon.yaml"
    config.write_text(SINK_ON)
    main(["check", "--simulate=job-software-fault", "--config", str(config), "--json"])
    report = json.loads(capsys.readouterr().out)
    pods = {chip["npu"]: [pod["pod"] for pod in chip["pods"]] for chip in report["chips"]}
    assert pods[0] == ["llm-serving-0"] and pods[7] == ["llm-serving-1"]
    [job] = [finding for finding in report["findings"] if finding["rule"] == "job-fault"]
    assert "pod default/llm-serving-0" in job["summary"]


def test_the_stand_ins_schema_check_refuses_what_the_schema_refuses_on_every_call():
    from npumon.sim.apiserver import kubernetes_validate, node_object, validate

    if kubernetes_validate is None:
        pytest.skip("kubernetes-validate is not installed (.ci/run installs it)")
    node = node_object("node-a")
    unknown_field = dict(node, spec={"taints": [{"key": "k", "effect": "NoSchedule", "colour": "red"}]})
    wrong_type = dict(node, metadata=dict(node["metadata"], name=7))
    for _ in range(2):  # the schema files are parsed once: the second round is judged from what was kept
        assert validate(node) is None
        assert "colour" in validate(unknown_field)
        assert validate(wrong_type) is not None
