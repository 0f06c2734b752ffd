"""Messages a new user met that said the wrong thing or nothing (issue 21's "Messages"), each as it reads now."""

import json
import subprocess
import sys

import pytest
import requests

from daemon_harness import DaemonProcess, wait_until
from recording_server import RecordingServer


def test_a_port_that_is_not_a_number_says_so(run, tmp_path):
    code, _, err = run("run", "--listen", ":19803x")
    assert code == 2 and err == "npumon: --listen: listen address ':19803x': port '19803x' is not a number\n"
    assert "0..65535" in run("run", "--listen", ":70000")[2]
    config = tmp_path / "npumon.yaml"
    config.write_text("exporter:\n  listen: ':19803x'\n")
    code, out, _ = run("check", "--simulate", "--config", str(config))
    assert code == 3 and out == "NPU UNKNOWN - {}:2: exporter.listen: listen address ':19803x': port '19803x' is " \
                                "not a number\n".format(config)


def test_simulation_options_without_simulate_are_refused(run, tmp_path):
    code, out, _ = run("check", "--sim-product", "atlas-a3")
    assert (code, out) == (3, "NPU UNKNOWN - --sim-product needs --simulate\n")
    assert run("run", "--sim-product", "atlas-a3") == (2, "", "npumon: --sim-product needs --simulate\n")
    assert run("control", "status", "--sim-state", str(tmp_path)) == (2, "", "npumon: --sim-state needs --simulate\n")


def test_since_after_until_is_an_error_not_an_empty_answer(run, tmp_path):
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(tmp_path))
    code, out, err = run("events", "--since", "1h", "--until", "2h", "--config", str(config))
    assert code == 2 and out == "" and err.startswith("npumon: --since 1h (") and ") is after --until 2h (" in err


def test_a_process_count_reads_right_for_one_process(run):
    code, out, _ = run("check", "--simulate=cpu-bottleneck", "--json")
    summaries = [finding["summary"] for finding in json.loads(out)["findings"] if finding["rule"] == "cpu-bottleneck"]
    assert summaries and all("NPU processes: 1)" in summary for summary in summaries)
    assert not any("1 NPU processes" in summary for summary in summaries)


@pytest.mark.e2e
def test_the_start_up_line_gives_the_address_and_alerts_name_the_host_status_names(tmp_path):
    with RecordingServer() as hook:
        config = tmp_path / "npumon.yaml"
        config.write_text("state_dir: {state}\npoll: {{table_seconds: 1}}\nnotify:\n  receivers:\n"
                          "    - {{name: hook, type: webhook, url: '{url}', group_wait_seconds: 0, "
                          "group_interval_seconds: 0}}\n".format(state=tmp_path / "state", url=hook.url("/hook")))
        daemon = DaemonProcess(["--simulate=overheat", "--config", str(config), "--listen", "127.0.0.1:0"])
        try:
            port = daemon.wait_serving()
            line = daemon.wait_for_line(r"serving on port \d+ at (\S+);").group(1)
            assert line == "http://127.0.0.1:{}".format(port)
            wait_until(lambda: hook.requests, timeout=30, what="the first notification")
            status = requests.get(daemon.url("/status"), timeout=5).json()
        finally:
            daemon.stop()
    hosts = {alert["labels"]["host"] for alert in hook.requests[0].json()["alerts"]}
    assert hosts == {status["host"]} == {"sim-host"}


def test_the_version_answers_to_dash_capital_v():
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "-V"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.startswith("npumon ") and proc.stdout.split()[1][0].isdigit()


@pytest.mark.parametrize("scenario", ["health-critical", "health-alarm", "hbm-ecc-fault"])
def test_one_recommendation_per_chip_and_no_hint_contradicts_itself(run, scenario):
    code, out, _ = run("check", "--simulate=" + scenario, "--timeout", "30", "--json")
    chips = {}
    for finding in json.loads(out)["findings"]:
        if finding["subject"] != "host" and finding.get("repair_action"):
            chips.setdefault(finding["subject"], []).append(finding)
            strong = finding["repair_action"] not in ("none", "restart_workload")
            assert not (strong and "stays in service" in finding["hint"]), finding
            assert finding["hint"].count("Recommended") == 1, finding
    assert chips and all(len({f["repair_action"] for f in found}) == 1 for found in chips.values())
    if scenario == "health-critical":  # "probably unusable": at least a reset, not a retry of the request
        assert chips["npu2/chip0"][0]["repair_action"] == "reset_npu"
        assert "AIV" in chips["npu2/chip0"][0]["hint"] and "HBM" not in chips["npu2/chip0"][0]["hint"]
    if scenario == "hbm-ecc-fault":
        # the kernel log's fault lines are the chip's too (attributed by their code), and so share its one action
        assert {f["rule"] for f in chips["npu3/chip0"]} == {"health-alarm", "ecc-uncorrectable", "driver-fault-repeating",
                                                           "driver-transient-fault"}
