"""One malformed row of the main table loses its chip, not the host: the parser's skip_bad_rows mode, and the
npu-smi source that reports the table as degraded (up, with the bad row named) instead of down."""

import dataclasses
import os
import re

import pytest

from npumon.model import HostSample, Snapshot
from npumon.outputs.report import nagios_line, overall_status
from npumon.sim import prepare_simulation
from npumon.sim.inprocess import run_in_process
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.npusmi.source import NpuSmiSource
from npumon.sources.npusmi.table import parse_info
from npumon.sources.runner import CommandRunner
from paths import FIXTURES
from simulated_pass import judged_pass

B3 = "info_910b3_8npu_v23.0.7.txt"  # 8 cards, one chip each
A3 = "info_a3_910-93_4chips_proc_v25.2.0_fixture.txt"  # 2 cards, two chips each, a process table


def load_capture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read().split("# ---\n", 1)[1]


def ids(table):
    return [(chip.npu, chip.chip) for chip in table.chips]


# The malformed rows of test_npusmi_table.py's strict tests, and a second row cut short mid-table.
BAD_ROWS = [
    ("102.8       55", "102.8       hot", 0, "expected a number, got 'hot'"),
    ("0000:C2:00.0", "0000:ZZ:00.0", 1, "expected a PCIe bus id"),
    ("3334 / 65536         |\n+===========================+===============+==========================="
     "=========================+\n| 3 ", "3334 / 65536         |\n+===========================+===============+==="
     "=================================================+\n| x ", 3, "expected an integer, got 'x'"),
    ("0    / 0          3338 / 65536", "0    / 0   7      3338 / 65536", 0, "does not fit its header"),
    ("| 0                         | 0000:01:00.0  | 0           0    / 0          3334 / 65536         |",
     "| 0                         | 0000:01:00.0  | 0           0    / 0    ", 4, "does not fit its header"),
]


@pytest.mark.parametrize("old, new, card, reason", BAD_ROWS)
def test_a_malformed_chip_row_loses_that_chip_only(old, new, card, reason):
    text = load_capture(B3)
    assert text.count(old) >= 1
    broken = text.replace(old, new, 1)
    with pytest.raises(NpuSmiParseError):
        parse_info(broken)  # the strict reading (captures, fan control) still refuses it
    table = parse_info(broken, skip_bad_rows=True)
    assert ids(table) == [(npu, 0) for npu in range(8) if npu != card]
    full = parse_info(text)
    assert table.chips == tuple(chip for chip in full.chips if chip.npu != card)  # the others are whole
    assert len(table.problems) == 1 and reason in table.problems[0]
    # the chip is still there, only unreadable: its bus id is kept where its rows still show it
    bus_id = next(chip.bus_id for chip in full.chips if chip.npu == card)
    assert table.unreadable_chips == ((bus_id if bus_id in broken else None),)
    if card != 3:  # the card id itself is what is broken there
        assert table.problems[0].startswith("npu {}: ".format(card))


def test_a_chip_without_its_second_row_loses_that_chip_only():
    lines = load_capture(B3).splitlines(keepends=True)
    assert "0000:C1:00.0" in lines[8]
    del lines[8]
    table = parse_info("".join(lines), skip_bad_rows=True)
    assert ids(table) == [(npu, 0) for npu in range(1, 8)]
    assert table.unreadable_chips == (None,)  # the row with its bus id is the one gone
    assert table.problems == ("npu 0: npu-smi main table: a chip has no second row before '+" + "=" * 27
                              + "+" + "=" * 15 + "+" + "=" * 52 + "+'",)


def test_two_chips_of_one_card_are_read_apart():
    text = load_capture(A3).replace("10568/ 65536", "10568/ 65#36")  # npu 1 chip 1
    table = parse_info(text, skip_bad_rows=True)
    assert ids(table) == [(0, 0), (0, 1), (1, 0)]
    assert table.problems[0].startswith("npu 1: ")
    assert [process.pid for process in table.processes] == [990711]


