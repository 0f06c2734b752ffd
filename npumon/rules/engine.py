"""The rule engine: Snapshots in, active Findings and fired/resolved transitions out.

For every rule and every subject of its kind (each chip, or the host) the engine keeps a small state:

    quiet --expr true--> pending --held `for`--> active --clear held `clear_for`--> quiet
                            ^ expr not true: back to quiet

* A rule fires only when its expression is exactly true; a null (missing value) never fires it and
  resets a pending `for` timer (the condition is not known to hold).
* An active finding resolves when its `clear` expression is exactly true for `clear_for` (hysteresis);
  without `clear`, when the expression is exactly false. A null keeps it active.
* Sticky findings ignore `clear`: they stay until `acknowledge(rule, subject)`. An acknowledged
  (rule, subject) does not fire again until its expression has been false once (a new occurrence).
* `since` of a finding is when the condition started to hold; summary and hint are re-rendered with
  current values while the condition holds.
* A chip that is gone from the Snapshot resolves its non-sticky findings -- unless some source is down,
  in which case "gone" may just mean "not seen": its state is kept unchanged until the sources recover.
* `restore()` takes over the findings and acknowledgements a previous run persisted (the event store),
  so a restart neither forgets a sticky finding nor fires an active one again; `replace_rules()` swaps
  the rules on a config reload and keeps the state of the rules that remain.
* What is reported (active(), transitions()) is shaped by presentation.py: a finding another active finding
  on its subject inhibits is not reported, and the chips of a `group: host` rule are reported as one host
  finding. "fired"/"resolved" transitions are the changes of what is reported, so an inhibited finding
  resolves when its inhibitor fires and fires again when the inhibitor clears while it still holds.
* `one_shot=True` (`npumon check`): `for` and `clear_for` are ignored, and window functions see the one
  sample there is (increase/delta/changes are 0, rate is null), so window-based rules stay quiet.
"""

import collections
import dataclasses
import re
import threading
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from ..model import SEVERITIES, Finding, Snapshot
from .expr import EvalContext, Series
from .facts import HOST_SUBJECT, snapshot_facts
from .history import History
from .loader import Rule
from .presentation import Key, reported_findings
from .template import NULL_TEXT, Template, compile_template

FIRED = "fired"
RESOLVED = "resolved"
# Transitions nobody collects (no event store, no notifier) must not grow without bound.
MAX_PENDING_TRANSITIONS = 10000
_SEVERITY_ORDER = {severity: rank for rank, severity in enumerate(reversed(SEVERITIES))}  # critical first


class _State:
    """One (rule, subject): pending since when, the active finding, and since when the clear holds."""

    __slots__ = ("pending_since", "finding", "clear_since")

    def __init__(self) -> None:
        self.pending_since: Optional[float] = None
        self.finding: Optional[Finding] = None
        self.clear_since: Optional[float] = None


class _CompiledRule:
    __slots__ = ("rule", "summary", "hint", "repair_action", "level")

    def __init__(self, rule: Rule):
        self.rule = rule
        self.summary: Template = compile_template(rule.summary)
        self.hint: Template = compile_template(rule.hint)
        self.repair_action: Template = compile_template(rule.repair_action)
        self.level: Template = compile_template(rule.level)


