"""`npumon run` (the daemon in the foreground) and `npumon scenarios` (what --simulate can run).

`run` exits 0 after SIGTERM/SIGINT and 2, with one line, when it cannot start (bad usage, bad config or
rules, a port in use, an unwritable state_dir).
"""

import argparse
import json
import logging
import os
import sys
from typing import List

from ..config.errors import ConfigError
from ..config.location import for_simulation, load_command_config
from ..config.schema import Config
from ..sources.target import NpuSmiMissing
from .common import USAGE_ERROR, UserError, add_common, open_target, setup_logging


def add_run_commands(commands: "argparse._SubParsersAction") -> None:
    """Register `run` and `scenarios` with the `npumon` parser."""
    run = commands.add_parser("run", help="the daemon: poll, judge, serve /metrics /status /healthz",
                              description="Run the monitoring daemon in the foreground (systemd Type=notify).")
    add_common(run)
    run.add_argument("--listen", metavar="ADDR:PORT", help="HTTP listen address (default: the config's, 0.0.0.0:9842)")
    run.add_argument("--web-config-file", metavar="FILE",
                     help="exporter-toolkit web config (TLS, client certificates, basic auth), the file "
                          "node_exporter reads with --web.config.file; read again on reload "
                          "(default: the config's exporter.web_config_file)")
    run.add_argument("--sim-time-scale", metavar="FACTOR", type=_time_scale, default=1.0,
                     help="with --simulate: run the scenario's clock FACTOR times faster than wall time, to see "
                          "hour-long trends (a leak, rising ECC counts) in minutes (default: 1)")
    run.set_defaults(func=cmd_run)

    scenarios = commands.add_parser("scenarios", help="list the simulator's scenarios and products",
                                    description="The scenarios --simulate=SCENARIO can run and the products "
                                                "--sim-product can simulate, each with what it shows.")
    scenarios.add_argument("--json", action="store_true", help="print one JSON object")
    scenarios.set_defaults(func=cmd_scenarios)


def _time_scale(text: str) -> float:
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not (0 < factor <= 100000):  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number above 0 and at most 100000, got {!r}".format(text))
    return factor


def cmd_run(args: argparse.Namespace) -> int:
    from ..outputs.web import WebServerError, parse_listen
    from ..daemon.daemon import Daemon
    from ..daemon.memory import limit_malloc_arenas
    from ..daemon.state import StartupError
    from ..rules.loader import RuleError

    limit_malloc_arenas()  # before any thread starts
    sim_state_dirs: List[str] = []

    def reload_config() -> Config:
        config = load_command_config(args.config)
        # A simulated host keeps its event history and outbox with the simulation (config/location.py)
        return for_simulation(config, sim_state_dirs[0]) if sim_state_dirs else config

    try:
        config = reload_config()
        setup_logging(args.log_level or config.log_level)
        if args.listen:
            try:
                parse_listen(args.listen)
            except WebServerError as exc:
                raise UserError("--listen: {}".format(exc)) from None
        with open_target(args, config, require_npu_smi=False) as target:
            if target.sim_state_dir:
                sim_state_dirs.append(target.sim_state_dir)
                config = reload_config()
            daemon = Daemon(config, target, listen=args.listen, log_level=args.log_level,
                            web_config_file=args.web_config_file)
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
    from ..sim import ScenarioError, describe_products, describe_scenarios

    try:
        scenarios, products = describe_scenarios(), describe_products()
    except ScenarioError as exc:  # a damaged installation
        print("npumon: " + str(exc), file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        print(json.dumps({"scenarios": scenarios, "products": products}, indent=2))
        return 0
    width = max(len(entry["name"]) for entry in scenarios + products)
    print("Scenarios (--simulate=SCENARIO; default healthy):")
    for entry in scenarios:
        print("  {}  {} [{}]".format(entry["name"].ljust(width), entry["description"], entry["product"]))
    print("Products (--sim-product PRODUCT; default: the scenario's, in brackets):")
    for entry in products:
        print("  {}  {}".format(entry["name"].ljust(width), entry["description"]))
    return 0
