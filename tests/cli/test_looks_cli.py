"""`check` and `events` for a person at a terminal: colour (never for NO_COLOR, TERM=dumb or a pipe), and
`check`'s table first with the verdict and the perfdata last; Nagios and pipes get what they always got."""

import io
import sys

from npumon.cli.events import render_events
from npumon.cli.main import main
from npumon.outputs.colour import Painter, wanted
from npumon.services.events.store import Event

ESC = "\x1b["


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_colour_is_wanted_only_on_a_terminal_without_no_color():
    assert wanted(Terminal(), {}) and wanted(Terminal(), {"NO_COLOR": ""})  # no-color.org: set and not empty
    assert not wanted(Terminal(), {"NO_COLOR": "1"}) and not wanted(Terminal(), {"TERM": "dumb"})
    assert not wanted(io.StringIO(), {})


def check_at(monkeypatch, stream, *args):
    monkeypatch.setattr(sys, "stdout", stream)
    code = main(["check", "--simulate=overheat"] + list(args))
    return code, stream.getvalue()


def test_check_on_a_terminal_puts_the_table_first_and_the_coloured_verdict_and_perfdata_last(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    monkeypatch.setenv("COLUMNS", "80")
    code, out = check_at(monkeypatch, Terminal())
    lines = out.splitlines()
    assert code == 2 and lines[0].startswith("host ")
    verdict = next(index for index, line in enumerate(lines) if "NPU CRITICAL - " in line)
    assert lines[verdict] == ESC + "1;31mNPU CRITICAL - 2 findings: npu0/chip0 temperature 87 C, at or above the " \
                                   "critical 85 C; npu1/chip0 temperature 83 C, at or above 80 C" + ESC + "0m"
    assert lines[verdict + 1].startswith("perfdata: 'temp_max'=87;80;85;; ") and verdict + 2 < len(lines)
    assert all(len(line) <= 80 for line in lines[verdict + 1:])  # wrapped (COLUMNS)
    assert ESC + "1;31mCRITICAL " in out and ESC + "32mOK" in out  # the findings' severity, a health cell


def test_no_color_and_pipes_get_plain_text_and_nagios_its_status_line_first(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    _, out = check_at(monkeypatch, Terminal())
    assert ESC not in out and out.splitlines()[0].startswith("host ")
    monkeypatch.delenv("NO_COLOR")
    _, piped = check_at(monkeypatch, io.StringIO())
    assert ESC not in piped
    assert piped.splitlines()[0].startswith("NPU CRITICAL - 2 findings: ") and " | 'temp_max'=87;80;85;; " in piped


def test_events_colour_their_severity_when_painted():
    events = [Event(1, 1.7e9, "finding_fired", "npu0/chip0", "critical", "temperature-critical: hot", {}),
              Event(2, 1.7e9, "finding_resolved", "npu0/chip0", "info", "temperature-critical resolved", {})]
    plain, painted = render_events(events), render_events(events, Painter(True))
    assert ESC not in plain and painted.replace(ESC + "1;31m", "").replace(ESC + "36m", "").replace(
        ESC + "1m", "").replace(ESC + "0m", "") == plain
    assert ESC + "1;31mcritical" in painted and ESC + "36minfo" in painted
