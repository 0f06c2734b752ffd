"""The campaign scorer on hand-built ground truth and events (npumon/sim/campaign_score.py)."""

import pytest

from npumon.sim.campaign_score import quantile, render_markdown, score, targets

T0 = 1000.0


def injection(ident, host, subjects, klass, start, end, rules, actions=(None,), budget=30.0):
    return {"id": ident, "host": host, "subjects": list(subjects), "class": klass, "start": T0 + start,
            "end": T0 + end, "expect": {"rules": list(rules), "repair_actions": list(actions),
                                        "budget_seconds": budget}}


def fired(host, at, subject, rule, action=None):
    return {"host": host, "time": T0 + at, "kind": "finding_fired", "subject": subject, "rule": rule,
            "repair_action": action, "new": None}


def resolved(host, at, subject, rule):
    return {"host": host, "time": T0 + at, "kind": "finding_resolved", "subject": subject, "rule": rule,
            "repair_action": None, "new": None}


def handoff(host, at):
    return {"host": host, "time": T0 + at, "kind": "handoff_action", "subject": host, "rule": None,
            "repair_action": None, "new": None}


def notified(host, at, subject, rule, status="firing"):
    return {"host": host, "time": T0 + at, "kind": "notified", "subject": subject, "rule": rule, "status": status}


def verdict(host, at, subject, new):
    return {"host": host, "time": T0 + at, "kind": "verdict_changed", "subject": subject, "rule": None,
            "repair_action": None, "new": new}


HOSTS = ["h1", "h2", "h3"]
OVERHEAT = injection(0, "h1", ["npu3/chip0"], "overheat", 10, 130, ["temperature-critical"])
HUNG = injection(1, "h2", ["npu1/chip0"], "hung-chip", 0, 400, ["chip-hung"], ["restart_workload"], budget=330.0)


def test_a_found_named_and_recovered_fault_scores_full_marks():
    events = [handoff("h1", 5),  # before the verdict: not its hand-off
              fired("h1", 22, "npu3/chip0", "temperature-critical"),
              verdict("h1", 22.5, "npu3/chip0", "out_of_service"),
              handoff("h1", 30), handoff("h1", 31),
              notified("h1", 25, "npu4/chip0", "temperature-warning"),  # another chip's alert
              notified("h1", 27, "npu3/chip0", "temperature-critical"),
              notified("h1", 146, "npu3/chip0", "temperature-critical", "resolved"),
              resolved("h1", 145, "npu3/chip0", "temperature-critical"),
              verdict("h1", 145, "npu3/chip0", "healthy")]
    report = score([OVERHEAT], events, HOSTS)
    row = report["injections"][0]
    assert row["detected"] and row["right_rule"] and row["right_action"] and row["within_budget"]
    assert row["time_to_finding"] == pytest.approx(12.0)
    assert row["time_to_verdict"] == pytest.approx(12.5)
    assert row["verdict_after_finding"] == pytest.approx(0.5)
    assert row["time_to_handoff"] == pytest.approx(20.0)
    assert row["handoff_after_finding"] == pytest.approx(8.0)
    assert row["time_to_notification"] == pytest.approx(17.0)
    assert row["notification_after_finding"] == pytest.approx(5.0)
    assert row["recovery"] == pytest.approx(15.0)
    overall = report["overall"]
    assert overall["recall"] == 1.0 and overall["classification"] == 1.0
    assert overall["false_positives"] == 0 and overall["false_isolations"] == 0
    assert overall["healthy_hosts"] == 2
    assert all(target["met"] for target in targets(report))


def test_a_miss_a_wrong_rule_and_a_late_finding_are_each_counted():
    late_and_wrong = injection(2, "h3", ["npu0/chip0"], "overheat", 0, 100, ["temperature-critical"], budget=15.0)
    events = [fired("h2", 50, "npu1/chip0", "load-imbalance"),  # the hung chip's: on its subject, wrong rule
              fired("h3", 40, "npu0/chip0", "temperature-warning")]
    report = score([OVERHEAT, HUNG, late_and_wrong], events, HOSTS)
    rows = {row["id"]: row for row in report["injections"]}
    assert not rows[0]["detected"] and rows[0]["time_to_finding"] is None
    assert rows[1]["detected"] and not rows[1]["right_rule"]
    assert rows[2]["detected"] and not rows[2]["within_budget"]
    classes = report["classes"]
    assert classes["overheat"]["injections"] == 2 and classes["overheat"]["recall"] == 0.5
    assert classes["hung-chip"]["classification"] == 0.0
    met = {target["target"]: target for target in targets(report)}
    assert not met["recall 100 %"]["met"] and met["recall 100 %"]["detail"] == "overheat"
    assert not met["classification >= 98 %"]["met"]
    assert not met["time to finding within for: + one poll"]["met"]


