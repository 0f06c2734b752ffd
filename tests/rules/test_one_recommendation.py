"""One recommendation per chip: the strongest repair action leads, the other findings name it (issue 34)."""

from npumon.model import Finding
from npumon.rules.presentation import one_recommendation_per_chip, reported_findings


def finding(rule, subject="npu3/chip0", severity="critical", repair=None, level=None, hint="What it is."):
    return Finding(rule=rule, severity=severity, subject=subject, summary=rule, hint=hint, since=0.0,
                   repair_action=repair, level=level)


def test_the_strongest_repair_leads_and_the_milder_finding_names_it():
    raw = {("health-alarm", "npu3/chip0"): finding("health-alarm", repair="restart_workload", level="RestartBusiness"),
           ("ecc-uncorrectable", "npu3/chip0"): finding("ecc-uncorrectable", repair="inspect_hardware"),
           ("temperature-warning", "npu3/chip0"): finding("temperature-warning", severity="warning"),
           ("health-warning", "npu1/chip0"): finding("health-warning", "npu1/chip0", "warning", "restart_workload",
                                                     "RestartBusiness")}
    out = reported_findings(raw, {}, ())
    alarm, ecc = out[("health-alarm", "npu3/chip0")], out[("ecc-uncorrectable", "npu3/chip0")]
    assert alarm.repair_action == ecc.repair_action == "inspect_hardware"
    assert ecc.hint == "What it is. Recommended: Drain the chip: schedule no new jobs on it, and have the hardware " \
                       "inspected when it is free."
    assert alarm.hint.startswith("What it is. Recommended for this chip (see ecc-uncorrectable): Drain the chip")
    assert "stays in service" not in alarm.hint + ecc.hint
    assert out[("temperature-warning", "npu3/chip0")] == raw[("temperature-warning", "npu3/chip0")]  # no repair
    # alone on its chip, a finding's code level words it, with the chip's numbers in
    assert out[("health-warning", "npu1/chip0")].hint.endswith(
        "Recommended: The job on this chip failed: restart the job; the chip stays in service.")


def test_the_level_words_the_advice_only_where_it_calls_for_the_same_repair():
    raw = {("health-critical", "npu2/chip1"): finding("health-critical", "npu2/chip1", repair="reset_npu",
                                                      level="RestartRequest")}
    hint = one_recommendation_per_chip(raw)[("health-critical", "npu2/chip1")].hint
    assert "retry" not in hint and hint.endswith("reset it (npu-smi set -t reset -i 2 -c 1), then re-run them.")
    raw = {("x", "npu0/chip0"): finding("x", "npu0/chip0", repair="reset_npu", level="RestartNPU")}
    assert "reset the chip now (npu-smi set -t reset -i 0 -c 0)" in one_recommendation_per_chip(raw)[("x", "npu0/chip0")].hint
