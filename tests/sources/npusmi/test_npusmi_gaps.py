"""The npu-smi source never loses a good value to a bad call: a query that times out, is left out by the
tier's budget, dies mid-output or prints fewer lines than before keeps the card's last good values until they
are older than their allowed age -- and a value npu-smi stops printing, or prints as NA, does go away.

npu-smi here is a stand-in executable that answers with the simulator's texts (real formats) and can be
told to print only the first lines of an answer and then die of SIGKILL, the way a crashing npu-smi does.
"""

import logging
import os
import sys

import pytest

from npumon.sim import prepare_simulation
from npumon.sim.npusmi import respond, sim_host
from npumon.sim.state import read_state
from npumon.sources.npusmi.source import NpuSmiSource
from npumon.sources.runner import CommandResult, CommandRunner

MAX_AGE = 120.0
USAGES_3 = ("info", "-t", "usages", "-i", "3")

# Answers `npu-smi ARGS` from answers/<ARGS joined by _>; with a <name>.kill file holding N, it prints the
# first N lines of the answer and kills itself, as npu-smi does when it crashes halfway through.
STAND_IN = """\
import os, signal, sys
answers = os.path.join(os.path.dirname(os.path.abspath(__file__)), "answers")
name = os.path.join(answers, "_".join(sys.argv[1:]))
with open(name) as handle:
    text = handle.read()
if os.path.exists(name + ".kill"):
    with open(name + ".kill") as handle:
        keep = int(handle.read())
    sys.stdout.write("".join(text.splitlines(True)[:keep]))
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)
sys.stdout.write(text)
"""


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


class StandIn:
    """A stand-in npu-smi in a directory: `answer(args, text)` sets what it prints, `crash(args, lines)`
    makes it die after printing that many lines."""

    def __init__(self, directory, answers_from):
        self.answers = directory / "answers"
        self.answers.mkdir(parents=True)
        self.script = directory / "npu-smi"
        self.script.write_text(STAND_IN)
        self.answers_from = answers_from

    def argv(self):
        return [sys.executable, "-I", "-S", str(self.script)]  # -S: no site, the script needs only the stdlib

    def answer(self, args, text=None):
        (self.answers / "_".join(args)).write_text(self.answers_from(list(args)) if text is None else text)

    def crash(self, args, lines):
        (self.answers / ("_".join(args) + ".kill")).write_text(str(lines))

    def recover(self, args):
        os.unlink(str(self.answers / ("_".join(args) + ".kill")))


