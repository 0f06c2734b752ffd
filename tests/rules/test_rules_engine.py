"""RuleEngine: for, clear and hysteresis with a controllable clock, shadow, sticky + acknowledge, vanishing
subjects, one-shot mode, ordering and history bounds."""

import textwrap

import pytest

from npumon.model import ChipSample, HostSample, Snapshot, SourceStatus
from npumon.rules import history as history_module
from npumon.rules.engine import RuleEngine
from npumon.rules.history import History
from npumon.rules.loader import load_rules

RULES = """
params:
  hot: 80
  margin: 3
rules:
  - id: hot
    subject: chip
    expr: temperature_celsius >= param.hot
    clear: temperature_celsius < param.hot - param.margin
    for: 1m
    severity: warning
    summary: "{temperature_celsius:.0f} C"
    hint: "cool {subject}"
  - id: alarm
    subject: chip
    expr: health == "Alarm"
    severity: critical
    summary: "alarm {error_code_text}"
  - id: dead
    subject: chip
    expr: health == "Critical"
    severity: critical
    sticky: true
    summary: dead
  - id: trial
    subject: chip
    expr: temperature_celsius > 90
    severity: info
    mode: shadow
    labels: {stage: trial}
    summary: trial
  - id: slow-clear
    subject: host
    expr: cpu_ratio > 0.9
    clear_for: 2m
    severity: warning
    summary: "cpu {cpu_ratio:.0%}"
  - id: rising
    subject: chip
    expr: increase(ecc_single_bit_errors, 1h) > 5
    severity: warning
    summary: rising
"""


@pytest.fixture
def engine_for(tmp_path):
    def make(one_shot=False, **kwargs):
        path = tmp_path / "rules.yaml"
        path.write_text(textwrap.dedent(RULES), encoding="utf-8")
        rules, params = load_rules([str(path)], include_builtin=False)
        return RuleEngine(rules, params, one_shot=one_shot, **kwargs)
    return make


def snapshot(now, chips=None, cpu=0.1, sources=None):
    if chips is None:
        chips = [ChipSample(npu=0, chip=0, health="OK", temperature_celsius=50.0)]
    return Snapshot(time=now, host=HostSample(cpu_ratio=cpu), chips=chips,
                    sources=sources if sources is not None else {"npu-smi": SourceStatus(ok=True, last_success=now)})


def chip(npu=0, index=0, **values):
    values.setdefault("health", "OK")
    values.setdefault("temperature_celsius", 50.0)
    return ChipSample(npu=npu, chip=index, **values)


def ids(findings):
    return [(f.rule, f.subject) for f in findings]


# --------------------------------------------------------------------------------------------- for / clear

def test_for_delays_firing_and_since_is_when_it_started(engine_for):
    engine = engine_for()
    assert engine.evaluate(snapshot(0, [chip(temperature_celsius=81.0)])) == []
    assert engine.evaluate(snapshot(30, [chip(temperature_celsius=82.0)])) == []
    findings = engine.evaluate(snapshot(60, [chip(temperature_celsius=83.0)]))
    assert ids(findings) == [("hot", "npu0/chip0")]
    assert findings[0].since == 0
    assert findings[0].summary == "83 C" and findings[0].hint == "cool npu0/chip0"
    assert [(kind, f.rule) for kind, f in engine.transitions()] == [("fired", "hot")]
    assert engine.transitions() == []


def test_next_due_is_when_the_earliest_for_or_clear_time_runs_out(engine_for):
    engine = engine_for()
    assert engine.evaluate(snapshot(0)) == [] and engine.next_due() is None  # nothing pending
    engine.evaluate(snapshot(10, [chip(temperature_celsius=81.0)]))
    assert engine.next_due() == 70  # hot's `for: 1m` from 10
    engine.evaluate(snapshot(70, [chip(temperature_celsius=81.0)], cpu=0.95))  # hot fires; slow-clear fires
    assert engine.next_due() is None  # both active, neither clearing
    engine.evaluate(snapshot(80, [chip(temperature_celsius=81.0)], cpu=0.5))
    assert engine.next_due() == 200  # slow-clear's `clear_for: 2m` from 80; hot's clear does not hold


def test_a_dip_or_a_missing_value_restarts_the_for_timer(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(0, [chip(temperature_celsius=81.0)]))
    engine.evaluate(snapshot(30, [chip(temperature_celsius=None)]))  # unknown: not known to hold
    assert engine.evaluate(snapshot(60, [chip(temperature_celsius=81.0)])) == []
    engine.evaluate(snapshot(90, [chip(temperature_celsius=70.0)]))
    engine.evaluate(snapshot(120, [chip(temperature_celsius=81.0)]))
    assert engine.evaluate(snapshot(150, [chip(temperature_celsius=81.0)])) == []
    assert ids(engine.evaluate(snapshot(180, [chip(temperature_celsius=81.0)]))) == [("hot", "npu0/chip0")]


