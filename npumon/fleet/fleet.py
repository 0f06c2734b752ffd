"""`npumon fleet --prometheus URL`: the fleet as Prometheus sees it, in a shell.

It reads Prometheus's HTTP query API only; it never scrapes a host itself. It shows hosts up and down,
the worst chips, and the active findings (`npumon_finding_active`) with their summaries and hints.

Hints: the metric carries only rule, severity and subject. The summary and hint templates of a rule id are
in the rule files, which this command loads locally (the built-in rules, plus the `rule_files` of
`--config`, the same loading as `npumon check`). They are rendered with facts rebuilt from the host's
series in Prometheus (one query per host with findings): temperatures, power, utilisation, memory, ECC,
error codes, host CPU and sources. What Prometheus does not hold (error information text, process names)
prints as `n/a`; `npumon check` on the host, or its /status, gives the full text.

The host of a series is its `host` label (`--host-label`), or its `instance` where it has none.

Exit codes: 0 the fleet was read, 1 Prometheus could not be read, 2 bad usage or config.
"""

import argparse
import json
import sys
import time
from dataclasses import asdict
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence

from ..model import SEVERITIES
from ..outputs.report import rfc3339
from .client import PrometheusClient, PrometheusError, Sample
from .series import host_of, subject_facts
from .view import (HOST_STATUS_ORDER, SORT_KEYS, FindingRow, FleetView, build_view, sorted_findings, sorted_hosts,
                   worst_chips)

SCHEMA = "npumon.fleet/v1"
PROMETHEUS_ERROR = 1
USAGE_ERROR = 2


# --------------------------------------------------------------------------------------------- hints

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
            facts = facts_of_host(row.host).get(row.subject) or {}
            row.summary = compile_template(rule.summary).render(facts, params)
            row.hint = compile_template(rule.hint).render(facts, params)
        rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------- reading

# name -> PromQL; {jobs} is the job matcher.
FLEET_QUERIES = {
    "up": 'up{{{jobs}}}',
    "chip_info": 'npumon_chip_info{{{jobs}}}',
    "health": 'npumon_chip_health{{{jobs}}} == 1',
    "temperature": 'npumon_chip_temperature_celsius{{{jobs}}}',
    "power": 'npumon_chip_power_watts{{{jobs}}}',
    "aicore": 'npumon_chip_utilization_ratio{{{jobs},engine="aicore"}}',
    "ecc_double": 'sum without (memory, bit) (npumon_chip_ecc_errors{{{jobs},bit="double"}})',
    "isolated_pages": 'sum without (memory) (npumon_chip_ecc_isolated_pages{{{jobs}}})',
    "sources_down": 'npumon_source_up{{{jobs}}} == 0 unless on (job, instance, source) '
                    'npumon_source_unsupported{{{jobs}}} == 1',
    "findings": 'npumon_finding_active{{{jobs}}} == 1',
}
JOB_DISCOVERY = 'group by (job) (last_over_time(npumon_build_info[1h]))'


def _label_value(value: str) -> str:
    return json.dumps(value)  # a PromQL string literal: double quotes, backslash escapes


def read_fleet(client: PrometheusClient, jobs: Optional[Sequence[str]], host_label: str,
               rules: Dict[str, Any], params: Dict[str, float]) -> FleetView:
    if not jobs:
        jobs = sorted({labels.get("job", "") for labels, _ in client.query(JOB_DISCOVERY)} - {""})
        if not jobs:
            raise PrometheusError("Prometheus at {} has no npumon_build_info series from the last hour: is it "
                                  "scraping npumon? (or name the scrape job with --job)".format(client.display_url))
    job_matcher = 'job=~{}'.format(_label_value("|".join(_regex_escape(job) for job in jobs)))
    now = time.time()
    results = {name: client.query(expr.format(jobs=job_matcher), at=now) for name, expr in FLEET_QUERIES.items()}
    # A finding's host is its host label, or its instance: select the host's series by the same label.
    selecting_label = {host_of(labels, host_label): host_label if labels.get(host_label) else "instance"
                       for labels, _ in results["findings"]}
    cache: Dict[str, Dict[str, Dict[str, Any]]] = {}

    def facts_of_host(host: str) -> Dict[str, Dict[str, Any]]:
        if host not in cache:
            selector = '{{{},{}={},__name__=~"npumon_(chip|host|source|snapshot)_.+"}}'.format(
                job_matcher, selecting_label.get(host, host_label), _label_value(host))
            cache[host] = subject_facts(client.query(selector, at=now))
        return cache[host]

    findings = render_findings(results["findings"], host_label, rules, params, facts_of_host)
    return build_view(client.display_url, jobs, now, results, findings, host_label)


