"""A real Alertmanager (Debian's prometheus-alertmanager) on 127.0.0.1: the daemon, polling a simulated
host whose chip is in Alarm and recovers (the test switches the scenario once it has seen the alert), pushes the firing and then the resolved alert; both are read
back through Alertmanager's own API, a silence applies, and Alertmanager's own routing notifies a webhook."""

import os
import shutil
import subprocess

import pytest
import requests

from daemon_harness import free_port, wait_until
from npumon.settings import parse_config
from npumon.daemon.daemon import Daemon
from npumon.sim import prepare_simulation, set_scenario
from npumon.sim.target import simulated_target
from recording_server import RecordingServer

ALERTMANAGER = shutil.which("prometheus-alertmanager") or "/usr/bin/prometheus-alertmanager"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not os.access(ALERTMANAGER, os.X_OK),
                       reason="prometheus-alertmanager is not installed (apt-get install prometheus-alertmanager)"),
]

SCENARIO = """\
description: chip 0 in Alarm; chip 1 in Warning throughout
product: atlas-800i-a2
chips:
  overrides:
    - devices: [0]
      health: Alarm
      errors:
        - {code: "A4025021", information: ascend_monitor adda heart beat lost error}
    - devices: [1]
      health: Warning
"""
RECOVERED = """\
description: chip 0 OK again; chip 1 still in Warning
product: atlas-800i-a2
chips:
  overrides:
    - devices: [1]
      health: Warning
"""

ALERTMANAGER_CONFIG = """\
route:
  receiver: recorder
  group_by: [alertname, subject]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: recorder
    webhook_configs:
      - url: {url}
        send_resolved: true
"""


@pytest.fixture
def recorder():
    with RecordingServer() as server:
        yield server


@pytest.fixture
def alertmanager(tmp_path, recorder):
    port = free_port()
    config = tmp_path / "alertmanager.yml"
    config.write_text(ALERTMANAGER_CONFIG.format(url=recorder.url("/from-alertmanager")))
    log = open(str(tmp_path / "alertmanager.log"), "w")
    process = subprocess.Popen([ALERTMANAGER, "--config.file=" + str(config),
                                "--storage.path=" + str(tmp_path / "am-data"),
                                "--web.listen-address=127.0.0.1:{}".format(port), "--cluster.listen-address="],
                               stdout=log, stderr=subprocess.STDOUT)
    base = "http://127.0.0.1:{}".format(port)

    def ready():
        try:
            return requests.get(base + "/-/ready", timeout=1).status_code == 200
        except requests.RequestException:
            return process.poll() is not None  # died: stop waiting, the assert below says so

    try:
        wait_until(ready, 20, what="Alertmanager to start")
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


def alerts(base, **filters):
    return {alert["labels"]["alertname"]: alert
            for alert in requests.get(base + "/api/v2/alerts", params=filters, timeout=5).json()}


def test_firing_then_resolved_through_alertmanager(tmp_path, alertmanager, recorder):
    scenario, recovered = tmp_path / "alarm.yaml", tmp_path / "recovered.yaml"
    scenario.write_text(SCENARIO)
    recovered.write_text(RECOVERED)
    config = parse_config("""\
state_dir: {state}
poll: {{table_seconds: 0.3, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 0,
        board_seconds: 0}}
notify:
  labels: {{cluster: test}}
  receivers:
    - name: am
      type: alertmanager
      url: {url}
""".format(state=tmp_path / "state", url=alertmanager), str(tmp_path / "npumon.yaml"))
    # A silence made in Alertmanager applies to what npumon pushes.
    silence = {"matchers": [{"name": "alertname", "value": "health-warning", "isRegex": False}],
               "startsAt": "2000-01-01T00:00:00Z", "endsAt": "2100-01-01T00:00:00Z", "createdBy": "test",
               "comment": "npumon test"}
    assert requests.post(alertmanager + "/api/v2/silences", json=silence, timeout=5).status_code == 200

    sim = prepare_simulation(str(tmp_path / "sim"), str(scenario))
    daemon = Daemon(config, simulated_target(sim),
                    listen="127.0.0.1:0")
    daemon.start()
    try:
        firing = wait_until(lambda: alerts(alertmanager).get("health-alarm"), 15, what="the firing alert")
        assert firing["status"]["state"] == "active"
        labels = firing["labels"]
        assert labels["severity"] == "critical" and labels["subject"] == "npu0/chip0"
        assert labels["npu"] == "0" and labels["chip"] == "0" and labels["cluster"] == "test"
        assert labels["host"] == "sim-host"  # the simulated host's name, as /status and the metrics give it
        assert firing["annotations"]["summary"].startswith("health Alarm") and firing["annotations"]["description"]
        warning = wait_until(lambda: alerts(alertmanager).get("health-warning"), 5, what="the warning alert")
        assert warning["status"]["state"] == "suppressed" and warning["status"]["silencedBy"]

        # The chip recovers: the resolved push ends the alert in Alertmanager.
        set_scenario(str(tmp_path / "sim"), str(recovered))
        wait_until(lambda: "health-alarm" not in alerts(alertmanager), 15, what="the resolved alert")
        assert "health-warning" in alerts(alertmanager)  # still firing, still silenced
        metrics = requests.get("http://127.0.0.1:{}/metrics".format(daemon.web.port), timeout=5).text
        assert 'npumon_notifications_total{receiver="am",result="delivered"} 3.0' in metrics
        assert 'npumon_notification_outbox_length{receiver="am"} 0.0' in metrics
    finally:
        daemon.stop()

    # Alertmanager routed it like any alert of its own: firing, then resolved, to its webhook receiver.
    def alarm_notifications():
        return [alert["status"] for request in recorder.requests for alert in request.json()["alerts"]
                if alert["labels"]["alertname"] == "health-alarm"]

    statuses = wait_until(lambda: "resolved" in alarm_notifications() and alarm_notifications(), 10,
                          what="Alertmanager's resolved notification")
    assert statuses[0] == "firing" and statuses[-1] == "resolved"
    assert not [request for request in recorder.requests
                if any(alert["labels"]["alertname"] == "health-warning" for alert in request.json()["alerts"])]
