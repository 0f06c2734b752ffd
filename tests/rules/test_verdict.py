"""Verdicts per chip and per host (rules/verdict.py) and their guard rails (rules/verdict_tracker.py), on
findings of the simulator's scenarios and on made-up findings walked through a fake clock."""

import pytest

from clocked_host import ClockedHost, FakeClock
from simulated_pass import judged_pass
from npumon.config.errors import ConfigError
from npumon.model import Finding
from npumon.rules.verdict import DEGRADED, HEALTHY, OUT_OF_SERVICE, decide
from npumon.rules.verdict_tracker import GuardRails, VerdictTracker
from npumon.settings import parse_config
from npumon.sim import prepare_simulation

CHIPS = ["npu{}/chip0".format(npu) for npu in range(4)]
T0 = 1767225600.0


def finding(rule, subject="npu1/chip0", severity="critical", repair_action=None, level=None, since=T0,
            chips=None, shadow=False):
    return Finding(rule, severity, subject, rule + " summary", "hint", since, repair_action=repair_action,
                   level=level, chips=chips, shadow=shadow)


@pytest.fixture(scope="module")
def hbm_ecc_pass(tmp_path_factory):
    """(snapshot, findings) of one pass over hbm-ecc-fault (the probe included), for the two tests that read it."""
    return judged_pass(tmp_path_factory.mktemp("hbm-ecc-fault"), "hbm-ecc-fault")


def test_healthy_scenario_gives_every_chip_and_the_host_healthy(tmp_path):
    snapshot, findings = judged_pass(tmp_path, "healthy")
    verdict = decide(findings, [chip.subject for chip in snapshot.chips])
    assert verdict.state == HEALTHY
    assert len(verdict.chips) == len(snapshot.chips) == 8
    assert {chip.state for chip in verdict.chips} == {HEALTHY}


def test_hbm_ecc_fault_takes_its_chip_out_with_one_recommendation(hbm_ecc_pass):
    snapshot, findings = hbm_ecc_pass
    verdict = decide(findings, [chip.subject for chip in snapshot.chips])
    out = [chip for chip in verdict.chips if chip.state != HEALTHY]
    assert [(chip.subject, chip.state) for chip in out] == [("npu3/chip0", OUT_OF_SERVICE)]
    chip = out[0]
    # coherent: the ManuallySeparateNPU finding decides; the RestartBusiness ones ("stays in service") are context
    assert chip.reasons[0].level == "ManuallySeparateNPU" and chip.repair_action == "inspect_hardware"
    assert {reason.rule for reason in chip.reasons} >= {"health-alarm", "ecc-uncorrectable"}
    # one recommendation per chip (rules/presentation.py): the RestartBusiness findings carry the chip's strongest
    assert {reason.repair_action for reason in chip.reasons} == {"inspect_hardware"}
    assert verdict.state == DEGRADED  # the host serves on with its other chips


def test_job_software_fault_takes_no_chip_out(tmp_path):
    snapshot, findings = judged_pass(tmp_path, "job-software-fault")
    assert "job-fault" in {f.rule for f in findings}
    verdict = decide(findings, [chip.subject for chip in snapshot.chips])
    assert {chip.state for chip in verdict.chips} == {HEALTHY}
    assert verdict.state == DEGRADED and [reason.rule for reason in verdict.reasons] == ["job-fault"]


def test_job_fault_never_takes_a_chip_or_the_host_out_even_when_configured_critical():
    job = finding("job-fault", subject="host", repair_action="replace_hardware", chips=CHIPS[:2])
    verdict = decide([job], CHIPS)
    assert {chip.state for chip in verdict.chips} == {HEALTHY} and verdict.state == DEGRADED


@pytest.mark.parametrize("repair_action, level, severity, state", [
    ("reset_npu", "RestartNPU", "warning", OUT_OF_SERVICE),
    ("replace_hardware", "SeparateNPU", "critical", OUT_OF_SERVICE),
    ("inspect_hardware", "PreSeparateNPU", "warning", OUT_OF_SERVICE),
    ("reboot_host", None, "warning", OUT_OF_SERVICE),
    ("restart_workload", "RestartBusiness", "critical", DEGRADED),
    ("none", "SubHealthFault", "critical", DEGRADED),
    (None, None, "critical", OUT_OF_SERVICE),
    (None, None, "warning", DEGRADED),
    (None, None, "info", HEALTHY),
])
def test_state_of_a_finding(repair_action, level, severity, state):
    verdict = decide([finding("r", severity=severity, repair_action=repair_action, level=level)], CHIPS)
    assert verdict.chip("npu1/chip0").state == state
    assert verdict.chip("npu0/chip0").state == HEALTHY


