"""What every `npumon` command shares: the common options, logging, the target host and the one-line error.

A leaf of the command line: the commands (npumon/cli/*) import it and it imports none of them, so no import
circle runs through the command line. It chooses the Target: `--simulate` builds the simulated one
(npumon/sim/target.py), and nothing below the command line asks whether a host is simulated. The parser
(parser.py) imports it for every command, `--help` included: what only a running command needs (the settings,
the sources, logging to the journal) is imported where it is used.
"""

import argparse
import contextlib
import dataclasses
import logging
import shutil
import sys
import tempfile
import time
from typing import TYPE_CHECKING, Callable, Iterator, List, NamedTuple, NoReturn, Optional, Sequence, Tuple

from ..config.location import DEFAULT_CONFIG_PATH

if TYPE_CHECKING:
    from ..settings import Config
    from ..sources.target import Target

USAGE_ERROR = 2
NAGIOS_UNKNOWN = 3
NAGIOS_SERVICE = "NPU"  # the first word of every Nagios status line npumon prints
CONFIG_HELP = ("YAML config file (default: {}, the file the systemd unit reads, when present; else the built-in "
               "defaults)".format(DEFAULT_CONFIG_PATH))


class UserError(Exception):
    """A mistake the user can fix; printed as one line."""


_PARSED_BY = "_npumon_parsed_by"  # the deepest parser that took part in a parse, removed before the caller sees it


class CommandParser(argparse.ArgumentParser):
    """Every parser of `npumon` (subcommands inherit the class): abbreviations are off, so a mistyped option
    fails instead of silently meaning another (`fleet --host` is not `--host-label`), and a parser marked with
    `nagios_usage` reports a usage error as a Nagios plugin must: one `NPU UNKNOWN - ...` line on stdout, exit 3,
    never argparse's exit 2 (CRITICAL to Nagios) with a usage text."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.nagios = False

    def parse_known_args(self, args=None, namespace=None) -> Tuple[argparse.Namespace, List[str]]:
        namespace, extras = super().parse_known_args(args, namespace)
        if not hasattr(namespace, _PARSED_BY):  # a subcommand's parser returns first and is kept
            setattr(namespace, _PARSED_BY, self)
        return namespace, extras

    def parse_args(self, args: Optional[Sequence[str]] = None, namespace=None) -> argparse.Namespace:
        namespace, extras = self.parse_known_args(args, namespace)
        parsed_by = vars(namespace).pop(_PARSED_BY, self)
        if extras:  # the subcommand's own message (argparse gives leftovers to the top parser)
            parsed_by.error("unrecognized arguments: " + " ".join(extras))
        return namespace

    def error(self, message: str) -> NoReturn:
        if self.nagios:
            print("{} UNKNOWN - {}: {} (see {} --help)".format(NAGIOS_SERVICE, self.prog, message, self.prog))
            sys.exit(NAGIOS_UNKNOWN)
        super().error(message)


def nagios_usage(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Mark a subcommand Nagios may call (`check`, `diag`): its usage errors exit 3 with one UNKNOWN line."""
    if not isinstance(parser, CommandParser):
        raise TypeError("nagios_usage needs a CommandParser, got {}".format(type(parser).__name__))
    parser.nagios = True
    return parser


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


def setup_logging(level: str) -> None:
    from ..daemon.sdnotify import JournalFormatter, set_log_level, stderr_is_journal

    handler = logging.StreamHandler(sys.stderr)
    if stderr_is_journal():  # journald stamps every line itself and reads the <priority> prefix
        handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s"))
    else:  # people running it by hand want the time
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(handlers=[handler], force=True)
    set_log_level(level)


class Host(NamedTuple):
    """The host a command reads: its Target, and `config_for(config)`, the config as it applies there (a
    simulated host keeps npumon's state, its event history, outbox, caches and cursors, with the simulation)."""

    target: "Target"
    config_for: Callable[["Config"], "Config"]


@contextlib.contextmanager
def open_target(args: argparse.Namespace, config: "Config", require_npu_smi: bool = True) -> Iterator[Host]:
    """The real host, or a simulated one living in a temporary state directory for this command.
    The daemon starts without npu-smi (it reports the source down until npu-smi appears); `check` cannot.
    Commands run with host.config_for(config), the config the Target's paths come from."""
    from ..sources.target import Target, find_npu_smi

    check_simulation_options(args)
    if args.simulate is None:
        target = Target.real(config)
        if require_npu_smi:
            target = dataclasses.replace(target, npu_smi_argv=[find_npu_smi(config.npu_smi)])
        yield Host(target, lambda config: config)
        return
    setting_up = time.thread_time()  # the simulator's own start (its modules, its host), not npumon's
    from ..sim import ScenarioError, prepare_simulation, simulated_target, simulation_config
    from ..sim.cluster import ClusterError, simulated_cluster, wanted as cluster_wanted
    from ..sim.own_cpu import IN_PROCESS_CPU

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
        with QueueServer(state_dir) as queue, contextlib.ExitStack() as stack:
            target = simulated_target(sim, serving_url=queue.url, serving_preset=queue.engine)
            # a simulated Kubernetes node (API server and kubelet stand-ins) when the config asks for Kubernetes
            cluster = None
            if cluster_wanted(config):
                try:
                    cluster = stack.enter_context(simulated_cluster(sim, state_dir, config, target.host_name()))
                except ClusterError as exc:
                    raise UserError(str(exc)) from None
            addresses = None if cluster is None else cluster.addresses
            IN_PROCESS_CPU.add("setup", time.thread_time() - setting_up)
            yield Host(target, lambda config: simulation_config(config, state_dir, addresses))
    finally:
        if kept_state_dir:
            with contextlib.suppress(OSError):  # for benchmarks/bench_cost.py; nothing to lose without it
                IN_PROCESS_CPU.save(state_dir)
        else:
            shutil.rmtree(state_dir, ignore_errors=True)
