"""One finding per cause, everywhere: in a real `npumon run --simulate=overheat` daemon the critical temperature
finding hides the warning on the same chip in /status, in npumon_finding_active and in the webhook; and once
`npumon ack`ed it is listed as acknowledged (not silently OK) while the chip is still hot."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from daemon_harness import DaemonProcess, wait_until
from recording_server import RecordingServer

pytestmark = pytest.mark.integration
TIMEOUT = 30.0

CONFIG = """\
state_dir: {state}
poll: {{table_seconds: 0.3, health_seconds: 0.3, ecc_seconds: 0.3, host_seconds: 0.3,
        usages_seconds: 0, power_seconds: 0, board_seconds: 0}}
rule_files: [{rules}]
notify:
  receivers:
    - name: hook
      type: webhook
      url: http://127.0.0.1:{port}/hook
      group_wait_seconds: 0
      group_interval_seconds: 0
"""
# Without its minute's wait the warning fires on the hottest chip too, so only inhibition can hide it.
RULES = "rules:\n  - {id: temperature-warning, for: 0s}\n"
HOT, WARM = "npu0/chip0", "npu1/chip0"  # the overheat scenario: 87 C and 83 C


def temperature_findings(document):
    return {(f["rule"], f["subject"]) for f in document if f["rule"].startswith("temperature-")}


def metric_findings(daemon):
    families = text_string_to_metric_families(daemon.get("/metrics").text)
    return {(s.labels["rule"], s.labels["subject"]) for family in families if family.name == "npumon_finding_active"
            for s in family.samples if s.labels["rule"].startswith("temperature-") and s.value == 1}


def notified(receiver):
    return {(alert["labels"]["alertname"], alert["labels"].get("subject"))
            for request in list(receiver.requests) for alert in request.json()["alerts"]
            if alert["labels"]["alertname"].startswith("temperature-")}


def test_the_critical_temperature_alone_is_reported_and_an_ack_shows_as_acknowledged(tmp_path, cli):
    expected = {("temperature-critical", HOT), ("temperature-warning", WARM)}
    with RecordingServer() as receiver:
        rules = tmp_path / "rules.yaml"
        rules.write_text(RULES, encoding="utf-8")
        config = tmp_path / "npumon.yaml"
        config.write_text(CONFIG.format(state=tmp_path / "state", rules=rules, port=receiver.port), encoding="utf-8")
        daemon = DaemonProcess(["-c", str(config), "--simulate=overheat", "--listen", "127.0.0.1:0"])
        try:
            daemon.wait_serving(TIMEOUT)
            status = lambda: daemon.get("/status").json()  # noqa: E731
            wait_until(lambda: temperature_findings(status()["findings"]) == expected, TIMEOUT,
                       what="one temperature finding per hot chip in /status")
            assert metric_findings(daemon) == expected
            wait_until(lambda: notified(receiver) == expected, TIMEOUT, what="the same two in the webhook")

            # `npumon ack` in this process (the daemon's is another): no interpreter start
            acked = cli("ack", "-c", str(config), "temperature-critical", HOT)
            assert acked.returncode == 0, acked.stderr
            wait_until(lambda: temperature_findings(status()["acknowledged"]) == {("temperature-critical", HOT)},
                       TIMEOUT, what="the acknowledged finding listed as acknowledged")
            document = status()
            # still hot: the acknowledged critical finding keeps hiding the warning on its chip
            assert temperature_findings(document["findings"]) == {("temperature-warning", WARM)}
            assert document["status"] == "warning"
            assert metric_findings(daemon) == {("temperature-warning", WARM)}
            assert ("temperature-warning", HOT) not in notified(receiver)
        finally:
            daemon.close()
