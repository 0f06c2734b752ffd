"""What the engine reports: `inhibits` (the worse finding hides the lesser on the same subject), `group: host`
(a host-wide cause once, listing its chips), and acknowledged findings kept visible as acknowledged."""

import textwrap

import pytest

from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import RuleError, load_rules

RULES = """
rules:
  - id: critical
    subject: chip
    expr: temperature_celsius >= 85
    severity: critical
    inhibits: [warning]
    summary: "critical {temperature_celsius:.0f} C"
  - id: warning
    subject: chip
    expr: temperature_celsius >= 80
    severity: warning
    summary: "warning {temperature_celsius:.0f} C"
  - id: starved
    subject: chip
    expr: aicore_ratio < 0.3
    severity: warning
    group: host
    summary: "AI Core {aicore_ratio:.0%}"
    hint: "the host CPU starves the NPUs"
"""


def write(tmp_path, text, name="rules.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


@pytest.fixture
def engine(tmp_path):
    rules, params = load_rules([write(tmp_path, RULES)], include_builtin=False)
    return RuleEngine(rules, params)


def snapshot(now, *chips):
    return Snapshot(time=now, host=HostSample(), chips=list(chips),
                    sources={"npu-smi": SourceStatus(ok=True, last_success=now)})


def chip(npu, temperature=50.0, aicore=0.9):
    return ChipSample(npu=npu, chip=0, health="OK", temperature_celsius=temperature, aicore_ratio=aicore)


def reported(findings):
    return [(f.rule, f.subject) for f in findings]


def transitions(engine):
    return [(kind, f.rule, f.subject) for kind, f in engine.transitions()]


def test_the_worse_finding_hides_the_lesser_on_the_same_chip_only(engine):
    assert reported(engine.evaluate(snapshot(0, chip(0, 82.0), chip(1, 82.0)))) == [
        ("warning", "npu0/chip0"), ("warning", "npu1/chip0")]
    engine.transitions()
    # npu0 gets worse: its critical finding replaces its warning, which the world sees resolve
    assert reported(engine.evaluate(snapshot(15, chip(0, 88.0), chip(1, 82.0)))) == [
        ("critical", "npu0/chip0"), ("warning", "npu1/chip0")]
    assert sorted(transitions(engine)) == [("fired", "critical", "npu0/chip0"), ("resolved", "warning", "npu0/chip0")]
    # back to warm: the warning, still true, is reported again
    assert reported(engine.evaluate(snapshot(30, chip(0, 82.0), chip(1, 82.0)))) == [
        ("warning", "npu0/chip0"), ("warning", "npu1/chip0")]
    assert sorted(transitions(engine)) == [("fired", "warning", "npu0/chip0"), ("resolved", "critical", "npu0/chip0")]


def test_a_finding_fired_already_inhibited_is_never_announced(engine):
    assert reported(engine.evaluate(snapshot(0, chip(0, 90.0)))) == [("critical", "npu0/chip0")]
    assert transitions(engine) == [("fired", "critical", "npu0/chip0")]


def test_a_host_wide_cause_is_one_finding_listing_its_chips(engine):
    findings = engine.evaluate(snapshot(0, chip(0, aicore=0.1), chip(1, aicore=0.9), chip(2, aicore=0.2)))
    assert reported(findings) == [("starved", "host")]
    assert findings[0].chips == ["npu0/chip0", "npu2/chip0"]
    assert findings[0].summary == "on 2 chips (npu0/chip0, npu2/chip0): AI Core 10%"
    assert findings[0].to_json()["chips"] == ["npu0/chip0", "npu2/chip0"]
    assert transitions(engine) == [("fired", "starved", "host")]
    # a chip more or less changes the list, not the finding
    findings = engine.evaluate(snapshot(15, chip(0, aicore=0.1), chip(1, aicore=0.1), chip(2, aicore=0.9)))
    assert findings[0].chips == ["npu0/chip0", "npu1/chip0"] and transitions(engine) == []
    assert engine.evaluate(snapshot(30, chip(0), chip(1), chip(2))) == []
    assert transitions(engine) == [("resolved", "starved", "host")]


def test_acknowledging_a_host_wide_finding_quiets_its_chips_and_shows_it_acknowledged(engine):
    engine.evaluate(snapshot(0, chip(0, aicore=0.1), chip(1, aicore=0.1)))
    assert engine.acknowledge("starved", "host") is True
    assert engine.evaluate(snapshot(15, chip(0, aicore=0.1), chip(1, aicore=0.1))) == []
    acknowledged = engine.acknowledged_findings()
    assert reported(acknowledged) == [("starved", "host")] and acknowledged[0].chips == ["npu0/chip0", "npu1/chip0"]
    # the chips clear: the acknowledgement ends, and the next occurrence is reported again
    engine.evaluate(snapshot(30, chip(0), chip(1)))
    assert engine.acknowledged() == [] and engine.acknowledged_findings() == []
    assert reported(engine.evaluate(snapshot(45, chip(0, aicore=0.1), chip(1)))) == [("starved", "host")]


def test_an_acknowledged_chip_finding_is_shown_until_its_condition_clears(engine):
    engine.evaluate(snapshot(0, chip(0, 90.0)))
    assert engine.acknowledge("critical", "npu0/chip0") is True
    assert engine.evaluate(snapshot(15, chip(0, 90.0))) == []
    assert reported(engine.acknowledged_findings()) == [("critical", "npu0/chip0")]
    engine.evaluate(snapshot(30, chip(0, 50.0)))
    assert engine.acknowledged_findings() == []


def test_a_restart_takes_over_a_host_wide_finding_and_its_acknowledgement(tmp_path, engine):
    engine.evaluate(snapshot(0, chip(0, aicore=0.1), chip(1, aicore=0.1)))
    finding = engine.active()[0]
    rules, params = load_rules([write(tmp_path, RULES)], include_builtin=False)

    restarted = RuleEngine(rules, params)
    assert restarted.restore([finding]) == []
    assert reported(restarted.active()) == [("starved", "host")]
    assert reported(restarted.evaluate(snapshot(15, chip(0, aicore=0.1), chip(1, aicore=0.1)))) == [
        ("starved", "host")]
    assert transitions(restarted) == []  # the last run announced it

    acked = RuleEngine(rules, params)
    assert acked.restore([], [("starved", "host")], [finding]) == []
    assert acked.evaluate(snapshot(15, chip(0, aicore=0.1), chip(1, aicore=0.1))) == []
    assert reported(acked.acknowledged_findings()) == [("starved", "host")]
    assert transitions(acked) == []


@pytest.mark.parametrize("entry, problem", [
    ("inhibits: [nope]", "inhibits: no rule has the id 'nope'"),
    ("inhibits: [self]", "a rule cannot inhibit itself"),
    ("inhibits: warning", "must be a list of rule ids"),
    ("inhibits: [on-host]", "'on-host' judges the host, not the chip"),
    ("group: chips", "group: must be host"),
])
def test_bad_inhibits_and_group_are_one_line_errors(tmp_path, entry, problem):
    text = """
    rules:
      - id: self
        subject: chip
        expr: temperature_celsius > 1
        severity: info
        summary: s
        {}
      - id: warning
        subject: chip
        expr: temperature_celsius > 2
        severity: info
        summary: s
      - id: on-host
        subject: host
        expr: cpu_ratio > 1
        severity: info
        summary: s
    """.format(entry)
    with pytest.raises(RuleError) as raised:
        load_rules([write(tmp_path, text)], include_builtin=False)
    assert problem in str(raised.value) and "\n" not in str(raised.value)
    assert "rules.yaml:" in str(raised.value)


def test_a_host_rule_cannot_be_grouped(tmp_path):
    text = """
    rules:
      - id: h
        subject: host
        expr: cpu_ratio > 1
        severity: info
        summary: s
        group: host
    """
    with pytest.raises(RuleError, match="only a chip rule can be grouped"):
        load_rules([write(tmp_path, text)], include_builtin=False)


def test_inhibiting_a_disabled_rule_is_fine(tmp_path):
    override = write(tmp_path, "rules:\n  - {id: temperature-warning, enabled: false}\n", "off.yaml")
    rules, _ = load_rules([override])
    assert "temperature-warning" not in {rule.id for rule in rules}
