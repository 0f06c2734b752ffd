"""The `npumon` parser: every command's name, options, help and checks of option values, and no command's code.

`npumon --help`, shell completion and the man page read this parser alone. Each command's module (check.py,
run.py, fleet/cli.py, ...) is imported only when that command runs (the small functions at the end), so a command
pays for its own imports and no other's: when every command imported every command's module, `npumon --help`
cost about 0.5 s of CPU instead of 0.25 s. The usage errors are argparse's, through common.CommandParser.
"""

import argparse
import gc
import sys

from .. import __version__
from ..fleet.view import SORT_KEYS
from ..services.events.store import KINDS
from ..services.notify.redact import MASK
from ..tui.rows import SORTS
from .common import CONFIG_HELP, USAGE_ERROR, CommandParser, add_common, add_sim_state, nagios_usage

DEFAULT_TIMEOUT_SECONDS = 9.0  # `check --timeout`, inside NRPE's 10 s
DEFAULT_INTERVAL_SECONDS = 2.0  # `top --interval`
SHELLS = ("bash", "zsh", "fish")


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="npumon", description="Monitoring and health checks for Ascend NPU hosts.")
    parser.add_argument("-V", "--version", action="version", version="npumon " + __version__)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    add_check_command(commands)  # `check`: one pass, Nagios exit code
    add_diag_command(commands)  # `diag -r 1|2|3`: on-demand diagnostics, Nagios exit code
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


def add_check_command(commands: "argparse._SubParsersAction") -> None:
    """Register `check` with the `npumon` parser."""
    check = commands.add_parser("check", help="one pass of every check; Nagios exit code",
                                description="Collect once, evaluate every rule once, print the result and exit "
                                            "0 OK, 1 WARNING, 2 CRITICAL or 3 UNKNOWN (bad usage included).")
    nagios_usage(check)
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
    check.set_defaults(func=_check)


def add_diag_command(commands: "argparse._SubParsersAction") -> None:
    """Register `diag` with the `npumon` parser."""
    diag = commands.add_parser("diag", help="on-demand diagnostics at level 1, 2 or 3; Nagios exit code",
                               description="Level 1 checks the deployment (seconds); level 2 also runs compute, "
                                           "copy, HBM and MatMul checks on every idle chip (about a minute); "
                                           "level 3 adds sustained loads with throttling checks and chip-to-chip "
                                           "copies (minutes). Exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN.")
    nagios_usage(diag)
    add_common(diag)
    diag.add_argument("-r", "--level", type=int, choices=(1, 2, 3), required=True, help="how deep to test")
    diag.add_argument("--json", action="store_true", help="print the npumon.diag/v1 JSON document")
    diag.add_argument("--textfile", metavar="DIR",
                      help="also write the npumon_diag_* metrics to DIR/npumon_diag.prom for node_exporter")
    diag.add_argument("--force", action="store_true", help="also test chips a process holds (disturbs its job)")
    diag.add_argument("--timeout", metavar="SECONDS", type=_seconds,
                      help="give up after this long and exit 3 (default: 9 for -r 1, 300 for -r 2, 1800 for -r 3)")
    diag.add_argument("--hbm-bytes", metavar="BYTES", type=_size, default=256 * 1048576,
                      help="device memory the HBM pattern covers (default: %(default)s)")
    diag.add_argument("--item-seconds", metavar="SECONDS", type=_seconds, default=5.0,
                      help="device time of each measurement (default: %(default)g)")
    diag.add_argument("--sustained-seconds", metavar="SECONDS", type=_seconds, default=60.0,
                      help="-r 3: device time of each sustained load (default: %(default)g)")
    diag.add_argument("--op-model-dir", metavar="DIR",
                      help="use the MatMul single-operator models in DIR (ATC output) instead of building them "
                           "once into the state directory's cache or using the runtime's operator API "
                           "(docs/diag.md)")
    diag.add_argument("--parallel", metavar="N", type=_parallel, default=8, help="chips tested at once (default: 8)")
    diag.set_defaults(func=_diag)


