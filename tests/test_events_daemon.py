"""The event history in real `npumon run --simulate` daemons: it survives `kill -9`, a restart neither
forgets a sticky finding nor logs the chips again, `npumon ack` (a real subprocess) clears it, and one
finding is the same in /status, in npumon_finding_active and in `npumon events`."""

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from npumon.events import EventStore, events_path

NPUMON = shutil.which("npumon", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
pytestmark = pytest.mark.skipif(NPUMON is None, reason="the npumon command is not installed (pip install -e .)")

# Fast tiers so that every poll that matters has run within a few seconds.
CONFIG = """\
state_dir: {state}
npu_smi_max_concurrent: 4
poll: {{table_seconds: 1, health_seconds: 1, ecc_seconds: 1, host_seconds: 1,
        usages_seconds: 0, power_seconds: 0, board_seconds: 0}}
rule_files: [{rules}]
"""
# `cpu-bottleneck` waits 5 minutes before it fires (`for: 5m`); a rule file can override just that key.
FAST_RULES = """\
rules:
  - id: cpu-bottleneck
    for: 2s
"""
TIMEOUT = 30.0  # generous: CI machines are sometimes slow; only a failure waits this long


class Daemon:
    def __init__(self, tmp_path, config, scenario):
        self.log_path = tmp_path / "daemon-{}-{}.log".format(scenario, time.monotonic_ns())
        self.log = open(self.log_path, "w")
        self.process = subprocess.Popen(
            [NPUMON, "run", "-c", config, "--simulate=" + scenario, "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT)
        self.port = wait_until(self._port, "the daemon to listen")

    def _port(self):
        if self.process.poll() is not None:
            pytest.fail("npumon run exited with {}: {}".format(self.process.returncode, self.log_path.read_text()))
        match = re.search(r"serving on port (\d+)", self.log_path.read_text())
        return int(match.group(1)) if match else None

    def get(self, path):
        response = requests.get("http://127.0.0.1:{}{}".format(self.port, path), timeout=5)
        response.raise_for_status()
        return response

    def findings(self, rule):
        """(rule, subject) of the rule's active findings in /status."""
        return {(f["rule"], f["subject"]) for f in self.get("/status").json()["findings"] if f["rule"] == rule}

    def metric_findings(self, rule):
        families = text_string_to_metric_families(self.get("/metrics").text)
        return {(s.labels["rule"], s.labels["subject"]) for family in families if family.name == "npumon_finding_active"
                for s in family.samples if s.labels["rule"] == rule and s.value == 1}

    def kill_9(self):
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.log.close()

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self.log.close()
        return self.process.returncode


def wait_until(probe, what, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail("timed out waiting for " + what)


def npumon(*args):
    return subprocess.run([NPUMON] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=30)


def events(config, *args):
    """`npumon events --json` (a real subprocess, reading while the daemon writes)."""
    result = npumon("events", "-c", config, "--json", *args)
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
def daemons():
    started = []
    yield started
    for daemon in started:
        daemon.stop()


def test_history_survives_kill_9_and_a_sticky_finding_waits_for_ack(tmp_path, config, daemons):
    # 1: a chip in Alarm with three error codes, another in Warning; then kill -9.
    first = Daemon(tmp_path, config, "health-alarm")
    daemons.append(first)
    wait_until(has(tmp_path, "finding_fired", "npu0/chip0", "health-alarm"), "health-alarm to be recorded")
    wait_until(lambda: len(stored(tmp_path, kinds=["error_code_new"])) == 4, "the error codes")
    first.kill_9()
    conn = sqlite3.connect(events_path(str(tmp_path / "state")))
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()
    listed = npumon("events", "-c", config, "--npu", "0")
    assert listed.returncode == 0
    assert re.search(r"chip_appeared +npu0/chip0 +info", listed.stdout)
    assert re.search(r"finding_fired +npu0/chip0 +critical +health-alarm: health Alarm",
                     listed.stdout)
    assert {e["details"]["code"] for e in events(config, "--kind", "error_code_new", "--npu", "0")} == {
        "A4025021", "8C03A000", "8C084E00"}

    # 2: the same host, now healthy except for an uncorrectable ECC error on npu2 (sticky); kill -9 again.
    second = Daemon(tmp_path, config, "ecc-rising")
    daemons.append(second)
    wait_until(has(tmp_path, "finding_fired", "npu2/chip0", "ecc-uncorrectable"), "ecc-uncorrectable to be recorded")
    wait_until(has(tmp_path, "finding_resolved", "npu0/chip0", "health-alarm"), "health-alarm to resolve")
    assert {(e["subject"], e["details"]["previous"], e["details"]["health"])
            for e in events(config, "--kind", "health_changed")} == {
        ("npu0/chip0", "Alarm", "OK"), ("npu1/chip0", "Warning", "OK")}
    second.kill_9()

    # 3: a healthy host: the sticky finding is still there, and the chips were not logged again.
    third = Daemon(tmp_path, config, "healthy")
    daemons.append(third)
    wait_until(lambda: third.get("/status").json().get("chips"), "the first poll")
    assert third.findings("ecc-uncorrectable") == {("ecc-uncorrectable", "npu2/chip0")}
    assert third.metric_findings("ecc-uncorrectable") == {("ecc-uncorrectable", "npu2/chip0")}
    appeared = [e["subject"] for e in events(config, "--kind", "chip_appeared")]
    assert sorted(appeared) == ["npu{}/chip0".format(n) for n in range(8)]
    assert len(events(config, "--kind", "finding_fired", "--npu", "2")) == 1

    acked = npumon("ack", "-c", config, "ecc-uncorrectable", "npu2/chip0", "--note", "card replaced")
    assert acked.returncode == 0 and acked.stdout.startswith("acknowledged ecc-uncorrectable on npu2/chip0"), acked
    wait_until(lambda: not third.findings("ecc-uncorrectable"), "the acknowledgement to reach the daemon")
    resolved = wait_until(lambda: stored(tmp_path, kinds=["finding_resolved"], npu=2), "the resolution to be recorded")
    assert resolved[-1].details["reason"] == "acknowledged"
    assert third.stop() == 0


def test_cpu_bottleneck_is_the_same_in_status_metrics_and_events(tmp_path, config, daemons):
    daemon = Daemon(tmp_path, config, "cpu-bottleneck")
    daemons.append(daemon)
    in_status = wait_until(lambda: daemon.findings("cpu-bottleneck"), "cpu-bottleneck in /status")

    def recorded():
        active = set()
        for event in events(config, "--kind", "finding_fired", "--kind", "finding_resolved"):
            key = (event["details"]["rule"], event["subject"])
            (active.add if event["kind"] == "finding_fired" else active.discard)(key)
        return {key for key in active if key[0] == "cpu-bottleneck"}

    in_events = wait_until(lambda: recorded() == in_status and in_status, "the same findings in events")
    assert daemon.metric_findings("cpu-bottleneck") == in_status == in_events
    assert len(in_status) == 8  # every chip of the simulated Atlas 800I A2 is starved
    assert daemon.get("/status").json()["sources"]["events"]["ok"] is True
    assert daemon.stop() == 0
