"""RuleEngine.restore (what the event history gives back after a restart) and RuleEngine.replace_rules (a
config reload that keeps what is going on)."""

import textwrap

import pytest

from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules

RULES = """
params:
  hot: 80
rules:
  - id: hot
    subject: chip
    expr: temperature_celsius >= param.hot
    for: 1m
    severity: warning
    summary: "{temperature_celsius:.0f} C"
  - id: dead
    subject: chip
    expr: health == "Critical"
    severity: critical
    sticky: true
    summary: dead
  - id: busy-host
    subject: host
    expr: cpu_ratio > 0.9
    severity: warning
    summary: "cpu {cpu_ratio:.0%}"
  - id: rising
    subject: chip
    expr: increase(ecc_single_bit_errors, 1h) > 5
    severity: warning
    summary: rising
"""


@pytest.fixture
def rules_from(tmp_path):
    def load(text=RULES):
        path = tmp_path / "rules.yaml"
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return load_rules([str(path)], include_builtin=False)
    return load


@pytest.fixture
def engine(rules_from):
    return RuleEngine(*rules_from())


def snapshot(now, cpu=0.1, **chip_values):
    chip_values.setdefault("health", "OK")
    chip_values.setdefault("temperature_celsius", 50.0)
    return Snapshot(time=now, host=HostSample(cpu_ratio=cpu), chips=[ChipSample(npu=0, chip=0, **chip_values)],
                    sources={"npu-smi": SourceStatus(ok=True, last_success=now)})


def keys(findings):
    return [(f.rule, f.subject) for f in findings]


def kinds(transitions):
    return [(kind, f.rule, f.subject) for kind, f in transitions]


# --------------------------------------------------------------------------------------------- restore

def fired_in_a_previous_run(rules_from, *snapshots):
    previous = RuleEngine(*rules_from())
    for item in snapshots:
        previous.evaluate(item)
    return previous.active()


def test_a_restored_sticky_finding_stays_until_acknowledged(engine, rules_from):
    [dead] = fired_in_a_previous_run(rules_from, snapshot(0, health="Critical"))
    assert engine.restore([dead]) == []
    assert engine.transitions() == []  # not fired again
    assert keys(engine.evaluate(snapshot(100, health="OK"))) == [("dead", "npu0/chip0")]
    assert engine.active()[0].since == 0
    assert engine.acknowledge("dead", "npu0/chip0")
    assert engine.evaluate(snapshot(200, health="OK")) == []


def test_a_restored_ordinary_finding_resolves_when_its_condition_is_gone(engine, rules_from):
    [hot] = fired_in_a_previous_run(rules_from, snapshot(0, temperature_celsius=90.0),
                                    snapshot(60, temperature_celsius=90.0))
    engine.restore([hot])
    assert keys(engine.evaluate(snapshot(100, temperature_celsius=90.0))) == [("hot", "npu0/chip0")]
    assert engine.transitions() == []  # still the same finding: no second "fired"
    assert engine.evaluate(snapshot(130, temperature_celsius=50.0)) == []
    assert kinds(engine.transitions()) == [("resolved", "hot", "npu0/chip0")]


def test_a_restored_acknowledgement_keeps_a_standing_condition_quiet(engine):
    engine.restore(acknowledged=[("dead", "npu0/chip0")])
    assert engine.evaluate(snapshot(0, health="Critical")) == []
    assert engine.evaluate(snapshot(10, health="OK")) == []  # cleared once ...
    assert keys(engine.evaluate(snapshot(20, health="Critical"))) == [("dead", "npu0/chip0")]  # ... fires again


def test_restore_rejects_gone_rules_and_subject_mismatches_and_is_idempotent(engine, rules_from):
    [dead] = fired_in_a_previous_run(rules_from, snapshot(0, health="Critical"))
    gone = dead.__class__(**dict(dead.to_json(), rule="removed-rule"))
    wrong_kind = dead.__class__(**dict(dead.to_json(), rule="busy-host"))  # a host rule on a chip subject
    assert engine.restore([dead, gone, wrong_kind], [("removed-rule", "host")]) == [
        ("removed-rule", "npu0/chip0"), ("busy-host", "npu0/chip0"), ("removed-rule", "host")]
    assert keys(engine.active()) == [("dead", "npu0/chip0")]
    assert engine.restore([dead]) == []
    assert keys(engine.active()) == [("dead", "npu0/chip0")]