def add_top_command(commands: "argparse._SubParsersAction") -> None:
    """Register `top` with the `npumon` parser."""
    top = commands.add_parser(
        "top", help="live terminal view of the chips, findings and sources",
        description="A live view of the host: one row per chip (health, temperature, power, AI Core / vector / "
                    "HBM bandwidth, HBM used, processes, network, probe), the active findings with their hints "
                    "and the sources with their age. Reads the local daemon's /status by default; --url reads "
                    "another, --local or --simulate collects without a daemon. Keys: q quit, ? help, s sort, "
                    "t/p/u/m sort by temperature/power/AI Core/HBM, / filter, Enter a chip's detail.")
    add_common(top)
    top.add_argument("--url", metavar="URL",
                     help="a daemon's /status to read (default: the local daemon, from exporter.listen)")
    top.add_argument("--local", action="store_true",
                     help="collect on this host without a daemon (npu-smi, as `npumon check` does)")
    top.add_argument("--probe", action="store_true", help="with --local or --simulate: also run the liveness probe")
    top.add_argument("--interval", metavar="SECONDS", type=_interval, default=DEFAULT_INTERVAL_SECONDS,
                     help="seconds between refreshes, 0.5..60 (default: %(default)g)")
    top.add_argument("--sort", choices=SORTS, default="npu", help="initial sort column (default: npu)")
    top.add_argument("--filter", metavar="TEXT", default="", help="initial chip filter, as the / key takes it")
    top.add_argument("--once", action="store_true", help="print one frame as plain text and exit")
    top.add_argument("--plain", action="store_true", help="a plain refreshing table even on a terminal")
    top.add_argument("--count", metavar="N", type=_frames, help="with the plain table: stop after N frames")
    top.set_defaults(func=_top)


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
    run.set_defaults(func=_run)

    scenarios = commands.add_parser("scenarios", help="list the simulator's scenarios and products",
                                    description="The scenarios --simulate=SCENARIO can run and the products "
                                                "--sim-product can simulate, each with what it shows.")
    scenarios.add_argument("--json", action="store_true", help="print one JSON object")
    scenarios.set_defaults(func=_scenarios)


def add_event_commands(commands: "argparse._SubParsersAction") -> None:
    """Register `events` and `ack` with the `npumon` parser."""
    events = commands.add_parser(
        "events", help="show the event history: findings, health changes, new error codes, chips, acks",
        description="Show what the daemon recorded, oldest first. Times: a duration back from now (30s, 15m, "
                    "1h, 2d, 1w) or a date and time (2024-05-01T08:00:00Z; without an offset, local time).")
    _add_history_options(events)
    events.add_argument("--since", metavar="WHEN", help="only events at or after WHEN (e.g. 1h)")
    events.add_argument("--until", metavar="WHEN", help="only events at or before WHEN")
    events.add_argument("--npu", metavar="N", help="only the chips of card N (npu-smi's NPU id)")
    events.add_argument("--kind", action="append", metavar="KIND",
                        help="only this kind (repeatable): " + ", ".join(KINDS))
    events.add_argument("--limit", metavar="N", help="only the newest N events")
    events.add_argument("--json", action="store_true", help="print a JSON list of events")
    events.set_defaults(func=_events)

    ack = commands.add_parser(
        "ack", help="acknowledge an active finding (sticky findings stay until acknowledged)",
        description="Acknowledge an active finding: it resolves and stays quiet until its condition has "
                    "cleared once. Recorded in the event history; the running daemon applies it at its next poll.")
    _add_history_options(ack)
    ack.add_argument("rule", nargs="?", metavar="RULE", help="rule id, e.g. ecc-uncorrectable")
    ack.add_argument("subject", nargs="?", metavar="SUBJECT", help="'host' or npu<N>/chip<C>, e.g. npu2/chip0")
    ack.add_argument("--all", action="store_true", help="acknowledge every active finding")
    ack.add_argument("--note", metavar="TEXT", help="why, for the record (e.g. a ticket number)")
    ack.add_argument("--json", action="store_true", help="print a JSON list of the findings acknowledged")
    ack.set_defaults(func=_ack)


def _add_history_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", "-c", metavar="FILE", help=CONFIG_HELP + "; its state_dir holds the history")
    parser.add_argument("--simulate", action="store_true",
                        help="a simulated host's history, never the real host's: with --sim-state DIR")
    add_sim_state(parser, "the simulated host's own history: the DIR that `npumon run --simulate --sim-state DIR` "
                          "(or check, control) kept")