class RuleEngine:
    def __init__(self, rules: Sequence[Rule], params: Dict[str, float], one_shot: bool = False,
                 acknowledged: Iterable[Tuple[str, str]] = (),
                 on_acknowledge: Optional[Callable[[str, str], None]] = None):
        """`acknowledged` restores persisted acknowledgements; `on_acknowledge(rule_id, subject)` is called
        for every new one (the hook a persistent store plugs into)."""
        self._set_rules(rules)
        self._params = dict(params)
        self._one_shot = one_shot
        self._history = History(_longest_windows(rules))
        self._states: Dict[Tuple[str, str], _State] = {}
        self._acknowledged: Set[Tuple[str, str]] = set(acknowledged)
        self._acknowledged_findings: Dict[Key, Finding] = {}  # what each acknowledgement acknowledged
        self._reported: Dict[Key, Finding] = {}
        self._on_acknowledge = on_acknowledge
        self._transitions: Deque[Tuple[str, Finding]] = collections.deque(maxlen=MAX_PENDING_TRANSITIONS)
        # The daemon polls on a scheduler thread while acknowledgements arrive on HTTP threads.
        self._lock = threading.RLock()

    # ----------------------------------------------------------------------------------------- public

    def evaluate(self, snapshot: Snapshot, now: Optional[float] = None) -> List[Finding]:
        """Record the Snapshot, run every rule on every subject; the active findings, critical first.

        `now` defaults to the Snapshot's time."""
        now = snapshot.time if now is None else now
        facts_by_subject = snapshot_facts(snapshot)
        with self._lock:
            contexts = {}
            for subject, facts in facts_by_subject.items():
                self._history.record(subject, now, facts)
                contexts[subject] = EvalContext(facts, self._params, self._series_reader(subject, now))
            host_context = contexts.pop(HOST_SUBJECT)
            for compiled in self._rules:
                if compiled.rule.subject == "host":
                    self._step(compiled, HOST_SUBJECT, host_context, now)
                else:
                    for subject, context in contexts.items():
                        self._step(compiled, subject, context, now)
            if not _any_source_down(snapshot):
                self._forget_vanished(set(facts_by_subject))
            self._release_group_acknowledgements()
            self._report()
            return self.active()

    def next_due(self) -> Optional[float]:
        """The earliest time (evaluate's clock) at which a pending rule's `for:` or an active one's clear time
        runs out, so that a pass then fires or resolves it on time instead of at the next poll; None if none."""
        with self._lock:
            due = [state.pending_since + self._for[rule][0] if state.finding is None
                   else state.clear_since + self._for[rule][1]
                   for (rule, _), state in self._states.items()
                   if (state.pending_since if state.finding is None else state.clear_since) is not None
                   and rule in self._for]
            return min(due) if due else None

    def active(self) -> List[Finding]:
        """The reported findings: inhibited ones left out, host-wide causes once."""
        with self._lock:
            return sorted(self._reported.values(), key=_finding_order)

    def acknowledged_findings(self) -> List[Finding]:
        """The findings acknowledged while their condition still holds (shown as acknowledged, not as OK)."""
        with self._lock:
            findings = [finding for key, finding in self._acknowledged_findings.items() if key in self._acknowledged]
        return sorted(findings, key=_finding_order)

    def transitions(self) -> List[Tuple[str, Finding]]:
        """("fired" | "resolved", finding) since the last call, oldest first (at most the newest
        MAX_PENDING_TRANSITIONS)."""
        with self._lock:
            transitions = list(self._transitions)
            self._transitions.clear()
        return transitions

    def acknowledge(self, rule_id: str, subject: str) -> bool:
        """Resolve a reported finding and keep it quiet until its condition clears. False if none is reported.
        A host-wide finding (`group: host`) is acknowledged on every chip it lists."""
        key = (rule_id, subject)
        with self._lock:
            reported = self._reported.get(key)
            if reported is None:
                return False
            for chip_key in [(rule_id, chip) for chip in reported.chips] if reported.chips else [key]:
                state = self._states.get(chip_key)
                if state is not None:
                    self._resolve(chip_key, state)
                self._acknowledged.add(chip_key)
            self._acknowledged.add(key)
            self._acknowledged_findings[key] = reported
            self._report()
        if self._on_acknowledge is not None:
            self._on_acknowledge(rule_id, subject)
        return True

    def cleared_by_reboot(self) -> List[str]:
        """Ids of the rules whose findings a reboot of the host resolves (`reboot_clears`)."""
        return sorted(compiled.rule.id for compiled in self._rules if compiled.rule.reboot_clears)

    def for_seconds(self) -> Dict[str, float]:
        """Each rule's `for:` in seconds, by id (what the verdict guard rails hold an out-of-service finding for)."""
        return {compiled.rule.id: compiled.rule.for_seconds for compiled in self._rules}

    def acknowledged(self) -> List[Tuple[str, str]]:
        with self._lock:
            return sorted(self._acknowledged)

    def restore(self, findings: Iterable[Finding] = (), acknowledged: Iterable[Tuple[str, str]] = (),
                acknowledged_findings: Iterable[Finding] = ()) -> List[Tuple[str, str]]:
        """Take over what a previous run left (the event store keeps it): `findings` become active again
        without a new "fired" transition, and then resolve or stay exactly as if the daemon had never
        stopped (sticky ones until acknowledged); `acknowledged` (rule, subject) stay quiet until their
        condition clears, and `acknowledged_findings` are what they acknowledged, to show them. A host-wide
        finding comes back as its chips' findings. State this engine already has wins, so restoring twice
        changes nothing. Returns the (rule, subject) keys it cannot take: the rule is gone or now judges
        another kind of subject."""
        rules = {compiled.rule.id: compiled.rule for compiled in self._rules}
        rejected = []
        with self._lock:
            for finding in findings:
                key = (finding.rule, finding.subject)
                rule = rules.get(finding.rule)
                if rule is None or not _judges(rule, finding.subject):
                    rejected.append(key)
                    continue
                for chip_finding in _per_chip(finding):
                    chip_key = (chip_finding.rule, chip_finding.subject)
                    if chip_key not in self._states and chip_key not in self._acknowledged:
                        state = self._states[chip_key] = _State()
                        state.finding = _as_defined_by(rule, chip_finding)
            for key in acknowledged:
                rule = rules.get(key[0])
                if rule is None or not _judges(rule, key[1]):
                    rejected.append(key)
                elif key not in self._states:
                    self._acknowledged.add(key)
            for finding in acknowledged_findings:
                self._acknowledged_findings[(finding.rule, finding.subject)] = finding
            self._report(announce=False)  # the last run reported these: no "fired" for them
        return rejected

    def replace_rules(self, rules: Sequence[Rule], params: Dict[str, float]) -> None:
        """New rules and parameters (a config reload) without forgetting what is going on: rules whose id
        remains keep their pending timers, active findings (now with the new severity, mode and labels)
        and acknowledgements; findings of rules that are gone, or that now judge another kind of
        subject, resolve (a "resolved" transition); new rules start quiet. Window history is kept."""
        by_id = {rule.id: rule for rule in rules}

        def still_judged(key: Tuple[str, str]) -> bool:
            rule = by_id.get(key[0])
            return rule is not None and _judges(rule, key[1])

        with self._lock:
            for key, state in list(self._states.items()):
                if not still_judged(key):
                    self._resolve(key, state)
                elif state.finding is not None:
                    state.finding = _as_defined_by(by_id[key[0]], state.finding)
            self._acknowledged = {key for key in self._acknowledged if still_judged(key)}
            self._set_rules(rules)
            self._params = dict(params)
            self._history.set_windows(_longest_windows(rules))
            self._report()

    # ----------------------------------------------------------------------------------------- internals

    def _set_rules(self, rules: Sequence[Rule]) -> None:
        self._rules = [_CompiledRule(rule) for rule in rules]
        self._sticky_rules = frozenset(rule.id for rule in rules if rule.sticky)
        self._inhibits = {rule.id: rule.inhibits for rule in rules if rule.inhibits}
        self._grouped = frozenset(rule.id for rule in rules if rule.group_host)
        self._for = {rule.id: (rule.for_seconds, rule.clear_for_seconds) for rule in rules}

    def _report(self, announce: bool = True) -> None:
        """Work out what is reported now; its changes are the transitions."""
        raw = {key: state.finding for key, state in self._states.items() if state.finding is not None}
        reported = reported_findings(raw, self._inhibits, self._grouped, self._acknowledged)
        if announce:
            for key, finding in self._reported.items():
                if key not in reported:
                    self._transitions.append((RESOLVED, finding))
            for key, finding in reported.items():
                if key not in self._reported:
                    self._transitions.append((FIRED, finding))
        self._reported = reported
        for key in [key for key in self._acknowledged_findings if key not in self._acknowledged]:
            del self._acknowledged_findings[key]

    def _release_group_acknowledgements(self) -> None:
        """A host-wide acknowledgement lasts while one of its rule's chips is still held by it."""
        held_rules = {rule for rule, subject in self._acknowledged if subject != HOST_SUBJECT}
        for key in [key for key in self._acknowledged if key[0] in self._grouped and key[1] == HOST_SUBJECT]:
            if key[0] not in held_rules:
                self._acknowledged.discard(key)

    def _series_reader(self, subject: str, now: float) -> Callable[[str, float], Series]:
        history = self._history

        def series(name: str, seconds: float) -> Series:
            return history.window(subject, name, now, seconds)
        return series

    def _step(self, compiled: _CompiledRule, subject: str, context: EvalContext, now: float) -> None:
        rule = compiled.rule
        key = (rule.id, subject)
        value = rule.expr.evaluate(context)
        if value is True and rule.id in self._grouped and (rule.id, HOST_SUBJECT) in self._acknowledged:
            self._acknowledged.add(key)  # a chip of an acknowledged host-wide finding (restored after a restart)
        if key in self._acknowledged:
            if value is False:
                self._acknowledged.discard(key)  # the condition went away: the next occurrence fires again
            return
        state = self._states.get(key)
        if state is None:
            if value is not True:
                return
            state = self._states[key] = _State()
        if state.finding is None:
            self._step_quiet(compiled, key, state, value is True, context, now)
        else:
            self._step_active(compiled, key, state, value, context, now)

    def _step_quiet(self, compiled: _CompiledRule, key: Tuple[str, str], state: _State, holds: bool,
                    context: EvalContext, now: float) -> None:
        if not holds:
            del self._states[key]
            return
        if state.pending_since is None:
            state.pending_since = now
        if self._one_shot or now - state.pending_since >= compiled.rule.for_seconds:
            state.finding = self._render(compiled, key[1], context, state.pending_since)

    def _step_active(self, compiled: _CompiledRule, key: Tuple[str, str], state: _State, value: Any,
                     context: EvalContext, now: float) -> None:
        rule = compiled.rule
        if value is True:
            state.finding = self._render(compiled, key[1], context, state.finding.since)
        if rule.sticky:
            return
        cleared = rule.clear.evaluate(context) is True if rule.clear is not None else value is False
        if not cleared:
            state.clear_since = None
            return
        if state.clear_since is None:
            state.clear_since = now
        if self._one_shot or now - state.clear_since >= rule.clear_for_seconds:
            self._resolve(key, state)

    def _resolve(self, key: Tuple[str, str], state: _State) -> None:
        del self._states[key]  # the "resolved" transition comes from _report()

    def _render(self, compiled: _CompiledRule, subject: str, context: EvalContext, since: float) -> Finding:
        rule = compiled.rule
        return Finding(
            rule=rule.id, severity=rule.severity, subject=subject,
            summary=compiled.summary.render(context.facts, self._params),
            hint=compiled.hint.render(context.facts, self._params),
            since=since, labels=dict(rule.labels), shadow=rule.shadow,
            repair_action=_known_text(compiled.repair_action.render(context.facts, self._params)),
            level=_known_text(compiled.level.render(context.facts, self._params)),
        )

    def _forget_vanished(self, present: Set[str]) -> None:
        for key, state in list(self._states.items()):
            if key[1] in present:
                continue
            if state.finding is None:
                del self._states[key]
            elif key[0] not in self._sticky_rules:
                self._resolve(key, state)
        kept = {subject for _, subject in self._states}
        for subject in self._history.subjects():
            if subject not in present and subject not in kept:
                self._history.forget(subject)