def test_a_malformed_process_row_loses_that_row_only():
    text = load_capture(A3).replace("| 990711        |", "| 99#711        |")
    table = parse_info(text, skip_bad_rows=True)
    assert len(table.chips) == 4 and table.processes == ()
    assert len(table.problems) == 1 and "99#711" in table.problems[0]


def test_a_whole_table_reads_the_same_either_way():
    for name in (B3, A3):
        strict, lenient = parse_info(load_capture(name)), parse_info(load_capture(name), skip_bad_rows=True)
        assert lenient == dataclasses.replace(strict, problems=()) and lenient.problems == ()


# --- the source -------------------------------------------------------------------------------


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


class BreakingTable:
    """The simulated npu-smi, whose main table can be given a corrupt row or cut short: a stand-in for a
    misbehaving npu-smi."""

    def __init__(self):
        self.edit = None

    def __call__(self, argv, env, timeout_seconds):
        result = run_in_process(argv, env, timeout_seconds)
        if argv[-1] == "info" and self.edit is not None:
            result = dataclasses.replace(result, stdout=self.edit(result.stdout))
        return result


def corrupt_card(card):
    def edit(text):
        lines = text.split("\n")
        row = next(index for index, line in enumerate(lines) if line.startswith("| {} ".format(card)))
        lines[row] = lines[row].replace(" OK ", " O| ", 1)  # one cell too many
        return "\n".join(lines)
    return edit


@pytest.fixture
def npusmi(tmp_path):
    sim = prepare_simulation(str(tmp_path), "ecc-rising", time_scale=0)  # npu 2 has a double-bit error
    spawn = BreakingTable()
    clock = Clock()
    source = NpuSmiSource(CommandRunner(sim.npu_smi_argv, 10, 2, env=sim.env, spawn=spawn), clock=clock)
    return source, spawn, clock


def test_a_corrupt_row_leaves_the_table_up_and_degraded_and_keeps_that_chips_values(npusmi):
    source, spawn, clock = npusmi
    source.poll("npu-smi")
    source.poll("npu-smi:ecc")
    assert {chip.key: chip for chip in source.chips(clock.now)}[(2, 0)].ecc_double_bit_errors == 1
    spawn.edit = corrupt_card(2)
    clock.now += 15
    source.poll("npu-smi")
    status = source.statuses(clock.now)["npu-smi"]
    assert status.ok and status.degraded and status.to_json()["degraded"] is True
    assert status.error.startswith("degraded: 1 unreadable row(s) left out, 7 chips read; npu 2: npu-smi main "
                                   "table row does not fit its header: '| 2 ")
    assert sorted(chip.npu for chip in source.chips(clock.now)) == [0, 1, 3, 4, 5, 6, 7]
    spawn.edit = None  # the row reads again: the chip comes back with its ECC values, which did not leave
    clock.now += 15
    source.poll("npu-smi")
    status = source.statuses(clock.now)["npu-smi"]
    assert status.ok and not status.degraded and status.error is None
    assert {chip.key: chip for chip in source.chips(clock.now)}[(2, 0)].ecc_double_bit_errors == 1


def test_a_table_cut_mid_line_is_refused_whole(npusmi):
    source, spawn, clock = npusmi
    spawn.edit = lambda text: text[:text.index("| 5 ") + 30]
    source.poll("npu-smi")
    status = source.statuses(clock.now)["npu-smi"]
    assert not status.ok and not status.degraded
    assert status.error.startswith("unreadable npu-smi info output: it stops mid-line after ")
    assert source.chips(clock.now) == []


def test_a_table_of_bad_rows_only_is_down(npusmi):
    source, spawn, clock = npusmi
    spawn.edit = lambda text: "\n".join(corrupt_card(card)(line) if line.startswith("| {} ".format(card)) else line
                                        for line in text.split("\n") for card in [line[2:3]])
    source.poll("npu-smi")
    status = source.statuses(clock.now)["npu-smi"]
    assert not status.ok and status.error.startswith("unreadable npu-smi info output: npu 0: ")


