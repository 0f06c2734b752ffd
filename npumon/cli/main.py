"""The `npumon` command line: the parser, one module per command family.

Exit codes: `check` follows the Nagios plugin convention (0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN); every
other command exits 0 on success and 2 on bad usage or bad config, with a one-line message and no traceback.
"""

import argparse
import sys
from typing import Optional, Sequence

from .. import __version__
from ..fleet.cli import add_fleet_command
from ..sim.fleet import add_fleet_sim_command
from .check import add_check_command
from .common import USAGE_ERROR
from .completion import add_completion_command
from .config import add_config_commands
from .control import add_control_commands
from .events import add_event_commands
from .manpage import add_manpage_command
from .notify import add_notify_commands
from .run import add_run_commands
from .top import add_top_command


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
    except BrokenPipeError:  # `npumon check | head`: the reader has gone; the verdict still counts
        _quiet_stdout()
        return getattr(args, "exit_code", 0)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that Python's flush at exit does not complain about the closed pipe."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="npumon", description="Monitoring and health checks for Ascend NPU hosts.")
    parser.add_argument("-V", "--version", action="version", version="npumon " + __version__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_check_command(commands)  # `check`: one pass, Nagios exit code
    add_top_command(commands)  # `top`: the live view
    add_run_commands(commands)  # `run` (the daemon) and `scenarios`
    add_event_commands(commands)  # `events` and `ack`
    add_notify_commands(commands)  # `notify test`
    add_control_commands(commands)  # `control status|fan|power`
    add_config_commands(commands)  # `config check|show`
    add_completion_command(commands)  # `completion bash`
    add_manpage_command(commands)  # `manpage`: npumon(1), also written by the packaging build
    add_fleet_command(commands)  # `fleet`: the fleet from Prometheus
    add_fleet_sim_command(commands)  # `fleet-sim`: simulated hosts and a Prometheus on this machine
    return parser


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
