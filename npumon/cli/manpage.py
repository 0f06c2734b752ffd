"""`npumon manpage`: the npumon(1) man page in roff, generated from the argument parser.

The packaging build (setup.py) writes it to share/man/man1/npumon.1, so `man npumon` describes the
installed commands and options exactly; `npumon manpage > npumon.1` does the same by hand.
"""

import argparse
import datetime
import os
import sys
from typing import Callable, List

from .. import __version__
from .parser_walk import Command, Option, walk

_FILES = (
    ("/etc/npumon/npumon.yaml", "The config file every command reads when no --config is given (the file the "
                                "systemd unit reads); NPUMON_CONFIG names another. `npumon config check` "
                                "validates it, `npumon config show` prints the effective config."),
    ("/var/lib/npumon", "The state directory (state_dir): event history, notification outbox, caches. A "
                        "simulated host (--simulate) keeps its own in its --sim-state directory instead."),
)
_EXIT = ("check and diag: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the Nagios plugin convention). Every other command: "
         "0 success, 1 refused or failed (control, notify test), 2 bad usage or bad config, with one line.")


def cmd_manpage(args: argparse.Namespace, build_parser: Callable[[], argparse.ArgumentParser]) -> int:
    sys.stdout.write(man_page(build_parser()))
    return 0


def man_page(parser: argparse.ArgumentParser, date: str = "") -> str:
    """The whole page. `date` (YYYY-MM-DD) defaults to SOURCE_DATE_EPOCH or today, for reproducible builds."""
    commands = walk(parser)
    top, rest = commands[0], commands[1:]
    lines = ['.TH NPUMON 1 "{}" "npumon {}" "User Commands"'.format(date or _build_date(), _escape(__version__)),
             ".SH NAME", "npumon \\- " + _escape(top.description or "monitoring and health checks for Ascend NPU hosts"),
             ".SH SYNOPSIS"]
    for command in rest:
        if not command.subcommands:
            tail = _usage_tail(command)
            lines += [".B " + _escape(command.name)] + ([_escape(tail)] if tail else []) + [".br"]
    lines += [".SH DESCRIPTION", _escape(parser.description or ""), ".SH OPTIONS"]
    lines += _options(top.options)
    lines.append(".SH COMMANDS")
    for command in rest:
        lines += [".SS " + _escape(command.name), _escape(command.description or command.help)]
        if command.subcommands:
            lines += [".PP", _escape("Actions: " + ", ".join(command.subcommands) + ".")]
        lines += _options(command.positionals + command.options)
    lines += [".SH FILES"]
    for path, text in _FILES:
        lines += [".TP", ".I " + _escape(path), _escape(text)]
    lines += [".SH ENVIRONMENT", ".TP", ".B NPUMON_CONFIG",
              _escape("The config file read when no --config is given (default /etc/npumon/npumon.yaml)."),
              ".SH EXIT STATUS", _escape(_EXIT),
              ".SH SEE ALSO", _escape("npu-smi(1); the documentation in docs/ of the npumon sources.")]
    return "\n".join(lines) + "\n"


def _options(options: List[Option]) -> List[str]:
    lines: List[str] = []
    for option in options:
        if option.flags == ("-h", "--help"):
            continue
        lines += [".TP", _term(option), _escape(option.help or "")]
        if option.choices:
            lines.append(_escape("One of: " + ", ".join(option.choices) + "."))
    return lines


def _term(option: Option) -> str:
    """`.B --flag`, `.BI "--flag " VALUE`, or `.I NAME` for a positional."""
    if not option.flags:
        return ".I " + _escape(option.metavar or option.dest)
    names = ", ".join(option.flags)
    if option.metavar is None:
        return ".B " + _escape(names)
    joiner = "[=" if option.optional_value else " "
    value = option.metavar + ("]" if option.optional_value else "")
    return '.BI "{}{}" "{}"'.format(_escape(names), joiner, _escape(value))


def _usage_tail(command: Command) -> str:
    parts = ["[{}]".format(_flag_usage(option)) for option in command.options if option.flags != ("-h", "--help")]
    parts += [("[{}]" if positional.optional_value else "{}").format(positional.metavar or positional.dest)
              for positional in command.positionals]
    return " ".join(parts)


def _flag_usage(option: Option) -> str:
    flag = max(option.flags, key=len)  # the long form says what it is
    if option.metavar is None:
        return flag
    return flag + ("[={}]" if option.optional_value else " {}").format(option.metavar)


def _escape(text: str) -> str:
    """Plain text as roff: backslashes and hyphens escaped, no line starting with a control character."""
    text = " ".join(text.split()).replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text if text.startswith((".", "'")) else text


def _build_date() -> str:
    epoch = os.environ.get("SOURCE_DATE_EPOCH")
    seconds = int(epoch) if epoch and epoch.isdigit() else None
    return datetime.datetime.fromtimestamp(seconds, datetime.timezone.utc).strftime("%Y-%m-%d") if seconds is not None \
        else datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
