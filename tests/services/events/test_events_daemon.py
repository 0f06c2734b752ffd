"""The event history in real `npumon run --simulate` daemons: it survives `kill -9`, a restart neither
forgets a sticky finding nor logs the chips again, `npumon ack` (run by the test, a process other than the
daemon) clears it, and one finding is the same in /status, in npumon_finding_active and in `npumon events`.
`npumon events` and `ack` go through the CLI's main() in the test's process (the `cli` fixture): the store
is shared with the daemon's process all the same, without an interpreter start per call."""

import json
import re
import signal
import sqlite3

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon_harness import DaemonProcess, wait_until
from npumon.services.events.store import EventStore, events_path

# Fast tiers so that every poll that matters has run within a few seconds.
CONFIG = """\
state_dir: {state}
npu_smi_max_concurrent: 4
poll: {{table_seconds: 0.3, health_seconds: 0.3, ecc_seconds: 0.3, host_seconds: 0.3,
        usages_seconds: 0, power_seconds: 0, board_seconds: 0}}
rule_files: [{rules}]
"""
# `cpu-bottleneck` waits 5 minutes before it fires (`for: 5m`); a rule file can override just that key.
FAST_RULES = """\
rules:
  - id: cpu-bottleneck
    for: 1s
"""
TIMEOUT = 30.0  # generous: CI machines are sometimes slow; only a failure waits this long


