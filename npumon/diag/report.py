"""How a diag run is shown: the JSON document, the Nagios line, the table, the textfile metrics, the event."""

from typing import Any, Dict, List

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from ..outputs.report import rfc3339, sorted_findings
from .judge import figures
from .run import DiagResult

SCHEMA = "npumon.diag/v1"
TEXTFILE_NAME = "npumon_diag.prom"


def status(result: DiagResult) -> str:
    severities = {finding.severity for finding in result.findings}
    if not result.snapshot.chips or result.incomplete or any(run.cut_short for run in result.runs):
        return "unknown"  # nothing, or not everything, was tested
    if result.runs and all(run.skipped for run in result.runs) and not severities & {"critical", "warning"}:
        return "unknown"  # the workloads asked for ran on no chip: no verdict on the chips
    for level in ("critical", "warning"):
        if level in severities:
            return level
    return "ok"


def document(result: DiagResult) -> Dict[str, Any]:
    return {"schema": SCHEMA, "host": result.snapshot.host.hostname, "time": rfc3339(result.started),
            "level": result.level, "status": status(result), "duration_seconds": round(result.seconds, 3),
            "error": result.incomplete,
            "chips": [{"subject": run.subject, "device": run.device, "skipped": run.skipped,
                       "error": run.error or (run.report or {}).get("error"), "stuck_item": run.stuck_item,
                       "samples": run.samples} for run in result.runs],
            "results": [_rounded(row) for row in figures(result.runs)],
            "findings": [finding.to_json() for finding in sorted_findings(result.findings)]}


def _rounded(row: Dict[str, Any]) -> Dict[str, Any]:
    return dict(row, ratio=None if row["ratio"] is None else round(row["ratio"], 4))


def nagios_line(result: DiagResult) -> str:
    state = status(result)
    findings = sorted_findings(result.findings)
    serious = [finding for finding in findings if finding.severity != "info"]
    cut = [run.subject for run in result.runs if run.cut_short]
    if not result.snapshot.chips:
        text = "no NPU found"
    elif cut:
        text = "--timeout reached before {} finished".format(", ".join(cut))
    elif result.incomplete:
        text = result.incomplete
    elif serious:
        text = "{} finding{}: {}".format(len(serious), "s" if len(serious) > 1 else "", "; ".join(
            "{} {}".format(finding.subject, finding.summary) for finding in serious[:3]))
    else:
        tested = [run for run in result.runs if not run.skipped] if result.level >= 2 else result.snapshot.chips
        total = len(result.snapshot.chips)
        text = "level {} {} {} of {} chips".format(result.level, "passed on" if tested else "tested", len(tested), total)
        if len(tested) < total:
            text += " ({} held by a process; --force tests them too)".format(total - len(tested))
    return "NPU DIAG {} - {} | 'duration'={:.1f}s".format(state.upper(), text, result.seconds)


def render_table(result: DiagResult) -> str:
    lines = []
    rows = figures(result.runs)
    if rows:
        lines.append("{:<12} {:<17} {:<12} {:>16} {:>16} {:>6}".format("CHIP", "ITEM", "STATE", "MEASURED",
                                                                      "EXPECTED", "RATIO"))
        for row in rows:
            lines.append("{:<12} {:<17} {:<12} {:>16} {:>16} {:>6}".format(
                row["subject"], row["item"], row["state"], _value(row["measured"], row["unit"]),
                _value(row["expected"], row["unit"]), "-" if row["ratio"] is None else "{:.0%}".format(row["ratio"])))
    for run in result.runs:
        if run.skipped:
            lines.append("{:<12} skipped: {}".format(run.subject, run.skipped))
    findings = sorted_findings(result.findings)
    lines.append("")
    lines.append("FINDINGS" if findings else "FINDINGS: none")
    for finding in findings:
        lines.append("  {:<9} {:<14} {}: {}".format(finding.severity.upper(), finding.subject, finding.rule,
                                                   finding.summary))
        lines.append("            hint: " + finding.hint)
        if finding.repair_action:
            lines.append("            repair: " + finding.repair_action)
    return "\n".join(lines)


def _value(value: Any, unit: str) -> str:
    if value is None:
        return "-"
    if unit == "FLOP/s":
        return "{:.1f} TFLOPS".format(value / 1e12)
    return "{:.2f} GB/s".format(value / 1e9)


class _DiagCollector:
    def __init__(self, result: DiagResult):
        self.result = result

    def collect(self) -> List[GaugeMetricFamily]:
        result = self.result
        level = str(result.level)
        ok = GaugeMetricFamily("npumon_diag_item_passed", "1: the diag item passed on the chip, 0: it failed.",
                               labels=("level", "item", "npu", "chip"))
        measured = GaugeMetricFamily("npumon_diag_measured", "What the item measured (bytes/s or FLOP/s).",
                                     labels=("level", "item", "npu", "chip"))
        ratio = GaugeMetricFamily("npumon_diag_expected_ratio", "The measured figure over the product's expected one.",
                                  labels=("level", "item", "npu", "chip"))
        judged = {(finding.subject, finding.labels.get("item")) for finding in result.findings
                  if finding.severity != "info"}
        for row in figures(result.runs):
            npu, chip = _ids(row["subject"])
            labels = [level, row["item"], npu, chip]
            if row["state"] in ("ok", "failed"):
                passed = row["state"] == "ok" and (row["subject"], row["item"]) not in judged
                ok.add_metric(labels, 1.0 if passed else 0.0)
            if row["measured"] is not None:
                measured.add_metric(labels, row["measured"])
            if row["ratio"] is not None:
                ratio.add_metric(labels, row["ratio"])
        findings = GaugeMetricFamily("npumon_diag_findings", "Findings of the last diag run by severity.",
                                     labels=("level", "severity"))
        for severity in ("info", "warning", "critical"):
            findings.add_metric([level, severity], float(sum(1 for finding in result.findings
                                                             if finding.severity == severity)))
        last = GaugeMetricFamily("npumon_diag_last_run_timestamp_seconds", "When the last diag run started.",
                                 labels=("level",))
        last.add_metric([level], result.started)
        duration = GaugeMetricFamily("npumon_diag_duration_seconds", "How long the last diag run took.",
                                     labels=("level",))
        duration.add_metric([level], result.seconds)
        return [ok, measured, ratio, findings, last, duration]


def _ids(subject: str):
    npu, _, chip = subject.partition("/")
    return npu[len("npu"):], chip[len("chip"):]


def registry(result: DiagResult) -> CollectorRegistry:
    out = CollectorRegistry(auto_describe=False)
    out.register(_DiagCollector(result))
    return out


def event(result: DiagResult) -> Dict[str, Any]:
    """The event history entry (kind diag_completed) of a run."""
    state = status(result)
    serious = [finding for finding in result.findings if finding.severity != "info"]
    return {"kind": "diag_completed", "subject": "host",
            "message": "diag level {} {} in {:.0f} s: {} finding{}".format(
                result.level, "passed" if state == "ok" else state, result.seconds, len(serious),
                "" if len(serious) == 1 else "s"),
            "severity": None if state == "ok" else state if state != "unknown" else "warning",
            "details": {"level": result.level, "status": state,
                        "findings": [{"rule": finding.rule, "subject": finding.subject, "severity": finding.severity}
                                     for finding in result.findings]}}
