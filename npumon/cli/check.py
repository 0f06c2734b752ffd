"""`npumon check`: one pass of every check, printed, with the Nagios plugin's exit code.

0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; UNKNOWN also when it could not check at all (bad config, no
npu-smi, an unwritable --textfile directory), with one line or a minimal JSON document.
"""

import argparse
import json

from ..config.errors import ConfigError
from ..config.load import load_config
from ..config.schema import Config
from ..outputs.report import EXIT_CODES, SCHEMA, nagios_line, render_table, rfc3339, status_document
from ..sources.collection import SourceSet
from ..sources.target import NpuSmiMissing
from .common import UserError, add_common, open_target, setup_logging


def add_check_command(commands: "argparse._SubParsersAction") -> None:
    """Register `check` with the `npumon` parser."""
    check = commands.add_parser("check", help="one pass of every check; Nagios exit code",
                                description="Collect once, evaluate every rule once, print the result and exit "
                                            "0 OK, 1 WARNING, 2 CRITICAL or 3 UNKNOWN.")
    add_common(check)
    check.add_argument("--json", action="store_true", help="print the npumon.check/v1 JSON document")
    check.add_argument("--textfile", metavar="DIR",
                       help="also write the metrics to DIR/npumon.prom for node_exporter's textfile collector")
    check.add_argument("--no-probe", action="store_true",
                       help="skip the liveness probe (by default every chip is probed once)")
    check.set_defaults(func=cmd_check)


def load_rule_engine(config: Config, one_shot: bool):
    from ..rules.engine import RuleEngine
    from ..rules.loader import RuleError, load_rules

    try:
        rules, params = load_rules(config.rule_files, params=config.thresholds)
    except RuleError as exc:
        raise UserError(str(exc)) from None
    return RuleEngine(rules, params, one_shot=one_shot), params


def cmd_check(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config)
        setup_logging(args.log_level or ("warning" if config.log_level == "info" else config.log_level))
        engine, params = load_rule_engine(config, one_shot=True)
        with open_target(args, config) as target:
            collection = SourceSet(config, target, skip=("probe",) if args.no_probe else ())
            try:
                snapshot = collection.collect_once()
            finally:
                collection.close()
    except (ConfigError, UserError, NpuSmiMissing) as exc:
        return _check_unknown(args, str(exc))
    findings = engine.evaluate(snapshot, now=snapshot.time)
    document = status_document(snapshot, findings)
    if args.textfile:
        from ..outputs.exporter import ExporterView, build_registry
        from ..outputs.textfile import TextfileError, write_textfile

        view = ExporterView(snapshot=snapshot, findings=findings, driver_version=snapshot.driver_version)
        try:
            write_textfile(args.textfile, build_registry(lambda: view,
                                                         npu_exporter_compat=config.exporter.npu_exporter_compat))
        except TextfileError as exc:
            return _check_unknown(args, str(exc))
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(nagios_line(snapshot, findings, params))
        print(render_table(snapshot, findings))
    return EXIT_CODES[document["status"]]


def _check_unknown(args: argparse.Namespace, message: str) -> int:
    """Could not check at all: one line (or a minimal JSON document), exit 3."""
    if args.json:
        import socket
        import time

        print(json.dumps({"schema": SCHEMA, "host": socket.gethostname(), "time": rfc3339(time.time()),
                          "status": "unknown", "error": message, "chips": [], "findings": [], "sources": {}},
                         indent=2))
    else:
        print("NPU UNKNOWN - " + message)
    return EXIT_CODES["unknown"]
