"""The identity tier against the simulator (`info -m`, then `-t board -i N -c C` per chip), its cache file,
and the parsers of the values only npu-exporter's families need, on real captures."""

import json
import os

import pytest

from npumon.settings import parse_config
from npumon.sim import prepare_simulation
from npumon.sources.npusmi import extras
from npumon.sources.npusmi.common import NpuSmiParseError
from npumon.sources.npusmi.identity import CACHE_FILE, IdentityCache
from npumon.sources.npusmi.source import QUERY_PARSERS, NpuSmiSource, query_intervals
from npumon.sources.runner import CommandRunner
from paths import FIXTURES


class Clock:
    def __init__(self, now=1_000_000.0):
        self.now = now

    def __call__(self):
        return self.now


def capture(name):
    with open(os.path.join(FIXTURES, name), encoding="utf-8") as handle:
        return handle.read().split("# ---\n", 1)[1]


@pytest.fixture
def make(tmp_path):
    def build(product="atlas-800i-a2", quick_pass=False, cache_dir=None):
        sim = prepare_simulation(str(tmp_path / "sim-{}".format(product)), "healthy", product=product, time_scale=0)
        runner = CommandRunner(sim.npu_smi_argv, 10, 2, env=sim.env, spawn=sim.spawn)  # simulator in-process
        cache = IdentityCache(str((cache_dir or tmp_path) / CACHE_FILE))
        clock = Clock()
        return NpuSmiSource(runner, clock=clock, intervals={"identity": 3600}, quick_pass=quick_pass,
                            identity_cache=cache), clock
    return build


def test_the_910b_table_prints_no_ids_and_the_identity_tier_fills_them(make):
    npusmi, clock = make()
    npusmi.poll("npu-smi")
    assert {chip.device_id for chip in npusmi.chips(clock.now)} == {None}  # what issue 15 saw on /status
    # the daemon's first identity poll reads info -m alone, and asks for the die-id sweep at once; until it
    # has run the chips say their identity is pending (the npu-exporter compatible series wait for it)
    assert npusmi.poll("npu-smi:identity") == 1.0
    assert [(chip.device_id, chip.vdie_id, chip.extra.get("identity_pending"))
            for chip in npusmi.chips(clock.now)] == [(n, None, True) for n in range(8)]
    assert npusmi.poll("npu-smi:identity") is None
    chips = npusmi.chips(clock.now)
    assert not any("identity_pending" in chip.extra for chip in chips)
    assert [chip.device_id for chip in chips] == list(range(8))
    assert all(chip.phy_id is None for chip in chips)
    assert len({chip.vdie_id for chip in chips}) == 8
    assert {chip.model_name for chip in chips} == {"910B3-Ascend-V1"}
    assert npusmi.statuses(clock.now)["npu-smi:identity"].ok


def test_a3_ids_come_from_the_mapping_with_its_phy_ids(make):
    npusmi, clock = make("atlas-a3")
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:identity")
    npusmi.poll("npu-smi:identity")
    chips = npusmi.chips(clock.now)
    assert [(chip.npu, chip.chip, chip.device_id, chip.phy_id) for chip in chips[:3]] == [
        (0, 0, 0, 0), (0, 1, 1, 1), (1, 0, 2, 2)]
    assert all(chip.vdie_id for chip in chips)


def test_the_950_refuses_c_and_its_first_poll_asks_each_card_again_at_once(make):
    """npu-smi on a 950 takes no -c: the same poll asks the card-level form, so one pass (npumon check) has
    every chip's die id, voltage and health codes, and later polls ask the card-level form only."""
    npusmi, clock = make("atlas-350")
    calls = []
    run = npusmi.runner.run
    npusmi.runner.run = lambda args, **kwargs: calls.append(list(args)) or run(args, **kwargs)
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:identity")  # info -m alone
    chips = npusmi.chips(clock.now)
    assert [(chip.device_id, chip.phy_id) for chip in chips] == [(None, n) for n in range(8)]  # 950: no logic id
    for tier in ("npu-smi:identity", "npu-smi:volt", "npu-smi:health"):
        npusmi.poll(tier)
        assert npusmi.statuses(clock.now)[tier].ok, npusmi.statuses(clock.now)[tier].error
    chips = npusmi.chips(clock.now)
    assert len({chip.vdie_id for chip in chips}) == 8 and all(chip.vdie_id for chip in chips)
    assert {chip.model_name for chip in chips} == {"Ascend950PR-Ascend-V100"}
    assert {chip.voltage_volts for chip in chips} == {0.8}
    chip_calls = [args for args in calls if "-c" in args]
    assert len(chip_calls) == 8  # only the first per-chip poll tried -c, once per chip
    calls.clear()
    npusmi.poll("npu-smi:volt")
    assert sorted(calls) == sorted(["info", "-t", "volt", "-i", str(n)] for n in range(8))


