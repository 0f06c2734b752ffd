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

from ..config.schema import Config
from ..daemon.sdnotify import JournalFormatter, stderr_is_journal
from ..sources.target import Target, find_npu_smi

USAGE_ERROR = 2


class UserError(Exception):
    """A mistake the user can fix; printed as one line."""


def add_common(parser: argparse.ArgumentParser) -> None:
    """--config, --simulate, --sim-product and --log-level: the options of every command that reads a host."""
    parser.add_argument("--config", "-c", metavar="FILE", help="YAML config file (default: built-in defaults)")
    parser.add_argument("--simulate", nargs="?", const="healthy", metavar="SCENARIO",
                        help="run against a simulated host instead of real hardware (default scenario: healthy; "
                             "see `npumon scenarios`)")
    parser.add_argument("--sim-product", metavar="PRODUCT", help="simulated product (default: the scenario's)")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"),
                        help="log level (default: the config's, info)")


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
    The daemon starts without npu-smi (it reports the source down until npu-smi appears); `check` cannot."""
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
