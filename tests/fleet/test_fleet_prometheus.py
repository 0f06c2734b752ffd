"""The dashboards, the alert rules and `npumon fleet` against a real Prometheus scraping a simulated fleet.

One fleet for the module (npumon.sim.fleet, as `npumon fleet-sim` starts it): five simulated hosts with
different scenarios and products, one target with no daemon (a host that is down), and Debian's
`prometheus` scraping them every 2 s with the shipped scrape job (exporters/prometheus.yml) and the shipped
alert rules (alerts/npumon.rules.yml). The rules are loaded from a temporary copy whose `for:` durations are
all rewritten to 0s, so that alerts fire within the test's minute instead of after 1-5 minutes; the
expressions are the shipped ones, unchanged.

* Every PromQL expression of every panel and every template variable of every dashboard is run against
  that Prometheus, with the variables set to real values ($host to each simulated host on the node
  dashboards) and Grafana's built-in intervals set to concrete durations, and must return data.
* Every alert the scenarios should raise is firing in /api/v1/alerts.
* `npumon fleet` lists the unhealthy hosts, and their findings, first.
"""

import importlib.util
import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time

import pytest
import requests
import yaml

from npumon.sim.fleet import DEFAULT_FLEET, FAST_POLL, SHIPPED_ALERT_RULES, Fleet, host_address
from paths import REPO

DASHBOARD_DIR = os.path.join(REPO, "grafana", "dashboards")
PROMETHEUS = shutil.which("prometheus")
SCRAPE_INTERVAL = "2s"
# What Grafana would put in for a 2 s scrape interval and a 5 minute dashboard range.
BUILT_INS = {"__rate_interval": "20s", "__interval": "2s", "__range": "5m"}
RANGE_SECONDS = 300
DATA_DEADLINE_SECONDS = 150  # only a failure waits this long; a loaded CI machine polls slower than asked
# Every tier every few seconds (first run 0.3-3 s after the start): the data and the alerts that need a tier's
# second poll (an ECC increase) are there within seconds. Cheap: the hosts answer npu-smi in-process.
POLL = {"table_seconds": 2, "host_seconds": 2, "usages_seconds": 3, "power_seconds": 3, "health_seconds": 3,
        "ecc_seconds": 3, "board_seconds": 300}
JOB = "npumon"

# Panels that need a feature the fleet turns on for one host only.
FEATURE_HOSTS = {"probe": "sim-200i-control", "control": "sim-200i-control", "network": "sim-a2-healthy",
                 "triton": "sim-200i-control"}  # model load time: only Triton exports it

# slow: five simulated hosts and a Prometheus run in real time for the whole module (about 20 s of CPU and
# 30-45 s of a worker); .ci/run runs the slow suite on every change
pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not on PATH (Debian: apt-get install prometheus)")]

RUNNING_HOSTS = [host.name for host in DEFAULT_FLEET if host.running]


def _ports_free(base_port):
    addresses = [("127.0.0.1", base_port)] + [host_address(i, base_port).split(":") for i in range(len(DEFAULT_FLEET))]
    for address, port in addresses:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, int(port)))
            except OSError:
                return False
    return True


def _free_base_port():
    for _ in range(50):
        base = random.randrange(20000, 32000, 10)  # below the ephemeral ports (32768-60999)
        if _ports_free(base):
            return base
    pytest.skip("no free block of loopback ports")


def rules_without_for(source, destination):
    """A copy of the alert rules with every `for:` set to 0s (the test cannot wait 5 minutes)."""
    with open(source, encoding="utf-8") as handle:
        document = yaml.safe_load(handle)
    for group in document["groups"]:
        for rule in group["rules"]:
            if "for" in rule:
                rule["for"] = "0s"
    with open(destination, "w", encoding="utf-8") as handle:
        yaml.safe_dump(document, handle, sort_keys=False)
    return destination


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    directory = tmp_path_factory.mktemp("fleet")
    rules = [rules_without_for(SHIPPED_ALERT_RULES, str(directory / "npumon.rules.yml"))] \
        if os.path.exists(SHIPPED_ALERT_RULES) else []
    with Fleet(str(directory), base_port=_free_base_port(), prometheus=PROMETHEUS, rule_files=rules,
               scrape_interval=SCRAPE_INTERVAL, evaluation_interval=SCRAPE_INTERVAL,
               poll=dict(FAST_POLL, **POLL)) as running:
        running.started = time.monotonic()
        _wait_for_prometheus(running)
        yield running
        assert not running.exited(), {name: running.log_tail(name) for name in running.exited()}


