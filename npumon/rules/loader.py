"""Rule files: the built-in `builtin.yaml` plus user files, merged by rule id, checked at load time.

A rule file is a YAML mapping with two optional keys:

    params:                      # numeric parameters that rules read as `param.<name>`
      temperature_warning_celsius: 80
    rules:
      - id: temperature-high     # stable kebab-case id: users override and disable rules by it
        subject: chip            # chip | host
        expr: temperature_celsius >= param.temperature_warning_celsius
        for: 1m                  # must hold this long before firing (default 0)
        clear: temperature_celsius < param.temperature_warning_celsius - 3   # default: expr is false
        clear_for: 2m            # the clear condition must hold this long (default 0)
        severity: warning        # info | warning | critical
        summary: "{temperature_celsius:.0f} C"   # templates: {fact}, {fact:spec}, {param.name}
        hint: "check the fans"
        labels: {team: infra}
        mode: shadow             # evaluated and recorded, never notified (default: normal)
        sticky: true             # stays active until acknowledged
        repair_action: "{fault_repair_action}"   # template: what repairs it (none, restart_workload, reset_npu,
        level: "{fault_level}"   # reboot_host, inspect_hardware, replace_hardware), and the fault's level
        reboot_clears: true      # a reboot of the host (a new boot id) resolves it, sticky or not
        inhibits: [temperature-warning]   # while active on a subject, these rules' findings there are not
                                 # reported (rules of the same subject kind; see presentation.py)
        group: host              # a chip rule with a host-wide cause: reported once, listing its chips
        enabled: false           # drop the rule (e.g. a built-in one)

Files are applied in order (built-in first). A later entry with an existing id overrides only the keys
it sets; a new id must set subject, expr, severity and summary. `params:` in a later file adds or
overrides parameters; the caller's `params` (the config's `thresholds:`) win over every file and may
only name parameters some file defines. Every problem is a RuleError naming file, line and rule id.
"""

import difflib
import functools
import math
import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence, Tuple

import yaml

from ..config import yamlparse
from ..faults.levels import REPAIR_ACTIONS
from ..model import SEVERITIES
from .expr import PARAM_PREFIX, Expression, ExprError, compile_expression, parse_duration
from .facts import CHIP_FACTS, HOST_FACTS, is_known_fact
from .template import TemplateError, compile_template

BUILTIN_RULES_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "builtin.yaml")

SUBJECT_KINDS = ("chip", "host")
MODES = ("normal", "shadow")
RULE_KEYS = ("id", "enabled", "subject", "expr", "for", "clear", "clear_for", "severity", "summary", "hint",
             "labels", "mode", "sticky", "repair_action", "level", "reboot_clears", "inhibits", "group")
REQUIRED_FOR_NEW_RULES = ("subject", "expr", "severity", "summary")
_RULE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_PARAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class Rule:
    id: str
    subject: str  # chip | host
    expr: Expression
    clear: Optional[Expression]  # None: the finding resolves when expr is false
    for_seconds: float
    clear_for_seconds: float
    severity: str
    summary: str  # template text, see template.py
    hint: str
    labels: Dict[str, str]
    shadow: bool
    sticky: bool
    source: str  # "file:line" of the entry that last defined or overrode the rule
    repair_action: str = ""  # template; empty or null when rendered: the finding has none
    level: str = ""  # template of the fault's handling level, likewise
    reboot_clears: bool = False  # a reboot (new boot id) resolves its findings, sticky ones too
    inhibits: Tuple[str, ...] = ()  # ids of rules whose findings on the same subject it hides while active
    group_host: bool = False  # `group: host`: its chips' findings are reported as one host finding


class RuleError(ValueError):
    """A rule file or parameter problem; the one-line message names file, line and rule id."""


class _Value(NamedTuple):
    """A YAML value with where it came from."""

    value: Any
    path: str
    line: int  # 1-based


class _Entry(NamedTuple):
    id: str
    path: str
    line: int
    fields: Dict[str, _Value]


class _RuleFile(NamedTuple):
    params: Dict[str, _Value]
    entries: List[_Entry]


def _fail(path: str, line: int, problem: str, rule_id: Optional[str] = None) -> RuleError:
    where = "{}:{}".format(path, line)
    return RuleError("{}: rule {!r}: {}".format(where, rule_id, problem) if rule_id else
                     "{}: {}".format(where, problem))