def _known_text(text: str) -> Optional[str]:
    """A rendered repair action or level; None where the facts did not know it."""
    return None if text in ("", NULL_TEXT) else text


def _longest_windows(rules: Sequence[Rule]) -> Dict[str, float]:
    windows: Dict[str, float] = {}
    for rule in rules:
        for expression in (rule.expr, rule.clear):
            if expression is None:
                continue
            for name, seconds in expression.windows.items():
                windows[name] = max(windows.get(name, 0.0), seconds)
    return windows


def _subject_kind(subject: str) -> str:
    return "host" if subject == HOST_SUBJECT else "chip"


def _judges(rule: Rule, subject: str) -> bool:
    """Whether the rule can have a finding on this subject (a `group: host` chip rule reports the host)."""
    return rule.subject == _subject_kind(subject) or (rule.group_host and subject == HOST_SUBJECT)


def _per_chip(finding: Finding) -> List[Finding]:
    """A host-wide finding as its chips' findings; any other finding as itself."""
    if not finding.chips:
        return [finding]
    return [dataclasses.replace(finding, subject=chip, chips=None) for chip in finding.chips]


def _as_defined_by(rule: Rule, finding: Finding) -> Finding:
    """A finding carried over to a (possibly changed) rule: its severity, mode and labels from now on."""
    return dataclasses.replace(finding, severity=rule.severity, shadow=rule.shadow, labels=dict(rule.labels))


def _any_source_down(snapshot: Snapshot) -> bool:
    return any(not status.ok and not status.unsupported for status in snapshot.sources.values())


_NUMBERS = re.compile(r"\d+")


def _finding_order(finding: Finding) -> Tuple[int, str, int, List[int], str]:
    """Critical first; then by rule; the host before chips, chips in numeric order (npu2 before npu10)."""
    numbers = [int(n) for n in _NUMBERS.findall(finding.subject)]
    return (_SEVERITY_ORDER.get(finding.severity, len(SEVERITIES)), finding.rule,
            0 if finding.subject == HOST_SUBJECT else 1, numbers, finding.subject)