def _wait_for_prometheus(fleet):
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if requests.get(fleet.prometheus_url + "/-/ready", timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        if "prometheus" in fleet.exited():
            break
        time.sleep(0.5)
    pytest.fail("prometheus did not become ready:\n" + fleet.log_tail("prometheus", 20))


def _api(fleet, path, **params):
    response = requests.post(fleet.prometheus_url + path, data=params, timeout=10)
    document = response.json()
    assert document["status"] == "success", (path, params, document)
    return document["data"]


def has_data(fleet, expr, instant):
    now = time.time()
    if instant:
        return bool(_api(fleet, "/api/v1/query", query=expr, time=now)["result"])
    result = _api(fleet, "/api/v1/query_range", query=expr, start=now - RANGE_SECONDS, end=now, step=2)["result"]
    return any(series["values"] for series in result)


def substitute(text, values):
    def replace(match):
        name = match.group(1) or match.group(2)
        return values[name] if name in values else BUILT_INS[name]
    return re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", replace, text)


def eventually(find_problems, deadline_seconds):
    """Re-check until there is no problem left or the deadline passes; the last problems."""
    deadline = time.monotonic() + deadline_seconds
    while True:
        problems = find_problems()
        if not problems or time.monotonic() > deadline:
            return problems
        time.sleep(1)  # half the scrape interval: new samples come every 2 s


def load_dashboards():
    result = {}
    for name in sorted(os.listdir(DASHBOARD_DIR)):
        with open(os.path.join(DASHBOARD_DIR, name), encoding="utf-8") as handle:
            result[name] = json.load(handle)
    return result


def panel_features():
    """panel title -> feature, from the generator (the JSON has no room for it)."""
    spec = importlib.util.spec_from_file_location("build_dashboards", os.path.join(REPO, "grafana", "build_dashboards.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    items = module.fleet_panels() + module.node_panels()
    return {item.title: item.feature for item in items if getattr(item, "feature", None)}


def variable_values(host):
    """Template variable values: the job, one host (".*" is the fleet dashboards' All), every NPU / chip id."""
    return {"job": JOB, "host": host, "npu": ".*", "id": ".*", "datasource": "prometheus"}


def hosts_for(dashboard_name, title, features):
    if "fleet" in dashboard_name:
        return [".*"]  # the fleet dashboards' All
    feature = features.get(title)
    return [FEATURE_HOSTS[feature]] if feature else RUNNING_HOSTS


def test_every_panel_query_returns_data(fleet):
    dashboards = load_dashboards()
    features = panel_features()

    def problems():
        missing = []
        for name, dashboard in dashboards.items():
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    hosts = hosts_for(name, panel["title"], features)
                    # A target has data if some host has it; a feature panel, on the host with the feature.
                    if not any(has_data(fleet, substitute(target["expr"], variable_values(host)),
                                        target["instant"]) for host in hosts):
                        missing.append("{} / {} / {}: {}".format(name, panel["title"], target["refId"], target["expr"]))
        return missing

    assert eventually(problems, DATA_DEADLINE_SECONDS - (time.monotonic() - fleet.started)) == []


def test_chip_panels_have_data_for_every_host(fleet):
    """The per-chip panels work on every product of the fleet (310P, 310B, 910B, A3), not just on one."""
    dashboard = load_dashboards()["npumon-node.json"]
    # Not Power: 310P chips (the simulated 300I Duo) report none, npu-smi prints NA.
    wanted = ("Temperature", "AI Core utilisation", "Utilisation by engine", "Memory in use", "Memory bandwidth",
              "Hottest chip", "Unhealthy chips", "Host CPU per NUMA node", "Serving queue against AI Core", "Sources")
    panels = [panel for panel in dashboard["panels"] if panel["title"] in wanted and panel["type"] != "row"]
    assert len({panel["title"] for panel in panels}) == len(wanted)

    def problems():
        return ["{} on {}: {}".format(panel["title"], host, target["expr"])
                for panel in panels for target in panel["targets"] for host in RUNNING_HOSTS
                if not has_data(fleet, substitute(target["expr"], variable_values(host)), target["instant"])]

    assert eventually(problems, DATA_DEADLINE_SECONDS - (time.monotonic() - fleet.started)) == []


def test_every_template_variable_query_returns_values(fleet):
    """On the fleet dashboards with every host; on the node dashboards with each host chosen in turn:
    every host for the native names, and some host for the npu-exporter ones (npumon serves those per chip
    only where it knows the chip's id, which the simulated 910B hosts do not print)."""
    for name, dashboard in load_dashboards().items():
        hosts = [".*"] if "fleet" in name else RUNNING_HOSTS
        for variable in dashboard["templating"]["list"]:
            if variable["type"] != "query":
                continue
            selector, label = re.fullmatch(r"label_values\((.+), (\w+)\)", variable["query"]["query"]).groups()
            answered = {host: _label_values(fleet, label, substitute(selector, variable_values(host)))
                        for host in hosts}
            where = "{}: variable {} ({})".format(name, variable["name"], variable["query"]["query"])
            assert any(answered.values()), where + " has no values"
            if "npu-exporter" not in name:
                assert all(answered.values()), where + " has no values for " + str(
                    [host for host, values in answered.items() if not values])
            if variable["name"] == "host" and "npu-exporter" not in name:
                assert set(RUNNING_HOSTS) <= set(answered[hosts[0]])


def _label_values(fleet, label, selector):
    response = requests.get(fleet.prometheus_url + "/api/v1/label/{}/values".format(label),
                            params={"match[]": selector}, timeout=10)
    return response.json()["data"]


# Every alert the scenarios raise, by alert name, host and subject (None: a host-level alert).
# Not expected: NpuChipEccUncorrectableErrors and NpuChipEccPagesIsolated. The ecc-rising scenario's
# double-bit error and isolated page are there from the start, and those alerts use increase(...[1h]) > 0,
# which does not count a value the series already had when Prometheus first saw it; npumon's own
# ecc-uncorrectable finding does catch it (NpumonFindingActive below).
EXPECTED_ALERTS = [
    ("NpumonTargetDown", "sim-a2-offline", None),
    ("NpuChipHealthAlarm", "sim-duo-alarm", "npu2/chip0"),
    ("NpuChipHealthWarning", "sim-duo-alarm", "npu2/chip1"),
    ("NpuChipTemperatureCritical", "sim-a3-overheat", "npu0/chip0"),
    ("NpuChipTemperatureHigh", "sim-a3-overheat", "npu0/chip0"),
    ("NpuChipTemperatureHigh", "sim-a3-overheat", "npu0/chip1"),
    ("NpuChipEccCorrectableErrorsRising", "sim-a2-ecc", "npu2/chip0"),
    ("NpumonFindingActive", "sim-duo-alarm", "npu2/chip0"),
    ("NpumonFindingActive", "sim-duo-alarm", "npu2/chip1"),
    ("NpumonFindingActive", "sim-a3-overheat", "npu0/chip0"),
    ("NpumonFindingActive", "sim-a2-ecc", "npu2/chip0"),
]


@pytest.mark.skipif(not os.path.exists(SHIPPED_ALERT_RULES), reason="alerts/npumon.rules.yml is not there")
def test_the_alerts_the_scenarios_raise_are_firing(fleet):
    def problems():
        firing = {(alert["labels"]["alertname"], alert["labels"].get("host"), alert["labels"].get("subject"))
                  for alert in _alerts(fleet) if alert["state"] == "firing"}
        return [alert for alert in EXPECTED_ALERTS if alert not in firing]

    assert eventually(problems, DATA_DEADLINE_SECONDS - (time.monotonic() - fleet.started)) == []


def _alerts(fleet):
    return requests.get(fleet.prometheus_url + "/api/v1/alerts", timeout=10).json()["data"]["alerts"]


def test_the_healthy_host_raises_no_chip_alert(fleet):
    chip_alerts = [alert for alert in _alerts(fleet)
                   if alert["labels"].get("host") == "sim-a2-healthy" and alert["labels"]["alertname"].startswith("NpuChip")]
    assert chip_alerts == []


def run_fleet(fleet, *args):
    return subprocess.run([sys.executable, "-m", "npumon.cli.main", "fleet", "--prometheus", fleet.prometheus_url] +
                          list(args), capture_output=True, text=True, timeout=60)


def test_npumon_fleet_lists_the_unhealthy_hosts_and_their_findings_first(fleet):
    unhealthy = {"sim-duo-alarm", "sim-a3-overheat", "sim-a2-ecc"}

    def problems():
        document = json.loads(run_fleet(fleet, "--json").stdout)
        statuses = {row["host"]: row["status"] for row in document["hosts"]}
        expected = dict({host: "critical" for host in unhealthy}, **{"sim-a2-offline": "down"})
        return [(host, statuses.get(host), status) for host, status in expected.items() if statuses.get(host) != status]

    assert eventually(problems, DATA_DEADLINE_SECONDS - (time.monotonic() - fleet.started)) == []
    result = run_fleet(fleet, "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    order = [row["host"] for row in document["hosts"]]
    assert set(order[:3]) == unhealthy and order[3] == "sim-a2-offline"
    assert set(order[4:]) == {"sim-a2-healthy", "sim-200i-control"}
    # findings follow the host order, so the first host's findings come first
    finding_hosts = [finding["host"] for finding in document["findings"]]
    assert finding_hosts[0] == order[0]
    assert finding_hosts == sorted(finding_hosts, key=order.index)
    by_rule = {(f["host"], f["rule"], f["subject"]): f for f in document["findings"]}
    overheat = by_rule[("sim-a3-overheat", "temperature-critical", "npu0/chip0")]
    assert re.match(r"temperature \d+ C, at or above the critical 85 C", overheat["summary"])
    assert overheat["hint"].startswith("Check the airflow first")
    alarm = by_rule[("sim-duo-alarm", "health-alarm", "npu2/chip0")]
    assert "8C03A000" in alarm["summary"] and "A4025021" in alarm["summary"]
    assert document["worst_chips"][0]["health"] == "Alarm"

    # The text view, a moment later (the order among the critical hosts may have changed since).
    text = run_fleet(fleet).stdout
    host_lines = [line.split()[0] for line in text.splitlines()[2:8]]
    assert set(host_lines[:3]) == unhealthy and host_lines[3] == "sim-a2-offline"
    findings_part = text.split("\nFINDINGS\n", 1)[1]
    assert findings_part.lstrip().split()[1] == host_lines[0]
    assert "hint: " in findings_part
