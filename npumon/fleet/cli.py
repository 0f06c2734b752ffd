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

PROMETHEUS_ERROR = 1
USAGE_ERROR = 2


def cmd_fleet(args: argparse.Namespace) -> int:
    from ..config.errors import ConfigError
    from ..settings import load_command_config
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
