"""The built-in rules that judge a trend or a duration fire on the scenario made for them, and stay quiet on
`healthy`.

`npumon check` sees one sample, so rules over windows (`increase(x, 1h)`, `delta(x, 3h)`) and `for:` timers
can only fire over a poll history. Most tests build that history on a fake clock (tests/clocked_host.py):
the collector, the rule engine and the in-process npu-smi share it, so the shipped poll intervals, `for:`
timers and windows apply unchanged and an hour of polls takes a moment. The windows are never shortened:
the rules fire because the recorded history already shows the trend the window asks about. One real
`npumon run --simulate` daemon per behaviour that needs one (the serving queue is served over HTTP on wall
time) keeps the daemon path honest: there `--sim-time-scale` runs the scenario's clock faster and a user
rule file shortens the `for:` timers to what a test can wait for.
"""

import pytest

from clocked_host import ClockedHost
from daemon_harness import DaemonProcess, kill_leftovers, sample, wait_until
from npumon.settings import parse_config
from npumon.sim import prepare_simulation

CONFIG = """\
state_dir: {state}
npu_smi_timeout_seconds: 10
poll: {{table_seconds: 0.5, ecc_seconds: 1, health_seconds: 1, host_seconds: 1,
        usages_seconds: 1, power_seconds: 0, board_seconds: 0}}
serving: {{interval_seconds: 0.5}}
probe: {{enabled: false}}
rule_files: [{rules}]
"""
# The built-in `for:` of the rules under test, shortened to what a test can wait for.
SHORT_FOR = """\
rules:
  - {id: serving-saturated, for: 1s}
  - {id: source-down, for: 2s}
  - {id: cpu-bottleneck, for: 3s}
  - {id: memory-bound, for: 3s}
  - {id: load-imbalance, for: 3s}
  - {id: pcie-degraded, for: 3s}
  - {id: temperature-warning, for: 3s}
  - {id: health-unknown, for: 3s}
"""
TIMEOUT = 60.0  # only a failure waits this long; a loaded CI machine polls slower than asked

# On the fake clock, with the shipped poll intervals (the table every 15 s, ecc every 5 min) and rules:
# scenario, time scale, the findings (rule, subject) it must raise, a text the first one's summary shows,
# and the clock time within which they must have fired.
CLOCKED_SCENARIOS = [
    # 30 more corrected errors a scenario minute on device 2: over 10 an hour by the second ecc poll
    ("ecc-rising", 1, {("ecc-single-bit-rising", "npu2/chip0"), ("ecc-uncorrectable", "npu2/chip0")},
     "rising faster than 10 per hour", 3600),
    # device 4 leaks 6 % of HBM per scenario hour; at 10x that is 1 % a clock minute, over 10 % in ~10 min
    ("hbm-leak", 10, {("hbm-leak", "npu4/chip0")}, "with the same processes", 3 * 3600),
    # every npu-smi call hangs (each taking its 10 s deadline): the source is down for the rule's 1 min
    ("hang", 1, {("source-down", "host")}, "npu-smi", 600),
    # device 3's link 3 at 2 lanes, its CRC errors rising 40 a minute: a rise by the second hccs poll (60 s)
    ("hccs-degraded", 1, {("hccs-errors-rising", "npu3/chip0"), ("hccs-lanes-degraded", "npu3/chip0"),
                          ("hccs-link-bandwidth-low", "npu3/chip0")}, "link 3: ", 600),
    # A3: NPU 2's dies count rising SIO CRC errors (the rise replaces the standing-count finding)
    ("sio-errors", 1, {("sio-crc-errors-rising", "npu2/chip0"), ("sio-crc-errors-rising", "npu2/chip1")},
     "SIO (die-to-die) CRC errors rising", 600),
]
CLOCKED_CONFIG = """\
state_dir: {state}
probe: {{enabled: false}}
"""
# In a real daemon: scenario, --sim-time-scale, the findings it must raise, a text the first one's summary shows
SCENARIOS = [
    # the queue grows by 30 a minute while every chip runs at about 95 % AI Core
    ("serving-saturated", 1, {("serving-saturated", "host")}, "serving queue growing"),
]


