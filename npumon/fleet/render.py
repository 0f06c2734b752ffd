"""What `npumon fleet` prints: the findings' summaries and hints rendered from the local rule files, the
text tables, and the npumon.fleet/v1 JSON document. Pure: the view comes in, strings and dicts go out.
"""

from dataclasses import asdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from ..model import SEVERITIES
from ..outputs.report import rfc3339
from .client import Sample
from .series import host_of
from .view import HOST_STATUS_ORDER, FindingRow, FleetView, sorted_findings, sorted_hosts, worst_chips

SCHEMA = "npumon.fleet/v1"


def render_findings(samples: Iterable[Sample], host_label: str, rules: Dict[str, Any], params: Dict[str, float],
                    facts_of_host: Callable[[str], Dict[str, Dict[str, Any]]]) -> List[FindingRow]:
    """One FindingRow per npumon_finding_active series, its summary and hint rendered from the local rules."""
    from ..rules.template import compile_template

    rows = []
    for labels, _ in samples:
        row = FindingRow(host=host_of(labels, host_label), rule=labels.get("rule", "?"),
                         severity=labels.get("severity", "?"), subject=labels.get("subject", "?"))
        rule = rules.get(row.rule)
        if rule is None:
            row.summary = "(rule {!r} is not in this npumon's rule files: pass the host's --config)".format(row.rule)
        else:
            subjects = facts_of_host(row.host)
            chips = _chips_of_host_wide(rule, row.subject, subjects, params)
            facts = subjects.get(chips[0] if chips else row.subject) or {}
            row.summary = compile_template(rule.summary).render(facts, params)
            row.hint = compile_template(rule.hint).render(facts, params)
            if chips:
                row.summary = "on {} chip{} ({}): {}".format(len(chips), "" if len(chips) == 1 else "s",
                                                            ", ".join(chips), row.summary)
        rows.append(row)
    return rows


def _chips_of_host_wide(rule: Any, subject: str, subjects: Dict[str, Dict[str, Any]],
                        params: Dict[str, float]) -> List[str]:
    """The chips a host-wide finding (`group: host`) holds for now, as far as the series tell; their texts
    are a chip's, so they render from the first one's facts."""
    from ..rules.expr import EvalContext
    from ..rules.presentation import chip_order

    if not getattr(rule, "group_host", False) or subject != "host":
        return []
    chips = [name for name, facts in subjects.items() if name != "host"
             and rule.expr.evaluate(EvalContext(facts, params)) is True]
    return sorted(chips, key=chip_order)


def view_document(view: FleetView, top: int, sort: str = "status") -> Dict[str, Any]:
    """The npumon.fleet/v1 document of `--json`: the same hosts, chips and findings, in the same order."""
    hosts = sorted_hosts(view.hosts, sort)
    return {
        "schema": SCHEMA,
        "prometheus": view.prometheus,
        "jobs": view.jobs,
        "time": rfc3339(view.time),
        "summary": {status: sum(1 for row in hosts if row.status == status) for status in HOST_STATUS_ORDER},
        "hosts": [dict(asdict(row), status=row.status) for row in hosts],
        "worst_chips": [dict(asdict(row), subject=row.subject) for row in worst_chips(view.chips, top, sort)],
        "findings": [asdict(row) for row in sorted_findings(view.findings, hosts)],
    }


def render_text(view: FleetView, top: int, sort: str = "status", hints: bool = True) -> str:
    """The hosts table, the worst chips and the findings, for a terminal."""
    hosts = sorted_hosts(view.hosts, sort)
    counts = ", ".join("{} {}".format(sum(1 for row in hosts if row.status == status), status)
                       for status in HOST_STATUS_ORDER)
    lines = ["FLEET {} host(s) from {} (job {}): {}".format(len(hosts), view.prometheus, ", ".join(view.jobs), counts),
             _columns(("HOST", "STATUS", "CHIPS", "UNHEALTHY", "HOTTEST", "FINDINGS", "INSTANCE", "SOURCES DOWN"),
                      HOST_WIDTHS)]
    for row in hosts:
        findings = ", ".join("{} {}".format(row.findings[s], s) for s in SEVERITIES[::-1] if row.findings.get(s))
        lines.append(_columns((row.host, row.status.upper(), row.chips, row.unhealthy_chips,
                               _number(row.hottest_celsius, "{:.0f}C"), findings or "-",
                               ", ".join(row.instances) or "-", ", ".join(row.sources_down) or "-"), HOST_WIDTHS))
    chips = worst_chips(view.chips, top, sort)
    if chips:
        lines += ["", "WORST CHIPS",
                  _columns(("HOST", "CHIP", "NAME", "HEALTH", "TEMP", "POWER", "AICORE", "ECC 2-BIT", "FINDING"),
                           CHIP_WIDTHS)]
        for row in chips:
            lines.append(_columns((row.host, row.subject, row.name or "-", row.health or "-",
                                   _number(row.temperature_celsius, "{:.0f}C"), _number(row.power_watts, "{:.0f}W"),
                                   _number(row.aicore_ratio, "{:.0%}"), _number(row.ecc_double_bit_errors, "{:.0f}"),
                                   row.worst_finding or "-"), CHIP_WIDTHS))
    findings = sorted_findings(view.findings, hosts)
    lines += ["", "FINDINGS" if findings else "FINDINGS: none active"]
    for finding in findings:
        lines.append("  {:<9} {:<18} {:<13} {}: {}".format(finding.severity.upper(), finding.host, finding.subject,
                                                          finding.rule, finding.summary))
        if hints and finding.hint:
            lines.append("            hint: " + finding.hint)
    return "\n".join(lines)


HOST_WIDTHS = (18, 9, 6, 10, 8, 22, 16, 0)
CHIP_WIDTHS = (18, 12, 10, 8, 6, 7, 7, 10, 0)


def _columns(cells: Sequence[Any], widths: Sequence[int]) -> str:
    return "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()


def _number(value: Optional[float], spec: str) -> str:
    return "-" if value is None else spec.format(value)