def test_hysteresis_keeps_the_finding_until_the_clear_condition(engine_for):
    engine = engine_for()
    for when in (0, 60):
        engine.evaluate(snapshot(when, [chip(temperature_celsius=85.0)]))
    engine.transitions()
    # below the threshold but inside the margin: still active, summary keeps the last firing value
    findings = engine.evaluate(snapshot(120, [chip(temperature_celsius=78.0)]))
    assert ids(findings) == [("hot", "npu0/chip0")] and findings[0].summary == "85 C"
    # a missing value neither fires nor clears
    assert ids(engine.evaluate(snapshot(150, [chip(temperature_celsius=None)]))) == [("hot", "npu0/chip0")]
    assert engine.evaluate(snapshot(180, [chip(temperature_celsius=76.0)])) == []
    transitions = engine.transitions()
    assert [(kind, f.rule, f.since) for kind, f in transitions] == [("resolved", "hot", 0)]


def test_summary_follows_the_value_while_the_condition_holds(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(0, [chip(temperature_celsius=81.0)]))
    engine.evaluate(snapshot(60, [chip(temperature_celsius=81.0)]))
    findings = engine.evaluate(snapshot(120, [chip(temperature_celsius=88.0)]))
    assert findings[0].summary == "88 C" and findings[0].since == 0
    assert [kind for kind, _ in engine.transitions()] == ["fired"]


def test_default_clear_is_the_expression_being_false(engine_for):
    engine = engine_for()
    assert ids(engine.evaluate(snapshot(0, [chip(health="Alarm", error_codes=["A4025021"])]))) == [
        ("alarm", "npu0/chip0")]
    assert ids(engine.evaluate(snapshot(15, [chip(health=None)]))) == [("alarm", "npu0/chip0")]
    assert engine.evaluate(snapshot(30, [chip(health="OK")])) == []
    assert [kind for kind, _ in engine.transitions()] == ["fired", "resolved"]


def test_clear_for(engine_for):
    engine = engine_for()
    assert ids(engine.evaluate(snapshot(0, cpu=0.95))) == [("slow-clear", "host")]
    assert ids(engine.evaluate(snapshot(60, cpu=0.5))) == [("slow-clear", "host")]
    assert ids(engine.evaluate(snapshot(120, cpu=0.95))) == [("slow-clear", "host")]  # clear timer restarts
    assert ids(engine.evaluate(snapshot(180, cpu=0.5))) == [("slow-clear", "host")]
    assert ids(engine.evaluate(snapshot(240, cpu=0.5))) == [("slow-clear", "host")]
    assert engine.evaluate(snapshot(300, cpu=0.5)) == []


def test_now_defaults_to_the_snapshot_time_and_can_be_injected(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(1000, [chip(temperature_celsius=81.0)]), now=0)
    findings = engine.evaluate(snapshot(1000, [chip(temperature_celsius=81.0)]), now=60)
    assert findings[0].since == 0


# --------------------------------------------------------------------------------------------- modes

def test_shadow_findings_are_marked(engine_for):
    findings = engine_for(one_shot=True).evaluate(snapshot(0, [chip(temperature_celsius=95.0)]))
    trial = next(f for f in findings if f.rule == "trial")
    assert trial.shadow and trial.labels == {"stage": "trial"}
    assert not next(f for f in findings if f.rule == "hot").shadow


def test_one_shot_ignores_for_and_windows_see_one_sample(engine_for):
    engine = engine_for(one_shot=True)
    findings = engine.evaluate(snapshot(0, [chip(temperature_celsius=81.0, ecc_single_bit_errors=1000)]))
    assert ids(findings) == [("hot", "npu0/chip0")]  # `for: 1m` ignored; increase() over one sample is 0


def test_window_rule_over_time(engine_for):
    engine = engine_for()
    for when, count in [(0, 100), (900, 101), (1800, 2), (2700, 3)]:
        assert engine.evaluate(snapshot(when, [chip(ecc_single_bit_errors=count)])) == []
    # 100 -> 101 (+1), reset -> 2 (+2), -> 3 (+1), -> 5 (+2) = 6 > 5
    assert ids(engine.evaluate(snapshot(3600, [chip(ecc_single_bit_errors=5)]))) == [("rising", "npu0/chip0")]
    # two hours later the old rises have left the 1-hour window
    assert engine.evaluate(snapshot(7200 + 3600, [chip(ecc_single_bit_errors=5)])) == []


# --------------------------------------------------------------------------------------------- sticky / acknowledge

def test_sticky_stays_until_acknowledged_and_fires_again_only_after_clearing(engine_for):
    acks = []
    engine = engine_for(on_acknowledge=lambda rule, subject: acks.append((rule, subject)))
    assert ids(engine.evaluate(snapshot(0, [chip(health="Critical")]))) == [("dead", "npu0/chip0")]
    assert ids(engine.evaluate(snapshot(15, [chip(health="OK")]))) == [("dead", "npu0/chip0")]
    assert engine.evaluate(snapshot(30, [chip(health="Critical")]))[0].since == 0

    assert engine.acknowledge("dead", "npu0/chip0") is True
    assert acks == [("dead", "npu0/chip0")]
    assert engine.acknowledged() == [("dead", "npu0/chip0")]
    assert engine.evaluate(snapshot(45, [chip(health="Critical")])) == []  # acknowledged: quiet
    assert engine.evaluate(snapshot(60, [chip(health=None)])) == []
    assert engine.evaluate(snapshot(75, [chip(health="OK")])) == []  # cleared: the acknowledgement ends
    assert engine.acknowledged() == []
    findings = engine.evaluate(snapshot(90, [chip(health="Critical")]))
    assert ids(findings) == [("dead", "npu0/chip0")] and findings[0].since == 90
    assert [kind for kind, _ in engine.transitions()] == ["fired", "resolved", "fired"]


