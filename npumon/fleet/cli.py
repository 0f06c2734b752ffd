"""`npumon fleet --prometheus URL`: the fleet as Prometheus sees it, in a shell.

It reads Prometheus's HTTP query API only; it never scrapes a host itself. It shows hosts up and down,
the worst chips, and the active findings (`npumon_finding_active`) with their summaries and hints.
The hints' templates come from the rule files, loaded locally (the built-in rules, plus the `rule_files`
of `--config`, the same loading as `npumon check`).

Exit codes: 0 the fleet was read, 1 Prometheus could not be read, 2 bad usage or config.
"""

import argparse
import json
import sys

from .client import PrometheusClient, PrometheusError
from .read import read_fleet
from .render import render_text, view_document
from .view import SORT_KEYS

PROMETHEUS_ERROR = 1
USAGE_ERROR = 2


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
    from ..config.location import load_command_config
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
        config = load_command_config(args.config)
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