def add_notify_commands(commands: "argparse._SubParsersAction") -> None:
    """Register `notify` with its actions on the top-level subparsers."""
    notify = commands.add_parser("notify", help="alert delivery: test the configured receivers",
                                 description="Alert delivery to webhooks, Alertmanager, chat robots and PagerDuty.")
    actions = notify.add_subparsers(dest="notify_action", metavar="ACTION")
    test = actions.add_parser("test", help="send a test alert to every receiver (or one) and print the answers",
                              description="Send a test alert through each configured receiver's real path and "
                                          "print what the receiver answered.")
    test.add_argument("--config", "-c", metavar="FILE", help=CONFIG_HELP + "; its notify: section names the receivers")
    test.add_argument("--receiver", metavar="NAME", help="only this receiver (default: all)")
    test.add_argument("--resolve", action="store_true",
                      help="send the test alert's resolved notification instead (closes the PagerDuty incident "
                           "or Alertmanager alert an earlier test opened)")
    test.add_argument("--json", action="store_true", help="print a JSON list of the receivers' answers")
    test.set_defaults(func=_notify_test)
    notify.set_defaults(func=lambda args: _usage(notify))


def add_control_commands(commands: "argparse._SubParsersAction") -> None:
    """Register `control` with the `npumon` parser."""
    control = commands.add_parser(
        "control", help="fan and power control: status, fan --duty/--auto/--safe, power PROFILE",
        description="Fans and power knobs, through the same safety checks as the daemon's governor. Acts only "
                    "with control.enabled: true in the config; with control.dry_run: true it only says what it "
                    "would do. Exit status: 0 done, 1 refused or failed, 2 bad usage or config.")
    actions = control.add_subparsers(dest="control_command", metavar="ACTION")
    status = actions.add_parser("status", help="the fan driver, the fans now, the daemon, the power profiles")
    add_common(status)
    status.add_argument("--json", action="store_true", help="print one JSON object")
    status.set_defaults(func=_control_status)
    fan = actions.add_parser("fan", help="set a manual duty, hand the fans back to automatic control, or apply "
                                         "the configured safe state")
    add_common(fan)
    which = fan.add_mutually_exclusive_group(required=True)
    which.add_argument("--duty", type=_percent, metavar="N", help="manual duty in percent (not below the floor)")
    which.add_argument("--auto", action="store_true", help="automatic control (the firmware's or chip's own)")
    which.add_argument("--safe", action="store_true",
                       help="the configured safe state (for ExecStopPost=); does nothing when control is off")
    fan.set_defaults(func=_control_fan)
    power = actions.add_parser("power", help="apply a power profile (performance, quiet, or one from the config)")
    add_common(power)
    power.add_argument("profile", metavar="PROFILE", nargs="?", help="the profile to apply (see --list)")
    power.add_argument("--list", action="store_true",
                       help="list the profiles this host's chips can take, built-in and configured; changes nothing")
    power.add_argument("--json", action="store_true", help="with --list: print one JSON object")
    power.set_defaults(func=_control_power)
    control.set_defaults(func=lambda args: _usage(control))


def add_config_commands(commands: "argparse._SubParsersAction") -> None:
    """Register `config check` and `config show` with the `npumon` parser."""
    config = commands.add_parser("config", help="validate the config file, or show the effective config",
                                 description="Validate a config file, or print the config npumon runs with.")
    actions = config.add_subparsers(dest="config_action", metavar="ACTION")
    check = actions.add_parser("check", help="report every problem of a config file, one line each; exit 0 or 2",
                               description="Validate a config file and the rule files it names without running "
                                           "any check: one line per problem, exit 0 when there is none, else 2.")
    check.add_argument("file", nargs="?", metavar="FILE", help=CONFIG_HELP)
    check.add_argument("--config", "-c", metavar="FILE", dest="config_option", help="the same as FILE")
    check.set_defaults(func=_config_check)
    show = actions.add_parser("show", help="print the effective config: the file's values and every default",
                              description="Print the config npumon runs with, defaults filled in; inline "
                                          "secrets are shown as " + MASK + ".")
    show.add_argument("--config", "-c", metavar="FILE", help=CONFIG_HELP)
    show.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    show.set_defaults(func=_config_show)
    config.set_defaults(func=lambda args: _usage(config))


