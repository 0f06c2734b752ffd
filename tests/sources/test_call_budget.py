"""The call budget (sources/budget.py): the query tiers' intervals stretched to what the shared call slots give."""

import logging
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from npumon.settings import parse_config
from npumon.model import ChipSample
from npumon.outputs.call_metrics import CallStatsCollector
from npumon.sim import prepare_simulation
from npumon.sources import budget as budget_module
from npumon.sources.budget import BUSY_HIGH, BUSY_LOW, MOST_STRETCH, CallBudget, next_stretch
from npumon.sources.hccn.source import HccnSource
from npumon.sources.npusmi.source import NpuSmiSource
from npumon.sources.runner import CommandResult, CommandRunner


class Clock:
    def __init__(self, now=1_000.0):
        self.now = now

    def __call__(self):
        return self.now


def test_the_stretch_brings_busy_slots_to_the_target_and_comes_back_when_they_are_idle():
    assert next_stretch(1.0, 0.93) == 1.55  # the A3 over npu-smi at the default intervals, one step
    assert next_stretch(1.55, 0.6) == 1.55  # within the band: kept
    assert next_stretch(1.55, BUSY_HIGH) == 1.55 and next_stretch(1.55, BUSY_LOW) == 1.55
    assert next_stretch(1.55, 1.0) == 2.58  # still full: further, the demand was hidden by the full slots
    assert next_stretch(2.0, 0.3) == 1.0  # the calls got quicker: back to the configured intervals
    assert next_stretch(3.0, 0.3) == 1.5
    assert next_stretch(1.0, 0.2) == 1.0  # never below the configured intervals
    assert next_stretch(MOST_STRETCH, 1.0) == MOST_STRETCH  # never past the cap


def test_the_budget_measures_a_window_of_slot_time_and_keeps_the_last_stretch_for_freshness(caplog):
    clock = Clock()
    budget = CallBudget(2, clock=clock, window_seconds=120.0, first_window_seconds=120.0)
    budget.spent(100.0)
    clock.now += 60
    budget.spent(123.0)  # 223 slot-seconds in the first 120 s of 2 slots: 93 % busy
    assert budget.stretch() == 1.0  # the window is not over yet
    clock.now += 60
    with caplog.at_level(logging.INFO, logger=budget_module.__name__):
        assert budget.stretch() == 1.55
    assert budget.state().busy_share == 0.929
    assert "93% busy" in caplog.text and "1.55 times" in caplog.text and "npu_smi_max_concurrent" in caplog.text
    assert budget.freshness_stretch() == 1.55
    clock.now += 120  # an idle window: back to the configured intervals ...
    assert budget.stretch() == 1.0
    assert budget.freshness_stretch() == 1.55  # ... while what was read under the stretch stays fresh as long
    clock.now += 120
    assert budget.freshness_stretch() == 1.0


def test_a_tier_stays_fresh_for_the_stretch_its_next_run_was_paced_with_after_the_stretch_came_down():
    clock = Clock()
    budget = CallBudget(2, clock=clock, window_seconds=120.0, first_window_seconds=120.0)
    budget.spent(240.0)  # a full window: stretch 1.67
    clock.now += 120
    assert budget.stretch("npu-smi:hccs") == 1.67  # hccs's next run in 2 x 1.67 minutes, after the next window
    for _ in range(2):  # two idle windows bring the stretch back to 1 ...
        clock.now += 120
        budget.stretch()
    assert budget.stretch() == 1.0 and budget.freshness_stretch() == 1.0
    assert budget.freshness_stretch("npu-smi:hccs") == 1.67  # ... while hccs still waits for its paced run
    assert budget.stretch("npu-smi:hccs") == 1.0  # it ran, paced at 1 now
    assert budget.freshness_stretch("npu-smi:hccs") == 1.0


def test_the_runner_counts_the_shared_slots_time_and_not_the_main_tables_own_slot():
    def answer(argv, env, timeout_seconds):
        time.sleep(0.02)
        return CommandResult(list(argv), 0, "ok\n", "", 0.02)

    runner = CommandRunner(["npu-smi"], 10, 2, priority_slots=1, spawn=answer)
    spent = []
    runner.budget.spent = spent.append
    runner.run(["info"], priority=True, label="npu-smi")
    assert spent == []
    runner.run(["info", "-t", "power", "-i", "0"], label="npu-smi:power")
    assert len(spent) == 1 and 0.02 <= spent[0] < 5


def stretched(runner, full_windows):
    """The runner's budget after `full_windows` windows whose calls held both slots all the time."""
    clock = Clock()
    runner.budget = CallBudget(2, clock=clock, window_seconds=120.0, first_window_seconds=120.0)
    for _ in range(full_windows):
        runner.budget.spent(240.0)
        clock.now += 120
    return runner.budget.stretch()


def test_a_stretched_npu_smi_query_tier_asks_to_run_later_and_stays_fresh_as_long(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0)
    clock = Clock(1_000_000.0)
    runner = CommandRunner(sim.npu_smi_argv, 10, 2, env=sim.env, spawn=sim.spawn)
    npusmi = NpuSmiSource(runner, clock=clock, intervals={"health": 60.0, "usages": 30.0}, max_age=120.0)
    assert npusmi.poll("npu-smi") is None
    assert npusmi.poll("npu-smi:health") is None  # not stretched: its configured interval
    assert stretched(runner, 2) == 2.78
    assert npusmi.poll("npu-smi") is None  # the main table has a slot of its own: never stretched
    assert npusmi.poll("npu-smi:health") == pytest.approx(60 * 2.78)
    assert npusmi.poll("npu-smi:usages") == pytest.approx(30 * 2.78)
    clock.now += 150  # past max_age and 2 x 30 s, within 2 x 30 s stretched
    npusmi.poll("npu-smi")
    assert npusmi.chips(clock.now, 120)[0].aivector_ratio is not None
    statuses = npusmi.statuses(clock.now)
    assert statuses["npu-smi:usages"].ok and statuses["npu-smi:health"].ok