def test_identity_values_outlive_max_age_until_their_hourly_poll_is_overdue(make):
    npusmi, clock = make()
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:identity")
    npusmi.poll("npu-smi:identity")
    clock.now += 3000
    npusmi.poll("npu-smi")
    assert npusmi.chips(clock.now)[0].device_id == 0


def test_a_quick_pass_takes_the_ids_from_the_cache_and_asks_npu_smi_nothing_more(make, tmp_path):
    daemon, clock = make()
    daemon.poll("npu-smi")
    daemon.poll("npu-smi:identity")
    daemon.poll("npu-smi:identity")
    written = json.loads((tmp_path / CACHE_FILE).read_text())
    assert len(written["chips"]) == 8
    assert oct(os.stat(str(tmp_path / CACHE_FILE)).st_mode & 0o777) == "0o644"
    quick, clock = make(quick_pass=True)
    calls = []
    run = quick.runner.run
    quick.runner.run = lambda args, **kwargs: calls.append(list(args)) or run(args, **kwargs)
    quick.poll("npu-smi")
    chips = quick.chips(clock.now)
    assert calls == [["info"]]
    assert [chip.device_id for chip in chips] == list(range(8))
    assert [chip.vdie_id for chip in chips] == [chip.vdie_id for chip in daemon.chips(clock.now)]
    assert "npu-smi:identity" not in [tier.name for tier in quick.tiers() if tier.quick]
    # a daemon that starts with the cache has the ids with its first table and skips the start-up sweep
    restarted, clock = make()
    restarted.poll("npu-smi")
    assert [chip.vdie_id for chip in restarted.chips(clock.now)] == [chip.vdie_id for chip in daemon.chips(clock.now)]
    calls.clear()
    restarted.runner.run = lambda args, **kwargs: calls.append(list(args)) or run(args, **kwargs)
    assert restarted.poll("npu-smi:identity") is None and calls == []
    assert restarted.statuses(clock.now)["npu-smi:identity"].ok


def test_a_cache_of_other_chips_or_bus_ids_is_ignored(make, tmp_path):
    daemon, _ = make()
    daemon.poll("npu-smi")
    daemon.poll("npu-smi:identity")
    daemon.poll("npu-smi:identity")
    path = tmp_path / CACHE_FILE
    data = json.loads(path.read_text())
    data["chips"][3]["bus_id"] = "0000:FF:00.0"  # a card moved: the cache describes another host layout
    path.write_text(json.dumps(data))
    quick, clock = make(quick_pass=True)
    quick.poll("npu-smi")
    assert {chip.device_id for chip in quick.chips(clock.now)} == {None}
    path.write_text("{not json")
    quick, clock = make(quick_pass=True)
    quick.poll("npu-smi")
    assert {chip.vdie_id for chip in quick.chips(clock.now)} == {None}