def add_completion_command(commands: "argparse._SubParsersAction") -> None:
    """Register `completion` with the `npumon` parser."""
    completion = commands.add_parser(
        "completion", help="print a shell completion script (bash, zsh, fish)",
        description="Print a completion script generated from npumon's argument parser. bash: "
                    "`npumon completion bash > /etc/bash_completion.d/npumon`, or "
                    "`source <(npumon completion bash)` in ~/.bashrc; zsh: `source <(npumon completion zsh)` "
                    "in ~/.zshrc, after compinit; fish: "
                    "`npumon completion fish > ~/.config/fish/completions/npumon.fish`.")
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete for")
    completion.set_defaults(func=_completion)


def add_manpage_command(commands: "argparse._SubParsersAction") -> None:
    """Register `manpage` with the `npumon` parser."""
    manpage = commands.add_parser("manpage", help="print the npumon(1) man page (roff)",
                                  description="Print the man page generated from npumon's argument parser, "
                                              "e.g. `npumon manpage > /usr/local/share/man/man1/npumon.1`.")
    manpage.set_defaults(func=_manpage)


def add_fleet_command(commands: "argparse._SubParsersAction") -> None:
    """Register `fleet` with the `npumon` parser."""
    fleet = commands.add_parser(
        "fleet", help="the fleet from Prometheus: hosts up and down, worst chips, findings with hints",
        description="Read the fleet from Prometheus's HTTP API (never from the hosts): hosts up and down, the "
                    "worst chips, the active findings with hints from the local rule files. Exit 0 when "
                    "Prometheus was read, 1 when it could not be, 2 on bad usage.")
    fleet.add_argument("--prometheus", required=True, metavar="URL", help="Prometheus base URL, e.g. http://prom:9090")
    fleet.add_argument("--job", action="append", metavar="JOB",
                       help="scrape job(s) of the npumon hosts (default: every job with npumon_build_info)")
    fleet.add_argument("--host-label", default="host", metavar="LABEL",
                       help="target label naming the host (default: host; instance where a series has none)")
    fleet.add_argument("--sort", choices=SORT_KEYS, default="status",
                       help="host order (default: status, worst first: critical, down, warning, info, ok)")
    fleet.add_argument("--top", type=int, default=10, metavar="N", help="worst chips to list (default 10)")
    fleet.add_argument("--no-hints", action="store_true", help="summaries only")
    fleet.add_argument("--json", action="store_true", help="print the npumon.fleet/v1 JSON document")
    fleet.add_argument("--config", "-c", metavar="FILE",
                       help="npumon config whose rule_files and thresholds render the hints (default: built-in)")
    fleet.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS",
                       help="deadline of each Prometheus query (default 10)")
    fleet.add_argument("--ca-file", metavar="FILE", help="CA bundle for an https:// Prometheus with a private CA")
    fleet.set_defaults(func=_fleet)


def add_fleet_sim_command(commands: "argparse._SubParsersAction") -> None:
    """Register `fleet-sim` with the `npumon` parser."""
    sim = commands.add_parser(
        "fleet-sim", help="start a simulated fleet (several hosts and a Prometheus) on this machine",
        description="Start simulated npumon hosts with different scenarios, each on its own port of 127.0.0.1, "
                    "and, if Prometheus is installed, a Prometheus scraping them with the shipped scrape config "
                    "and alert rules. Runs until Ctrl-C.")
    sim.add_argument("--dir", metavar="DIR", help="where configs, state and logs go (default: a new temporary "
                                                   "directory, removed at exit)")
    sim.add_argument("--hosts", type=int, metavar="N",
                     help="N running simulated hosts, the default fleet's kinds in turn (default: the five kinds "
                          "plus one host that is down)")
    sim.add_argument("--base-port", type=int, default=19100, metavar="PORT",
                     help="Prometheus listens on 127.0.0.1:PORT, host K on 127.0.0.1:PORT+K (default 19100)")
    sim.add_argument("--prometheus", metavar="PATH",
                     help="the prometheus executable (default: `prometheus` on PATH; none found: no Prometheus)")
    sim.add_argument("--no-prometheus", action="store_true", help="start only the simulated hosts")
    sim.add_argument("--rules", metavar="FILE", action="append",
                     help="Prometheus alert rule file (repeatable; default: alerts/npumon.rules.yml of this clone)")
    sim.add_argument("--scrape-interval", default="5s", metavar="DURATION",
                     help="Prometheus scrape and rule evaluation interval (default 5s)")
    sim.add_argument("--campaign", metavar="FILE",
                     help="play this fault campaign on --hosts healthy hosts (default: the campaign's `hosts`), "
                          "write the ground truth and the score under --dir, print the score and exit "
                          "(docs/campaign.md)")
    sim.set_defaults(func=_fleet_sim)


