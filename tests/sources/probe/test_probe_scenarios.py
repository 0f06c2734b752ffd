"""The probe-slow scenario: the simulated pyACL makes one call slower by a delay that changes over scenario
time (npumon/sim/pyacl.py), the scenario checker refuses bad delays, and a real `npumon run` daemon raises
`probe-slow` for exactly the scenario's chip once its stream synchronisation slows down (switched to the
scenario once the chip has its baseline, past the slowdown's scenario time)."""

import re
import sys
import time
import types

import pytest

from daemon_harness import DaemonProcess, kill_leftovers, sample, wait_until
from npumon.model import chip_subject
from npumon.sources.probe.child import parse_arguments, probe
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.stages import Stages
from npumon.sim.pyacl import ACL_ERROR_RT_STREAM_SYNC_TIMEOUT, SimulatedAcl
from npumon.sim import set_scenario
from npumon.sim.scenario import ScenarioError, load_scenario
from npumon.sim.state import read_state, scenario_time
from npumon.sim.values import probe_plan_at

# -- the simulated pyACL's slow calls, in-process ----------------------------------------------------------


class _Quiet:
    def write(self, text):
        pass

    def flush(self):
        pass


def probe_in_process(monkeypatch, plan):
    """One acl probe of device 2 against a simulated runtime with `plan`; returns the child's report."""
    runtime = SimulatedAcl(8, "Ascend910B3", lambda device: (1 << 30, 1 << 31), lambda device: dict(plan))
    module = types.SimpleNamespace(init=runtime.init, finalize=runtime.finalize, get_soc_name=runtime.get_soc_name,
                                   create_data_buffer=runtime.create_data_buffer,
                                   destroy_data_buffer=runtime.destroy_data_buffer,
                                   rt=runtime.rt, mdl=runtime.mdl, util=runtime.util)
    monkeypatch.setitem(sys.modules, "acl", module)
    return probe(parse_arguments(["--device", "2", "--copy-bytes", "1024"]), Stages(_Quiet()))


# (the slowed call, the probe stage it is in, how often the probe calls it)
SLOW_CALLS = [("rt.synchronize_stream_with_timeout", "synchronize", 1), ("rt.memcpy", "memcpy", 2),
              ("rt.set_device", "set_device", 1)]


@pytest.mark.parametrize("call, stage, times", SLOW_CALLS)
def test_a_slow_call_takes_its_delay_each_time_and_the_others_do_not(monkeypatch, call, stage, times):
    delay = 0.3
    report = probe_in_process(monkeypatch, {"slow": call, "delay_seconds": delay})
    assert report["state"] == "ok", report
    seconds = report["stages"]
    assert times * delay <= seconds[stage] < times * delay + 0.25, seconds
    assert all(took < delay / 2 for name, took in seconds.items() if name != stage), seconds


def test_a_sync_slower_than_its_timeout_returns_507046_at_the_timeout():
    runtime = SimulatedAcl(8, "Ascend910B3", lambda device: (1 << 30, 1 << 31),
                           lambda device: {"slow": "rt.synchronize_stream_with_timeout", "delay_seconds": 30.0})
    assert runtime.init() == 0 and runtime.rt.set_device(0) == 0
    stream, _ = runtime.rt.create_stream()
    started = time.monotonic()
    assert runtime.rt.synchronize_stream_with_timeout(stream, 200) == ACL_ERROR_RT_STREAM_SYNC_TIMEOUT == 507046
    assert 0.2 <= time.monotonic() - started < 2.0


