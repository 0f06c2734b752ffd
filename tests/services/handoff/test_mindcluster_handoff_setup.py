"""The MindCluster sink's config and service: off by default, a bad section is one line naming the key, the
service takes the chips' physical ids from the snapshot and the verdict from the service set and sends in its
own job (gRPC to a real server on a unix socket), and a dry run through the service records the exact message
in the event history and sends nothing."""

import json
import subprocess
import sys

import pytest

from clusterd_stub import ClusterD, ClusterdGrpc, message_problems
from npumon.config.errors import ConfigError
from npumon.daemon.services import ServiceSet, build_services
from npumon.model import ChipSample, HostSample, Snapshot
from npumon.rules.verdict import DEGRADED, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason
from npumon.services.events.store import EventStore, events_path
from npumon.settings import parse_config
from npumon.outputs.exposition import ExpositionRegistry
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry
from service_context import close_context, open_context, recorded

NAME = "handoff-mindcluster"
HBM = Reason("driver-fault-repeating", "critical", "HBM ECC repeating", "inspect_hardware", "ManuallySeparateNPU",
             OUT_OF_SERVICE, 1_799_999_900.0)


@pytest.mark.parametrize("text, key", [
    ("handoff:\n  mindcluster:\n    route: http\n", "mindcluster.route"),
    ("handoff:\n  mindcluster:\n    resource: 'npu mon'\n", "mindcluster.resource"),
    ("handoff:\n  mindcluster:\n    namespace: Cluster-System\n", "mindcluster.namespace"),
    ("handoff:\n  mindcluster:\n    timeout_seconds: 30\n", "mindcluster.timeout_seconds"),
    ("handoff:\n  mindcluster:\n    fault_codes: {separate_npu: '02001600'}\n", "fault_codes.separate_npu"),
    ("handoff:\n  mindcluster:\n    fault_codes: {separate_npu: 020016001}\n", "fault_codes.separate_npu"),
    ("handoff:\n  mindcluster:\n    fault_codes: {separate_npu: '010016001'}\n", "mindcluster.fault_codes"),
    ("handoff:\n  mindcluster:\n    grpc_target: ''\n", "mindcluster.grpc_target"),
    ("handoff:\n  mindcluster:\n    enabeld: true\n", "enabeld"),
])
def test_a_bad_section_is_one_line_naming_the_key(text, key):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "npumon.yaml")
    message = str(caught.value)
    assert "\n" not in message and key in message and message.startswith("npumon.yaml:")


def test_a_bad_section_stops_the_daemon_with_one_line_and_no_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("handoff:\n  mindcluster:\n    enabled: true\n    route: carrier-pigeon\n")
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "run", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (proc.stderr + proc.stdout).strip().count("\n") == 0 and "mindcluster.route" in proc.stderr


def test_off_by_default(tmp_path):
    config = parse_config("{}\n")
    assert not config.handoff.mindcluster.enabled
    context = open_context(config, tmp_path)
    try:
        assert [s.name for s in build_services(context) if s.name == NAME] == []
    finally:
        close_context(context)


def test_without_a_node_name_the_status_says_so_and_no_job_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    config = parse_config("state_dir: {}\nhandoff:\n  mindcluster:\n    enabled: true\n".format(tmp_path))
    context = open_context(config, tmp_path)
    try:
        [service] = [s for s in build_services(context) if s.name == NAME]
        status = service.statuses()[NAME]
        assert not status.ok and "NODE_NAME" in status.error and service.jobs() == []
    finally:
        close_context(context)


def snapshot(phy_ids):
    """Chips numbered by npu-smi npu0..npuN whose physical ids are `phy_ids` (as on an A3, where they differ)."""
    chips = [ChipSample(npu=n, chip=0, device_id=n, phy_id=phy) for n, phy in enumerate(phy_ids)]
    return Snapshot(time=1_800_000_000.0, host=HostSample(hostname="node-a"), chips=chips, sources={})


def with_wakes(context, woken):
    return context.__class__(context.config, context.engine, context.target, context.npu_smi, context.events,
                             context.clock, lambda job, seconds: woken.append((job, seconds)))


