"""The `npumon` command line.

Exit codes: `check` follows the Nagios plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN); every
other command exits 0 on success and 2 on bad usage or bad config, with a one-line message and no traceback.
"""

import argparse
import dataclasses
import json
import logging
import os
import sys
from typing import List, Optional, Sequence

from .. import __version__
from ..sources.collection import Collector
from ..sources.target import NpuSmiMissing
from ..config.errors import ConfigError
from ..config.load import load_config
from ..config.schema import Config
from .common import USAGE_ERROR, UserError, add_common, open_target, setup_logging
from .control import add_control_commands
from .events import add_event_commands
from ..fleet.fleet import add_fleet_command
from ..sim.fleet import add_fleet_sim_command
from .notify import add_notify_commands
from ..outputs.report import EXIT_CODES, SCHEMA, nagios_line, render_table, rfc3339, status_document


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return USAGE_ERROR
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `npumon check | head`
        return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="npumon", description="Monitoring and health checks for Ascend NPU hosts.")
    parser.add_argument("--version", action="version", version="npumon " + __version__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

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

    run = commands.add_parser("run", help="the daemon: poll, judge, serve /metrics /status /healthz",
                              description="Run the monitoring daemon in the foreground (systemd Type=notify).")
    add_common(run)
    run.add_argument("--listen", metavar="ADDR:PORT", help="HTTP listen address (default: the config's, 0.0.0.0:9842)")
    run.add_argument("--sim-state", metavar="DIR",
                     help="with --simulate: keep the simulation's state in DIR (created or reset, kept at exit), "
                          "so that npumon.sim.set_scenario(DIR, SCENARIO) can switch its scenario while it runs")
    run.add_argument("--sim-time-scale", metavar="FACTOR", type=_time_scale, default=1.0,
                     help="with --simulate: run the scenario's clock FACTOR times faster than wall time, to see "
                          "hour-long trends (a leak, rising ECC counts) in minutes (default: 1)")
    run.set_defaults(func=cmd_run)

    scenarios = commands.add_parser("scenarios", help="list the simulator's scenarios and products")
    scenarios.set_defaults(func=cmd_scenarios)

    add_event_commands(commands)  # `events` and `ack`
    add_notify_commands(commands)  # `notify test`
    add_control_commands(commands)  # `control status|fan|power`
    add_fleet_command(commands)  # `fleet`: the fleet from Prometheus
    add_fleet_sim_command(commands)  # `fleet-sim`: simulated hosts and a Prometheus on this machine
    return parser


def _time_scale(text: str) -> float:
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not (0 < factor <= 100000):  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number above 0 and at most 100000, got {!r}".format(text))
    return factor


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
            snapshot = Collector(config, target, skip=("probe",) if args.no_probe else ()).collect_once()
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


def cmd_run(args: argparse.Namespace) -> int:
    from ..outputs.web import WebServerError, parse_listen
    from ..daemon.daemon import Daemon, StartupError
    from ..rules.loader import RuleError

    sim_state_dirs: List[str] = []

    def reload_config() -> Config:
        config = load_config(args.config)
        if sim_state_dirs and config.state_dir == Config().state_dir:
            # A simulated host keeps its event history and outbox with the simulation, never in the real
            # host's /var/lib/npumon (set state_dir in the config to choose another place).
            config = dataclasses.replace(config, state_dir=os.path.join(sim_state_dirs[0], "npumon-state"))
        return config

    try:
        config = reload_config()
        setup_logging(args.log_level or config.log_level)
        if args.listen:
            try:
                parse_listen(args.listen)
            except WebServerError as exc:
                raise UserError("--listen: {}".format(exc)) from None
        if args.sim_state and args.simulate is None:
            raise UserError("--sim-state needs --simulate")
        if args.sim_time_scale != 1.0 and args.simulate is None:
            raise UserError("--sim-time-scale needs --simulate")
        with open_target(args, config, require_npu_smi=False) as target:
            if target.sim_state_dir:
                sim_state_dirs.append(target.sim_state_dir)
                config = reload_config()
            daemon = Daemon(config, target, listen=args.listen, log_level=args.log_level)
            still_running = daemon.serve_forever(reload_config)
    except (ConfigError, UserError, NpuSmiMissing, StartupError, RuleError) as exc:
        print("npumon: " + str(exc), file=sys.stderr)
        return USAGE_ERROR
    if still_running:
        # A job that ignores its deadline must not keep the process alive past the promised stop time
        # (the interpreter would wait for its thread); everything else is already closed.
        logging.shutdown()
        os._exit(0)
    return 0


def cmd_scenarios(args: argparse.Namespace) -> int:
    from ..sim import list_products, list_scenarios

    print("scenarios: " + ", ".join(list_scenarios()))
    print("products:  " + ", ".join(list_products()))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