def test_the_delay_is_a_value_over_scenario_time(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("product: atlas-800i-a2\nchips:\n  overrides:\n"
                    "    - devices: [1]\n      probe: {slow: rt.memcpy, delay_seconds: {start: -1, per_minute: 1}}\n")
    chips = load_scenario(str(path))["chips"]
    assert probe_plan_at(chips, 1, 0.0)["delay_seconds"] == 0.0  # a ramp below 0 is no delay
    assert probe_plan_at(chips, 1, 180.0)["delay_seconds"] == pytest.approx(2.0)
    assert probe_plan_at(chips, 0, 180.0) == {}


def test_the_probe_slow_scenario_slows_one_chip_after_half_an_hour_within_the_probe_deadlines():
    scenario = load_scenario("probe-slow")
    chips = scenario["chips"]
    assert probe_plan_at(chips, 6, 1799.0)["delay_seconds"] == 0.0
    slow = probe_plan_at(chips, 6, 1800.0)
    assert slow == {"slow": "rt.synchronize_stream_with_timeout", "delay_seconds": 2.0}
    # below the default sync timeout and probe deadline: the probe passes, slowly, instead of failing
    defaults = ProbeConfig()
    assert slow["delay_seconds"] < defaults.sync_timeout_ms / 1000.0 < defaults.timeout_seconds
    assert all(probe_plan_at(chips, device, 3600.0) == {} for device in range(8) if device != 6)
    assert scenario["description"]


@pytest.mark.parametrize("probe_text, expected", [
    ("{slow: rt.synchronize_stream_with_timeout, delay_seconds: -1}",
     ":5: chips.overrides[0].probe.delay_seconds: must be within [0.0, inf], got -1"),
    ("{slow: rt.memcpy, delay_seconds: {steps: [[0, 0], [60, -2]]}}",
     ":5: chips.overrides[0].probe.delay_seconds.steps: must be within [0.0, inf], got -2"),
    ("{slow: rt.memcpy, delay_seconds: soon}",
     ":5: chips.overrides[0].probe.delay_seconds: expected a number, got 'soon'"),
    ("{slow: rt.sleep, delay_seconds: 1}", ":5: chips.overrides[0].probe.slow: must be one of rt.set_device"),
    ("{slow: rt.memcpy}", ":5: chips.overrides[0].probe.delay_seconds: slow and delay_seconds go together"),
    ("{delay_seconds: 2}", ":5: chips.overrides[0].probe.slow: slow and delay_seconds go together"),
    ("{crash: rt.sleep}", ":5: chips.overrides[0].probe.crash: must be one of rt.set_device"),
])
def test_bad_slow_plans_name_file_line_and_key(tmp_path, probe_text, expected):
    path = tmp_path / "mine.yaml"
    path.write_text("product: atlas-800i-a2\nchips:\n  overrides:\n    - devices: [6]\n      probe: {}\n".format(
        probe_text))
    with pytest.raises(ScenarioError) as error:
        load_scenario(str(path))
    message = str(error.value)
    assert message.startswith(str(path)) and expected in message and "\n" not in message, message


# -- the scenario in a real daemon -----------------------------------------------------------------------

SLOW_DEVICE = 6  # the scenario's override
SLOWDOWN_AT = 1800.0  # scenario seconds
# The daemon starts on `healthy` (the same host without the slowdown) and switches to probe-slow once the
# chip has its cold first probe and 3 warm baseline runs, however long a busy machine takes for them (a
# round of 8 probes takes 1-3 s here). The scenario clock runs fast enough to be past the slowdown by then.
TIME_SCALE = 1000.0
CONFIG = """\
state_dir: {state}
poll: {{table_seconds: 1, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 0, board_seconds: 0}}
probe: {{interval_seconds: 0.5, jitter_seconds: 0.2, max_concurrent: 2}}
"""
SUMMARY = re.compile(r"liveness probe took (\d+\.\d\d) s, over 3 times its usual (\d+\.\d\d) s")
WARM_UP_SECONDS = 60.0  # only a failure waits this long


@pytest.fixture
def daemon(tmp_path):
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state"))
    sim_state = tmp_path / "sim"
    process = DaemonProcess(["--simulate=healthy", "--sim-time-scale", str(TIME_SCALE), "--sim-state",
                             str(sim_state), "--listen", "127.0.0.1:0", "--config", str(config)])
    try:
        process.wait_serving(timeout=20)
        yield process, str(sim_state)
    finally:
        process.close()
        kill_leftovers(str(sim_state))


def probe_slow_subjects(status):
    return {finding["subject"] for finding in status["findings"] if finding["rule"] == "probe-slow"}


def slow_chip_of(status):
    return next((chip for chip in status["chips"] if chip["probe"] and chip["probe"]["device_id"] == SLOW_DEVICE),
                None)


def test_probe_slow_fires_for_the_slowed_chip_alone_after_the_slowdown(daemon):
    process, sim_state = daemon
    chip = wait_until(lambda: (lambda chip: chip if chip and chip["probe"]["baseline_seconds"] is not None else None)(
        slow_chip_of(process.get("/status").json())), timeout=WARM_UP_SECONDS, interval=0.2,
        what="chip {}'s warm baseline".format(SLOW_DEVICE))
    warm_before_slowdown = chip["probe"]["first_run"] is False
    assert probe_slow_subjects(process.get("/status").json()) == set()
    set_scenario(sim_state, "probe-slow")
    state = read_state(sim_state)
    switched_at = time.time()
    assert scenario_time(state, switched_at) >= SLOWDOWN_AT  # the chip is slow from its next probe on
    give_up = switched_at + 12.0  # a round with the 2 s probe, and spare
    while True:
        status = process.get("/status").json()
        # the status was read after this moment, so every probe in it started before
        t = scenario_time(state, time.time())
        fired = probe_slow_subjects(status)
        chip = slow_chip_of(status)
        if fired:
            break
        assert time.time() < give_up, "probe-slow did not fire; chip {}'s last probe: {}".format(
            SLOW_DEVICE, chip and chip["probe"])
        time.sleep(0.2)
    assert t >= SLOWDOWN_AT, "probe-slow fired at scenario time {:.0f} s, before the slowdown".format(t)
    assert warm_before_slowdown, "the chip had no warm probe before the slowdown: the test ran too slowly"

    subject = chip_subject(chip["npu"], chip["chip"])
    assert fired == {subject}
    probe_sample = chip["probe"]
    assert probe_sample["state"] == "ok" and probe_sample["first_run"] is False
    assert probe_sample["stage_seconds"]["synchronize"] >= 2.0
    assert probe_sample["baseline_seconds"] is not None and probe_sample["baseline_seconds"] < 0.5
    finding = next(f for f in status["findings"] if f["rule"] == "probe-slow")
    assert finding["severity"] == "warning" and finding["hint"]
    took, usual = SUMMARY.fullmatch(finding["summary"]).groups()
    assert took == "{:.2f}".format(probe_sample["duration_seconds"]) and float(took) >= 2.0
    assert usual == "{:.2f}".format(probe_sample["baseline_seconds"])

    metrics = process.get("/metrics").text
    assert sample(metrics, "npumon_finding_active", rule="probe-slow", subject=subject) == 1
    active = {s.labels["subject"] for s in _samples(metrics, "npumon_finding_active")
              if s.labels["rule"] == "probe-slow" and s.value == 1}
    assert active == {subject}


def _samples(metrics_text, name):
    from prometheus_client.parser import text_string_to_metric_families

    return [item for family in text_string_to_metric_families(metrics_text) for item in family.samples
            if item.name == name]
