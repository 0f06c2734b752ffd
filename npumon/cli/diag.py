"""`npumon diag -r 1|2|3`: on-demand diagnostics, one-shot like `check`, with the Nagios exit codes.

-r 1 checks the deployment in seconds; -r 2 (about a minute) and -r 3 (minutes) also run workloads on every
chip no process holds (--force: on every chip). docs/diag.md lists every item, its duration and its pass
criterion. The result goes where `check`'s goes: the table or --json, --textfile metrics (npumon_diag_*) and
an event (diag_completed) in the history. The daemon never runs this on its own.
"""

import argparse
import json
import sys
import threading
import time
from typing import Any, Dict

from ..config.errors import ConfigError
from ..outputs.report import EXIT_CODES, rfc3339
from ..settings import load_command_config
from ..sources.target import NpuSmiMissing
from .check import load_rule_engine
from .common import UserError, open_target, setup_logging

DEFAULT_TIMEOUTS = {1: 9.0, 2: 300.0, 3: 1800.0}


class Progress:
    """One line on a terminal, rewritten as the chips move through their items; nothing when not a terminal."""

    def __init__(self, stream: Any, level: int, started: float):
        self.stream = stream
        self.active = stream.isatty() and level >= 2
        self.level = level
        self.started = started
        self.current: Dict[str, str] = {}
        self.lock = threading.Lock()

    def item(self, subject: str, item: str) -> None:
        if not self.active:
            return
        with self.lock:
            self.current[subject] = item
            items = sorted(set(self.current.values()))
            line = "diag -r {}: {} chip{} running ({}), {:.0f} s".format(
                self.level, len(self.current), "s" if len(self.current) > 1 else "", ", ".join(items),
                time.time() - self.started)
            self.stream.write("\r" + line[:120].ljust(120))
            self.stream.flush()

    def done(self) -> None:
        if self.active and self.current:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()


def cmd_diag(args: argparse.Namespace) -> int:
    from ..diag.report import TEXTFILE_NAME, document, event, nagios_line, registry, render_table, status
    from ..diag.judge import DEFAULT_THRESHOLDS
    from ..diag.run import DiagOptions, run_diag

    timeout = args.timeout or DEFAULT_TIMEOUTS[args.level]
    options = DiagOptions(level=args.level, force=args.force, parallel=args.parallel, item_seconds=args.item_seconds,
                          sustained_seconds=args.sustained_seconds, hbm_bytes=args.hbm_bytes,
                          op_model_dir=args.op_model_dir, budget_seconds=timeout)
    progress = Progress(sys.stderr, args.level, time.time())
    try:
        config = load_command_config(args.config)
        setup_logging(args.log_level or ("warning" if config.log_level == "info" else config.log_level))
        engine, params = load_rule_engine(config, one_shot=True)
        options.thresholds = {name: params["diag_" + name] for name in DEFAULT_THRESHOLDS}
        with open_target(args, config) as (target, config_for):
            config = config_for(config)
            result = _within(lambda: run_diag(config, target, engine, options, progress.item), timeout)
    except (ConfigError, UserError, NpuSmiMissing) as exc:
        return _unknown(args, str(exc))
    finally:
        progress.done()
    if result is None:
        return _unknown(args, "diag timed out after {:g}s (--timeout)".format(timeout))
    if args.textfile:
        from ..outputs.textfile import TextfileError, write_textfile

        try:
            write_textfile(args.textfile, registry(result), TEXTFILE_NAME)
        except TextfileError as exc:
            return _unknown(args, str(exc))
    _record_event(config, engine, event(result))
    args.exit_code = EXIT_CODES[status(result)]
    if args.json:
        print(json.dumps(document(result), indent=2))
    else:
        print(nagios_line(result))
        print(render_table(result))
    return args.exit_code


def _within(work, timeout: float):
    """work()'s result, or None when it did not finish in `timeout` s (the children it started have their own
    deadlines, below it, and are killed there)."""
    result: Dict[str, Any] = {}

    def run() -> None:
        try:
            result["value"] = work()
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            result["error"] = exc

    thread = threading.Thread(target=run, name="diag", daemon=True)
    thread.start()
    thread.join(timeout)
    if "error" in result:
        raise result["error"]
    return result.get("value")


def _record_event(config: Any, engine: Any, entry: Dict[str, Any]) -> None:
    from ..services.events.service import open_event_history

    history = open_event_history(config, lambda: engine)
    if history is None:
        return
    try:
        history.record(entry["kind"], entry["subject"], entry["message"], severity=entry["severity"],
                       details=entry["details"])
        history.flush()
    finally:
        history.close()


def _unknown(args: argparse.Namespace, message: str) -> int:
    if args.json:
        import socket

        print(json.dumps({"schema": "npumon.diag/v1", "host": socket.gethostname(), "time": rfc3339(time.time()),
                          "level": args.level, "status": "unknown", "error": message, "results": [],
                          "findings": []}, indent=2))
    else:
        print("NPU DIAG UNKNOWN - " + message)
    return EXIT_CODES["unknown"]