# -- option values --------------------------------------------------------------------------------------------

def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help(sys.stderr)
    return USAGE_ERROR


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= 3600:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number of seconds above 0 and at most 3600, got {!r}".format(text))
    return value


def _size(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1048576 <= value <= 1 << 40:
        raise argparse.ArgumentTypeError("must be a whole number of bytes from 1048576 to 2^40, got {!r}".format(text))
    return value


def _parallel(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 64:
        raise argparse.ArgumentTypeError("must be a whole number from 1 to 64, got {!r}".format(text))
    return value


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.5 <= value <= 60:  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number of seconds from 0.5 to 60, got {!r}".format(text))
    return value


def _frames(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000000:
        raise argparse.ArgumentTypeError("must be a whole number from 1, got {!r}".format(text))
    return int(text)


def _time_scale(text: str) -> float:
    try:
        factor = float(text)
    except ValueError:
        factor = float("nan")
    if not (0 < factor <= 100000):  # also refuses nan and inf
        raise argparse.ArgumentTypeError("must be a number above 0 and at most 100000, got {!r}".format(text))
    return factor


def _percent(text: str) -> int:
    if not text.isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError("expected a whole percent 0..100, got {!r}".format(text))
    return int(text)


# -- the commands, imported when one runs ---------------------------------------------------------------------

def _check(args: argparse.Namespace) -> int:
    from .check import cmd_check

    return cmd_check(args)


def _diag(args: argparse.Namespace) -> int:
    from .diag import cmd_diag

    return cmd_diag(args)


def _top(args: argparse.Namespace) -> int:
    from .top import cmd_top

    return cmd_top(args)


def _run(args: argparse.Namespace) -> int:
    # The daemon's start makes ~50,000 objects that live as long as it does (modules, classes, the config, the
    # rules), and the cyclic collector walked them again and again while they were made: about 0.1 s of CPU per
    # start. It is off until the daemon has started, which then collects once, freezes them and turns it back on
    # (daemon/memory.py); on any other way out it is turned back on here.
    gc.disable()
    try:
        from .run import cmd_run

        return cmd_run(args)
    finally:
        gc.enable()


def _scenarios(args: argparse.Namespace) -> int:
    from .run import cmd_scenarios

    return cmd_scenarios(args)


def _events(args: argparse.Namespace) -> int:
    from .events import cmd_events

    return cmd_events(args)


def _ack(args: argparse.Namespace) -> int:
    from .events import cmd_ack

    return cmd_ack(args)


def _notify_test(args: argparse.Namespace) -> int:
    from .notify import cmd_notify_test

    return cmd_notify_test(args)


def _control_status(args: argparse.Namespace) -> int:
    from .control import cmd_status

    return cmd_status(args)


def _control_fan(args: argparse.Namespace) -> int:
    from .control import cmd_fan

    return cmd_fan(args)


def _control_power(args: argparse.Namespace) -> int:
    from .control import cmd_power

    return cmd_power(args)


def _config_check(args: argparse.Namespace) -> int:
    from .config import cmd_config_check

    return cmd_config_check(args)


def _config_show(args: argparse.Namespace) -> int:
    from .config import cmd_config_show

    return cmd_config_show(args)


def _completion(args: argparse.Namespace) -> int:
    from .completion import cmd_completion

    return cmd_completion(args, build_parser)


def _manpage(args: argparse.Namespace) -> int:
    from .manpage import cmd_manpage

    return cmd_manpage(args, build_parser)


def _fleet(args: argparse.Namespace) -> int:
    from ..fleet.cli import cmd_fleet

    return cmd_fleet(args)


def _fleet_sim(args: argparse.Namespace) -> int:
    from ..sim.fleet import cmd_fleet_sim

    return cmd_fleet_sim(args)
