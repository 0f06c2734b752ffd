"""The MindCluster sink against stand-ins built from MindCluster's documented API: the ConfigMap route through
the API-server stand-in (objects checked against the Kubernetes schema) into a ClusterD stand-in that checks
every message field by field and keeps the faults per node as ClusterD does, and the gRPC route against a real
gRPC server on a unix socket. Clocks are fake: spacing and backoff are checked, never slept."""

import json
import threading
import time

import pytest

from npumon.sim.apiserver import TOKEN, ApiServer
from clusterd_stub import LEVEL_CODES, ClusterD, ClusterdGrpc, message_problems
from simulated_pass import judged_pass
from npumon.model import Finding
from npumon.rules.verdict import DEGRADED, HEALTHY, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason, decide
from npumon.services.handoff.config import MindClusterHandoffConfig
from npumon.services.handoff.kubeapi import Endpoint, request
from npumon.services.handoff.mcroute import ConfigMapRoute, GrpcRoute
from npumon.services.handoff.mcsink import MindClusterSink
from npumon.services.handoff.metrics import HandoffMetrics
from npumon.services.handoff.publicfault import MAX_FAULTS, changes, desired_faults, first_batch
from npumon.sources.k8s.devices import chip_number

NODE = "node-a"
NAMESPACE = "cluster-system"
HBM = Reason("driver-fault-repeating", "critical", "HBM multi-bit ECC 80E18005 repeating", "inspect_hardware",
             "ManuallySeparateNPU", OUT_OF_SERVICE, 1_799_999_900.0)
PHY = {"npu{}/chip0".format(n): n for n in range(8)}