# --------------------------------------------------------------------------------------------- reading

def _read_rule_file(path: str) -> _RuleFile:
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError("{}: cannot read rule file: {}".format(path, exc)) from None
    try:
        return yamlparse.parse(text, lambda loader: _interpret(path, loader.get_single_node(), loader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise _fail(path, line, "bad YAML: {}".format(problem)) from None


def _interpret(path: str, root: Optional[yaml.Node], loader: yaml.SafeLoader) -> _RuleFile:
    result = _RuleFile({}, [])
    if root is None:
        return result  # an empty file adds nothing
    if not isinstance(root, yaml.MappingNode):
        raise _fail(path, _line(root), "a rule file must be a mapping with 'params' and/or 'rules'")
    for key, node in _mapping_items(path, root):
        if key == "params":
            result.params.update(_read_params(path, node, loader))
        elif key == "rules":
            result.entries.extend(_read_entries(path, node, loader))
        else:
            raise _fail(path, _line(node), "unknown top-level key {!r} (expected params, rules)".format(key))
    return result


def _line(node: yaml.Node) -> int:
    return node.start_mark.line + 1


def _mapping_items(path: str, node: yaml.MappingNode, rule_id: Optional[str] = None) -> List[Tuple[str, yaml.Node]]:
    items = []
    seen = set()
    for key_node, value_node in node.value:
        if not isinstance(key_node, yaml.ScalarNode):
            raise _fail(path, _line(key_node), "keys must be plain names", rule_id)
        key = key_node.value
        if key in seen:
            raise _fail(path, _line(key_node), "duplicate key {!r}".format(key), rule_id)
        seen.add(key)
        items.append((key, value_node))
    return items


def _read_params(path: str, node: yaml.Node, loader: yaml.SafeLoader) -> Dict[str, _Value]:
    if not isinstance(node, yaml.MappingNode):
        raise _fail(path, _line(node), "params must be a mapping of name: number")
    params = {}
    for name, value_node in _mapping_items(path, node):
        value = loader.construct_object(value_node, deep=True)
        if not _PARAM_NAME.fullmatch(name):
            raise _fail(path, _line(value_node), "bad parameter name {!r}".format(name))
        if not _is_number(value):
            raise _fail(path, _line(value_node), "parameter {!r} must be a number, got {!r}".format(name, value))
        params[name] = _Value(value, path, _line(value_node))
    return params


def _read_entries(path: str, node: yaml.Node, loader: yaml.SafeLoader) -> List[_Entry]:
    if not isinstance(node, yaml.SequenceNode):
        raise _fail(path, _line(node), "rules must be a list of rule mappings")
    entries = []
    ids = set()
    for rule_node in node.value:
        if not isinstance(rule_node, yaml.MappingNode):
            raise _fail(path, _line(rule_node), "each rule must be a mapping")
        fields = {key: _Value(loader.construct_object(value, deep=True), path, _line(value))
                  for key, value in _mapping_items(path, rule_node)}
        rule_id = fields.get("id")
        if rule_id is None:
            raise _fail(path, _line(rule_node), "rule without an id")
        if not isinstance(rule_id.value, str) or not _RULE_ID.fullmatch(rule_id.value):
            raise _fail(path, rule_id.line, "bad rule id {!r} (letters, digits, '-', '_', '.')".format(rule_id.value))
        for key, value in fields.items():
            if key not in RULE_KEYS:
                raise _fail(path, value.line, "unknown key {!r} (known: {})".format(
                    key, ", ".join(RULE_KEYS)), rule_id.value)
        if rule_id.value in ids:
            raise _fail(path, _line(rule_node), "duplicate rule id in this file", rule_id.value)
        ids.add(rule_id.value)
        entries.append(_Entry(rule_id.value, path, _line(rule_node), fields))
    return entries


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# --------------------------------------------------------------------------------------------- building

@functools.lru_cache(maxsize=1)
def _builtin_file() -> _RuleFile:
    return _read_rule_file(BUILTIN_RULES_PATH)


def default_params() -> Dict[str, float]:
    """The built-in parameter defaults (the names the config's `thresholds:` may set)."""
    return {name: value.value for name, value in _builtin_file().params.items()}


def threshold_problems(config: Any) -> List[Tuple[str, str]]:
    """The rule loader's check of the config's `thresholds:`: every name is a built-in parameter."""
    known = default_params()
    return [("thresholds." + name, "unknown threshold (known: {})".format(", ".join(sorted(known))))
            for name in config.thresholds if name not in known]


def load_rules(user_files: Sequence[str] = (), params: Optional[Dict[str, float]] = None,
               include_builtin: bool = True) -> Tuple[List[Rule], Dict[str, float]]:
    """The enabled rules (built-in order, then new user rules in file order) and the effective params."""
    files = ([_builtin_file()] if include_builtin else []) + [_read_rule_file(path) for path in user_files]
    effective = _effective_params(files, params or {})
    merged: Dict[str, _Entry] = {}
    for rule_file in files:
        for entry in rule_file.entries:
            previous = merged.get(entry.id)
            if previous is None:
                _check_complete(entry)
            else:
                entry = _Entry(entry.id, entry.path, entry.line, dict(previous.fields, **entry.fields))
            merged[entry.id] = entry
    rules = []
    for entry in merged.values():
        enabled = entry.fields.get("enabled")
        if enabled is not None and not isinstance(enabled.value, bool):
            raise _fail(enabled.path, enabled.line, "enabled must be true or false", entry.id)
        if enabled is None or enabled.value:
            rules.append(_build_rule(entry, effective))
    _check_inhibits(rules, merged)
    return rules, effective


def _check_inhibits(rules: Sequence[Rule], merged: Mapping[str, _Entry]) -> None:
    """`inhibits` names rules some file defines, of the same subject kind; a disabled one is fine."""
    subjects = {rule.id: rule.subject for rule in rules}
    for rule in rules:
        for inhibited in rule.inhibits:
            value = merged[rule.id].fields["inhibits"]
            if inhibited not in merged:
                raise _fail(value.path, value.line, "inhibits: no rule has the id {!r}{}".format(
                    inhibited, _suggest(inhibited, merged)), rule.id)
            if inhibited in subjects and subjects[inhibited] != rule.subject:
                raise _fail(value.path, value.line, "inhibits: {!r} judges the {}, not the {}".format(
                    inhibited, subjects[inhibited], rule.subject), rule.id)


def _effective_params(files: Sequence[_RuleFile], overrides: Mapping[str, Any]) -> Dict[str, float]:
    effective: Dict[str, float] = {}
    for rule_file in files:
        effective.update((name, value.value) for name, value in rule_file.params.items())
    for name, value in overrides.items():
        if name not in effective:
            raise RuleError("thresholds: unknown parameter {!r}{}".format(name, _suggest(name, effective)))
        if not _is_number(value):
            raise RuleError("thresholds: parameter {!r} must be a number, got {!r}".format(name, value))
        effective[name] = value
    return effective


def _check_complete(entry: _Entry) -> None:
    """A new id must be a whole rule; this also catches a typo in the id of an override."""
    missing = [key for key in REQUIRED_FOR_NEW_RULES if key not in entry.fields]
    if missing:
        raise _fail(entry.path, entry.line, "no earlier rule has this id, and a new rule needs {} (missing {})".format(
            ", ".join(REQUIRED_FOR_NEW_RULES), ", ".join(missing)), entry.id)


def _build_rule(entry: _Entry, params: Mapping[str, float]) -> Rule:
    checker = _FieldChecker(entry)
    subject = checker.choice("subject", SUBJECT_KINDS)
    expr = checker.expression("expr", subject, params)
    clear = checker.expression("clear", subject, params) if "clear" in entry.fields else None
    return Rule(
        id=entry.id,
        subject=subject,
        expr=expr,
        clear=clear,
        for_seconds=checker.duration("for"),
        clear_for_seconds=checker.duration("clear_for"),
        severity=checker.choice("severity", SEVERITIES),
        summary=checker.template("summary", subject, params),
        hint=checker.template("hint", subject, params),
        labels=checker.labels(),
        shadow=checker.choice("mode", MODES, default="normal") == "shadow",
        sticky=checker.flag("sticky"),
        source="{}:{}".format(entry.path, entry.line),
        repair_action=checker.repair_action(subject, params),
        level=checker.template("level", subject, params),
        reboot_clears=checker.flag("reboot_clears"),
        inhibits=checker.rule_ids("inhibits"),
        group_host=checker.group(subject),
    )


class _FieldChecker:
    """Reads one typed field of a rule entry; every error carries that field's own file and line."""

    def __init__(self, entry: _Entry):
        self.entry = entry

    def _error(self, key: str, problem: str) -> RuleError:
        value = self.entry.fields[key]
        return _fail(value.path, value.line, "{}: {}".format(key, problem), self.entry.id)

    def _get(self, key: str, default: Any) -> Any:
        value = self.entry.fields.get(key)
        return default if value is None else value.value

    def choice(self, key: str, choices: Sequence[str], default: Optional[str] = None) -> str:
        value = self._get(key, default)
        if value not in choices:
            raise self._error(key, "must be one of {}, got {!r}".format(", ".join(choices), value))
        return value

    def flag(self, key: str) -> bool:
        value = self._get(key, False)
        if not isinstance(value, bool):
            raise self._error(key, "must be true or false, got {!r}".format(value))
        return value

    def duration(self, key: str) -> float:
        value = self._get(key, 0)
        if _is_number(value) and value >= 0:
            return float(value)
        if isinstance(value, str):
            try:
                return parse_duration(value)
            except ValueError as exc:
                raise self._error(key, str(exc)) from None
        raise self._error(key, "expected a duration like 30s, 5m or 1h, got {!r}".format(value))

    def expression(self, key: str, subject: str, params: Mapping[str, float]) -> Expression:
        text = self._get(key, None)
        if not isinstance(text, str):
            raise self._error(key, "must be an expression string, got {!r}".format(text))
        try:
            expression = compile_expression(text)
        except ExprError as exc:
            raise self._error(key, "{} at column {}".format(exc.message, exc.position + 1)) from None
        if not expression.is_condition:
            raise self._error(key, "must be a condition (a comparison, in, and/or/not), got {!r}".format(text))
        self._check_names(key, expression.names, subject, params)
        return expression

    def template(self, key: str, subject: str, params: Mapping[str, float]) -> str:
        text = self._get(key, "")
        if not isinstance(text, str):
            raise self._error(key, "must be a string, got {!r}".format(text))
        try:
            template = compile_template(text)
        except TemplateError as exc:
            raise self._error(key, str(exc)) from None
        self._check_names(key, template.names, subject, params)
        return text

    def repair_action(self, subject: str, params: Mapping[str, float]) -> str:
        """A template; a fixed text must be one of the repair actions."""
        text = self.template("repair_action", subject, params)
        if text and not compile_template(text).names and text not in REPAIR_ACTIONS:
            raise self._error("repair_action", "must be one of {} (or a template), got {!r}".format(
                ", ".join(REPAIR_ACTIONS), text))
        return text

    def rule_ids(self, key: str) -> Tuple[str, ...]:
        value = self._get(key, [])
        if not isinstance(value, list) or not all(isinstance(item, str) and _RULE_ID.fullmatch(item)
                                                  for item in value):
            raise self._error(key, "must be a list of rule ids, got {!r}".format(value))
        if self.entry.id in value:
            raise self._error(key, "a rule cannot inhibit itself")
        return tuple(value)

    def group(self, subject: str) -> bool:
        value = self._get("group", None)
        if value is None:
            return False
        if value != "host":
            raise self._error("group", "must be host, got {!r}".format(value))
        if subject != "chip":
            raise self._error("group", "only a chip rule can be grouped on its host")
        return True

    def labels(self) -> Dict[str, str]:
        value = self._get("labels", {})
        if not isinstance(value, dict) or not all(
                isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in value.items()):
            raise self._error("labels", "must be a mapping of name: text")
        return {k: "true" if v is True else "false" if v is False else str(v) for k, v in value.items()}

    def _check_names(self, key: str, names: Sequence[str], subject: str, params: Mapping[str, float]) -> None:
        for name in sorted(names):
            if name.startswith(PARAM_PREFIX):
                param = name[len(PARAM_PREFIX):]
                if param not in params:
                    raise self._error(key, "unknown parameter {!r}{}".format(name, _suggest(param, params)))
            elif not is_known_fact(subject, name):
                known = CHIP_FACTS if subject == "chip" else HOST_FACTS
                raise self._error(key, "unknown {} fact {!r}{}".format(subject, name, _suggest(name, known)))


def _suggest(name: str, known: Any) -> str:
    close = difflib.get_close_matches(name, sorted(known), n=1)
    return " (did you mean {!r}?)".format(close[0]) if close else ""
