"""Rule files: the built-in file, user overrides, params, and one-line errors naming file, line and rule."""

import re
import textwrap

import pytest

from npumon.rules.loader import BUILTIN_RULES_PATH, RuleError, default_params, load_rules


@pytest.fixture
def write(tmp_path):
    def write_file(text, name="rules.yaml"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
        return str(path)
    return write_file


def load_error(*paths, **kwargs):
    with pytest.raises(RuleError) as caught:
        load_rules(paths, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


# --------------------------------------------------------------------------------------------- built-in

def test_builtin_rules_load_with_stable_ids_and_hints():
    rules, params = load_rules()
    ids = [rule.id for rule in rules]
    assert len(ids) == len(set(ids))
    for rule in rules:
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", rule.id), rule.id
        assert rule.hint.strip(), rule.id
        assert rule.source.startswith(BUILTIN_RULES_PATH + ":")
    assert {"cpu-bottleneck", "memory-bound", "source-down"} <= set(ids)
    assert params == default_params()
    assert params["temperature_critical_celsius"] == 85 and params["temperature_warning_celsius"] == 80
    assert params["max_map_count_min"] == 262144


def test_builtin_sticky_rules():
    rules, _ = load_rules()
    assert {rule.id for rule in rules if rule.sticky} == {"health-critical", "ecc-uncorrectable",
                                                          "driver-hardware-fault", "driver-device-fault",
                                                          "driver-host-hardware-fault", "driver-host-device-fault"}


def test_default_params_is_a_copy():
    default_params()["temperature_critical_celsius"] = 1
    assert default_params()["temperature_critical_celsius"] == 85


# --------------------------------------------------------------------------------------------- user files

def test_user_file_overrides_disables_and_adds(write):
    path = write("""
        params:
          fan_limit: 3
        rules:
          - id: temperature-warning
            severity: info
            for: 30s
          - id: memory-bound
            enabled: false
          - id: hot-host
            subject: host
            expr: max_chip_temperature_celsius > 70 and chip_count > param.fan_limit
            severity: warning
            summary: "hottest chip {max_chip_temperature_celsius:.0f} C"
            labels: {team: infra, tier: 1}
            mode: shadow
    """)
    rules, params = load_rules([path])
    by_id = {rule.id: rule for rule in rules}
    assert "memory-bound" not in by_id
    warning = by_id["temperature-warning"]
    assert warning.severity == "info" and warning.for_seconds == 30.0
    # keys the override does not set come from the built-in rule
    assert warning.expr.text == "temperature_celsius >= param.temperature_warning_celsius"
    assert warning.clear is not None
    assert warning.source == path + ":4"
    added = by_id["hot-host"]
    assert added.subject == "host" and added.shadow and not added.sticky
    assert added.labels == {"team": "infra", "tier": "1"}
    assert added.hint == "" and added.for_seconds == 0 and added.clear is None
    assert params["fan_limit"] == 3
    assert [rule.id for rule in rules][-1] == "hot-host"


def test_later_files_win(write):
    first = write("rules:\n  - {id: source-down, severity: critical}\n", "a.yaml")
    second = write("rules:\n  - {id: source-down, for: 5m}\n", "b.yaml")
    rules, _ = load_rules([first, second])
    rule = next(r for r in rules if r.id == "source-down")
    assert rule.severity == "critical" and rule.for_seconds == 300.0
    assert rule.source == second + ":2"


def test_without_builtin_rules(write):
    path = write("""
        rules:
          - id: only-rule
            subject: chip
            expr: health == "Alarm"
            severity: critical
            summary: alarm
    """)
    rules, params = load_rules([path], include_builtin=False)
    assert [rule.id for rule in rules] == ["only-rule"] and params == {}


def test_empty_user_file_adds_nothing(write):
    assert len(load_rules([write("")])[0]) == len(load_rules()[0])


# --------------------------------------------------------------------------------------------- params

def test_thresholds_override_params():
    rules, params = load_rules(params={"temperature_critical_celsius": 90})
    assert params["temperature_critical_celsius"] == 90
    assert params["temperature_warning_celsius"] == 80


def test_unknown_threshold_is_refused():
    message = load_error(params={"temperature_critcal_celsius": 90})
    assert "unknown parameter 'temperature_critcal_celsius'" in message
    assert "did you mean 'temperature_critical_celsius'" in message


def test_non_numeric_threshold_is_refused():
    assert "must be a number" in load_error(params={"temperature_critical_celsius": "hot"})


# --------------------------------------------------------------------------------------------- errors

RULE_HEAD = """
rules:
  - id: my-rule
    subject: chip
"""


@pytest.mark.parametrize("body, line, fragment", [
    # each body continues RULE_HEAD (the rule starts on line 2)
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    colour: red\n", 7, "unknown key 'colour'"),
    ("    expr: health == 1\n    severity: urgent\n    summary: s\n", 5, "severity: must be one of info, warning, critical"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    for: soon\n", 7, "for: expected a duration"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    for: [1]\n", 7, "for: expected a duration"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    sticky: maybe\n", 7, "sticky: must be true or false"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    mode: loud\n", 7, "mode: must be one of normal, shadow"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    labels: [a]\n", 7, "labels: must be a mapping"),
    ("    expr: 42\n    severity: warning\n    summary: s\n", 4, "expr: must be an expression string"),
    ("    expr: temprature_celsius > 80\n    severity: warning\n    summary: s\n", 4,
     "expr: unknown chip fact 'temprature_celsius' (did you mean 'temperature_celsius'?)"),
    ("    expr: temperature_celsius > param.nope\n    severity: warning\n    summary: s\n", 4,
     "expr: unknown parameter 'param.nope'"),
    ("    expr: temperature_celsius >> 80\n    severity: warning\n    summary: s\n", 4,
     "expr: unexpected '>' at column 22"),
    ("    expr: temperature_celsius + 1\n    severity: warning\n    summary: s\n", 4, "expr: must be a condition"),
    ("    expr: health == 1\n    clear: health ==\n    severity: warning\n    summary: s\n", 5,
     "clear: unexpected end of expression at column 10"),
    ("    expr: health == 1\n    severity: warning\n    summary: '{tempreature_celsius}'\n", 6,
     "summary: unknown chip fact 'tempreature_celsius'"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    hint: 'see {param.missing}'\n", 7,
     "hint: unknown parameter 'param.missing'"),
    ("    expr: health == 1\n    severity: warning\n    summary: '{health'\n", 6, "summary: unclosed '{'"),
    ("    expr: health == 1\n    severity: warning\n    summary: '{health.__class__}'\n", 6, "summary: bad field"),
    ("    expr: health == 1\n    severity: warning\n    summary: '{health:zz}'\n", 6, "summary: bad format spec"),
    ("    expr: health == 1\n    severity: warning\n", 2, "missing summary"),
    ("    expr: health == 1\n    severity: warning\n    summary: s\n    enabled: 3\n", 7,
     "enabled must be true or false"),
])
def test_rule_errors_name_file_line_and_rule(write, body, line, fragment):
    path = write(RULE_HEAD + body)
    message = load_error(path)
    assert message.startswith("{}:{}: rule 'my-rule': ".format(path, line)), message
    assert fragment in message


def test_wrong_subject_is_refused(write):
    path = write("rules:\n  - id: r\n    subject: card\n    expr: 'true'\n    severity: info\n    summary: s\n")
    assert load_error(path) == "{}:3: rule 'r': subject: must be one of chip, host, got 'card'".format(path)


def test_host_rule_cannot_read_chip_facts(write):
    path = write("rules:\n  - id: r\n    subject: host\n    expr: temperature_celsius > 1\n"
                 "    severity: info\n    summary: s\n")
    assert "unknown host fact 'temperature_celsius'" in load_error(path)


@pytest.mark.parametrize("text, line, fragment", [
    ("rules:\n  - id: a\n    expr: [unclosed\n", 4, "bad YAML"),
    ("rules: {id: a}\n", 1, "rules must be a list"),
    ("- id: a\n", 1, "a rule file must be a mapping"),
    ("rules: []\nextras: 1\n", 2, "unknown top-level key 'extras'"),
    ("rules:\n  - just text\n", 2, "each rule must be a mapping"),
    ("rules:\n  - subject: chip\n", 2, "rule without an id"),
    ("rules:\n  - id: 'bad id!'\n", 2, "bad rule id"),
    ("params:\n  x: fast\n", 2, "parameter 'x' must be a number"),
    ("params:\n  x: .nan\n", 2, "parameter 'x' must be a number"),
    ("params: [1]\n", 1, "params must be a mapping"),
    ("params:\n  x: 1\n  x: 2\n", 3, "duplicate key 'x'"),
])
def test_file_errors_name_file_and_line(write, text, line, fragment):
    path = write(text)
    message = load_error(path)
    assert message.startswith("{}:{}: ".format(path, line)), message
    assert fragment in message


def test_duplicate_id_in_one_file(write):
    path = write("rules:\n  - {id: source-down, for: 1m}\n  - {id: source-down, for: 2m}\n")
    assert load_error(path) == "{}:3: rule 'source-down': duplicate rule id in this file".format(path)


def test_override_of_an_unknown_id_is_refused(write):
    """A typo in the id of an override must not silently do nothing."""
    path = write("rules:\n  - id: temprature-warning\n    enabled: false\n")
    message = load_error(path)
    assert message.startswith("{}:2: rule 'temprature-warning': no earlier rule has this id".format(path))


def test_error_in_an_override_names_the_override(write):
    path = write("rules:\n  - id: source-down\n    expr: down_source_count >\n")
    message = load_error(path)
    assert message.startswith("{}:3: rule 'source-down': expr: unexpected end of expression".format(path))


def test_unreadable_file(tmp_path):
    missing = str(tmp_path / "absent.yaml")
    assert load_error(missing).startswith(missing + ": cannot read rule file")