def _regex_escape(text: str) -> str:
    return "".join("\\" + char if char in ".^$*+?()[]{}|\\" else char for char in text)


# --------------------------------------------------------------------------------------------- output

def view_document(view: FleetView, top: int, sort: str = "status") -> Dict[str, Any]:
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


# --------------------------------------------------------------------------------------------- command

def add_fleet_command(commands) -> None:
    fleet = commands.add_parser(
        "fleet", help="the fleet from Prometheus: hosts up and down, worst chips, findings with hints",
        description="Read the fleet from Prometheus's HTTP API (never from the hosts): hosts up and down, the "
                    "worst chips, the active findings with hints from the local rule files. Exit 0 when "
                    "Prometheus was read, 1 when it could not be, 2 on bad usage.")
    fleet.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://prom:9090")
    fleet.add_argument("--job", action="append", metavar="JOB",
                       help="scrape job(s) of the npumon hosts (default: every job with npumon_build_info)")
    fleet.add_argument("--host-label", default="host", metavar="LABEL",
                       help="target label naming the host (default: host; instance where a series has none)")
    fleet.add_argument("--sort", choices=SORT_KEYS, default="status",
                       help="host order (default: status, worst first: critical, down, warning, info, ok)")
    fleet.add_argument("--top", type=int, default=10, metavar="N", help="worst chips to list (default 10)")
    fleet.add_argument("--no-hints", action="store_true", help="summaries only")
    fleet.add_argument("--json", action="store_true", help="print the npumon.fleet/v1 JSON document")
    fleet.add_argument("--config", "-c", metavar="FILE",
                       help="npumon config whose rule_files and thresholds render the hints (default: built-in)")
    fleet.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                       help="deadline of each Prometheus query (default 10)")
    fleet.add_argument("--ca-file", metavar="FILE", help="CA bundle for an https:// Prometheus with a private CA")
    fleet.set_defaults(func=cmd_fleet)


def cmd_fleet(args: argparse.Namespace) -> int:
    from ..config.errors import ConfigError
    from ..config.load import load_config
    from ..rules.loader import RuleError, load_rules

    if args.top < 0 or not args.timeout > 0:
        print("npumon: --top must be 0 or more and --timeout greater than 0", file=sys.stderr)
        return USAGE_ERROR
    try:
        client = PrometheusClient(args.prometheus, timeout_seconds=args.timeout, ca_file=args.ca_file)
    except ValueError as exc:
        print("npumon: --prometheus: " + str(exc), file=sys.stderr)
        return USAGE_ERROR
    try:
        config = load_config(args.config)
        rule_list, params = load_rules(config.rule_files, params=config.thresholds)
    except (ConfigError, RuleError) as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return USAGE_ERROR
    rules = {rule.id: rule for rule in rule_list}
    try:
        view = read_fleet(client, args.job, args.host_label, rules, params)
    except PrometheusError as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return PROMETHEUS_ERROR
    if args.json:
        document = view_document(view, args.top, args.sort)
        if args.no_hints:
            for finding in document["findings"]:
                finding["hint"] = ""
        print(json.dumps(document, indent=2))
    else:
        print(render_text(view, args.top, args.sort, hints=not args.no_hints))
    return 0