def test_restore_takes_the_current_rule_definition(engine, rules_from):
    [dead] = fired_in_a_previous_run(rules_from, snapshot(0, health="Critical"))
    old = dead.__class__(**dict(dead.to_json(), severity="warning", shadow=True, labels={"old": "yes"}))
    engine.restore([old])
    [restored] = engine.active()
    assert (restored.severity, restored.shadow, restored.labels) == ("critical", False, {})
    assert restored.summary == dead.summary and restored.since == dead.since


def test_live_state_wins_over_restored_state(engine, rules_from):
    engine.evaluate(snapshot(0, health="Critical"))
    engine.transitions()
    [stale] = fired_in_a_previous_run(rules_from, snapshot(-500, health="Critical"))
    engine.restore([stale])
    assert engine.active()[0].since == 0


# --------------------------------------------------------------------------------------------- replace_rules

def test_replace_rules_keeps_pending_timers_active_findings_and_acknowledgements(engine, rules_from):
    engine.evaluate(snapshot(0, cpu=0.95, health="Critical", temperature_celsius=90.0))  # hot: pending
    engine.acknowledge("dead", "npu0/chip0")
    engine.transitions()
    engine.replace_rules(*rules_from())
    assert engine.acknowledged() == [("dead", "npu0/chip0")]
    findings = engine.evaluate(snapshot(60, cpu=0.95, health="Critical", temperature_celsius=90.0))
    assert keys(findings) == [("busy-host", "host"), ("hot", "npu0/chip0")]  # `for` counted from 0, not 60
    assert kinds(engine.transitions()) == [("fired", "hot", "npu0/chip0")]


def test_replace_rules_resolves_removed_rules_and_starts_new_ones_quiet(engine, rules_from):
    engine.evaluate(snapshot(0, cpu=0.95))
    engine.transitions()
    changed = RULES.replace("  - id: busy-host", "  - id: busy-host-renamed")
    engine.replace_rules(*rules_from(changed))
    assert kinds(engine.transitions()) == [("resolved", "busy-host", "host")]
    assert engine.active() == []
    assert keys(engine.evaluate(snapshot(10, cpu=0.95))) == [("busy-host-renamed", "host")]


def test_replace_rules_applies_new_severity_params_and_stickiness(engine, rules_from):
    engine.evaluate(snapshot(0, health="Critical"))
    changed = RULES.replace("""    severity: critical
    sticky: true""", """    severity: warning
    mode: shadow""").replace("hot: 80", "hot: 60")
    engine.replace_rules(*rules_from(changed))
    [dead] = engine.active()
    assert (dead.severity, dead.shadow) == ("warning", True)
    assert engine.evaluate(snapshot(10, health="OK")) == []  # no longer sticky: it resolves
    engine.evaluate(snapshot(20, temperature_celsius=70.0))
    assert keys(engine.evaluate(snapshot(80, temperature_celsius=70.0))) == [("hot", "npu0/chip0")]  # new param


def test_replace_rules_drops_state_of_a_rule_that_changed_subject_kind(engine, rules_from):
    engine.evaluate(snapshot(0, health="Critical"))
    engine.acknowledge("dead", "npu0/chip0")
    engine.evaluate(snapshot(10, health="Critical"))
    engine.transitions()
    changed = RULES.replace("""  - id: dead
    subject: chip
    expr: health == "Critical\"""", """  - id: dead
    subject: host
    expr: cpu_ratio > 0.99""")
    engine.replace_rules(*rules_from(changed))
    assert engine.acknowledged() == []


def test_replace_rules_keeps_window_history(engine, rules_from):
    for minute, count in enumerate((0, 3, 6, 10)):
        engine.evaluate(snapshot(minute * 60, ecc_single_bit_errors=count))
        if minute == 1:
            engine.replace_rules(*rules_from())
    assert keys(engine.active()) == [("rising", "npu0/chip0")]  # increase over samples from both sides
