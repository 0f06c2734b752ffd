"""Scoring a fault campaign: pure functions over the ground truth (what was injected where and when, from
sim/campaign.py) and what each host recorded (its event history's finding and verdict events).

    report = score(truth, events, hosts)   # truth: injection dicts; events: event dicts; hosts: every host name
    print(render_markdown(report))

An injection is a fault on one host from `start` to `end` (wall time, unix seconds) whose findings should be
on `subjects` (chips as "npu<N>/chip<C>", or "host"), involving `chip_subjects` (its chips, also for a fault
the host reports: a card that dropped out, a job's chips), which may go out of service only if `isolates`,
with what it should produce: `expect.rules` (any of them names the fault), `expect.repair_actions` and
`expect.budget_seconds` (the rule's `for:` plus one poll of its source). A finding belongs to an injection
when it fired on the same host between the start and the end plus the grace, on one of its subjects, one of
its chips or the host as a whole; every other finding is a false positive.

Per class and overall the report gives recall (a finding on the injected subject in the window), right
rule and right repair action, time from injection to the first finding (p50, p99) and whether it was
within the budget, time to the first hand-off verdict that is not healthy, to the host's hand-off sink
acting on it (its first `handoff_action` after the verdict) and to the first alert about the subject
arriving at the on-call receiver (`notified`), each with its lag behind the finding; recovery (from the end
of the injection until every finding it raised resolved), false positives (and findings on hosts that had
no injection at all), and false isolations: chips whose verdict went out_of_service with no injection on
them at the time.
"""

import math
from typing import Any, Dict, Iterable, List, Optional, Sequence

HANDOFF = "handoff_action"
NOTIFIED = "notified"  # an alert's arrival at the on-call receiver (campaign_receiver.py)
FIRED = "finding_fired"
RESOLVED = "finding_resolved"
VERDICT = "verdict_changed"
HOST = "host"
OUT_OF_SERVICE = "out_of_service"
HEALTHY = "healthy"
DEFAULT_GRACE_SECONDS = 60.0  # a finding may fire this long after its injection ended and still be its