class Daemon(DaemonProcess):
    """`npumon run --simulate=SCENARIO` with the test's config, on a free loopback port."""

    def __init__(self, config, scenario):
        super().__init__(["-c", config, "--simulate=" + scenario, "--listen", "127.0.0.1:0"])

    def status(self):
        response = self.get("/status")
        response.raise_for_status()
        return response.json()

    def findings(self, rule):
        """(rule, subject) of the rule's active findings in /status."""
        return {(f["rule"], f["subject"]) for f in self.status()["findings"] if f["rule"] == rule}

    def metric_findings(self, rule):
        response = self.get("/metrics")
        response.raise_for_status()
        families = text_string_to_metric_families(response.text)
        return {(s.labels["rule"], s.labels["subject"]) for family in families if family.name == "npumon_finding_active"
                for s in family.samples if s.labels["rule"] == rule and s.value == 1}

    def kill_9(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def events(cli, config, *args):
    """`npumon events --json`, reading while the daemon's process writes."""
    result = cli("events", "-c", config, "--json", *args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def stored(tmp_path, **query):
    """The same, read in-process: cheaper for waiting."""
    store = EventStore(events_path(str(tmp_path / "state")), readonly=True)
    try:
        return store.query(**query)
    finally:
        store.close()


def has(tmp_path, kind, subject, rule=None):
    return lambda: any(e.subject == subject and (rule is None or e.details["rule"] == rule)
                       for e in stored(tmp_path, kinds=[kind]))


@pytest.fixture
def config(tmp_path):
    rules = tmp_path / "fast-rules.yaml"
    rules.write_text(FAST_RULES, encoding="utf-8")
    path = tmp_path / "npumon.yaml"
    path.write_text(CONFIG.format(state=tmp_path / "state", rules=rules), encoding="utf-8")
    return str(path)


@pytest.fixture
def start_daemon(config):
    started = []

    def start(scenario):
        daemon = Daemon(config, scenario)
        started.append(daemon)
        daemon.wait_serving(TIMEOUT)
        return daemon

    yield start
    for daemon in started:
        daemon.close()


def test_history_survives_kill_9_and_a_sticky_finding_waits_for_ack(tmp_path, config, start_daemon, cli):
    # 1: a chip in Alarm with three error codes, another in Warning; then kill -9.
    first = start_daemon("health-alarm")
    wait_until(has(tmp_path, "finding_fired", "npu0/chip0", "health-alarm"), TIMEOUT,
               what="health-alarm to be recorded")
    wait_until(lambda: len(stored(tmp_path, kinds=["error_code_new"])) == 4, TIMEOUT, what="the error codes")
    first.kill_9()
    conn = sqlite3.connect(events_path(str(tmp_path / "state")))
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    listed = cli("events", "-c", config, "--npu", "0")
    assert listed.returncode == 0
    assert re.search(r"chip_appeared +npu0/chip0 +info", listed.stdout)
    assert re.search(r"finding_fired +npu0/chip0 +critical +health-alarm: health Alarm",
                     listed.stdout)
    assert {e["details"]["code"] for e in events(cli, config, "--kind", "error_code_new", "--npu", "0")} == {
        "A4025021", "8C03A000", "8C084E00"}

    # 2: the same host, now healthy except for an uncorrectable ECC error on npu2 (sticky); kill -9 again.
    second = start_daemon("ecc-rising")
    wait_until(has(tmp_path, "finding_fired", "npu2/chip0", "ecc-uncorrectable"), TIMEOUT,
               what="ecc-uncorrectable to be recorded")
    wait_until(has(tmp_path, "finding_resolved", "npu0/chip0", "health-alarm"), TIMEOUT, what="health-alarm to resolve")
    assert {(e["subject"], e["details"]["previous"], e["details"]["health"])
            for e in events(cli, config, "--kind", "health_changed")} == {
        ("npu0/chip0", "Alarm", "OK"), ("npu1/chip0", "Warning", "OK")}
    second.kill_9()

    # 3: a healthy host: the sticky finding is still there, and the chips were not logged again.
    third = start_daemon("healthy")
    wait_until(lambda: third.status().get("chips"), TIMEOUT, what="the first poll")
    assert third.findings("ecc-uncorrectable") == {("ecc-uncorrectable", "npu2/chip0")}
    assert third.metric_findings("ecc-uncorrectable") == {("ecc-uncorrectable", "npu2/chip0")}
    appeared = [e["subject"] for e in events(cli, config, "--kind", "chip_appeared")]
    assert sorted(appeared) == ["npu{}/chip0".format(n) for n in range(8)]
    assert len(events(cli, config, "--kind", "finding_fired", "--npu", "2")) == 1

    acked = cli("ack", "-c", config, "ecc-uncorrectable", "npu2/chip0", "--note", "card replaced")
    assert acked.returncode == 0 and acked.stdout.startswith("acknowledged ecc-uncorrectable on npu2/chip0"), acked
    wait_until(lambda: not third.findings("ecc-uncorrectable"), TIMEOUT, what="the acknowledgement to reach the daemon")
    resolved = wait_until(lambda: stored(tmp_path, kinds=["finding_resolved"], npu=2), TIMEOUT,
                          what="the resolution to be recorded")
    assert resolved[-1].details["reason"] == "acknowledged"
    third.stop()
    assert third.proc.returncode == 0


def test_cpu_bottleneck_is_the_same_in_status_metrics_and_events(tmp_path, config, start_daemon, cli):
    daemon = start_daemon("cpu-bottleneck")
    in_status = wait_until(lambda: daemon.findings("cpu-bottleneck"), TIMEOUT, what="cpu-bottleneck in /status")

    def recorded():
        active = set()
        for event in events(cli, config, "--kind", "finding_fired", "--kind", "finding_resolved"):
            key = (event["details"]["rule"], event["subject"])
            (active.add if event["kind"] == "finding_fired" else active.discard)(key)
        return {key for key in active if key[0] == "cpu-bottleneck"}

    in_events = wait_until(lambda: recorded() == in_status and in_status, TIMEOUT, what="the same findings in events")
    assert daemon.metric_findings("cpu-bottleneck") == in_status == in_events
    # a host-wide cause: one finding, on the host, listing every chip of the simulated Atlas 800I A2
    assert in_status == {("cpu-bottleneck", "host")}
    finding = next(f for f in daemon.status()["findings"] if f["rule"] == "cpu-bottleneck")
    assert len(finding["chips"]) == 8
    assert daemon.status()["sources"]["events"]["ok"] is True
    daemon.stop()
    assert daemon.proc.returncode == 0
