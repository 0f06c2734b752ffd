"""The npu-smi source against the simulator: merging, unsupported queries, freshness of slow tiers."""

import pytest

from npumon.sim import prepare_simulation
from npumon.sources.npusmi.source import NpuSmiSource
from npumon.sources.runner import CommandRunner


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


@pytest.fixture
def source(tmp_path):
    def make(scenario="ecc-rising", intervals=None, product=None):
        sim = prepare_simulation(str(tmp_path / scenario), scenario, product=product, time_scale=0)
        clock = Clock()
        runner = CommandRunner(sim.npu_smi_argv, 10, 2, env=sim.env, spawn=sim.spawn)  # simulator in-process
        return NpuSmiSource(runner, clock=clock, intervals=intervals), clock
    return make


def test_query_values_merge_into_the_table_chips(source):
    npusmi, clock = source()
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:ecc")
    npusmi.poll("npu-smi:usages")
    chips = {chip.key: chip for chip in npusmi.chips(clock.now, 120)}
    assert len(chips) == 8
    assert chips[(2, 0)].ecc_double_bit_errors == 1  # the scenario's failing chip
    assert chips[(0, 0)].ecc_double_bit_errors == 0
    assert chips[(0, 0)].aivector_ratio is not None
    assert chips[(0, 0)].temperature_celsius is not None  # from the main table


def test_a_card_level_board_answer_reaches_every_chip_of_the_card(source):
    npusmi, clock = source("board-incompatible", product="atlas-a3")  # 2 chips per card; card 1 is NOK
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:board")
    chips = {chip.key: chip for chip in npusmi.chips(clock.now, 120)}
    assert len(chips) == 16
    assert all(chip.firmware_version for chip in chips.values())
    assert {key for key, chip in chips.items() if chip.compatibility == "NOK"} == {(1, 0), (1, 1)}


def test_a_slow_tier_stays_fresh_until_its_next_poll_is_overdue(source):
    npusmi, clock = source(intervals={"ecc": 300, "usages": 30})
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:ecc")
    npusmi.poll("npu-smi:usages")
    clock.now += 200  # past max_age (120), before the ecc tier's second poll is overdue (2 x 300)
    npusmi.poll("npu-smi")
    chip = npusmi.chips(clock.now, 120)[0]
    assert chip.ecc_double_bit_errors is not None
    assert chip.aivector_ratio is None  # usages (every 30 s) is overdue: dropped, not served stale
    statuses = npusmi.statuses(clock.now)
    assert statuses["npu-smi:ecc"].ok
    assert not statuses["npu-smi:usages"].ok
    assert statuses["npu-smi:usages"].error == "stale: last success 200s ago (max age 120s)"
    clock.now += 500
    statuses = npusmi.statuses(clock.now)
    assert statuses["npu-smi:ecc"].error == "stale: last success 700s ago (max age 600s)"


def test_unsupported_query_is_remembered_and_not_asked_again(source):
    npusmi, clock = source("unsupported")
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:usages")
    status = npusmi.statuses(clock.now)["npu-smi:usages"]
    assert status.ok and status.unsupported
    assert "does not support querying usages" in status.error
    calls = []
    npusmi.runner.run = lambda *args, **kwargs: calls.append(args)  # must not be called again
    npusmi.poll("npu-smi:usages")
    assert calls == []


def test_queries_pause_while_the_main_table_cannot_be_read(source):
    npusmi, clock = source("garbage")
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:ecc")
    statuses = npusmi.statuses(clock.now)
    assert not statuses["npu-smi"].ok and statuses["npu-smi"].error.startswith("unreadable npu-smi info output")
    assert statuses["npu-smi:ecc"].error == "skipped while the main table cannot be read"
    assert npusmi.chips(clock.now, 120) == []


def test_a_query_poll_is_news_for_the_rules_only_when_a_value_moved(tmp_path):
    """The daemon judges the rules soon after an ECC or health poll only when it read something other than the
    last time (Outcome.changed): the same counts again would give the same findings."""
    from npumon.sim.simulation import set_scenario

    sim = prepare_simulation(str(tmp_path / "sim"), "ecc-rising", time_scale=0)
    npusmi = NpuSmiSource(CommandRunner(sim.npu_smi_argv, 10, 2, env=sim.env, spawn=sim.spawn), clock=Clock())
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:ecc")
    assert npusmi.recorder.take_news("npu-smi:ecc") == (True, True)
    npusmi.poll("npu-smi:ecc")
    assert npusmi.recorder.take_news("npu-smi:ecc") == (False, False)  # frozen time: the same counts
    set_scenario(str(tmp_path / "sim"), "healthy")  # npu2's double-bit error is gone
    npusmi.poll("npu-smi:ecc")
    assert npusmi.recorder.take_news("npu-smi:ecc") == (False, True)
