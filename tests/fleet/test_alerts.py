"""The fleet-side files in alerts/: promtool checks and unit-tests the alerting rules, amtool checks the
Alertmanager example and its routing, and a real Alertmanager applies its inhibition rule."""

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from daemon_harness import free_port
from npumon.outputs.exporter import NATIVE_METRICS
from paths import REPO

ALERTS = Path(REPO) / "alerts"
RULES = ALERTS / "npumon.rules.yml"
RULE_TESTS = ALERTS / "npumon.rules.test.yml"
AM_EXAMPLE = ALERTS / "alertmanager.example.yml"

PROMTOOL = shutil.which("promtool")
AMTOOL = shutil.which("amtool")
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")

needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)")
needs_amtool = pytest.mark.skipif(AMTOOL is None,
                                  reason="amtool is not installed (apt-get install prometheus-alertmanager)")


def run(*argv):
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=60)


def alert_rules():
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


# --- promtool -------------------------------------------------------------------------------------------


@needs_promtool
def test_promtool_check_rules():
    proc = run(PROMTOOL, "check", "rules", str(RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: {} rules found".format(len(alert_rules())) in proc.stdout


@needs_promtool
def test_promtool_unit_tests():
    proc = run(PROMTOOL, "test", "rules", str(RULE_TESTS))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


# --- the rules file itself ------------------------------------------------------------------------------


def test_every_alert_is_unit_tested_and_annotated():
    tested = {case["alertname"] for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
              for case in test["alert_rule_test"] if case.get("exp_alerts")}
    for rule in alert_rules():
        name = rule["alert"]
        assert name in tested, "{} has no unit test in which it fires".format(name)
        assert rule["annotations"]["summary"] and "Runbook:" in rule["annotations"]["description"], name
        # Routing needs a severity: set on the rule, or carried by the series (npumon_finding_active has it).
        assert rule.get("labels", {}).get("severity") in ("warning", "critical") \
            or "npumon_finding_active" in rule["expr"], name


def test_rules_use_only_metrics_npumon_exports():
    exported = {spec.name for spec in NATIVE_METRICS}
    used = {name for rule in alert_rules() for name in re.findall(r"\bnpumon_[a-z_]+", rule["expr"])}
    assert used and used <= exported, used - exported


def test_chip_alerts_carry_npumons_subject_label():
    """The inhibition rule matches chip alerts and npumon findings on `subject`."""
    for rule in alert_rules():
        if "npumon_chip_" in rule["expr"]:
            assert rule["labels"]["subject"] == "npu{{ $labels.npu }}/chip{{ $labels.chip }}", rule["alert"]


# --- the Alertmanager example ---------------------------------------------------------------------------


@needs_amtool
def test_amtool_check_config():
    proc = run(AMTOOL, "check-config", str(AM_EXAMPLE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


@needs_amtool
@pytest.mark.parametrize("labels, receiver", [
    (["severity=critical", "alertname=NpuChipTemperatureCritical", "instance=a:9842"], "npu-pager"),
    (["severity=warning", "alertname=NpuChipTemperatureHigh", "instance=a:9842"], "npu-chat"),
    (["severity=info", "alertname=NpumonFindingActive", "rule=memory-bound"], "blackhole"),
    (["severity=critical", "alertname=health-alarm", "host=a"], "npu-pager"),  # pushed by the daemon itself
])
def test_routing_by_severity(labels, receiver):
    proc = run(AMTOOL, "config", "routes", "test", "--config.file=" + str(AM_EXAMPLE), *labels)
    assert proc.returncode == 0 and proc.stdout.strip() == receiver, proc.stdout + proc.stderr


@pytest.fixture
def alertmanager(tmp_path):
    """Debian's Alertmanager on 127.0.0.1 with the example's route and inhibition rule; the receivers point at
    a closed local port (this test only reads Alertmanager's API, nothing is sent)."""
    config = yaml.safe_load(AM_EXAMPLE.read_text())
    nowhere = "http://127.0.0.1:{}/".format(free_port())
    config["receivers"] = [{"name": receiver["name"], "webhook_configs": [{"url": nowhere}]}
                           for receiver in config["receivers"]]
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = open(str(tmp_path / "alertmanager.log"), "w")
    process = subprocess.Popen([ALERTMANAGER, "--config.file=" + str(path), "--storage.path=" + str(tmp_path / "data"),
                                "--web.listen-address=127.0.0.1:{}".format(port), "--cluster.listen-address="],
                               stdout=log, stderr=subprocess.STDOUT)
    base = "http://127.0.0.1:{}".format(port)
    try:
        deadline = time.monotonic() + 20
        while process.poll() is None and time.monotonic() < deadline:
            try:
                if requests.get(base + "/-/ready", timeout=1).status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.1)
        assert process.poll() is None, (tmp_path / "alertmanager.log").read_text()
        yield base
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.mark.integration
@pytest.mark.skipif(ALERTMANAGER is None,
                    reason="prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)")
def test_critical_inhibits_warnings_for_the_same_instance_and_subject(alertmanager):
    def alert(name, severity, **labels):
        return {"labels": dict(labels, alertname=name, severity=severity), "annotations": {"summary": name}}

    posted = [
        alert("NpuChipTemperatureCritical", "critical", instance="a:9842", subject="npu0/chip0"),
        alert("NpuChipTemperatureHigh", "warning", instance="a:9842", subject="npu0/chip0"),
        alert("NpumonFindingActive", "warning", instance="a:9842", subject="npu0/chip0", rule="cpu-bottleneck"),
        alert("NpuChipTemperatureHigh", "warning", instance="a:9842", subject="npu1/chip0"),  # another chip
        alert("NpuChipTemperatureHigh", "warning", instance="b:9842", subject="npu0/chip0"),  # another host
        # Pushed by two daemons (no `instance`): one host's critical must not silence the other host's warning.
        alert("health-alarm", "critical", host="c", subject="npu0/chip0"),
        alert("health-warning", "warning", host="c", subject="npu0/chip0"),
        alert("health-warning", "warning", host="d", subject="npu0/chip0"),
    ]
    assert requests.post(alertmanager + "/api/v2/alerts", json=posted, timeout=5).status_code == 200

    def states():
        found = requests.get(alertmanager + "/api/v2/alerts", timeout=5).json()
        return {(a["labels"]["alertname"], a["labels"].get("instance") or a["labels"]["host"],
                 a["labels"]["subject"]): a["status"]["state"] for a in found}

    deadline = time.monotonic() + 10
    while len(states()) < len(posted) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert states() == {
        ("NpuChipTemperatureCritical", "a:9842", "npu0/chip0"): "active",
        ("NpuChipTemperatureHigh", "a:9842", "npu0/chip0"): "suppressed",
        ("NpumonFindingActive", "a:9842", "npu0/chip0"): "suppressed",
        ("NpuChipTemperatureHigh", "a:9842", "npu1/chip0"): "active",
        ("NpuChipTemperatureHigh", "b:9842", "npu0/chip0"): "active",
        ("health-alarm", "c", "npu0/chip0"): "active",
        ("health-warning", "c", "npu0/chip0"): "suppressed",
        ("health-warning", "d", "npu0/chip0"): "active",
    }