def test_the_wrong_repair_action_is_a_misclassification():
    events = [fired("h2", 340, "npu1/chip0", "chip-hung", "reboot_host")]
    row = score([HUNG], events, HOSTS)["injections"][0]
    assert row["right_rule"] and not row["right_action"]


def test_findings_no_injection_explains_are_false_positives_and_healthy_hosts_are_told_apart():
    events = [fired("h1", 5, "npu3/chip0", "temperature-critical"),  # before the injection started
              fired("h1", 300, "npu0/chip0", "temperature-critical"),  # after its window, another chip
              fired("h3", 50, "host", "source-down"),  # a host with no injection at all
              fired("h1", 60, "host", "load-imbalance")]  # the injected host's, during its fault: explained
    report = score([OVERHEAT], events, HOSTS)
    assert report["overall"]["false_positives"] == 3
    assert report["overall"]["healthy_host_findings"] == 1
    met = {target["target"]: target["met"] for target in targets(report)}
    assert not met["no finding on a healthy host"]


def test_out_of_service_on_a_chip_with_no_injection_is_a_false_isolation():
    events = [verdict("h1", 30, "npu3/chip0", "out_of_service"),  # the injected chip: right
              verdict("h1", 30, "npu4/chip0", "out_of_service"),  # its neighbour: wrong
              verdict("h2", 30, "npu1/chip0", "degraded"),  # degraded keeps the chip in service
              verdict("h3", 30, "host", "out_of_service")]  # the host's verdict isolates no chip
    report = score([OVERHEAT], events, HOSTS)
    assert report["overall"]["false_isolations"] == 1
    assert report["false_isolations"][0]["subject"] == "npu4/chip0"


def test_a_hosts_fault_explains_findings_on_its_chips_and_isolates_them_only_if_it_may():
    card = dict(injection(3, "h1", ["host"], "card-drop", 0, 60, ["chips-missing"], ["inspect_hardware"]),
                chip_subjects=["npu7/chip0"], isolates=True)
    job = dict(injection(4, "h2", ["host"], "job-software-fault", 0, 60, ["job-fault"], ["restart_workload"]),
               chip_subjects=["npu0/chip0", "npu1/chip0"], isolates=False)
    events = [fired("h1", 75, "npu7/chip0", "driver-device-fault"),  # the card back, its held lines now its chip's
              verdict("h1", 75, "npu7/chip0", "out_of_service"),
              fired("h2", 70, "npu0/chip0", "driver-fault-repeating"),
              verdict("h2", 70, "npu0/chip0", "out_of_service")]  # a job's fault taking its chip out: wrong
    report = score([card, job], events, HOSTS)
    assert report["overall"]["false_positives"] == 0
    assert [e["subject"] for e in report["false_isolations"]] == ["npu0/chip0"]


def test_a_finding_still_active_at_the_end_leaves_the_injection_unrecovered():
    events = [fired("h1", 20, "npu3/chip0", "temperature-critical"),
              fired("h1", 21, "npu3/chip0", "temperature-warning"),
              resolved("h1", 140, "npu3/chip0", "temperature-warning")]
    row = score([OVERHEAT], events, HOSTS)["injections"][0]
    assert row["recovery"] is None
    assert score([OVERHEAT], events, HOSTS)["overall"]["recovered"] == 0


def test_a_slow_hand_off_misses_its_target():
    events = [fired("h1", 20, "npu3/chip0", "temperature-critical"), verdict("h1", 21, "npu3/chip0", "out_of_service"),
              handoff("h2", 30),  # another host's sink
              handoff("h1", 95)]
    report = score([OVERHEAT], events, HOSTS)
    assert report["injections"][0]["handoff_after_finding"] == pytest.approx(75.0)
    met = {target["target"]: target for target in targets(report)}
    assert not met["hand-off within 60 s of the finding"]["met"]
    assert met["hand-off within 60 s of the finding"]["detail"] == "overheat"


def test_quantiles_are_nearest_rank():
    values = list(range(1, 101))
    assert quantile(values, 0.5) == 50
    assert quantile(values, 0.99) == 99
    assert quantile([7.0], 0.99) == 7.0
    assert quantile([], 0.5) is None


def test_the_markdown_names_every_class_and_the_unmet_target():
    text = render_markdown(score([OVERHEAT, HUNG], [fired("h2", 340, "npu1/chip0", "chip-hung", "restart_workload")],
                                 HOSTS))
    assert "| overheat | 1 | 0 % |" in text
    assert "| hung-chip | 1 | 100 % | 1 | 1 | 340 / 340 | 330 | - / - | 0 | - / - | 0 | - / - |" in text
    assert "| hung-chip | 1 | 100 % |" in text
    assert "| recall 100 % | **no** | overheat |" in text


def test_notifications_are_not_findings():
    report = score([OVERHEAT], [notified("h3", 50, "host", "source-down")], HOSTS)
    assert report["overall"]["false_positives"] == 0 and report["overall"]["notified"] == 0