def quantile(values: Sequence[float], q: float) -> Optional[float]:
    """The nearest-rank q-quantile (q in 0..1) of the values; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, int(math.ceil(q * len(ordered))) - 1))]


def _window_end(injection: Dict[str, Any], grace: float) -> float:
    return injection["end"] + max(grace, injection["expect"].get("budget_seconds", 0.0))


def _belongs(event: Dict[str, Any], injection: Dict[str, Any], grace: float) -> bool:
    """A finding event that this injection explains: its host, its window, its subject or the host."""
    return (event["host"] == injection["host"] and injection["start"] <= event["time"] <= _window_end(injection, grace)
            and (event["subject"] in injection["subjects"] or event["subject"] == HOST
                 or event["subject"] in injection.get("chip_subjects", ())))


def _on_subject(event: Dict[str, Any], injection: Dict[str, Any]) -> bool:
    return event["subject"] in injection["subjects"]


def score_injection(injection: Dict[str, Any], events: Sequence[Dict[str, Any]],
                    grace: float = DEFAULT_GRACE_SECONDS) -> Dict[str, Any]:
    """One injection's outcome: detected, right rule/action, the times, recovery. `events` are the host's."""
    expect = injection["expect"]
    fired = [e for e in events if e["kind"] == FIRED and _belongs(e, injection, grace)]
    on_subject = [e for e in fired if _on_subject(e, injection)]
    named = [e for e in on_subject if e.get("rule") in expect["rules"]]
    first = min(on_subject, key=lambda e: e["time"]) if on_subject else None
    verdicts = [e for e in events if e["kind"] == VERDICT and e.get("new") != HEALTHY and _on_subject(e, injection)
                and injection["start"] <= e["time"] <= _window_end(injection, grace)]
    verdict = min(verdicts, key=lambda e: e["time"]) if verdicts else None
    # the host's hand-off sink acting on it: its first request (sent, or recorded in a dry run) after the verdict
    handoffs = [] if verdict is None else [e for e in events if e["kind"] == HANDOFF and e["host"] == injection["host"]
                                           and verdict["time"] <= e["time"] <= _window_end(injection, grace)]
    handoff = min(handoffs, key=lambda e: e["time"]) if handoffs else None
    notices = [e for e in events if e["kind"] == NOTIFIED and e.get("status") == "firing"
               and _belongs(e, injection, grace) and _on_subject(e, injection)]
    notice = min(notices, key=lambda e: e["time"]) if notices else None
    raised = {(e["rule"], e["subject"]) for e in fired}
    resolved_at = {}  # (rule, subject) -> when it resolved after the injection's end
    for e in events:
        if e["kind"] == RESOLVED and (e.get("rule"), e["subject"]) in raised and e["time"] >= injection["start"]:
            key = (e["rule"], e["subject"])
            resolved_at[key] = max(resolved_at.get(key, e["time"]), e["time"])
    recovered = bool(raised) and all(key in resolved_at for key in raised)
    recovery = max(0.0, max(resolved_at.values()) - injection["end"]) if recovered else None
    time_to_finding = None if first is None else first["time"] - injection["start"]
    return {
        "id": injection["id"], "class": injection["class"], "host": injection["host"],
        "subjects": list(injection["subjects"]),
        "detected": first is not None,
        "right_rule": bool(named),
        "right_action": any(e.get("repair_action") in expect["repair_actions"] for e in named),
        "first_rule": None if first is None else first["rule"],
        "time_to_finding": time_to_finding,
        "within_budget": time_to_finding is not None and time_to_finding <= expect["budget_seconds"],
        "budget_seconds": expect["budget_seconds"],
        "time_to_verdict": None if verdict is None else verdict["time"] - injection["start"],
        "verdict_after_finding": _lag(verdict, first),
        "time_to_notification": None if notice is None else notice["time"] - injection["start"],
        "notification_after_finding": _lag(notice, first),
        "time_to_handoff": None if handoff is None else handoff["time"] - injection["start"],
        "handoff_after_finding": _lag(handoff, first),
        "recovery": recovery,
        "raised": sorted("{} {}".format(rule, subject) for rule, subject in raised),
    }


def _lag(event: Optional[Dict[str, Any]], finding: Optional[Dict[str, Any]]) -> Optional[float]:
    """Seconds from the finding to the event (at least 0); None without both."""
    return None if event is None or finding is None else max(0.0, event["time"] - finding["time"])


def stray_findings(truth: Sequence[Dict[str, Any]], events: Sequence[Dict[str, Any]],
                   grace: float = DEFAULT_GRACE_SECONDS) -> List[Dict[str, Any]]:
    """Finding events that no injection explains: the false positives."""
    return [e for e in events if e["kind"] == FIRED and not any(_belongs(e, i, grace) for i in truth)]


def false_isolations(truth: Sequence[Dict[str, Any]], events: Sequence[Dict[str, Any]],
                     grace: float = DEFAULT_GRACE_SECONDS) -> List[Dict[str, Any]]:
    """Chips whose verdict went out_of_service with no injection on that chip at the time that may take it out
    (a job's fault never may: its chips are fine)."""
    return [e for e in events if e["kind"] == VERDICT and e.get("new") == OUT_OF_SERVICE and e["subject"] != HOST
            and not any(e["host"] == i["host"] and i.get("isolates", True)
                        and e["subject"] in set(i["subjects"]) | set(i.get("chip_subjects", ()))
                        and i["start"] <= e["time"] <= _window_end(i, grace) for i in truth)]


def _summary(rows: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    def times(key):
        return [row[key] for row in rows if row[key] is not None]
    count = len(rows)
    detected = sum(row["detected"] for row in rows)
    return {
        "injections": count,
        "detected": detected,
        "recall": detected / count if count else None,
        "right_rule": sum(row["right_rule"] for row in rows),
        "right_action": sum(row["right_action"] for row in rows),
        "classification": sum(row["right_rule"] and row["right_action"] for row in rows) / count if count else None,
        "within_budget": sum(row["within_budget"] for row in rows),
        "time_to_finding_p50": quantile(times("time_to_finding"), 0.5),
        "time_to_finding_p99": quantile(times("time_to_finding"), 0.99),
        "budget_seconds_max": max((row["budget_seconds"] for row in rows), default=None),
        "time_to_verdict_p50": quantile(times("time_to_verdict"), 0.5),
        "time_to_verdict_p99": quantile(times("time_to_verdict"), 0.99),
        "verdict_after_finding_p99": quantile(times("verdict_after_finding"), 0.99),
        "notified": len(times("time_to_notification")),
        "notification_after_finding_p99": quantile(times("notification_after_finding"), 0.99),
        "handed_off": len(times("time_to_handoff")),
        "handoff_after_finding_p50": quantile(times("handoff_after_finding"), 0.5),
        "handoff_after_finding_p99": quantile(times("handoff_after_finding"), 0.99),
        "recovered": len(times("recovery")),
        "recovery_p50": quantile(times("recovery"), 0.5),
        "recovery_p99": quantile(times("recovery"), 0.99),
    }


def score(truth: Sequence[Dict[str, Any]], events: Iterable[Dict[str, Any]], hosts: Sequence[str],
          grace: float = DEFAULT_GRACE_SECONDS) -> Dict[str, Any]:
    """The campaign's report: per injection, per class, overall, the strays and the false isolations."""
    events = sorted(events, key=lambda e: e["time"])
    by_host: Dict[str, List[Dict[str, Any]]] = {}
    for event in events:
        by_host.setdefault(event["host"], []).append(event)
    rows = [score_injection(i, by_host.get(i["host"], []), grace) for i in truth]
    classes: Dict[str, List[Dict[str, Any]]] = {}
    for row in rows:
        classes.setdefault(row["class"], []).append(row)
    strays = stray_findings(truth, events, grace)
    injected_hosts = {i["host"] for i in truth}
    healthy_hosts = [host for host in hosts if host not in injected_hosts]
    isolations = false_isolations(truth, events, grace)
    overall = _summary(rows)
    overall.update(false_positives=len(strays),
                   healthy_host_findings=sum(e["host"] not in injected_hosts for e in strays),
                   healthy_hosts=len(healthy_hosts), hosts=len(hosts), false_isolations=len(isolations))
    return {
        "overall": overall,
        "classes": {name: _summary(class_rows) for name, class_rows in sorted(classes.items())},
        "injections": rows,
        "false_positives": [_brief(e) for e in strays],
        "false_isolations": [_brief(e) for e in isolations],
    }


def _brief(event: Dict[str, Any]) -> Dict[str, Any]:
    return {key: event.get(key) for key in ("host", "time", "kind", "subject", "rule", "new")}


# Targets of issue 33. p99 time to finding is judged per injection against its own budget (the rule's for:
# plus a poll); time to hand-off as the sink's lag behind the finding that caused it (from the injection it
# includes the rule's for:, up to 5 minutes).
def targets(report: Dict[str, Any]) -> List[Dict[str, Any]]:
    overall = report["overall"]
    rows = report["injections"]
    missed = sorted({row["class"] for row in rows if not row["detected"]})
    misnamed = sorted({row["class"] for row in rows
                       if row["detected"] and not (row["right_rule"] and row["right_action"])})
    late = sorted({row["class"] for row in rows if row["detected"] and not row["within_budget"]})
    slow_handoff = sorted({row["class"] for row in rows if (row["handoff_after_finding"] or 0.0) > 60.0})
    return [
        {"target": "recall 100 %", "met": not missed, "detail": ", ".join(missed)},
        {"target": "no finding on a healthy host", "met": overall["healthy_host_findings"] == 0,
         "detail": str(overall["healthy_host_findings"])},
        {"target": "classification >= 98 %", "met": (overall["classification"] or 0.0) >= 0.98,
         "detail": ", ".join(misnamed)},
        {"target": "zero false isolations", "met": overall["false_isolations"] == 0,
         "detail": str(overall["false_isolations"])},
        {"target": "time to finding within for: + one poll", "met": not late, "detail": ", ".join(late)},
        {"target": "hand-off within 60 s of the finding", "met": not slow_handoff,
         "detail": ", ".join(slow_handoff)},
    ]


def _seconds(value: Optional[float]) -> str:
    return "-" if value is None else "{:.0f}".format(value)


def _percent(value: Optional[float]) -> str:
    return "-" if value is None else "{:.0f} %".format(100.0 * value)


def render_markdown(report: Dict[str, Any]) -> str:
    """The report as Markdown tables: per class, overall, the targets."""
    lines = ["| class | injections | recall | right rule | right action | finding p50 / p99 s | budget s | "
             "verdict p50 / p99 s | handed off | hand-off after finding p50 / p99 s | recovered | "
             "recovery p50 / p99 s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def row(name, s):
        lines.append("| {} | {} | {} | {} | {} | {} / {} | {} | {} / {} | {} | {} / {} | {} | {} / {} |".format(
            name, s["injections"], _percent(s["recall"]), s["right_rule"], s["right_action"],
            _seconds(s["time_to_finding_p50"]), _seconds(s["time_to_finding_p99"]), _seconds(s["budget_seconds_max"]),
            _seconds(s["time_to_verdict_p50"]), _seconds(s["time_to_verdict_p99"]), s["handed_off"],
            _seconds(s["handoff_after_finding_p50"]), _seconds(s["handoff_after_finding_p99"]), s["recovered"],
            _seconds(s["recovery_p50"]), _seconds(s["recovery_p99"])))
    for name, summary in report["classes"].items():
        row(name, summary)
    overall = report["overall"]
    row("**all**", overall)
    lines += ["", "False positives: {} ({} on the {} hosts with no injection); false isolations: {}; "
              "classification {}; verdict p99 {} s, hand-off p99 {} s and notification p99 {} s after the finding "
              "({} of {} injections notified).".format(
                  overall["false_positives"], overall["healthy_host_findings"], overall["healthy_hosts"],
                  overall["false_isolations"], _percent(overall["classification"]),
                  _seconds(overall["verdict_after_finding_p99"]), _seconds(overall["handoff_after_finding_p99"]),
                  _seconds(overall["notification_after_finding_p99"]), overall["notified"], overall["injections"]),
              "", "| target | met | where not |", "|---|---|---|"]
    for target in targets(report):
        lines.append("| {} | {} | {} |".format(target["target"], "yes" if target["met"] else "**no**",
                                                target["detail"] if not target["met"] else ""))
    return "\n".join(lines)