def test_an_unwritable_state_dir_loses_nothing_but_the_cache(make, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the directory should be")
    npusmi, clock = make(cache_dir=blocker)
    npusmi.poll("npu-smi")
    npusmi.poll("npu-smi:identity")
    npusmi.poll("npu-smi:identity")
    assert npusmi.chips(clock.now)[0].device_id == 0
    assert npusmi.statuses(clock.now)["npu-smi:identity"].ok


def test_compat_only_queries_poll_only_in_compat_mode_unless_set():
    assert query_intervals(parse_config("", "x.yaml"))["volt"] == 0
    compat = query_intervals(parse_config("exporter: {npu_exporter_compat: true}", "x.yaml"))
    assert (compat["common"], compat["memory"], compat["volt"], compat["identity"]) == (120, 300, 600, 3600)
    chosen = query_intervals(parse_config("poll: {volt_seconds: 0, common_seconds: 5}\n"
                                          "exporter: {npu_exporter_compat: true}", "x.yaml"))
    assert (chosen["volt"], chosen["common"]) == (0, 5)


# -- the parsers, on real captures -------------------------------------------------------------------------

def test_chip_board_of_a_real_910a_gives_npu_exporters_vdie_id_and_model_name():
    values = extras.parse_chip_identity(capture("info-t-board-chip_910a_v23.0.5_tabs.txt"), chip=0)
    assert values == {0: {"vdie_id": "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003", "model_name": "910A-Ascend-V1"}}


def test_chip_board_of_a_real_310p_reads_its_die_id_line():
    values = extras.parse_chip_identity(capture("info-t-board-chip_310p_gpustack-docstring.txt"), chip=0)
    assert values == {0: {"vdie_id": "409921D4-2140A100-E54BDDD4-07CC040A-9B00301F", "model_name": "xxx-Ascend-V1"}}


def test_card_level_board_has_no_die_id_but_a_serial_number():
    text = capture("info-t-board_910b_card_v25.5.1_fixture.txt")
    assert extras.parse_chip_identity(text) == {0: {}}
    serial = extras.parse_card_serial(text)[0]["serial_number"]
    assert serial and " " not in serial


def test_card_level_board_of_a_real_910a_without_a_serial_number_reads_as_a_board():
    """npu-smi 23.0.5 prints no Serial Number on a 910A card: the board tier's parsers give nothing for it,
    not an error that would fail the tier on every 910A host."""
    text = capture("info-t-board-card_910a_v23.0.5_tabs.txt")
    assert extras.parse_card_serial(text) == {0: {}}
    assert QUERY_PARSERS["board"](text) == {0: {"firmware_version": "7.1.0.7.220", "driver_version": "23.0.5",
                                                "compatibility": "OK"}}


def test_the_950_boards_ddie_id_stands_in_for_the_vdie_id_it_does_not_print():
    values = extras.parse_chip_identity(capture("doc950_info-t-board.txt"))
    assert values == {0: {"vdie_id": "870408E3-2120D518-77936EE6-80B40A0A-D4100003", "model_name": "xxx-Ascend-xxx"}}
    real = extras.parse_chip_identity(capture("info-t-board_950pr_v25.7.rc1.6_annotated.txt"))
    assert real == {0: {"model_name": "Ascend950PR-Ascend-V100"}}  # this copy of it lost its DDie ID line


@pytest.mark.parametrize("cell, formatted", [
    ("42C711D4 20B03704 4A10C8D4 14CC040A D2102003", "42C711D4-20B03704-4A10C8D4-14CC040A-D2102003"),
    ("V1, 409921d4 2140a100 e54bddd4 07cc040a 9b00301f", "409921D4-2140A100-E54BDDD4-07CC040A-9B00301F"),
    ("1 2 3 4 5", "00000001-00000002-00000003-00000004-00000005"),
    ("NA", None)])
def test_die_id_format(cell, formatted):
    assert extras.format_die_id(cell) == formatted


@pytest.mark.parametrize("cell", ["42C711D4 20B03704", "42C711D4 20B03704 4A10C8D4 14CC040A ZZZZZZZZ"])
def test_a_malformed_die_id_is_a_parse_error(cell):
    with pytest.raises(NpuSmiParseError):
        extras.format_die_id(cell)


def test_aicore_frequency_and_310p_card_power_from_real_common_outputs():
    assert extras.parse_common_extra(capture("info-t-common_910a1_30cores_doc.txt")) == {0: {"aicore_freq_mhz": 900.0}}
    assert extras.parse_common_extra(capture("info-t-common_310p_mcu-power_gpustack-docstring.txt")) == {
        0: {"aicore_freq_mhz": 960.0, "card_power_watts": 13.4}}


def test_hbm_usage_rate_hbm_temperature_and_ecc_counters_from_real_outputs():
    usages = extras.parse_usages_extra(capture("info-t-usages_910b_v25.5.1_fixture.txt"))
    assert 0 <= usages[0]["hbm_usage_ratio"] <= 1
    assert extras.parse_usages_extra(capture("info-t-usages_310p_gpustack-docstring.txt")) == {0: {}}
    memory = extras.parse_memory_extra(capture("info-t-memory_910b_issue78.txt"))
    assert isinstance(memory[0]["hbm_temperature_celsius"], float)
    ecc = extras.parse_ecc_counters(capture("info-t-ecc_910a_ddr-hbm_v23.0.5_doc.txt"))[0]["ecc_counters"]
    assert set(ecc) == {"ddr", "hbm"}
    assert set(ecc["hbm"]) == {"aggregate_single", "aggregate_double", "isolated_single", "isolated_double"}