def test_a_degraded_table_makes_the_check_warn_and_say_why(npusmi):
    # A chip whose row is unreadable went unchecked: a Nagios check must not say OK for the host.
    source, spawn, clock = npusmi
    spawn.edit = corrupt_card(2)
    source.poll("npu-smi")
    snapshot = Snapshot(clock.now, HostSample(hostname="h"), source.chips(clock.now), source.statuses(clock.now))
    assert overall_status(snapshot, []) == "warning"
    line = nagios_line(snapshot, [], {})
    assert line.startswith("NPU WARNING - npu-smi table degraded: 1 unreadable row(s) left out, 7 chips read; npu 2")
    spawn.edit = None
    clock.now += 15
    source.poll("npu-smi")
    snapshot = Snapshot(clock.now, HostSample(hostname="h"), source.chips(clock.now), source.statuses(clock.now))
    assert overall_status(snapshot, []) == "ok"
    assert nagios_line(snapshot, [], {}).startswith("NPU OK - 8 chips OK")


# --- the chip count: an unreadable row is a degraded read of its chip, not a chip gone ---------------------


def breaking(edit):
    """judged_pass's wrap_spawn: the simulator with `edit` applied to its main table."""
    def wrap(spawn):
        table = BreakingTable()
        table.edit = edit
        return table
    return wrap


def drop_card(card):
    def edit(text):
        lines = text.split("\n")
        row = next(index for index, line in enumerate(lines) if line.startswith("| {} ".format(card)))
        return "\n".join(lines[:row] + lines[row + 3:])  # its two rows and the border below them
    return edit


def test_an_unreadable_row_is_counted_as_a_chip_there_not_a_missing_one(tmp_path):
    snapshot, findings = judged_pass(tmp_path, "healthy", wrap_spawn=breaking(corrupt_card(2)))
    assert sorted(chip.npu for chip in snapshot.chips) == [0, 1, 3, 4, 5, 6, 7]
    assert snapshot.sources["npu-smi"].degraded
    found = snapshot.host.extra["chip_count"]
    assert found["pci"] == 8  # the card's bus id is still in its row: the PCI comparison holds
    assert (found["listed"], found["missing"], found["unreadable"], found["unlisted"]) == (8, 0, 1, [])
    assert found["problem"] == "1 chip row(s) of npu-smi's table unreadable, not missing"
    assert "chips-missing" not in {finding.rule for finding in findings}


def test_an_unreadable_row_without_its_bus_id_is_not_a_missing_chip_either(tmp_path):
    def edit(text):
        text = corrupt_card(2)(text)
        bus_id = re.search(r"\| 0\s+\| (\S+)", text.split("| 2 ", 1)[1]).group(1)  # card 2's second row
        return text.replace(bus_id, "0000:ZZ:00.0")
    snapshot, findings = judged_pass(tmp_path, "healthy", wrap_spawn=breaking(edit))
    found = snapshot.host.extra["chip_count"]
    assert (found["listed"], found["missing"], found["unreadable"]) == (8, 0, 1)
    assert "chips-missing" not in {finding.rule for finding in findings}


def test_a_chip_gone_from_a_readable_table_is_still_missing(tmp_path):
    snapshot, findings = judged_pass(tmp_path, "healthy", wrap_spawn=breaking(drop_card(2)))
    assert not snapshot.sources["npu-smi"].degraded
    found = snapshot.host.extra["chip_count"]
    assert (found["listed"], found["missing"], found["unreadable"]) == (7, 1, 0)
    assert [finding.summary for finding in findings if finding.rule == "chips-missing"] == [
        "1 NPU chip(s) missing: npu-smi lists 7 of 8 chips; on the PCI bus but not in npu-smi's table: {}".format(
            found["unlisted"][0])]
