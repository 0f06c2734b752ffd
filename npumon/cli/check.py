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
import os
import shutil
import sys
import textwrap
import threading
from typing import Optional, Sequence

from ..config.errors import ConfigError
from ..outputs.colour import Painter
from ..outputs.colour import wanted as colour_wanted
from ..outputs.report import EXIT_CODES, SCHEMA, nagios_line, render_table, rfc3339, status_document
from ..settings import Config, load_command_config
from ..sources.collection import SourceSet
from ..sources.target import NpuSmiMissing
from .common import UserError, open_target, setup_logging


RESERVE_SECONDS = 1.0  # of --timeout, kept for the rules, the output and closing what still runs


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
        with open_target(args, config) as (target, config_for):
            config = config_for(config)
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
    elif _terminal():  # a person: the table first, then the verdict in colour, the perfdata last and wrapped
        status_line, _, perf = nagios_line(snapshot, findings, params, error=incomplete).partition(" | ")
        paint = Painter(colour_wanted(sys.stdout, os.environ))
        print(render_table(snapshot, findings, paint))
        print()
        print(paint(status_line, document["status"]))
        if perf:
            print(textwrap.fill(perf, width=shutil.get_terminal_size().columns, initial_indent="perfdata: ",
                                subsequent_indent="  ", break_on_hyphens=False, break_long_words=False))
    else:  # Nagios and pipes: the status line with its perfdata first, as the plugin protocol has it
        print(nagios_line(snapshot, findings, params, error=incomplete))
        print(render_table(snapshot, findings))
    return args.exit_code


def _terminal() -> bool:
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


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