def test_acknowledge_without_an_active_finding(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(0))
    assert engine.acknowledge("dead", "npu0/chip0") is False
    assert engine.acknowledge("no-such-rule", "host") is False


def test_acknowledgements_can_be_restored(engine_for):
    engine = engine_for(acknowledged=[("dead", "npu0/chip0")])
    assert engine.evaluate(snapshot(0, [chip(health="Critical")])) == []


# --------------------------------------------------------------------------------------------- subjects

def test_vanished_chip_resolves_non_sticky_findings_only(engine_for):
    engine = engine_for(one_shot=True)
    chips = [chip(0, 0, health="Alarm"), chip(1, 0, health="Critical")]
    assert sorted(ids(engine.evaluate(snapshot(0, chips)))) == [("alarm", "npu0/chip0"), ("dead", "npu1/chip0")]
    engine.transitions()
    assert ids(engine.evaluate(snapshot(15, []))) == [("dead", "npu1/chip0")]
    assert [(kind, f.rule) for kind, f in engine.transitions()] == [("resolved", "alarm")]


def test_chips_unseen_while_a_source_is_down_keep_their_state(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(0, [chip(health="Alarm"), chip(1, 0, temperature_celsius=81.0)]))
    engine.transitions()
    down = {"npu-smi": SourceStatus(ok=False, error="timed out", last_success=0)}
    assert ids(engine.evaluate(snapshot(15, [], sources=down))) == [("alarm", "npu0/chip0")]
    assert engine.transitions() == []
    # back: the pending `hot` on npu1 kept its start time too
    findings = engine.evaluate(snapshot(60, [chip(health="Alarm"), chip(1, 0, temperature_celsius=81.0)]))
    assert sorted(ids(findings)) == [("alarm", "npu0/chip0"), ("hot", "npu1/chip0")]


def test_an_unsupported_source_is_not_down(engine_for):
    engine = engine_for(one_shot=True)
    engine.evaluate(snapshot(0, [chip(health="Alarm")]))
    unsupported = {"npu-smi": SourceStatus(ok=True), "npu-smi:ecc": SourceStatus(ok=False, unsupported=True)}
    assert engine.evaluate(snapshot(15, [], sources=unsupported)) == []


def test_findings_sorted_critical_first_then_rule_then_chip_number(engine_for):
    engine = engine_for(one_shot=True)
    chips = [chip(10, 0, health="Alarm"), chip(2, 0, health="Alarm", temperature_celsius=81.0),
             chip(2, 1, health="Critical")]
    findings = engine.evaluate(snapshot(0, chips, cpu=0.95))
    assert ids(findings) == [("alarm", "npu2/chip0"), ("alarm", "npu10/chip0"), ("dead", "npu2/chip1"),
                             ("hot", "npu2/chip0"), ("slow-clear", "host")]


# --------------------------------------------------------------------------------------------- history

def test_engine_keeps_history_only_for_windowed_facts(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(0, [chip(ecc_single_bit_errors=1)]))
    assert engine._history.retention.keys() == {"ecc_single_bit_errors"}


def test_history_drops_samples_older_than_the_window_and_margin():
    history = History({"x": 600.0})
    for step in range(200):
        history.record("s", step * 15.0, {"x": step})
    times, values = history.window("s", "x", 199 * 15.0, 10 ** 6)
    assert times[0] >= 199 * 15.0 - 600.0 - history_module.RETENTION_MARGIN_SECONDS
    assert values[-1] == 199
    assert history.sample_count() == len(times)


def test_history_caps_samples_per_series(monkeypatch):
    monkeypatch.setattr(history_module, "MAX_SAMPLES", 10)
    history = History({"x": 10 ** 9})
    for step in range(50):
        history.record("s", float(step), {"x": step})
    assert history.sample_count() == 10
    assert history.window("s", "x", 49.0, 10 ** 9)[1] == list(range(40, 50))


def test_history_ignores_samples_that_are_not_newer():
    history = History({"x": 100.0})
    history.record("s", 10.0, {"x": 1})
    history.record("s", 10.0, {"x": 2})
    history.record("s", 5.0, {"x": 3})
    assert history.window("s", "x", 10.0, 100.0) == ([10.0], [1])


def test_history_of_a_vanished_chip_is_forgotten(engine_for):
    engine = engine_for()
    engine.evaluate(snapshot(0, [chip(0, 0, ecc_single_bit_errors=1), chip(1, 0, ecc_single_bit_errors=1)]))
    engine.evaluate(snapshot(15, [chip(0, 0, ecc_single_bit_errors=1)]))
    assert sorted(engine._history.subjects()) == ["host", "npu0/chip0"]
