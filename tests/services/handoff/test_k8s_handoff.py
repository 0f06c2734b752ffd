"""The Kubernetes hand-off sink against a stand-in API server on 127.0.0.1 whose stored objects and Events are
checked against the Kubernetes 1.37 schema: conditions follow the verdict, other conditions stay, every
transition gets its Event, every failure mode is retried from a fresh GET and loses nothing, a dry run sends
nothing, the taint's circuit breaker holds. Clocks are fake: backoff is checked, never slept."""

import logging

import pytest

from npumon.sim.apiserver import TOKEN, ApiServer, node_object
from npumon.rules.verdict import DEGRADED, HEALTHY, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason
from npumon.services.handoff.config import KubernetesHandoffConfig, TaintConfig
from npumon.services.handoff.kubeapi import Endpoint, request
from npumon.services.handoff.kubesink import KubernetesSink
from npumon.services.handoff.metrics import HandoffMetrics

NODE = "node-a"
HBM = Reason("hbm-ecc-uncorrectable", "critical", "HBM uncorrectable ECC errors: 3", "isolate_and_reset")
WARM = Reason("temperature-high", "warning", "NPU at 92 C", "none")


class Clock:
    def __init__(self, now=1_800_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def out_of_service(subject="npu0/chip0"):
    return HostVerdict(DEGRADED, (), (ChipVerdict(subject, OUT_OF_SERVICE, (HBM,)),))


def healthy():
    return HostVerdict(HEALTHY, (), (ChipVerdict("npu0/chip0", HEALTHY),))


@pytest.fixture
def server():
    stub = ApiServer((NODE,))
    yield stub
    stub.close()
    assert stub.invalid == []  # every body the sink sent fits the Kubernetes schema


class Harness:
    def __init__(self, server, config=None, dry_run=False, token=TOKEN):
        self.clock = Clock()
        self.recorded = []
        self.wakes = []
        self.config = config or KubernetesHandoffConfig(enabled=True, dry_run=dry_run)
        endpoint = Endpoint(server.url, token=token)

        def send(method, path, body, content_type):
            return request(endpoint, method, path, 10.0, body, content_type)

        self.sink = KubernetesSink(self.config, NODE, None if dry_run else send, self.clock,
                                   lambda *args: self.recorded.append(args), self.wakes.append)

    def offer_and_sync(self, verdict):
        self.sink.offer(verdict)
        self.sink.sync()

    def kinds(self):
        return [record[0] for record in self.recorded]


def test_an_out_of_service_chip_sets_the_condition_true_naming_the_chip_and_leaves_ready_alone(server):
    harness = Harness(server)
    harness.offer_and_sync(out_of_service("npu3/chip0"))
    condition = server.condition(NODE, "NpuOutOfService")
    assert condition["status"] == "True" and condition["reason"] == "ChipOutOfService"
    assert "npu3/chip0" in condition["message"] and "hbm-ecc-uncorrectable" in condition["message"]
    assert server.condition(NODE, "NpuDegraded")["status"] == "False"
    assert server.condition(NODE, "Ready")["status"] == "True"  # someone else's condition, untouched
    [event] = server.events
    assert (event["type"], event["reason"], event["involvedObject"]["name"]) == ("Warning", "ChipOutOfService", NODE)
    assert event["involvedObject"]["uid"] == "uid-" + NODE and "npu3/chip0" in event["message"]
    assert harness.sink.state().in_sync and "handoff_action" in harness.kinds()


def test_healthy_sets_no_condition_true_and_posts_no_event(server):
    harness = Harness(server)
    harness.offer_and_sync(healthy())
    assert [server.condition(NODE, kind)["status"] for kind in ("NpuOutOfService", "NpuDegraded")] == ["False"] * 2
    assert server.events == []


def test_a_degraded_chip_sets_npu_degraded_only():
    verdict = HostVerdict(DEGRADED, (), (ChipVerdict("npu1/chip0", DEGRADED, (WARM,)),))
    stub = ApiServer((NODE,))
    try:
        Harness(stub).offer_and_sync(verdict)
        assert stub.condition(NODE, "NpuDegraded")["status"] == "True"
        assert "npu1/chip0" in stub.condition(NODE, "NpuDegraded")["message"]
        assert stub.condition(NODE, "NpuOutOfService")["status"] == "False"
    finally:
        stub.close()
    assert stub.invalid == []


def test_recovery_clears_the_condition_with_a_normal_event_and_a_new_transition_time(server):
    harness = Harness(server)
    harness.offer_and_sync(out_of_service())
    harness.clock.now += 600
    harness.offer_and_sync(healthy())
    condition = server.condition(NODE, "NpuOutOfService")
    assert condition["status"] == "False" and condition["lastTransitionTime"] == "2027-01-15T08:10:00Z"
    assert [(event["type"], event["reason"]) for event in server.events] == [
        ("Warning", "ChipOutOfService"), ("Normal", "NoNpuOutOfService")]


def test_nothing_is_sent_while_nothing_changes_until_the_heartbeat(server):
    harness = Harness(server)
    harness.offer_and_sync(out_of_service())
    sent = len(server.requests)
    harness.clock.now += 60
    harness.offer_and_sync(out_of_service())
    assert len(server.requests) == sent
    harness.clock.now += harness.config.heartbeat_seconds
    harness.sink.sync()
    assert [request[0] for request in server.requests[sent:]] == ["GET", "PATCH"]


def test_a_condition_changed_by_someone_else_is_put_back_at_the_next_resync(server):
    harness = Harness(server)
    harness.offer_and_sync(out_of_service())
    server.condition(NODE, "NpuOutOfService")["status"] = "False"  # e.g. an operator's kubectl patch
    harness.clock.now += harness.config.heartbeat_seconds
    harness.sink.sync()
    assert server.condition(NODE, "NpuOutOfService")["status"] == "True"


@pytest.mark.parametrize("status, kind", [(401, "unauthorized"), (403, "unauthorized"), (409, "conflict"),
                                          (429, "throttled"), (500, "server"), (503, "server")])
def test_each_failure_is_retried_after_a_backoff_and_loses_no_transition(server, status, kind, caplog):
    harness = Harness(server)
    server.fail_next(status, count=3, headers={"Retry-After": "7"} if status == 429 else None)
    with caplog.at_level(logging.WARNING, logger="npumon.services.handoff.kubesink"):
        harness.offer_and_sync(out_of_service())
        harness.sink.offer(healthy())  # a second transition while the API server fails
        harness.sink.sync()  # within the backoff: no request
        assert len(server.requests) == 1
        for _ in range(4):
            harness.clock.now += 61
            harness.sink.sync()
    state = harness.sink.state()
    assert state.failures[kind] == 3 and state.in_sync and state.pending_events == 0
    assert server.condition(NODE, "NpuOutOfService")["status"] == "False"
    assert [event["type"] for event in server.events] == ["Warning", "Normal"]  # both transitions, in order
    assert len([r for r in caplog.records if "retrying with backoff" in r.getMessage()]) == 1  # one line per problem
    assert harness.kinds().count("handoff_problem") == 1
    assert ("rbac-handoff.yaml" in harness.recorded[0][2]) == (kind == "unauthorized")
    if status == 429:
        assert harness.wakes[0] == 7.0  # Retry-After beats the first backoff (1 s)
    else:
        assert harness.wakes[:3] == [1.0, 2.0, 4.0]


def test_an_unreachable_api_server_is_retried_and_nothing_is_lost():
    stub = ApiServer((NODE,))
    port = stub.server.server_address[1]
    stub.close()  # nothing listens: connection refused
    clock, recorded = Clock(), []
    endpoint = Endpoint("http://127.0.0.1:{}".format(port), token=TOKEN)
    sink = KubernetesSink(KubernetesHandoffConfig(enabled=True), NODE,
                          lambda m, p, b, c: request(endpoint, m, p, 1.0, b, c), clock,
                          lambda *args: recorded.append(args))
    sink.offer(out_of_service())
    sink.sync()
    state = sink.state()
    assert state.failures["unreachable"] == 1 and state.pending_events == 1 and not state.in_sync
    assert "unreachable" in state.problem


def test_a_lost_answer_to_an_event_is_not_posted_twice(server):
    harness = Harness(server)
    harness.sink.offer(out_of_service())
    server.lose_answers = ["/events"]  # the Event is taken, its answer lost
    harness.sink.sync()
    assert harness.sink.state().failures["server"] == 1 and len(server.events) == 1
    harness.clock.now += 2
    harness.sink.sync()  # the status matches: no patch; the Event's retry gets 409 AlreadyExists
    assert len(server.events) == 1 and harness.sink.state().pending_events == 0 and harness.sink.state().in_sync
    assert [r[0] for r in server.requests[-2:]] == ["GET", "POST"]


def test_a_dry_run_sends_nothing_and_records_the_exact_requests(server):
    harness = Harness(server, dry_run=True)
    harness.offer_and_sync(out_of_service())
    assert server.requests == []
    requests = [record[4]["request"] for record in harness.recorded if record[4] and record[4].get("dry_run")]
    assert [(r["method"], r["path"]) for r in requests] == [
        ("PATCH", "/api/v1/nodes/node-a/status"), ("POST", "/api/v1/namespaces/default/events")]
    assert requests[0]["content_type"] == "application/strategic-merge-patch+json"
    patched = node_object(NODE)
    patched["status"]["conditions"] += requests[0]["body"]["status"]["conditions"]
    from npumon.sim.apiserver import validate
    assert validate(patched) is None and validate(requests[1]["body"]) is None  # what it would send is valid
    assert harness.sink.state().requests[("patch_status", "dry_run")] == 1


def taint_config(**taint):
    return KubernetesHandoffConfig(enabled=True, taint=TaintConfig(enabled=True, **taint))


def host_out_of_service():
    return HostVerdict(OUT_OF_SERVICE, (Reason("pcie-link-down", "critical", "all chips gone", "replace"),),
                       (ChipVerdict("npu0/chip0", OUT_OF_SERVICE, (HBM,)),))


def cluster(tainted, total):
    stub = ApiServer(["node-a"] + ["node-{}".format(i) for i in range(1, total)])
    for i in range(1, tainted + 1):
        stub.nodes["node-{}".format(i)]["spec"]["taints"] = [
            {"key": "npumon.io/npu-out-of-service", "value": "true", "effect": "NoSchedule"}]
    return stub


def test_the_taint_is_added_for_a_host_out_of_service_and_removed_on_recovery_keeping_other_taints():
    stub = cluster(tainted=1, total=20)  # 5 %: under the 10 % limit
    stub.nodes[NODE]["spec"]["taints"] = [{"key": "dedicated", "value": "ai", "effect": "NoSchedule"}]
    try:
        harness = Harness(stub, taint_config())
        harness.offer_and_sync(out_of_service())  # a chip, not the host: no taint
        assert [t["key"] for t in stub.nodes[NODE]["spec"]["taints"]] == ["dedicated"]
        harness.offer_and_sync(host_out_of_service())
        assert [t["key"] for t in stub.nodes[NODE]["spec"]["taints"]] == ["dedicated", "npumon.io/npu-out-of-service"]
        harness.offer_and_sync(healthy())
        assert [t["key"] for t in stub.nodes[NODE]["spec"]["taints"]] == ["dedicated"]
    finally:
        stub.close()
    assert stub.invalid == []


def test_the_circuit_breaker_keeps_the_taint_off_when_too_many_nodes_carry_it(caplog):
    stub = cluster(tainted=2, total=10)  # 20 % already tainted
    try:
        harness = Harness(stub, taint_config())
        with caplog.at_level(logging.WARNING, logger="npumon.services.handoff.kubesink"):
            harness.offer_and_sync(host_out_of_service())
            harness.clock.now += 600
            harness.sink.sync()  # the heartbeat: still open, no second line
        assert "taints" not in stub.nodes[NODE]["spec"]
        assert stub.condition(NODE, "NpuOutOfService")["status"] == "True"  # the conditions still say why
        assert harness.sink.state().breaker_open
        [line] = [r.getMessage() for r in caplog.records if "circuit breaker" in r.getMessage()]
        assert "2 of 10" in line
        assert harness.kinds().count("handoff_problem") == 1
        samples = {m.name: m.samples[0].value for m in HandoffMetrics("kubernetes", harness.sink.state).collect()}
        assert samples["npumon_handoff_taint_breaker_open"] == 1
    finally:
        stub.close()


def test_the_circuit_breaker_by_count():
    stub = cluster(tainted=2, total=100)  # 2 %, but more than max_nodes=1
    try:
        harness = Harness(stub, taint_config(max_nodes=1))
        harness.offer_and_sync(host_out_of_service())
        assert "taints" not in stub.nodes[NODE]["spec"] and harness.sink.state().breaker_open
    finally:
        stub.close()


def test_a_taint_race_lost_on_the_resource_version_is_retried_from_a_fresh_read():
    stub = cluster(tainted=0, total=10)
    try:
        harness = Harness(stub, taint_config())
        harness.sink.offer(host_out_of_service())
        real_route = stub._route

        def racing(method, path, body, content_type):
            if method == "PATCH" and not path.endswith("/status") and not racing.done:
                racing.done = True
                stub.nodes[NODE]["metadata"]["resourceVersion"] = "99"  # another writer got there first
            return real_route(method, path, body, content_type)
        racing.done = False
        stub._route = racing
        harness.sink.sync()
        assert harness.sink.state().failures["conflict"] == 1 and "taints" not in stub.nodes[NODE]["spec"]
        harness.clock.now += 2
        harness.sink.sync()
        assert [t["key"] for t in stub.nodes[NODE]["spec"]["taints"]] == ["npumon.io/npu-out-of-service"]
    finally:
        stub.close()
    assert stub.invalid == []


def test_metrics_count_requests_and_failures(server):
    harness = Harness(server)
    server.fail_next(500)
    harness.offer_and_sync(out_of_service())
    harness.clock.now += 2
    harness.sink.sync()
    families = {m.name: m for m in HandoffMetrics("kubernetes", harness.sink.state).collect()}
    requests = {(s.labels["action"], s.labels["result"]): s.value for s in families["npumon_handoff_requests"].samples
                if s.name.endswith("_total")}
    assert requests[("get_node", "failed")] == 1 and requests[("get_node", "ok")] == 1
    assert requests[("patch_status", "ok")] == 1 and requests[("create_event", "ok")] == 1
    failures = {s.labels["kind"]: s.value for s in families["npumon_handoff_failures"].samples
                if s.name.endswith("_total")}
    assert failures["server"] == 1
    assert families["npumon_handoff_in_sync"].samples[0].value == 1


@pytest.mark.slow  # real time: a request that times out after 1 s
def test_a_hanging_api_server_never_holds_up_the_poll_path_or_a_scrape():
    """offer (the poll path) and state (the metrics) return while sync waits on a server that does not answer."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # accepts, never answers
    endpoint = Endpoint("http://127.0.0.1:{}".format(listener.getsockname()[1]), token=TOKEN)
    clock = Clock()
    sink = KubernetesSink(KubernetesHandoffConfig(enabled=True), NODE,
                          lambda m, p, b, c: request(endpoint, m, p, 1.0, b, c), clock, lambda *args: None)
    sink.offer(out_of_service())
    worker = threading.Thread(target=sink.sync)
    worker.start()
    try:
        time.sleep(0.2)  # the request is in flight
        started = time.monotonic()
        assert sink.offer(healthy()) is True
        HandoffMetrics("kubernetes", sink.state).collect().__next__()
        assert time.monotonic() - started < 0.1 and worker.is_alive()
    finally:
        worker.join(10)
        listener.close()
    state = sink.state()
    assert state.failures["unreachable"] == 1 and state.pending_events == 2  # the timeout lost neither transition


def test_a_problem_that_ended_while_npumon_was_down_is_cleared_with_its_event(server):
    Harness(server).offer_and_sync(out_of_service())  # the npumon before the restart
    restarted = Harness(server)
    restarted.offer_and_sync(healthy())
    assert server.condition(NODE, "NpuOutOfService")["status"] == "False"
    assert [event["type"] for event in server.events] == ["Warning", "Normal"]


def test_a_flap_storm_through_an_outage_keeps_the_latest_events_in_order_and_ends_at_the_last_verdict(server, caplog):
    harness = Harness(server)
    server.fail_next(503)
    harness.offer_and_sync(out_of_service())  # fails: the API server is down for the storm
    with caplog.at_level(logging.WARNING, logger="npumon.services.handoff.kubesink"):
        for flip in range(300):
            harness.sink.offer(healthy() if flip % 2 == 0 else out_of_service())
    state = harness.sink.state()
    assert state.pending_events == 256 and state.dropped_events == 301 - 256
    assert len([r for r in caplog.records if "dropping the oldest" in r.getMessage()]) == 1
    harness.clock.now += 2
    harness.sink.sync()
    assert len(server.events) == 256 and harness.sink.state().pending_events == 0
    assert [e["type"] for e in server.events[-2:]] == ["Normal", "Warning"]  # the last two, in order
    assert server.condition(NODE, "NpuOutOfService")["status"] == "True"  # the 300th verdict
    families = {m.name: m for m in HandoffMetrics("kubernetes", harness.sink.state).collect()}
    assert families["npumon_handoff_dropped_events"].samples[0].value == 45