class Clock:
    def __init__(self, now=1_800_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def hbm_fault(subject="npu3/chip0", since=1_799_999_950.0):
    chips = tuple(ChipVerdict(s, OUT_OF_SERVICE, (HBM,), since) if s == subject else ChipVerdict(s, HEALTHY)
                  for s in sorted(PHY))
    return HostVerdict(DEGRADED, (), chips, since)


def healthy():
    return HostVerdict(HEALTHY, (), tuple(ChipVerdict(s, HEALTHY) for s in sorted(PHY)))


class Harness:
    """The sink on the ConfigMap route, the API server stand-in feeding every ConfigMap write to ClusterD."""

    def __init__(self, config=None, dry_run=False, burst=100):
        self.clock = Clock()
        self.recorded = []
        self.wakes = []
        self.server = ApiServer((NODE,))
        self.clusterd = ClusterD(self.clock, burst)
        self.server.on_configmap = self._informer
        endpoint = Endpoint(self.server.url, token=TOKEN)

        def send(method, path, body, content_type):
            return request(endpoint, method, path, 10.0, body, content_type)

        self.config = config or MindClusterHandoffConfig(enabled=True, dry_run=dry_run)
        self.route = ConfigMapRoute(NAMESPACE, NODE, None if dry_run else send)
        self.sink = MindClusterSink(self.config, NODE, self.route, dry_run, self.clock,
                                    lambda *args: self.recorded.append(args), self.wakes.append)

    def _informer(self, configmap):
        if configmap["metadata"].get("labels", {}).get("mc-consumer-publicfault") == "true":
            self.clusterd.take(json.loads(configmap["data"]["PublicFault"]))

    def step(self, verdict, seconds=10.0):
        self.clock.now += seconds
        self.sink.offer(verdict, PHY)
        self.sink.sync()

    def configmap(self):
        return self.server.configmaps.get((NAMESPACE, "npumon-fault-" + NODE))

    def close(self):
        self.server.close()
        assert self.server.invalid == [] and self.clusterd.invalid == []


@pytest.fixture
def harness():
    made = Harness()
    yield made
    made.close()


def test_the_configmap_holds_one_documented_message_field_by_field(harness):
    harness.step(hbm_fault())
    configmap = harness.configmap()
    assert configmap["metadata"]["labels"]["mc-consumer-publicfault"] == "true"
    assert set(configmap["data"]) == {"PublicFault"}
    body = json.loads(configmap["data"]["PublicFault"])
    assert message_problems(body) == []
    assert list(body) == ["id", "timestamp", "version", "resource", "faults"]
    assert body["version"] == "1.0" and body["resource"] == "npumon"
    assert body["timestamp"] == int(harness.clock.now * 1000) and len(str(body["timestamp"])) == 13
    [fault] = body["faults"]
    assert sorted(fault) == sorted(["faultId", "faultType", "faultCode", "faultTime", "assertion", "faultLocation",
                                    "influence", "description"])
    assert fault["faultType"] == "NPU" and fault["assertion"] == "occur"
    assert LEVEL_CODES[fault["faultCode"]] == "SeparateNPU" and fault["faultCode"] == "020016001"
    assert fault["faultTime"] == 1_799_999_950_000  # when the chip went out of service, in ms
    assert fault["influence"] == [{"nodeName": NODE, "deviceIds": [3]}]  # the physical id, not npu-smi's
    assert fault["faultLocation"] == {"npumonSubject": "npu3/chip0", "npumonRule": "driver-fault-repeating",
                                      "repairAction": "inspect_hardware"}
    assert "npu3/chip0" in fault["description"] and "80E18005" in fault["description"]
    assert fault["faultId"] == "npumon.node-a.phy3.separate.1799999950"
    assert [f["faultId"] for f in harness.clusterd.open_faults(NODE)] == [fault["faultId"]]
    assert harness.sink.state().in_sync


def test_occur_then_recover_clears_the_fault_at_clusterd_and_the_configmap_stays(harness):
    harness.step(hbm_fault())
    harness.step(hbm_fault())  # unchanged: nothing sent
    assert len(harness.clusterd.messages) == 1
    harness.step(healthy())
    recover = harness.clusterd.messages[-1]["faults"]
    assert [(f["assertion"], f["faultId"], f["faultTime"]) for f in recover] == [
        ("recover", "npumon.node-a.phy3.separate.1799999950", 1_799_999_950_000)]  # the occur's faultTime
    assert harness.clusterd.open_faults(NODE) == []
    assert harness.configmap() is not None  # recovery is a message, never a deletion
    assert [r[0] for r in harness.recorded] == ["handoff_action", "handoff_action"]
    assert "recover SeparateNPU on devices [3]" in harness.recorded[-1][2]


def test_a_new_incident_on_the_same_chip_gets_a_new_id(harness):
    harness.step(hbm_fault(since=1_799_999_950.0))
    harness.step(healthy())
    harness.step(hbm_fault(since=1_800_000_500.0))
    [open_fault] = harness.clusterd.open_faults(NODE)
    assert open_fault["faultId"].endswith(".1800000500")


def simulated_verdict(tmp_path, scenario):
    """The verdict of one pass over a simulator scenario, and its chips' physical ids (as the service takes them)."""
    snapshot, findings = judged_pass(tmp_path / scenario, scenario)
    phy = {chip.subject: chip_number(chip, position) for position, chip in enumerate(snapshot.chips)}
    return decide(findings, [chip.subject for chip in snapshot.chips]), phy


def test_the_simulators_hbm_ecc_fault_opens_separate_npu_on_its_chip_and_healthy_recovers_it(harness, tmp_path):
    verdict, phy = simulated_verdict(tmp_path, "hbm-ecc-fault")
    harness.clock.now += 10
    harness.sink.offer(verdict, phy)
    harness.sink.sync()
    [fault] = harness.clusterd.open_faults(NODE)
    assert LEVEL_CODES[fault["faultCode"]] == "SeparateNPU"
    assert fault["influence"] == [{"nodeName": NODE, "deviceIds": [phy["npu3/chip0"]]}]
    assert fault["faultLocation"]["repairAction"] == "inspect_hardware"
    verdict, phy = simulated_verdict(tmp_path, "healthy")
    harness.clock.now += 10
    harness.sink.offer(verdict, phy)
    harness.sink.sync()
    assert harness.clusterd.open_faults(NODE) == []


def test_the_simulators_job_software_fault_sends_no_separate_npu(harness, tmp_path):
    verdict, phy = simulated_verdict(tmp_path, "job-software-fault")
    harness.clock.now += 10
    harness.sink.offer(verdict, phy)
    harness.sink.sync()
    sent = [f for m in harness.clusterd.messages for f in m["faults"]]
    assert [LEVEL_CODES[f["faultCode"]] for f in sent] == ["NotHandleFault"]
    assert sent[0]["influence"][0]["deviceIds"] == sorted(phy.values())  # the host's: every chip named


def test_levels_follow_the_verdicts():
    pre = Reason("ecc-pre", "critical", "pre-isolate", "replace_hardware", "PreSeparateNPU", OUT_OF_SERVICE)
    warm = Reason("temperature-high", "warning", "NPU at 92 C", "none", None, DEGRADED)
    verdict = HostVerdict(DEGRADED, (), (ChipVerdict("npu0/chip0", OUT_OF_SERVICE, (pre,), 1.8e9),
                                         ChipVerdict("npu1/chip0", DEGRADED, (warm,), 1.8e9),
                                         ChipVerdict("npu2/chip0", OUT_OF_SERVICE, (HBM,), 1.8e9)))
    wanted, unnamed = desired_faults(verdict, PHY, NODE, MindClusterHandoffConfig().fault_codes)
    assert unnamed == [] and sorted((f.level, dict(f.entry)["influence"][0]["deviceIds"][0])
                                    for f in wanted.values()) == [
        ("PreSeparateNPU", 0), ("SeparateNPU", 2), ("SubHealthFault", 1)]  # the host: chips only, no fault


def test_a_chip_the_guard_rails_hold_out_keeps_its_fault_and_level(harness):
    """PreSeparateNPU, then the finding clears but healthy_seconds holds the chip out: the open fault stays as
    it is (no escalation to SeparateNPU, no new incident); it is recovered once the chip is back."""
    pre = Reason("ecc-pre", "critical", "pre-isolate", "replace_hardware", "PreSeparateNPU", OUT_OF_SERVICE)
    harness.step(HostVerdict(DEGRADED, (), (ChipVerdict("npu2/chip0", OUT_OF_SERVICE, (pre,), 1.8e9),)))
    held = HostVerdict(DEGRADED, (), (ChipVerdict("npu2/chip0", OUT_OF_SERVICE, (), 1.8e9,
                                                  "back in service after 590 s more"),))
    harness.step(held)
    harness.step(held)
    assert len(harness.clusterd.messages) == 1
    [fault] = harness.clusterd.open_faults(NODE)
    assert LEVEL_CODES[fault["faultCode"]] == "PreSeparateNPU"
    harness.step(HostVerdict(HEALTHY, (), (ChipVerdict("npu2/chip0", HEALTHY),)))
    assert harness.clusterd.open_faults(NODE) == []


def test_a_host_out_of_service_names_every_chip_and_a_chip_without_physical_id_is_reported():
    host = Reason("chips-missing", "critical", "2 chips missing", "reboot_host", None, OUT_OF_SERVICE)
    verdict = HostVerdict(OUT_OF_SERVICE, (host,), (ChipVerdict("npu9/chip0", DEGRADED, (HBM,)),), 1.8e9)
    wanted, unnamed = desired_faults(verdict, PHY, NODE, MindClusterHandoffConfig().fault_codes)
    [fault] = wanted.values()
    assert fault.level == "SeparateNPU" and dict(fault.entry)["influence"][0]["deviceIds"] == list(range(8))
    assert unnamed == ["npu9/chip0"]


def test_the_job_wide_fault_sends_no_separate_npu(harness):
    """job-software-fault: the same fault on several chips of one job is the job's; decide() gives it to the
    host as degraded and the sink sends NotHandleFault: shown in ClusterD, no chip isolated."""
    job = Finding("job-fault", "critical", "host", "fault 80CB8009 on chips 0-3 of job train-1 within 30 s", "",
                  1_799_999_000.0, repair_action="reset_npu", level="RestartNPU")
    verdict = decide([job], sorted(PHY))
    harness.step(verdict)
    [fault] = harness.clusterd.open_faults(NODE)
    assert LEVEL_CODES[fault["faultCode"]] == "NotHandleFault"
    assert all(LEVEL_CODES[f["faultCode"]] != "SeparateNPU" for m in harness.clusterd.messages for f in m["faults"])


def test_two_changes_within_a_second_go_out_a_second_apart(harness):
    harness.step(hbm_fault("npu3/chip0"))
    harness.step(hbm_fault("npu5/chip0"), seconds=0.3)  # ClusterD refills 1 request a second
    assert len(harness.clusterd.messages) == 1 and harness.wakes[-1] == pytest.approx(0.7)
    harness.clock.now += 0.7
    harness.sink.sync()
    assert [f["assertion"] for f in harness.clusterd.messages[-1]["faults"]] == ["recover", "occur"]
    [open_fault] = harness.clusterd.open_faults(NODE)
    assert "phy5" in open_fault["faultId"]


@pytest.mark.parametrize("status, kind", [(0, "unreachable"), (403, "unauthorized"), (409, "conflict"),
                                          (429, "throttled"), (500, "server")])
def test_a_failing_api_server_is_retried_with_backoff_and_loses_nothing(harness, status, kind):
    if status == 0:
        harness.server.close()
        harness.server = ApiServer((NODE,))  # for close(): the sink's server is gone
    else:
        harness.server.fail_next(status, 3)
    harness.step(hbm_fault())
    assert harness.sink.state().problem.startswith(kind) and harness.wakes[-1] == 1.0
    assert harness.recorded[-1][0] == "handoff_problem"
    if status == 0:
        return
    for delay in (1.0, 2.0):
        harness.clock.now += delay - 0.01
        harness.sink.sync()  # not yet
        harness.clock.now += 0.01
        harness.sink.sync()
    harness.clock.now += 4.0
    harness.sink.sync()
    assert harness.sink.state().in_sync and len(harness.clusterd.open_faults(NODE)) == 1
    assert harness.sink.state().failures[kind] == 3


def test_a_rate_limited_grpc_sender_backs_off_and_loses_nothing(tmp_path):
    clock = Clock()
    clusterd = ClusterD(clock, burst=1)  # the bucket empties after one message
    server = ClusterdGrpc(clusterd, str(tmp_path / "clusterd.sock"))
    recorded, wakes = [], []
    config = MindClusterHandoffConfig(enabled=True, route="grpc", grpc_target=server.target)
    sink = MindClusterSink(config, NODE, GrpcRoute(server.target, 5.0), False, clock,
                           lambda *args: recorded.append(args), wakes.append)
    try:
        sink.offer(hbm_fault("npu3/chip0"), PHY)
        sink.sync()
        clock.now += 1.0  # another message under npumon's name spends the refill
        assert clusterd.take({"resource": "npumon"})[0] == 409
        rival = list(clusterd.invalid)
        clock.now += 0.2
        sink.offer(hbm_fault("npu5/chip0"), PHY)
        sink.sync()
        assert clusterd.refused == 1 and sink.state().failures["throttled"] == 1
        assert sink.state().pending_events == 2  # the recover of phy3 and the occur of phy5 wait
        for _ in range(3):
            clock.now += wakes[-1]
            sink.sync()
        assert sink.state().in_sync
        [open_fault] = clusterd.open_faults(NODE)
        assert "phy5" in open_fault["faultId"]
        assert server.calls == 3
    finally:
        server.close()
    assert clusterd.invalid == rival  # the sink's messages all passed


def test_the_grpc_route_against_a_real_grpc_server(tmp_path):
    clock = Clock()
    clusterd = ClusterD(clock)
    server = ClusterdGrpc(clusterd, str(tmp_path / "clusterd.sock"))
    recorded = []
    config = MindClusterHandoffConfig(enabled=True, route="grpc", grpc_target=server.target)
    sink = MindClusterSink(config, NODE, GrpcRoute(server.target, 5.0), False, clock,
                           lambda *args: recorded.append(args))
    try:
        sink.offer(hbm_fault(), PHY)
        sink.sync()
        [fault] = clusterd.open_faults(NODE)
        assert fault["influence"] == [{"nodeName": NODE, "deviceIds": [3]}] and fault["faultTime"] == 1_799_999_950_000
        clock.now += 30
        sink.offer(healthy(), PHY)
        sink.sync()
        assert clusterd.open_faults(NODE) == [] and clusterd.invalid == []
        assert sink.state().requests[("send_public_fault", "ok")] == 2
    finally:
        server.close()


def test_a_fault_that_ended_while_npumon_was_down_is_recovered_over_grpc_from_the_state_file(tmp_path):
    clock = Clock()
    clusterd = ClusterD(clock)
    server = ClusterdGrpc(clusterd, str(tmp_path / "clusterd.sock"))
    config = MindClusterHandoffConfig(enabled=True, route="grpc", grpc_target=server.target)
    held_file = str(tmp_path / "state" / "mindcluster-faults.json")
    try:
        first = MindClusterSink(config, NODE, GrpcRoute(server.target, 5.0), False, clock, lambda *args: None,
                                held_file=held_file)
        first.offer(hbm_fault(), PHY)
        first.sync()
        assert len(clusterd.open_faults(NODE)) == 1
        clock.now += 600  # npumon restarts; the chip recovered meanwhile
        second = MindClusterSink(config, NODE, GrpcRoute(server.target, 5.0), False, clock, lambda *args: None,
                                 held_file=held_file)
        assert second.held() == first.held()
        second.offer(healthy(), PHY)
        second.sync()
        assert clusterd.open_faults(NODE) == [] and second.held() == {}
        third = MindClusterSink(config, NODE, GrpcRoute(server.target, 5.0), False, clock, lambda *args: None,
                                held_file=held_file)
        assert third.held() == {}
    finally:
        server.close()
    assert clusterd.invalid == []


def test_a_message_clusterd_refuses_is_rejected_and_retried(tmp_path):
    clock = Clock()
    clusterd = ClusterD(clock)
    server = ClusterdGrpc(clusterd, str(tmp_path / "clusterd.sock"))
    config = MindClusterHandoffConfig(enabled=True, route="grpc", resource="not-listed")
    recorded = []
    sink = MindClusterSink(config, NODE, GrpcRoute(server.target, 5.0), False, clock,
                           lambda *args: recorded.append(args))
    try:
        sink.offer(hbm_fault(), PHY)
        sink.sync()
        state = sink.state()
        assert state.failures["rejected"] == 1 and "409" in state.problem and not state.in_sync
        assert "publicCustomization.json" in recorded[-1][2]
    finally:
        server.close()


def test_grpc_unreachable_is_a_failure_not_a_crash(tmp_path):
    clock = Clock()
    target = "unix:" + str(tmp_path / "nobody.sock")
    sink = MindClusterSink(MindClusterHandoffConfig(enabled=True, route="grpc", timeout_seconds=1.0), NODE,
                           GrpcRoute(target, 1.0), False, clock, lambda *args: None)
    sink.offer(hbm_fault(), PHY)
    sink.sync()
    assert sink.state().failures["unreachable"] == 1


def test_a_dry_run_sends_nothing_and_records_the_exact_request():
    harness = Harness(dry_run=True)
    try:
        harness.step(hbm_fault())
        harness.step(healthy())
        assert harness.server.requests == [] and harness.clusterd.messages == []
        occur, recover = [r for r in harness.recorded if r[0] == "handoff_action"]
        request_sent = occur[4]["request"]
        assert occur[4]["dry_run"] and request_sent["method"] == "PUT"
        assert request_sent["path"] == "/api/v1/namespaces/cluster-system/configmaps/npumon-fault-node-a"
        body = json.loads(request_sent["body"]["data"]["PublicFault"])
        assert message_problems(body) == [] and body["faults"][0]["assertion"] == "occur"
        assert json.loads(recover[4]["request"]["body"]["data"]["PublicFault"])["faults"][0]["assertion"] == "recover"
        assert harness.sink.state().requests[("write_configmap", "dry_run")] == 2
    finally:
        harness.close()


def test_a_fault_left_open_by_an_earlier_run_is_recovered_from_the_configmap(harness):
    harness.step(hbm_fault())
    # npumon restarts: a new sink, nothing in memory; the chip recovered while it was down
    restarted = MindClusterSink(harness.config, NODE, ConfigMapRoute(NAMESPACE, NODE, harness.route._send), False,
                                harness.clock, lambda *args: None)
    harness.clock.now += 60
    restarted.offer(healthy(), PHY)
    restarted.sync()
    assert harness.clusterd.open_faults(NODE) == [] and restarted.state().in_sync
    assert restarted.state().requests[("read_configmap", "ok")] == 1


def test_a_configmap_deleted_meanwhile_is_created_again(harness):
    harness.step(hbm_fault())
    del harness.server.configmaps[(NAMESPACE, "npumon-fault-" + NODE)]
    harness.step(healthy())
    assert harness.configmap() is not None and harness.clusterd.open_faults(NODE) == []


def test_a_message_is_bounded_in_faults_and_bytes():
    codes = MindClusterHandoffConfig().fault_codes
    many = {"npu{}/chip{}".format(n, c): (n * 2 + c) % 32 for n in range(16) for c in range(2)}
    chips = tuple(ChipVerdict(s, OUT_OF_SERVICE, (HBM,), 1.8e9) for s in many)
    wanted, _ = desired_faults(HostVerdict(DEGRADED, (), chips, 1.8e9), many, "n" * 253, codes)
    held = {"old-{}".format(i): dict(next(iter(wanted.values())).as_json("occur"), faultId="old-{}".format(i))
            for i in range(90)}
    faults = changes(wanted, held)
    batch = first_batch(faults)
    assert len(faults) == 122 and len(batch) == MAX_FAULTS
    assert [f["assertion"] for f in batch[:90]] == ["recover"] * 90  # what ended goes first
    assert all(len(f["faultId"]) <= 128 and len(f["description"]) <= 512 for f in faults)


def test_metrics_carry_the_sink_label(harness):
    harness.step(hbm_fault())
    families = {family.name: family for family in HandoffMetrics("mindcluster", harness.sink.state).collect()}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in families["npumon_handoff_requests"].samples}
    assert samples[("npumon_handoff_requests_total", (("action", "write_configmap"), ("result", "ok"),
                                                       ("sink", "mindcluster")))] == 1
    assert families["npumon_handoff_in_sync"].samples[0].value == 1


class HangingRoute:
    """A route whose delivery hangs until released: ClusterD not answering within the deadline."""

    name = "grpc"

    def __init__(self):
        self.entered, self.release = threading.Event(), threading.Event()

    def request(self, body):
        return {"body": body}

    def read(self, count):
        return None

    def deliver(self, body, count):
        self.entered.set()
        self.release.wait(30)
        count("send_public_fault", "ok")


def test_a_hanging_clusterd_never_holds_up_the_poll_path_or_a_scrape():
    route = HangingRoute()
    sink = MindClusterSink(MindClusterHandoffConfig(enabled=True, route="grpc"), NODE, route, False, Clock(),
                           lambda *args: None)
    sink.offer(hbm_fault(), PHY)
    job = threading.Thread(target=sink.sync)
    job.start()
    try:
        assert route.entered.wait(10)
        started = time.monotonic()
        sink.offer(healthy(), PHY)  # the poll path
        list(HandoffMetrics("mindcluster", sink.state).collect())  # a scrape
        assert time.monotonic() - started < 1.0
    finally:
        route.release.set()
        job.join(10)
    assert sink.state().pending_events == 1  # the recover follows at the next sync
