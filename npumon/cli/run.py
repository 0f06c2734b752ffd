"""`npumon run` (the daemon in the foreground) and `npumon scenarios` (what --simulate can run).

`run` exits 0 after SIGTERM/SIGINT and 2, with one line, when it cannot start (bad usage, bad config or
rules, a port in use, an unwritable state_dir).
"""

import argparse
import json
import logging
import os
import sys
from typing import Callable, List

from ..config.errors import ConfigError
from ..settings import Config, load_command_config
from ..sources.target import NpuSmiMissing
from .common import USAGE_ERROR, UserError, open_target, setup_logging


def cmd_run(args: argparse.Namespace) -> int:
    from ..outputs.web import WebServerError, parse_listen
    from ..daemon.daemon import Daemon
    from ..daemon.memory import limit_malloc_arenas
    from ..daemon.state import StartupError
    from ..rules.loader import RuleError

    limit_malloc_arenas()  # before any thread starts
    config_for: List[Callable[[Config], Config]] = []  # the host's, once it is open

    def reload_config() -> Config:
        config = load_command_config(args.config)
        # A simulated host keeps its event history and outbox with the simulation (sim/target.py)
        return config_for[0](config) if config_for else config

    try:
        config = reload_config()
        setup_logging(args.log_level or config.log_level)
        if args.listen:
            try:
                parse_listen(args.listen)
            except WebServerError as exc:
                raise UserError("--listen: {}".format(exc)) from None
        with open_target(args, config, require_npu_smi=False) as (target, host_config):
            config_for.append(host_config)
            config = host_config(config)
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