def test_shadow_findings_count_for_nothing_and_host_group_findings_count_per_chip():
    verdict = decide([finding("shadowed", shadow=True),
                      finding("pcie", subject="host", repair_action="reset_npu", chips=["npu2/chip0"]),
                      finding("room-hot", subject="host", severity="critical")], CHIPS)
    assert verdict.chip("npu1/chip0").state == HEALTHY
    assert verdict.chip("npu2/chip0").state == OUT_OF_SERVICE
    assert verdict.state == OUT_OF_SERVICE  # a host-wide cause of its own


def tracker(clock, healthy=600.0, transitions=6, hold_for=None):
    return VerdictTracker(GuardRails(healthy_seconds=healthy, max_transitions_per_hour=transitions),
                          hold_for=hold_for, clock=clock)


def test_out_of_service_only_once_the_finding_has_held_for_its_rule(tmp_path):
    clock = FakeClock(T0)
    guard = tracker(clock, hold_for={"ecc": 60.0})
    fault = [finding("ecc", repair_action="replace_hardware", since=T0)]
    first = guard.update(decide(fault, CHIPS)).chip("npu1/chip0")
    assert first.state == DEGRADED and "for:" in first.note
    clock.now = T0 + 59
    assert guard.update(decide(fault, CHIPS)).chip("npu1/chip0").state == DEGRADED
    clock.now = T0 + 60
    chip = guard.update(decide(fault, CHIPS)).chip("npu1/chip0")
    assert (chip.state, chip.since) == (OUT_OF_SERVICE, T0 + 60)
    assert [(t.subject, t.old, t.new) for t in guard.transitions] == [("npu1/chip0", DEGRADED, OUT_OF_SERVICE)]


def test_hbm_ecc_fault_over_clocked_polls_takes_the_chip_out_within_a_minute(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "hbm-ecc-fault", time_scale=1)
    config = parse_config("state_dir: {}\nprobe: {{enabled: false}}\n".format(tmp_path / "state"))
    host = ClockedHost(config, sim)
    try:
        guard = VerdictTracker(config.handoff, hold_for=host.engine.for_seconds(),
                               clock=host.clock)
        started = host.clock()
        while True:
            findings = host.step()
            verdict = guard.update(decide(findings, [chip.subject for chip in host.snapshot.chips]))
            if verdict.chip("npu3/chip0").state == OUT_OF_SERVICE:
                break
            assert host.clock() - started < 60, [(f.rule, f.subject) for f in findings]
        assert [chip.subject for chip in verdict.chips if chip.state != HEALTHY] == ["npu3/chip0"]
    finally:
        host.close()


@pytest.mark.parametrize("scenario, host_states", [
    ("healthy", {HEALTHY}),
    ("job-software-fault", {DEGRADED}),  # the job's fault: the host's, from the first poll on
])
def test_no_chip_ever_goes_out_over_clocked_polls(tmp_path, scenario, host_states):
    sim = prepare_simulation(str(tmp_path / "sim"), scenario, time_scale=1)
    config = parse_config("state_dir: {}\nprobe: {{enabled: false}}\n".format(tmp_path / "state"))
    host = ClockedHost(config, sim)
    seen = set()
    try:
        guard = VerdictTracker(config.handoff, hold_for=host.engine.for_seconds(), clock=host.clock)
        started = host.clock()
        while host.clock() - started < 300:
            findings = host.step()
            verdict = guard.update(decide(findings, [chip.subject for chip in host.snapshot.chips]))
            assert {chip.state for chip in verdict.chips} == {HEALTHY}, host.clock() - started
            seen.add(verdict.state)
    finally:
        host.close()
    assert seen == host_states


