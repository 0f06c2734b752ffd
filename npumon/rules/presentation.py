"""What the world is told: the engine's raw findings with inhibited ones left out and host-wide causes merged.

Pure functions. Two rule keys shape it (see loader.py):

* `inhibits: [rule ids]`: while a finding of this rule is active on a subject, findings of the listed
  rules on the same subject are not reported (temperature-critical hides temperature-warning), in `check`,
  `/status`, the metrics and notifications alike, as the shipped Alertmanager config does for alerts.
* `group: host`: a chip rule whose cause is host-wide (the host CPU starving every chip) is reported once,
  as one host finding that lists the chips it affects, instead of once per chip.

And one recommendation per chip: of a chip's findings with a repair action, the strongest (then the most severe)
leads; its recommendation ends every one of them, and the others carry its repair action and name it, so no
two findings of a chip tell the operator different things to do (their own texts stay as context).

The engine keeps judging every (rule, subject) on its own; only what it reports is shaped here, so a chip
whose inhibitor clears reports its own finding again at once.
"""

import dataclasses
from typing import Dict, Iterable, List, Mapping, Sequence, Tuple

from ..faults import levels
from ..model import Finding
from .facts import HOST_SUBJECT

Key = Tuple[str, str]  # (rule id, subject)
# A grouped finding's summary names at most this many chips; `chips` lists them all.
CHIPS_NAMED_IN_SUMMARY = 4


def reported_findings(raw: Mapping[Key, Finding], inhibits: Mapping[str, Sequence[str]],
                      grouped: Iterable[str], acknowledged: Iterable[Key] = ()) -> Dict[Key, Finding]:
    """The findings to report, keyed by (rule, subject as reported): grouped ones under the host. An
    acknowledged finding still inhibits: the operator who acknowledged the critical one knows."""
    inhibitors = set(raw) | set(acknowledged)
    hidden = {(inhibited, subject) for (rule, subject) in inhibitors for inhibited in inhibits.get(rule, ())}
    grouped = set(grouped)
    reported: Dict[Key, Finding] = {}
    members: Dict[str, List[Finding]] = {}
    for key, finding in raw.items():
        if key in hidden:
            continue
        if key[0] in grouped and key[1] != HOST_SUBJECT:
            members.setdefault(key[0], []).append(finding)
        else:
            reported[key] = finding
    for rule, findings in members.items():
        reported[(rule, HOST_SUBJECT)] = host_wide_finding(findings)
    return one_recommendation_per_chip(reported)


SEVERITY_RANK = {"info": 0, "warning": 1, "critical": 2}


def one_recommendation_per_chip(reported: Dict[Key, Finding]) -> Dict[Key, Finding]:
    """Every chip finding with a repair action ends with the chip's one recommendation, its strongest."""
    by_chip: Dict[str, List[Key]] = {}
    for key, finding in reported.items():
        if finding.subject != HOST_SUBJECT and levels.repair_rank(finding.repair_action) >= 0:
            by_chip.setdefault(finding.subject, []).append(key)
    result = dict(reported)
    for subject, keys in by_chip.items():
        lead = max((reported[key] for key in keys), key=lambda finding: (
            levels.repair_rank(finding.repair_action), SEVERITY_RANK.get(finding.severity, -1), finding.rule))
        advice = recommendation(lead)
        for key in keys:
            finding = reported[key]
            if finding is lead:
                result[key] = dataclasses.replace(finding, hint=_join(finding.hint, "Recommended: " + advice))
            else:
                result[key] = dataclasses.replace(finding, repair_action=lead.repair_action, hint=_join(
                    finding.hint, "Recommended for this chip (see {}): {}".format(lead.rule, advice)))
    return result


def recommendation(finding: Finding) -> str:
    """The lead finding's advice: its code level's own words where the level calls for the same repair (they say
    it more precisely), else the repair action's."""
    text = None
    if finding.level and levels.repair_action(finding.level) == finding.repair_action:
        text = levels.level_action(finding.level)
    text = text or levels.repair_text(finding.repair_action) or finding.repair_action
    npu, chip = chip_order(finding.subject)[:2]
    return text.replace("{npu}", str(npu)).replace("{chip}", str(chip))


def _join(hint: str, sentence: str) -> str:
    return "{} {}".format(hint.rstrip(), sentence) if hint.strip() else sentence


def host_wide_finding(findings: Sequence[Finding]) -> Finding:
    """One host finding for a rule active on several chips: the first chip's texts, the chips named."""
    findings = sorted(findings, key=lambda finding: chip_order(finding.subject))
    first = findings[0]
    chips = [finding.subject for finding in findings]
    named = ", ".join(chips[:CHIPS_NAMED_IN_SUMMARY]) + (", ..." if len(chips) > CHIPS_NAMED_IN_SUMMARY else "")
    summary = "on {} chip{} ({}): {}".format(len(chips), "" if len(chips) == 1 else "s", named, first.summary)
    return dataclasses.replace(first, subject=HOST_SUBJECT, summary=summary, chips=chips,
                               since=min(finding.since for finding in findings))


def chip_order(subject: str) -> Tuple[int, ...]:
    """npu2/chip1 -> (2, 1): chips in numeric order (npu2 before npu10)."""
    digits = []
    for part in subject.split("/"):
        number = "".join(ch for ch in part if ch.isdigit())
        digits.append(int(number) if number else -1)
    return tuple(digits)