def test_a_stretched_hccn_tier_asks_to_run_later_and_stays_fresh_as_long():
    def answer(argv, env, timeout_seconds):
        return CommandResult(list(argv), 0, "packet statistics:\nroce_rx_err_pkt_num:0\n", "", 0.01)

    runner = CommandRunner(["npu-smi"], 10, spawn=answer)
    config = parse_config("network:\n  stat_seconds: 60\n").network
    source = HccnSource(config, ["hccn_tool"], runner, 120.0, check_program=False)
    chips = [ChipSample(0, 0, name="910B3", phy_id=0)]
    assert source.poll("hccn:stat", chips) is None
    assert stretched(runner, 2) == 2.78
    assert source.poll("hccn:stat", chips) == pytest.approx(60 * 2.78)
    now = time.time() + 300  # past 2 x 60 s, within 2 x 60 s stretched
    assert source.statuses(now)["hccn:stat"].ok


def test_the_budget_is_on_metrics():
    runner = CommandRunner(["npu-smi"], 10, spawn=lambda argv, env, timeout: CommandResult(argv, 0, "", "", 0.0))
    stretched(runner, 1)
    registry = CollectorRegistry()
    registry.register(CallStatsCollector(lambda: runner.stats, runner.budget.state))
    text = generate_latest(registry).decode()
    assert "npumon_call_slots_busy_ratio 1.0" in text
    assert "npumon_poll_interval_stretch 1.67" in text


@pytest.mark.parametrize("busy", [0.5, 0.7])
def test_slots_within_the_band_keep_the_configured_intervals(busy):
    clock = Clock()
    budget = CallBudget(2, clock=clock, window_seconds=120.0, first_window_seconds=120.0)
    budget.spent(busy * 240)
    clock.now += 120
    assert budget.stretch() == 1.0


def test_a_poll_that_asks_its_own_retry_keeps_it_and_an_unstretched_one_keeps_its_interval():
    from npumon.sources.base import Outcome
    assert Outcome().paced(60.0, 2.5).retry == 150.0
    assert Outcome(retry=5.0).paced(60.0, 2.5).retry == 5.0  # a source's own retry (backoff, waiting) wins
    assert Outcome().paced(60.0, 1.0).retry is None  # not stretched: the scheduler's interval
    assert Outcome().paced(0.0, 3.0).retry is None  # an off tier stays off


def test_a_stretched_tier_has_until_its_stretched_next_run_to_finish(tmp_path, monkeypatch):
    """Its calls may take the stretched interval: cutting them off at the configured one would leave calls out
    (and warn so) on exactly the hosts whose slots are too busy for it."""
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0)
    runner = CommandRunner(sim.npu_smi_argv, 10, 2, env=sim.env, spawn=sim.spawn)
    npusmi = NpuSmiSource(runner, intervals={"usages": 30.0})
    budgets = []
    read_query = npusmi._read_query
    monkeypatch.setattr(npusmi, "_read_query", lambda query, started, budget_seconds=None: (
        budgets.append(budget_seconds), read_query(query, started, budget_seconds))[1])
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:usages")
    assert stretched(runner, 2) == 2.78
    npusmi.poll("npu-smi:usages")
    assert budgets == [30.0, pytest.approx(30 * 2.78)]

    hccn_runner = CommandRunner(["npu-smi"], 10, spawn=lambda argv, env, timeout_seconds: CommandResult(
        list(argv), 0, "packet statistics:\nroce_rx_err_pkt_num:0\n", "", 0.01))
    source = HccnSource(parse_config("network:\n  stat_seconds: 60\n").network, ["hccn_tool"], hccn_runner, 120.0,
                        check_program=False)
    chips = [ChipSample(0, 0, name="910B3", phy_id=0)]
    deadlines = []
    poll_chip = source._poll_chip
    monkeypatch.setattr(source, "_poll_chip", lambda tier, target, commands, deadline, started: (
        deadlines.append(deadline - time.monotonic()), poll_chip(tier, target, commands, deadline, started))[1])
    source.poll("hccn:stat", chips)
    stretched(hccn_runner, 2)
    source.poll("hccn:stat", chips)
    assert 55 < deadlines[0] <= 60 and 60 * 2.78 - 5 < deadlines[1] <= 60 * 2.78


def test_the_first_window_is_short_so_a_start_that_fills_the_slots_is_stretched_within_half_a_minute():
    clock = Clock()
    budget = CallBudget(2, clock=clock)  # the defaults: 30 s, then 120 s windows
    budget.spent(60.0)  # every tier's first poll at once: both slots full for the first 30 s
    clock.now += 30
    assert budget.stretch() == 1.67
    budget.spent(130.0)
    clock.now += 60
    assert budget.stretch() == 1.67  # the next window is a whole one: not over after 60 s
    clock.now += 60
    assert budget.stretch() == 1.67 and budget.state().busy_share == 0.542  # within the band: kept
