"""Usage errors: a Nagios plugin's is UNKNOWN (exit 3, one line on stdout); no command takes an abbreviation."""

import argparse

import pytest

from npumon.cli.common import CommandParser, nagios_usage
from npumon.cli.main import build_parser, main
from npumon.cli.parser_walk import walk


def _exit(capsys, *args):
    """(exit code, stdout, stderr) of `npumon ARGS` in this process, argparse's SystemExit included."""
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("args,says", [
    (["check", "--npu", "2"], "unrecognized arguments: --npu 2"),
    (["check", "--timeout", "abc"], "--timeout: must be a number of seconds above 0"),
    (["check", "--simulate", "--timeout", "0"], "--timeout: must be a number of seconds above 0"),
    (["check", "--log-level", "loud"], "--log-level: invalid choice"),
    (["check", "--simulate", "--time", "5"], "unrecognized arguments: --time 5"),  # no abbreviation of --timeout
    (["check", "extra"], "unrecognized arguments: extra"),
])
def test_a_usage_error_of_check_is_one_unknown_line(capsys, args, says):
    code, out, err = _exit(capsys, *args)
    assert code == 3 and err == "" and len(out.splitlines()) == 1, (code, out, err)
    assert out.startswith("NPU UNKNOWN - npumon check: ") and says in out


@pytest.mark.parametrize("args,says", [
    (["diag", "--simulate"], "the following arguments are required: -r/--level"),
    (["diag", "-r", "7", "--simulate"], "argument -r/--level: invalid choice: 7"),
    (["diag", "-r", "1", "--timeout", "abc"], "--timeout: must be a number of seconds above 0"),
])
def test_a_usage_error_of_diag_is_one_unknown_line(capsys, args, says):
    code, out, err = _exit(capsys, *args)
    assert code == 3 and err == "" and len(out.splitlines()) == 1, (code, out, err)
    assert out.startswith("NPU UNKNOWN - npumon diag: ") and says in out


@pytest.mark.parametrize("args", [["fleet", "--prometheus", "http://p:9090", "--host", "x"],
                                  ["events", "--sinc", "1h"], ["run", "--simulate", "--liste", ":0"]])
def test_an_abbreviated_option_is_refused_not_taken_for_another(capsys, args):
    code, out, err = _exit(capsys, *args)
    assert code == 2 and out == "" and "unrecognized arguments: " + args[-2] in err


def test_no_parser_of_npumon_accepts_abbreviations():
    parsers, visited = [build_parser()], 0
    while parsers:
        parser = parsers.pop()
        visited += 1
        assert isinstance(parser, CommandParser) and parser.allow_abbrev is False, parser.prog
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                parsers.extend(action.choices.values())
    assert visited == len(walk(build_parser()))  # every command, not only the top


def test_the_nagios_marker_is_a_shared_helper_another_command_can_use(capsys):
    parser = CommandParser(prog="npumon diag")
    nagios_usage(parser)
    parser.add_argument("--level", type=int)
    with pytest.raises(SystemExit) as exit:
        parser.parse_args(["--level", "x"])
    assert exit.value.code == 3
    assert capsys.readouterr().out.startswith("NPU UNKNOWN - npumon diag: argument --level: invalid int value")