def test_back_in_service_only_after_the_healthy_time():
    clock = FakeClock(T0)
    guard = tracker(clock, healthy=600.0)
    fault = [finding("ecc", repair_action="reset_npu")]
    assert guard.update(decide(fault, CHIPS)).chip("npu1/chip0").state == OUT_OF_SERVICE
    clock.now += 30
    guard.update(decide([], CHIPS))  # cleared at T0+30: the healthy time starts
    for seconds in (60, 300, 629):
        clock.now = T0 + seconds
        chip = guard.update(decide([], CHIPS)).chip("npu1/chip0")
        assert chip.state == OUT_OF_SERVICE and "back in service" in chip.note, seconds
    clock.now = T0 + 630
    chip = guard.update(decide([], CHIPS)).chip("npu1/chip0")
    assert (chip.state, chip.since) == (HEALTHY, T0 + 630)


def test_a_fault_again_restarts_the_healthy_time():
    clock = FakeClock(T0)
    guard = tracker(clock, healthy=600.0)
    fault = [finding("ecc", repair_action="reset_npu")]
    guard.update(decide(fault, CHIPS))
    clock.now = T0 + 500
    guard.update(decide([], CHIPS))
    clock.now = T0 + 900
    guard.update(decide(fault, CHIPS))  # back before the healthy time was up
    clock.now = T0 + 1000
    guard.update(decide([], CHIPS))
    clock.now = T0 + 1599
    assert guard.update(decide([], CHIPS)).chip("npu1/chip0").state == OUT_OF_SERVICE
    clock.now = T0 + 1600
    assert guard.update(decide([], CHIPS)).chip("npu1/chip0").state == HEALTHY


def test_a_flap_storm_gives_at_most_the_allowed_transitions_and_ends_out_of_service():
    clock = FakeClock(T0)
    guard = tracker(clock, healthy=0.0, transitions=4)
    fault = [finding("ecc", repair_action="reset_npu")]
    changes = []
    for step in range(360):  # an hour of 10 s polls, the fault on every other poll
        clock.now = T0 + 10 * step
        verdict = guard.update(decide(fault if step % 2 == 0 else [], CHIPS))
        changes += [t for t in guard.transitions if t.subject == "npu1/chip0"]
    # out, in, out: the fourth change of the budget could only have been a stronger one
    assert [t.new for t in changes] == [OUT_OF_SERVICE, HEALTHY, OUT_OF_SERVICE]
    assert verdict.chip("npu1/chip0").state == OUT_OF_SERVICE and "flap damping" in verdict.chip("npu1/chip0").note
    # an hour after the storm's first change the budget frees up again
    clock.now = T0 + 3600 + 10
    guard.update(decide(fault, CHIPS))
    clock.now = T0 + 3600 + 20
    assert guard.update(decide([], CHIPS)).chip("npu1/chip0").state == HEALTHY


def test_a_chip_gone_from_the_host_is_forgotten():
    clock = FakeClock(T0)
    guard = tracker(clock)
    guard.update(decide([finding("ecc", repair_action="reset_npu")], CHIPS))
    assert [chip.subject for chip in guard.update(decide([], CHIPS[:1])).chips] == CHIPS[:1]
    assert guard.update(decide([], CHIPS)).chip("npu1/chip0").state == HEALTHY


@pytest.mark.parametrize("text, message", [
    ("handoff: {healthy_seconds: -5}", "<config>:1: handoff.healthy_seconds: must be between 0 and 604800"),
    ("handoff: {max_transitions_per_hour: 1}", "<config>:1: handoff.max_transitions_per_hour: must be between 2"),
    ("handoff: {healthy_seconds: soon}", "<config>:1: handoff.healthy_seconds: expected a number"),
])
def test_a_bad_handoff_setting_is_one_line(text, message):
    with pytest.raises(ConfigError) as error:
        parse_config(text)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_check_shows_the_verdicts_in_its_table_and_json(hbm_ecc_pass):
    from npumon.outputs.report import render_table, status_document

    snapshot, findings = hbm_ecc_pass
    document = status_document(snapshot, findings)
    states = {chip["subject"]: chip["state"] for chip in document["verdict"]["chips"]}
    assert states.pop("npu3/chip0") == OUT_OF_SERVICE and set(states.values()) == {HEALTHY}
    assert document["verdict"]["state"] == DEGRADED
    table = render_table(snapshot, findings)
    assert "VERDICT: host degraded, 7 of 8 chips healthy" in table
    assert [line.split()[:4] for line in table.splitlines() if line.startswith("  npu3/chip0     out")] == \
        [["npu3/chip0", "out", "of", "service"]]
