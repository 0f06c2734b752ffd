"""`npumon check`: one pass of the checks, printed, with the Nagios plugin's exit code.

0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN; UNKNOWN also when it could not check at all (bad config, no
npu-smi, an unwritable --textfile directory), with one line or a minimal JSON document.

Made to run as an NRPE plugin on a real host, where one npu-smi call takes a second or more: by default it
reads the quick tiers (the main table, health, usages, ECC, the host; `--full` adds power, board and the
probe, `--probe` the probe), and it gives up after `--timeout` seconds (default 9, inside NRPE's 10 s),
printing what it has with UNKNOWN and what it still waited for.
"""

import argparse
import json
import threading
from typing import Optional, Sequence

from ..config.errors import ConfigError
from ..config.location import load_command_config
from ..config.schema import Config
from ..outputs.report import EXIT_CODES, SCHEMA, nagios_line, render_table, rfc3339, status_document
from ..sources.collection import SourceSet
from ..sources.target import NpuSmiMissing
from .common import UserError, add_common, open_target, setup_logging, simulated_config


def add_check_command(commands: "argparse._SubParsersAction") -> None:
    """Register `check` with the `npumon` parser."""
    check = commands.add_parser("check", help="one pass of every check; Nagios exit code",
                                description="Collect once, evaluate every rule once, print the result and exit "
                                            "0 OK, 1 WARNING, 2 CRITICAL or 3 UNKNOWN.")
    add_common(check)
    check.add_argument("--json", action="store_true", help="print the npumon.check/v1 JSON document")
    check.add_argument("--textfile", metavar="DIR",
                       help="also write the metrics to DIR/npumon.prom for node_exporter's textfile collector")
    check.add_argument("--full", action="store_true",
                       help="every query tier, the NPU network (hccn_tool) and the liveness probe, not only the "
                            "quick ones (give it a longer --timeout)")
    check.add_argument("--probe", action="store_true", help="also probe every chip once with the ACL runtime")
    check.add_argument("--no-probe", action="store_true", help="no liveness probe, even with --full")
    check.add_argument("--timeout", metavar="SECONDS", type=_seconds, default=DEFAULT_TIMEOUT_SECONDS,
                       help="give up after this long, print what was read and exit 3 (default: %(default)g, "
                            "inside NRPE's 10 s)")
    check.set_defaults(func=cmd_check)


DEFAULT_TIMEOUT_SECONDS = 9.0
RESERVE_SECONDS = 1.0  # of --timeout, kept for the rules, the output and closing what still runs


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number of seconds above 0 and at most 3600, got {!r}".format(text))
    return value


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
        config = load_command_config(args.config)
        setup_logging(args.log_level or ("warning" if config.log_level == "info" else config.log_level))
        engine, params = load_rule_engine(config, one_shot=True)
        probe = (args.full or args.probe) and not args.no_probe
        with open_target(args, config) as target:
            config = simulated_config(config, target)
            collection = SourceSet(config, target, skip=() if probe else ("probe",), quick_pass=not args.full,
                                   max_concurrent=config.check_max_concurrent, one_pass=True)
            snapshot, timed_out = _collect_within(collection, args.full, ("probe",) if probe else (), args.timeout)
    except (ConfigError, UserError, NpuSmiMissing) as exc:
        return _check_unknown(args, str(exc))
    findings = engine.evaluate(snapshot, now=snapshot.time)
    document = status_document(snapshot, findings)
    incomplete = timed_out or _incomplete(snapshot)
    if incomplete is not None:  # some of what this pass was to read was not read: no verdict on it
        document["status"], document["error"] = "unknown", incomplete
    if args.textfile:
        from ..outputs.exporter import ExporterView, build_registry
        from ..outputs.npu_exporter import resolve_node_label
        from ..outputs.textfile import TextfileError, write_textfile

        view = ExporterView(snapshot=snapshot, findings=findings, driver_version=snapshot.driver_version)
        try:
            write_textfile(args.textfile, build_registry(
                lambda: view, npu_exporter_compat=config.exporter.npu_exporter_compat,
                node=resolve_node_label(config.exporter.node_label),
                process_series_per_chip=config.exporter.process_series_per_chip))
        except TextfileError as exc:
            return _check_unknown(args, str(exc))
    args.exit_code = EXIT_CODES[document["status"]]  # also when a closed pipe cuts the printing short
    if args.json:
        print(json.dumps(document, indent=2))
    else:
        print(nagios_line(snapshot, findings, params, error=incomplete))
        print(render_table(snapshot, findings))
    return args.exit_code


def _incomplete(snapshot) -> Optional[str]:
    """Why the pass is incomplete (a tier left calls out within --timeout), or None."""
    short = ["{} ({} calls)".format(name, status.left_out)
             for name, status in sorted(snapshot.sources.items()) if status.left_out]
    if not short:
        return None
    return "check incomplete: --timeout reached before every call of " + ", ".join(short) + " was made"


def _collect_within(collection: SourceSet, full: bool, also: Sequence[str], timeout: float):
    """(snapshot, None), or (what was read by the timeout, why it is incomplete). Closing the collection kills
    the npu-smi calls still running, so nothing outlives the check."""
    done = threading.Event()
    result = {}

    def collect() -> None:
        # npu-smi calls stop a little before the timeout, so that the rules and the output still fit in it
        result["snapshot"] = collection.collect_once(full=full, also=also, within=max(0.1, timeout - RESERVE_SECONDS))
        done.set()

    threading.Thread(target=collect, name="check-collect", daemon=True).start()
    try:
        if done.wait(timeout):
            return result["snapshot"], None
        waiting = collection.polling()
        return collection.snapshot(), "check timed out after {:g}s{}".format(
            timeout, "; still waiting for " + ", ".join(waiting) if waiting else "")
    finally:
        collection.close()


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