def test_the_service_sends_over_grpc_in_its_job_naming_the_physical_id(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE_NAME", "node-a")
    clusterd = ClusterD(lambda: 1_800_000_000.0)
    server = ClusterdGrpc(clusterd, str(tmp_path / "clusterd.sock"))
    config = parse_config("state_dir: {}\nhandoff:\n  mindcluster:\n    enabled: true\n    route: grpc\n"
                          "    grpc_target: '{}'\n".format(tmp_path, server.target))
    woken = []
    context = with_wakes(open_context(config, tmp_path), woken)
    services = ServiceSet([s for s in build_services(context) if s.name == NAME], CollectorRegistry())
    try:
        services.evaluated(snapshot([4, 5, 6, 7]), [], [])
        services.verdict(HostVerdict(DEGRADED, (), (ChipVerdict("npu1/chip0", OUT_OF_SERVICE, (HBM,), 1.8e9),)))
        assert woken == [(NAME, 0.0)]  # the change goes out now, not at the next interval
        [(job, interval, run)] = services.jobs()
        assert (job, interval) == (NAME, 10.0)
        run()
        [fault] = clusterd.open_faults("node-a")
        assert fault["influence"][0]["deviceIds"] == [5]  # npu1's physical id
        [service] = list(services)
        assert service.statuses()[NAME].ok
        assert ("handoff_action", "node-a") in recorded(context)
    finally:
        services.close()
        close_context(context)
        server.close()
    assert clusterd.invalid == []


def test_a_dry_run_through_the_service_records_the_message_and_sends_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    config = parse_config("state_dir: {}\nhandoff:\n  mindcluster:\n    enabled: true\n    dry_run: true\n"
                          .format(tmp_path))
    context = open_context(config, tmp_path)
    services = ServiceSet([s for s in build_services(context) if s.name == NAME], CollectorRegistry())
    try:
        services.evaluated(snapshot([0, 1]), [], [])
        services.verdict(HostVerdict(DEGRADED, (), (ChipVerdict("npu0/chip0", OUT_OF_SERVICE, (HBM,), 1.8e9),)))
        [(_, _, run)] = services.jobs()
        run()
        [service] = list(services)
        assert service.statuses()[NAME].ok
        assert context.events.flush()
        store = EventStore(events_path(context.config.state_dir), readonly=True)
        try:
            [event] = [e for e in store.query() if e.kind == "handoff_action"]
        finally:
            store.close()
        request = event.details["request"]
        assert event.details["dry_run"] and request["method"] == "PUT"
        assert message_problems(json.loads(request["body"]["data"]["PublicFault"])) == []
    finally:
        services.close()
        close_context(context)


def test_both_sinks_take_the_same_verdict_and_share_one_family_per_metric(tmp_path, monkeypatch):
    """The Kubernetes and MindCluster sinks side by side (dry runs): one verdict stream, and /metrics shows each
    npumon_handoff_* family once, with a sample per sink."""
    monkeypatch.setenv("NODE_NAME", "node-a")
    config = parse_config("state_dir: {}\nhandoff:\n  kubernetes: {{enabled: true, dry_run: true}}\n"
                          "  mindcluster: {{enabled: true, dry_run: true}}\n".format(tmp_path))
    context = open_context(config, tmp_path)
    registry = ExpositionRegistry()
    services = ServiceSet([s for s in build_services(context) if s.name.startswith("handoff")], registry)
    try:
        assert sorted(s.name for s in services) == ["handoff-kubernetes", NAME]
        services.evaluated(snapshot([0, 1]), [], [])
        services.verdict(HostVerdict(DEGRADED, (), (ChipVerdict("npu0/chip0", OUT_OF_SERVICE, (HBM,), 1.8e9),)))
        for _, _, run in services.jobs():
            run()
        text = generate_latest(registry).decode()
        assert text.count("# HELP npumon_handoff_requests_total ") == 1
        families = {f.name: f for f in text_string_to_metric_families(text)}
        dry = {(s.labels["sink"], s.labels["action"]) for s in families["npumon_handoff_requests"].samples
               if s.name == "npumon_handoff_requests_total" and s.labels["result"] == "dry_run" and s.value}
        assert dry == {("kubernetes", "patch_status"), ("kubernetes", "create_event"),
                       ("mindcluster", "write_configmap")}
        assert {s.labels["sink"] for s in families["npumon_handoff_in_sync"].samples} == {"kubernetes",
                                                                                        "mindcluster"}
    finally:
        services.close()
        close_context(context)
