"""What every `npumon` command shares: the common options, logging, the target host and the one-line error.

A leaf module: the commands (npumon/cli/*) and the daemon import it, it imports neither, so no import
circle runs through the command line.
"""

import argparse
import contextlib
import logging
import shutil
import sys
import tempfile
from typing import Iterator

from ..config.location import DEFAULT_CONFIG_PATH
from ..config.schema import Config
from ..daemon.sdnotify import JournalFormatter, stderr_is_journal
from ..sources.target import Target, find_npu_smi

USAGE_ERROR = 2
CONFIG_HELP = ("YAML config file (default: {}, the file the systemd unit reads, when present; else the built-in "
               "defaults)".format(DEFAULT_CONFIG_PATH))


class UserError(Exception):
    """A mistake the user can fix; printed as one line."""


def add_common(parser: argparse.ArgumentParser) -> None:
    """--config, --simulate, --sim-product and --log-level: the options of every command that reads a host."""
    parser.add_argument("--config", "-c", metavar="FILE", help=CONFIG_HELP)
    parser.add_argument("--simulate", nargs="?", const="healthy", metavar="SCENARIO",
                        help="run against a simulated host instead of real hardware (default scenario: healthy; "
                             "see `npumon scenarios`)")
    parser.add_argument("--sim-product", metavar="PRODUCT", help="with --simulate: the simulated product "
                                                                  "(default: the scenario's)")
    add_sim_state(parser, "with --simulate: keep the simulated host, and npumon's own state (event history, "
                          "outbox, caches), in DIR (created or reset, kept at exit), so that `npumon events "
                          "--sim-state DIR` reads its history and npumon.sim.set_scenario(DIR, SCENARIO) can switch "
                          "its scenario while it runs (default: a temporary directory, removed at exit)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help="log level (default: the config's, info)")


def add_sim_state(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--sim-state", metavar="DIR", help=help_text)


def check_simulation_options(args: argparse.Namespace) -> None:
    """Simulation options without --simulate are a mistake, not something to ignore."""
    for option, value in (("--sim-product", getattr(args, "sim_product", None)),
                          ("--sim-state", getattr(args, "sim_state", None)),
                          ("--sim-time-scale", getattr(args, "sim_time_scale", 1.0) != 1.0 or None)):
        if value is not None and args.simulate is None:
            raise UserError("{} needs --simulate".format(option))


def simulated_config(config: Config, target: Target) -> Config:
    """`config` as a command uses it with `target`: a simulated host's state stays with the simulation."""
    from ..config.location import for_simulation

    return for_simulation(config, target.sim_state_dir) if target.sim_state_dir else config


def setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():  # journald stamps every line itself and reads the <priority> prefix
        handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s"))
    else:  # people running it by hand want the time
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(handlers=[handler], force=True)
    set_log_level(level)


def set_log_level(level: str) -> None:
    """Also used when a reloaded config changes log_level."""
    logging.getLogger().setLevel(getattr(logging, level.upper()))
    # APScheduler logs every job run at INFO: that is noise in a journal, its warnings still show.
    logging.getLogger("apscheduler").setLevel(max(logging.WARNING, logging.getLogger().level))


@contextlib.contextmanager
def open_target(args: argparse.Namespace, config: Config, require_npu_smi: bool = True) -> Iterator[Target]:
    """The real host, or a simulated one living in a temporary state directory for this command.
    The daemon starts without npu-smi (it reports the source down until npu-smi appears); `check` cannot.
    Commands that use config.state_dir take it from simulated_config(config, target)."""
    check_simulation_options(args)
    if args.simulate is None:
        yield Target([find_npu_smi(config.npu_smi) if require_npu_smi else config.npu_smi], None, config.root)
        return
    from ..sim import ScenarioError, prepare_simulation

    kept_state_dir = getattr(args, "sim_state", None)  # `run --sim-state DIR`: the caller owns DIR
    state_dir = kept_state_dir or tempfile.mkdtemp(prefix="npumon-sim-")
    try:
        try:
            sim = prepare_simulation(state_dir, args.simulate, product=args.sim_product,
                                     time_scale=getattr(args, "sim_time_scale", 1.0))
        except ScenarioError as exc:
            raise UserError(str(exc)) from None
        except OSError as exc:  # an unusable --sim-state directory
            raise UserError("simulation state {}: {}".format(state_dir, exc.strerror or exc)) from None
        from ..sim.queue_server import QueueServer

        # The simulated inference server's metrics endpoint, read by the serving source over real HTTP.
        with QueueServer(state_dir) as queue:
            yield Target(sim.npu_smi_argv, sim.env, sim.root, simulated=True, serving_url=queue.url,
                         sim_state_dir=state_dir, spawn=sim.spawn)
    finally:
        if not kept_state_dir:
            shutil.rmtree(state_dir, ignore_errors=True)
