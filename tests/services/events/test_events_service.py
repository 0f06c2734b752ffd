"""The daemon's event service on real SQLite files, driven the way the table job drives it: transitions and
chip changes recorded, acknowledgements applied, and a "restart" (a new service and a new engine on the
same file) that neither forgets sticky findings nor logs the chips again."""

import dataclasses
import logging
import textwrap
import time

import pytest

from npumon.services.events.store import EventStore, KnownChip, events_path
from npumon.cli.events import acknowledge
from npumon.services.events.observe import SeenChip, chip_changes, observe_chips
from npumon.services.events.service import EventService, event_services
from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from service_context import open_context, recorded

RULES = """
rules:
  - id: alarm
    subject: chip
    expr: health == "Alarm"
    severity: critical
    summary: "alarm {error_code_text}"
  - id: dead
    subject: chip
    expr: health == "Critical"
    severity: critical
    sticky: true
    summary: dead
  - id: trial
    subject: chip
    expr: temperature_celsius > 90
    severity: info
    mode: shadow
    summary: trial
"""


@pytest.fixture
def rules_file(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(textwrap.dedent(RULES), encoding="utf-8")
    return path


class Host:
    """A daemon's worth of event history: engine + service, restartable on the same file."""

    def __init__(self, tmp_path, rules_file):
        self.path = events_path(str(tmp_path / "state"))
        self.rules_file = rules_file
        self.engine = None
        self.service = None
        self.t0 = time.time()  # poll times are offsets from here; `npumon ack` stamps the real time
        self.start()

    def start(self):
        self.engine = RuleEngine(*load_rules([str(self.rules_file)], include_builtin=False))
        self.service = EventService(self.path, 86400, lambda: self.engine)

    def restart(self):
        self.stop()
        self.start()

    def stop(self):
        if self.service is not None:
            self.service.close()
            self.service = None

    def poll(self, offset, chips, health_ok=True, table_ok=True):
        """One table job: evaluate, hand the result to the service, wait until it is written; the snapshot as
        the daemon publishes it (with the history's status among the sources)."""
        now = self.t0 + offset
        sources = {"npu-smi": SourceStatus(ok=table_ok, last_success=now),
                   "npu-smi:health": SourceStatus(ok=health_ok, last_success=now)}
        snap = Snapshot(time=now, host=HostSample(), chips=chips if table_ok else [], sources=sources)
        findings = self.engine.evaluate(snap)
        self.service.on_evaluation(snap, findings, self.engine.transitions())
        published = dataclasses.replace(snap, sources={**snap.sources, **self.service.statuses()})
        assert self.service.flush()
        assert set(snap.sources) == {"npu-smi", "npu-smi:health"}  # the snapshot handed over stays as it was
        return published

    def events(self, **kwargs):
        store = EventStore(self.path, readonly=True)
        try:
            return [(e.kind, e.subject) for e in store.query(**kwargs)]
        finally:
            store.close()

    def ack(self, rule, subject):
        store = EventStore(self.path)
        try:
            return acknowledge(store, (rule, subject), "ticket 7", "alice")
        finally:
            store.close()


@pytest.fixture
def host(tmp_path, rules_file):
    host = Host(tmp_path, rules_file)
    yield host
    host.stop()


def chip(npu, health="OK", codes=(), temperature=50.0):
    return ChipSample(npu=npu, chip=0, name="910B3", bus_id="0000:0{}:00.0".format(npu), health=health,
                      temperature_celsius=temperature, error_codes=list(codes))


def keys(findings):
    return [(f.rule, f.subject) for f in findings]


# --------------------------------------------------------------------------------------------- pure diffing

def test_chip_changes_appear_disappear_health_and_new_codes():
    known = {"npu0/chip0": KnownChip("npu0/chip0", "910B3", "0000:01:00.0", "OK", ("80E01801",)),
             "npu1/chip0": KnownChip("npu1/chip0", "910B3", "0000:02:00.0", "OK", ())}
    seen = {"npu0/chip0": SeenChip("910B3", "0000:01:00.0", "Alarm", ("80E01801", "A4025021")),
            "npu2/chip0": SeenChip("910B3", "0000:03:00.0", "OK", None)}
    changes, after = chip_changes(known, seen)
    assert [(c.kind, c.subject, c.severity) for c in changes] == [
        ("health_changed", "npu0/chip0", "critical"),
        ("error_code_new", "npu0/chip0", "critical"),
        ("chip_appeared", "npu2/chip0", "info"),
        ("chip_disappeared", "npu1/chip0", "warning")]
    assert changes[0].message == "health Alarm (was OK)"
    assert changes[1].details["code"] == "A4025021"
    assert after == {"npu0/chip0": KnownChip("npu0/chip0", "910B3", "0000:01:00.0", "Alarm", ("80E01801", "A4025021")),
                     "npu2/chip0": KnownChip("npu2/chip0", "910B3", "0000:03:00.0", "OK", ())}


def test_unknown_values_keep_what_was_known():
    known = {"npu0/chip0": KnownChip("npu0/chip0", "910B3", "0000:01:00.0", "Alarm", ("A4025021",))}
    changes, after = chip_changes(known, {"npu0/chip0": SeenChip(None, None, None, None)})
    assert changes == [] and after == known


def test_observe_chips_trusts_error_codes_only_from_a_fresh_health_query():
    def snap(table_ok=True, health=None):
        sources = {"npu-smi": SourceStatus(ok=table_ok)}
        if health is not None:
            sources["npu-smi:health"] = health
        return Snapshot(time=0, host=HostSample(), chips=[chip(0, codes=["A4025021"])], sources=sources)

    assert observe_chips(snap(table_ok=False)) is None
    assert observe_chips(snap())["npu0/chip0"].error_codes is None  # not polled yet
    assert observe_chips(snap(health=SourceStatus(ok=False, error="stale")))["npu0/chip0"].error_codes is None
    assert observe_chips(snap(health=SourceStatus(ok=True, unsupported=True)))["npu0/chip0"].error_codes is None
    assert observe_chips(snap(health=SourceStatus(ok=True)))["npu0/chip0"].error_codes == ("A4025021",)


# --------------------------------------------------------------------------------------------- the service

def test_records_transitions_and_chip_changes(host):
    host.poll(0, [chip(0), chip(1)])
    host.poll(15, [chip(0, "Alarm", ["A4025021"]), chip(1, temperature=95.0)])
    host.poll(30, [chip(0)])
    assert host.events() == [  # per evaluation: what happened to the chips, then what the rules made of it
        ("chip_appeared", "npu0/chip0"), ("chip_appeared", "npu1/chip0"),
        ("health_changed", "npu0/chip0"), ("error_code_new", "npu0/chip0"),
        ("finding_fired", "npu0/chip0"), ("finding_fired", "npu1/chip0"),
        ("health_changed", "npu0/chip0"), ("chip_disappeared", "npu1/chip0"),
        ("finding_resolved", "npu0/chip0"), ("finding_resolved", "npu1/chip0")]
    store = EventStore(host.path, readonly=True)
    fired = store.query(kinds=["finding_fired"])
    store.close()
    assert fired[0].message == "alarm: alarm A4025021" and fired[0].severity == "critical"
    assert fired[1].message == "trial [shadow]: trial" and fired[1].details["shadow"] is True


def test_a_failed_table_read_is_not_a_disappearance(host):
    host.poll(0, [chip(0)])
    host.poll(15, [], table_ok=False)
    host.poll(30, [chip(0)], health_ok=False)
    assert host.events() == [("chip_appeared", "npu0/chip0")]


def test_restart_takes_over_chips_and_findings_without_logging_them_again(host):
    host.poll(0, [chip(0, "Critical"), chip(1, "Alarm", ["A4025021"])])
    before = host.events()
    host.restart()
    assert keys(host.engine.active()) == [("alarm", "npu1/chip0"), ("dead", "npu0/chip0")]
    host.poll(15, [chip(0, "OK"), chip(1, "Alarm", ["A4025021"])])
    assert keys(host.engine.active()) == [("alarm", "npu1/chip0"), ("dead", "npu0/chip0")]  # sticky stays
    assert host.events() == before + [("health_changed", "npu0/chip0")]


def test_an_acknowledgement_reaches_the_engine_and_outlives_a_restart(host):
    host.poll(0, [chip(0, "Critical")])
    [(row, already)] = host.ack("dead", "npu0/chip0")
    assert not already and row.finding.rule == "dead"
    assert host.ack("dead", "npu0/chip0")[0][1] is True  # not applied yet: already acknowledged
    host.poll(15, [chip(0, "Critical")])  # the daemon picks it up ...
    assert host.engine.active() == []
    host.poll(30, [chip(0, "Critical")])  # ... and records the resolution the engine reports
    host.restart()
    host.poll(45, [chip(0, "Critical")])  # still acknowledged: the standing condition stays quiet
    assert host.engine.active() == []
    assert host.events(kinds=["finding_fired", "finding_acknowledged", "finding_resolved"]) == [
        ("finding_fired", "npu0/chip0"), ("finding_acknowledged", "npu0/chip0"), ("finding_resolved", "npu0/chip0")]
    host.poll(60, [chip(0, "OK")])
    host.poll(75, [chip(0, "Critical")])  # a new occurrence fires again
    assert keys(host.engine.active()) == [("dead", "npu0/chip0")]


def test_an_acknowledgement_made_while_the_daemon_is_down_applies_at_start(host):
    host.poll(0, [chip(0, "Critical")])
    host.stop()
    host.ack("dead", "npu0/chip0")
    host.start()
    assert host.engine.active() == []
    host.poll(15, [chip(0, "Critical")])
    assert host.engine.active() == []
    store = EventStore(host.path, readonly=True)
    [resolved] = store.query(kinds=["finding_resolved"])
    store.close()
    assert resolved.details["reason"] == "acknowledged"


def test_findings_of_a_rule_no_longer_loaded_are_resolved_at_start(host, rules_file):
    host.poll(0, [chip(0, "Alarm")])
    host.stop()
    rules_file.write_text(textwrap.dedent(RULES).replace("id: alarm", "id: alarm-renamed"), encoding="utf-8")
    host.start()
    store = EventStore(host.path, readonly=True)
    [resolved] = store.query(kinds=["finding_resolved"])
    assert store.finding_rows() == []
    store.close()
    assert resolved.details["reason"] == "rule no longer loaded"


def test_other_services_record_through_it_and_sources_show_it(host):
    snap = host.poll(0, [chip(0)])
    assert snap.sources["events"].ok and snap.sources["events"].error is None
    host.service.record("control_action", "npu0/chip0", "fan speed 80%", "info", {"speed": 80}, time=5.0)
    assert host.service.flush()
    assert host.events(kinds=["control_action"]) == [("control_action", "npu0/chip0")]
    with pytest.raises(ValueError, match="unknown event kind"):
        host.service.record("fan_set", "host", "typo")


def test_an_unusable_history_is_reported_and_polling_goes_on(tmp_path, rules_file, caplog):
    # Not a corrupt file (that one is moved aside and a new one started): a directory in the file's place.
    (tmp_path / "state" / "events.sqlite").mkdir(parents=True)
    with caplog.at_level(logging.ERROR, logger="npumon.services.events.service"):
        host = Host(tmp_path, rules_file)
    try:
        host.poll(0, [chip(0, "Critical")])
        status = host.poll(15, [chip(0, "Critical")]).sources["events"]
        assert not status.ok
        assert status.error.startswith("{}: cannot open the event history: ".format(host.path))
        assert "running without event history" in status.error and "events dropped" in status.error
        assert keys(host.engine.active()) == [("dead", "npu0/chip0")]  # the rules still work
        assert [r.getMessage() for r in caplog.records] == ["event history: " + status.error.split("; 1 events")[0]]
        assert host.service.dropped() == 1
    finally:
        host.stop()


def test_a_history_that_can_be_opened_later_is_picked_up(tmp_path, rules_file, monkeypatch):
    from npumon.services.events import service as events_service

    monkeypatch.setattr(events_service, "REOPEN_SECONDS", 0.0)
    blocker = tmp_path / "state"
    blocker.write_text("not a directory yet")
    host = Host(tmp_path, rules_file)
    try:
        assert not host.poll(0, [chip(0)]).sources["events"].ok
        blocker.unlink()
        host.poll(15, [chip(0)])
        assert host.poll(30, [chip(0)]).sources["events"].ok
        assert host.events() == [("chip_appeared", "npu0/chip0")]
    finally:
        host.stop()


def test_event_services_follow_the_config(tmp_path):
    from npumon.settings import parse_config

    context = open_context(parse_config("state_dir: {}\nevents: {{enabled: false}}\n".format(tmp_path)), tmp_path)
    assert event_services(context) == [] and context.events is None
    context.record_event("control_action", "host", "nothing keeps it")  # and nothing fails
    context = open_context(parse_config("state_dir: {}\nevents: {{retention_days: 7}}\n".format(tmp_path)), tmp_path)
    [service] = event_services(context)
    try:
        assert context.events is service and service.path == str(tmp_path / "events.sqlite")
        assert [job_id for job_id, _, _ in service.jobs()] == ["events-prune"]
        context.record_event("control_action", "host", "set the fans")
        context.record_event("no_such_kind", "host", "a bug in the caller costs this record only")
        assert recorded(context) == [("control_action", "host")]
    finally:
        service.close()


def test_the_dropped_counter_is_a_metric(host):
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()
    for collector in host.service.collectors():
        registry.register(collector)
    assert b"npumon_events_dropped_total 0.0" in generate_latest(registry)
    for collector in host.service.collectors():
        registry.unregister(collector)  # the same objects: unregistering works
