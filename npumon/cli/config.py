"""`npumon config check [FILE]` (every problem of a config, one line each) and `npumon config show` (the
effective config, defaults filled in, secrets masked).

Both read what every command reads: FILE or --config, else /etc/npumon/npumon.yaml when present
(config/location.py). `check` exits 0 when the file is good and 2 with one line per problem; it also
loads the rule files the config names, as the daemon would at start. Neither reads a secret file.
"""

import argparse
import dataclasses
import json
import sys
from typing import Any, List

from ..config.errors import ConfigError
from ..config.load import config_problems
from ..config.location import config_path, load_command_config, no_file_reason
from ..services.notify.redact import MASK
from .common import CONFIG_HELP, USAGE_ERROR


def add_config_commands(commands: "argparse._SubParsersAction") -> None:
    """Register `config check` and `config show` with the `npumon` parser."""
    config = commands.add_parser("config", help="validate the config file, or show the effective config",
                                 description="Validate a config file, or print the config npumon runs with.")
    actions = config.add_subparsers(dest="config_action", metavar="ACTION")
    check = actions.add_parser("check", help="report every problem of a config file, one line each; exit 0 or 2",
                               description="Validate a config file and the rule files it names without running "
                                           "any check: one line per problem, exit 0 when there is none, else 2.")
    check.add_argument("file", nargs="?", metavar="FILE", help=CONFIG_HELP)
    check.add_argument("--config", "-c", metavar="FILE", dest="config_option", help="the same as FILE")
    check.set_defaults(func=cmd_config_check)
    show = actions.add_parser("show", help="print the effective config: the file's values and every default",
                              description="Print the config npumon runs with, defaults filled in; inline "
                                          "secrets are shown as " + MASK + ".")
    show.add_argument("--config", "-c", metavar="FILE", help=CONFIG_HELP)
    show.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    show.set_defaults(func=cmd_config_show)
    config.set_defaults(func=lambda args: _usage(config))


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return USAGE_ERROR


def cmd_config_check(args: argparse.Namespace) -> int:
    if args.file and args.config_option and args.file != args.config_option:
        print("npumon: config check: give FILE or --config, not both", file=sys.stderr)
        return USAGE_ERROR
    path = config_path(args.file or args.config_option)
    if path is None:
        print("npumon: {}: nothing to check (the built-in defaults are valid)".format(no_file_reason()),
              file=sys.stderr)
        return USAGE_ERROR
    config, problems = config_problems(path)
    if config is not None and not problems:
        problems = _rule_problems(config)
    for problem in problems:
        print(problem)
    if problems:
        return USAGE_ERROR
    print("{}: ok".format(path))
    return 0


def _rule_problems(config) -> List[str]:
    """The rule files the config names, loaded with its thresholds, as the daemon does at start."""
    from ..rules.loader import RuleError, load_rules

    try:
        load_rules(config.rule_files, params=config.thresholds)
    except RuleError as exc:
        return [str(exc)]
    return []


def cmd_config_show(args: argparse.Namespace) -> int:
    try:
        config = load_command_config(args.config)
    except ConfigError as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return USAGE_ERROR
    document = redacted(config)
    source = document.pop("source")
    if args.json:
        print(json.dumps({"source": source, "config": document}, indent=2))
        return 0
    import yaml

    print("# effective config: " + source)
    print(yaml.safe_dump(document, sort_keys=False, default_flow_style=False).rstrip())
    return 0


def redacted(value: Any) -> Any:
    """A config dataclass as plain data; the schema's secret fields (repr=False) that are set become MASK."""
    if dataclasses.is_dataclass(value):
        result = {}
        for spec in dataclasses.fields(value):
            item = getattr(value, spec.name)
            result[spec.name] = MASK if not spec.repr and item is not None else redacted(item)
        return result
    if isinstance(value, (list, tuple)):
        return [redacted(item) for item in value]
    if isinstance(value, dict):
        return {str(key): redacted(item) for key, item in value.items()}
    return value
