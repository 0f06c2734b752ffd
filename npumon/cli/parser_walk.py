"""The `npumon` argument parser as data: every command path with its options, positionals and subcommands.

Shell completion (completion.py) and the man page (manpage.py) are generated from this, so a new command
or option appears in both without an edit there. Pure: reads the parser, prints nothing.
"""

import argparse
from dataclasses import dataclass, field
from typing import List, Optional, Tuple


@dataclass(frozen=True)
class Option:
    flags: Tuple[str, ...]  # "-c", "--config"
    help: str
    metavar: Optional[str]  # None: a flag that takes no value
    choices: Tuple[str, ...] = ()
    optional_value: bool = False  # nargs="?": `--simulate` or `--simulate=SCENARIO`
    dest: str = ""


@dataclass(frozen=True)
class Command:
    path: Tuple[str, ...]  # () for `npumon` itself, ("control", "fan") for `npumon control fan`
    help: str  # the one line in the parent's list
    description: str
    options: List[Option] = field(default_factory=list)
    positionals: List[Option] = field(default_factory=list)
    subcommands: List[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return " ".join(("npumon",) + self.path)


def walk(parser: argparse.ArgumentParser) -> List[Command]:
    """Every command, parents before their subcommands, in the order they were registered."""
    found: List[Command] = []
    _walk(parser, (), "", found)
    return found


def _walk(parser: argparse.ArgumentParser, path: Tuple[str, ...], help_line: str, found: List[Command]) -> None:
    options: List[Option] = []
    positionals: List[Option] = []
    children: List[Tuple[str, argparse.ArgumentParser, str]] = []
    for action in parser._actions:  # argparse has no public walk; _actions is stable since Python 3.2
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            children.extend((name, sub, helps.get(name, "")) for name, sub in action.choices.items())
            continue
        if action.help == argparse.SUPPRESS:
            continue
        entry = _option(action, parser)
        (options if action.option_strings else positionals).append(entry)
    found.append(Command(path, help_line, parser.description or "", options, positionals,
                         [name for name, _, _ in children]))
    for name, sub, line in children:
        _walk(sub, path + (name,), line, found)


def _option(action: argparse.Action, parser: argparse.ArgumentParser) -> Option:
    takes_value = action.nargs != 0
    metavar = action.metavar if isinstance(action.metavar, str) else None
    if takes_value and metavar is None:
        metavar = action.dest.upper() if action.option_strings else action.dest
    help_text = action.help or ""
    if "%(" in help_text:  # argparse's own substitutions: %(default)s, %(default)g
        help_text = help_text % dict(vars(action), prog=parser.prog)
    return Option(tuple(action.option_strings), help_text, metavar if takes_value else None,
                  tuple(str(choice) for choice in action.choices or ()), action.nargs == "?", action.dest)