@pytest.fixture
def clocked_host(tmp_path):
    hosts = []

    def start(scenario, time_scale, extra=""):
        sim = prepare_simulation(str(tmp_path / "sim"), scenario, time_scale=time_scale)
        config = parse_config(CLOCKED_CONFIG.format(state=tmp_path / "state") + extra)
        hosts.append(ClockedHost(config, sim))
        return hosts[-1]

    yield start
    for host in hosts:
        host.close()


@pytest.mark.parametrize("scenario, time_scale, expected, summary, within", CLOCKED_SCENARIOS,
                         ids=[row[0] for row in CLOCKED_SCENARIOS])
def test_trend_rule_fires_on_its_scenario_over_clocked_polls(clocked_host, scenario, time_scale, expected, summary,
                                                             within):
    host = clocked_host(scenario, time_scale)
    started = host.clock()
    while not expected <= {(finding.rule, finding.subject) for finding in host.step()}:
        assert host.clock() - started < within, "{} not raised within {} s of polls; active: {}".format(
            sorted(expected), within, sorted((f.rule, f.subject) for f in host.findings))
    findings = {(finding["rule"], finding["subject"]): finding for finding in host.status()["findings"]}
    expected_rules = {rule for rule, _ in expected}
    # the rule fires for the scenario's subject only
    assert {key for key in findings if key[0] in expected_rules} == expected
    assert summary in findings[min(expected)]["summary"]
    for key in expected:
        assert findings[key]["hint"], key
    metrics = host.metrics()
    for rule, subject in expected:
        assert sample(metrics, "npumon_finding_active", rule=rule, subject=subject) == 1.0


def test_healthy_stays_quiet_over_hours_of_clocked_polls(clocked_host, tmp_path):
    """Short `for:` timers and a fast scenario clock on `healthy`: after half an hour of polls (5 scenario
    hours) no rule has fired, and none fired on the way."""
    rules = tmp_path / "short-for.yaml"
    rules.write_text(SHORT_FOR, encoding="utf-8")
    host = clocked_host("healthy", 10, "rule_files: [{}]\n".format(rules))
    started = host.clock()
    while host.clock() - started < 1800:
        assert host.step() == [], host.clock() - started
    assert host.polls >= 1800 / 15 and host.status()["findings"] == []
    assert {name for name, source in host.snapshot.sources.items() if not source.ok} == set()


@pytest.fixture
def start_daemon(tmp_path):
    rules = tmp_path / "short-for.yaml"
    rules.write_text(SHORT_FOR, encoding="utf-8")
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state", rules=rules), encoding="utf-8")
    started = []

    def start(scenario, time_scale):
        sim_state = tmp_path / "sim"
        daemon = DaemonProcess(["--config", str(config), "--simulate=" + scenario, "--sim-state", str(sim_state),
                                "--sim-time-scale", str(time_scale), "--listen", "127.0.0.1:0"])
        started.append((daemon, str(sim_state)))
        daemon.wait_serving()
        return daemon

    yield start
    for daemon, sim_state in started:
        daemon.close()
        kill_leftovers(sim_state)


def active_findings(daemon):
    return {(finding["rule"], finding["subject"]): finding for finding in daemon.get("/status").json()["findings"]}


@pytest.mark.parametrize("scenario, time_scale, expected, summary", SCENARIOS, ids=[row[0] for row in SCENARIOS])
def test_trend_rule_fires_on_its_scenario(start_daemon, scenario, time_scale, expected, summary):
    daemon = start_daemon(scenario, time_scale)
    findings = wait_until(lambda: (lambda active: active if expected <= set(active) else None)(active_findings(daemon)),
                          timeout=TIMEOUT, interval=0.5, what="{} in /status".format(sorted(expected)))
    expected_rules = {rule for rule, _ in expected}
    # the rule fires for the scenario's subject only
    assert {key for key in findings if key[0] in expected_rules} == expected
    assert summary in findings[min(expected)]["summary"]
    for key in expected:
        assert findings[key]["hint"], key
    metrics = daemon.get("/metrics").text
    for rule, subject in expected:
        assert sample(metrics, "npumon_finding_active", rule=rule, subject=subject) == 1.0
