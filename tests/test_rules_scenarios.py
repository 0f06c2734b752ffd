"""The built-in rules that judge a trend or a duration fire in a real `npumon run --simulate` daemon on the
scenario made for them, and stay quiet on `healthy`.

`npumon check` sees one sample, so rules over windows (`increase(x, 1h)`, `delta(x, 3h)`) and long `for:`
timers can only fire in the daemon. The tests keep them short in two honest ways: `--sim-time-scale` runs
the scenario's clock faster (the hbm-leak scenario grows 6 % of HBM per scenario hour), and a user rule
file shortens a rule's `for:` (the `for:` timer itself is tested with a controllable clock in
test_rules_engine.py). The windows are never shortened: the rules fire because the recorded history,
however short, already shows the trend the window asks about.
"""

import pytest

from daemon_harness import DaemonProcess, kill_leftovers, sample, wait_until

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
  - {id: serving-saturated, for: 3s}
  - {id: source-down, for: 2s}
  - {id: cpu-bottleneck, for: 3s}
  - {id: memory-bound, for: 3s}
  - {id: load-imbalance, for: 3s}
  - {id: pcie-degraded, for: 3s}
  - {id: temperature-warning, for: 3s}
  - {id: health-unknown, for: 3s}
"""
TIMEOUT = 60.0  # only a failure waits this long; a loaded CI machine polls slower than asked

# scenario, --sim-time-scale, the findings (rule, subject) it must raise, a text the first one's summary shows
SCENARIOS = [
    # 30 more corrected errors a scenario minute on device 2; at 10x, over 10 an hour after ~2 s of history
    ("ecc-rising", 10, {("ecc-single-bit-rising", "npu2/chip0"), ("ecc-uncorrectable", "npu2/chip0")},
     "rising faster than 10 per hour"),
    # the queue grows by 30 a minute while every chip runs at about 95 % AI Core
    ("serving-saturated", 1, {("serving-saturated", "host")}, "serving queue growing"),
    # device 4 leaks 6 % of HBM per scenario hour; at 600x that is 0.6 % a second, over 10 % in ~17 s
    ("hbm-leak", 600, {("hbm-leak", "npu4/chip0")}, "with the same processes"),
    # every npu-smi call hangs: the source is down
    ("hang", 1, {("source-down", "host")}, "npu-smi"),
]


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


def test_healthy_stays_quiet_with_history(start_daemon):
    """The same fast daemon, short `for:` timers and a fast clock on `healthy`: after 15 s (75 scenario
    minutes) of history no rule has fired."""
    daemon = start_daemon("healthy", 300)

    def snapshot_time():
        return sample(daemon.get("/metrics").text, "npumon_snapshot_timestamp_seconds")

    first = wait_until(snapshot_time, timeout=TIMEOUT, interval=0.5, what="a first snapshot")
    wait_until(lambda: snapshot_time() >= first + 15, timeout=TIMEOUT, interval=0.5, what="15 s of snapshots")
    assert active_findings(daemon) == {}
