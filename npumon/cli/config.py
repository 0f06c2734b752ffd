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
from ..config.location import config_path, no_file_reason
from ..services.notify.redact import MASK
from ..settings import config_problems, load_command_config
from .common import USAGE_ERROR


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