class Faulty(CommandRunner):
    """The real runner, except that the calls named in `faults` return the CommandResult given for them."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.faults = {}

    def run(self, args, timeout_seconds=None, **options):
        fault = self.faults.get(tuple(args))
        return fault if fault is not None else super().run(args, timeout_seconds, **options)


@pytest.fixture
def host(tmp_path):
    """(NpuSmiSource, Clock, StandIn) for an 8-card Atlas 800I A2 whose stand-in answers the table and usages."""
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0)
    state = read_state(sim.env["NPUMON_SIM_STATE"])
    stand_in = StandIn(tmp_path / "bin", lambda args: respond(args, sim_host(state, 0.0))[0])
    stand_in.answer(["info"])
    for npu in range(8):
        stand_in.answer(["info", "-t", "usages", "-i", str(npu)])
    clock = Clock()
    runner = Faulty(stand_in.argv(), 10, 4, priority_slots=1)
    npusmi = NpuSmiSource(runner, clock=clock, intervals={"usages": 30})
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:usages")
    assert all(chip.aivector_ratio is not None for chip in npusmi.chips(clock.now, MAX_AGE))
    return npusmi, clock, stand_in


def chip(npusmi, clock, npu):
    return {sample.npu: sample for sample in npusmi.chips(clock.now, MAX_AGE)}[npu]


def usages_ok(npusmi, clock):
    return npusmi.statuses(clock.now)["npu-smi:usages"]


def usages_lines(text, leave_out):
    return "".join(line for line in text.splitlines(True) if leave_out not in line)


# -- calls that fail keep the last good values --------------------------------------------------------------

def test_a_timed_out_call_keeps_the_cards_last_values(host):
    npusmi, clock, _ = host
    before = chip(npusmi, clock, 3).aivector_ratio
    npusmi.runner.faults[USAGES_3] = CommandResult(
        ["npu-smi"] + list(USAGES_3), None, "\tAicore Usage Rate(%)", "", 10.0, timed_out=True)
    clock.now += 30
    npusmi.poll("npu-smi:usages")
    assert not usages_ok(npusmi, clock).ok
    assert "npu 3: timed out" in usages_ok(npusmi, clock).error
    assert chip(npusmi, clock, 3).aivector_ratio == before


def test_a_call_the_tier_budget_left_out_keeps_the_cards_last_values(host):
    npusmi, clock, _ = host
    before = chip(npusmi, clock, 3).aivector_ratio
    npusmi.runner.faults[USAGES_3] = CommandResult(
        ["npu-smi"] + list(USAGES_3), None, "", "", 0.0, timed_out=True,
        error="not run: the poll's time budget was used up by earlier calls", started=False)
    clock.now += 30
    npusmi.poll("npu-smi:usages")
    status = usages_ok(npusmi, clock)  # slow is not down: the cards that answered are fresh, card 3 is asked first
    assert status.ok and status.error == "1 of 8 calls left out: the tier did not finish within 30s"
    assert chip(npusmi, clock, 3).aivector_ratio == before
    assert npusmi.runner.stats.snapshot()["npu-smi:usages"].overruns == 1


def test_calls_npumon_s_own_stop_ended_are_no_failure_and_log_nothing_above_debug(host, caplog):
    npusmi, clock, _ = host
    before = chip(npusmi, clock, 3).aivector_ratio
    status = usages_ok(npusmi, clock)
    table = npusmi.statuses(clock.now)["npu-smi"]
    # the table's call killed mid-answer by the stop; the queries' calls refused once it began
    npusmi.runner.faults[("info",)] = CommandResult(["npu-smi", "info"], None, "", "", 0.4, stopped=True)
    npusmi.runner.terminate_all()
    caplog.set_level(logging.DEBUG, logger="npumon")
    clock.now += 1
    npusmi.poll("npu-smi:usages")
    npusmi.poll("npu-smi")
    assert [record.getMessage() for record in caplog.records if record.levelno > logging.DEBUG] == []
    assert usages_ok(npusmi, clock) == status and npusmi.statuses(clock.now)["npu-smi"] == table
    assert chip(npusmi, clock, 3).aivector_ratio == before
    assert npusmi.runner.stats.snapshot()["npu-smi:usages"].overruns == 0


def test_a_query_that_dies_mid_output_is_a_failure_and_keeps_the_last_values(host):
    npusmi, clock, stand_in = host
    before = chip(npusmi, clock, 3)
    # killed after the Aicore line, before Aivector and before the block's closing Chip ID line
    text = (stand_in.answers / "_".join(USAGES_3)).read_text()
    keep = next(number for number, line in enumerate(text.splitlines(), 1) if "Aicore Usage" in line)
    stand_in.crash(USAGES_3, keep)
    clock.now += 30
    npusmi.poll("npu-smi:usages")
    after = chip(npusmi, clock, 3)
    assert (after.aivector_ratio, after.hbm_bandwidth_ratio) == (before.aivector_ratio, before.hbm_bandwidth_ratio)
    status = usages_ok(npusmi, clock)
    assert not status.ok and "npu 3: killed by SIGKILL" in status.error
    stand_in.recover(USAGES_3)
    clock.now += 30
    npusmi.poll("npu-smi:usages")
    assert usages_ok(npusmi, clock).ok


def test_a_table_that_dies_mid_output_does_not_make_cards_forget_their_values(host):
    npusmi, clock, stand_in = host
    text = (stand_in.answers / "info").read_text()
    # the stand-in dies in the middle of the last card's rows: the rows before it parse as a 7-card table
    last_card_row = min(number for number, line in enumerate(text.splitlines(), 1) if line.startswith("| 7 "))
    stand_in.crash(["info"], last_card_row)
    clock.now += 1
    npusmi.poll("npu-smi")
    stand_in.recover(["info"])
    clock.now += 1
    npusmi.poll("npu-smi")
    assert len(npusmi.chips(clock.now, MAX_AGE)) == 8
    assert chip(npusmi, clock, 7).aivector_ratio is not None  # without waiting for the next usages poll
    stand_in.crash(["info"], last_card_row)
    npusmi.poll("npu-smi")
    status = npusmi.statuses(clock.now)["npu-smi"]
    assert not status.ok and "killed by SIGKILL" in status.error
    assert len(npusmi.chips(clock.now, MAX_AGE)) == 8  # the last complete table stays while fresh


# -- outputs that print less than before --------------------------------------------------------------------

def test_a_line_missing_from_one_answer_keeps_its_last_value_until_it_is_too_old(host):
    npusmi, clock, stand_in = host
    before = chip(npusmi, clock, 3)
    full = (stand_in.answers / "_".join(USAGES_3)).read_text()
    stand_in.answer(USAGES_3, usages_lines(full, "Aivector"))
    clock.now += 30
    npusmi.poll("npu-smi:usages")
    assert usages_ok(npusmi, clock).ok
    after = chip(npusmi, clock, 3)
    assert after.aivector_ratio == before.aivector_ratio  # a good value is not erased by a shorter answer
    assert after.hbm_bandwidth_ratio == before.hbm_bandwidth_ratio
    # ... but one npu-smi no longer prints does not live forever: it goes once older than its allowed age
    for _ in range(4):
        clock.now += 30
        npusmi.poll("npu-smi")
        npusmi.poll("npu-smi:usages")
    after = chip(npusmi, clock, 3)
    assert after.aivector_ratio is None
    assert after.hbm_bandwidth_ratio is not None  # printed on every poll: fresh


def test_a_value_printed_as_NA_is_null_at_once(host):
    npusmi, clock, stand_in = host
    full = (stand_in.answers / "_".join(USAGES_3)).read_text()
    line = next(line for line in full.splitlines() if "Aivector" in line)
    stand_in.answer(USAGES_3, full.replace(line, line.rsplit(":", 1)[0] + ": NA"))
    clock.now += 30
    npusmi.poll("npu-smi:usages")
    assert usages_ok(npusmi, clock).ok
    assert chip(npusmi, clock, 3).aivector_ratio is None  # npu-smi said "no value": that is the reading
    assert chip(npusmi, clock, 2).aivector_ratio is not None


def test_a_card_that_really_leaves_the_table_forgets_its_values(host):
    npusmi, clock, stand_in = host
    full = (stand_in.answers / "info").read_text()
    # a complete table (the process exits normally) without card 7: the card is gone, and so are its values
    rows = full.splitlines(True)
    first = min(index for index, line in enumerate(rows) if line.startswith("| 7 "))
    stand_in.answer(["info"], "".join(rows[:first] + rows[first + 3:]))
    clock.now += 1
    npusmi.poll("npu-smi")
    assert sorted(sample.npu for sample in npusmi.chips(clock.now, MAX_AGE)) == list(range(7))
    stand_in.answer(["info"])
    clock.now += 1
    npusmi.poll("npu-smi")
    assert chip(npusmi, clock, 7).aivector_ratio is None  # back, but not with values from before it left
