"""The simulator's latency model: its numbers per product and kind of call (calibrated to the public figures
in npumon/sim/latency.py), that both the executable and the in-process simulator wait for it, and that the
simulation's and the scenario's scales multiply it, 0 turning it off."""

import json
import os
import random
import subprocess
import sys
import time

import pytest

from npumon.sim.inprocess import InProcessNpuSmi
from npumon.sim.latency import (CARD_QUERY, CHIP_QUERY, LATENCY_SCALE_ENV, LIST, MAPPING, PROFILES, SET, TABLE,
                                VERSION, call_seconds, kind_of, nominal_seconds)
from npumon.sim.npusmi import main
from npumon.sim.products import PRODUCTS, get_product
from npumon.sim.scenario import ScenarioError, load_scenario
from npumon.sim.simulation import prepare_simulation, set_latency_scale
from npumon.sim.state import STATE_ENV, STATE_FILE
from npumon.sources.runner import CommandRunner

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

A2, A3 = get_product("atlas-800i-a2"), get_product("atlas-a3")
TABLE_ARGS = ["info"]
CARD_ARGS = ["info", "-t", "usages", "-i", "0"]
CHIP_ARGS = ["info", "-t", "health", "-i", "0", "-c", "0"]


@pytest.mark.parametrize("args, kind", [
    (["info"], TABLE), (["info", "-t", "usages", "-i", "3"], CARD_QUERY), (["info", "-t", "pwm-mode"], CARD_QUERY),
    (["info", "-t", "health", "-i", "1", "-c", "0"], CHIP_QUERY), (["info", "-m"], MAPPING), (["info", "-l"], LIST),
    (["set", "-t", "pwm-mode", "-d", "0"], SET), (["set", "-t", "nve-level", "-i", "0", "-d", "1"], SET),
    (["-v"], VERSION), (["-h"], VERSION), (["info", "-h"], VERSION), ([], VERSION), (["bogus"], VERSION),
    (["info", "watch"], VERSION), (["info", "-x"], VERSION),
])
def test_every_argv_is_one_kind_of_call(args, kind):
    assert kind_of(args) == kind


# (product, table, card query, chip query, -m, -l, set, -v) in seconds, before jitter: the module's table
NOMINAL = [
    ("atlas-800i-a2", 1.06, 0.55, 0.55, 0.52, 0.52, 0.70, 0.05),
    ("atlas-a3", 2.62, 2.00, 1.75, 1.52, 1.52, 1.70, 0.05),
    ("atlas-300i-duo", 0.68, 0.50, 0.45, 0.42, 0.42, 0.60, 0.05),
    ("atlas-200i-a2", 0.57, 0.55, 0.55, 0.52, 0.52, 0.70, 0.05),
]


@pytest.mark.parametrize("row", NOMINAL, ids=[row[0] for row in NOMINAL])
def test_each_product_and_kind_of_call_costs_what_the_documented_table_says(row):
    product = get_product(row[0])
    card = str(product.cards[0])
    argvs = [TABLE_ARGS, ["info", "-t", "usages", "-i", card], ["info", "-t", "health", "-i", card, "-c", "0"],
             ["info", "-m"], ["info", "-l"], ["set", "-t", "pwm-mode", "-d", "0"], ["-v"]]
    assert [round(nominal_seconds(product, args), 3) for args in argvs] == list(row[1:])
    assert set(PROFILES) == set(PRODUCTS)  # every simulated product has its costs


def test_the_model_reproduces_the_public_figures():
    # nvitop-npu on 8 x 910B3: `info -m`, `info`, then 7 detail types, each one 8-way parallel batch: ~5.4 s
    report = nominal_seconds(A2, ["info", "-m"]) + nominal_seconds(A2, TABLE_ARGS) + 7 * nominal_seconds(A2, CARD_ARGS)
    assert report == pytest.approx(5.4, abs=0.1)
    # nvitop's libnpu: "a startup cost of roughly half a second per invocation" on the same host
    assert 0.4 <= nominal_seconds(A2, CARD_ARGS) <= 0.6
    # AReaL: a 16-chip npu-smi sweep, one chip-level call after another, ~28 s
    rng = random.Random(7)
    sweep = sum(call_seconds(A3, ["info", "-t", "usages", "-i", str(npu), "-c", str(chip)], rng)
                for npu in A3.cards for chip in range(A3.chips_per_card))
    assert 16 * nominal_seconds(A3, CHIP_ARGS) == pytest.approx(28.0)
    assert sweep == pytest.approx(28.0, rel=0.2)


def test_a_seeded_rng_gives_the_same_jittered_seconds_within_the_documented_spread():
    first = [call_seconds(A2, TABLE_ARGS, random.Random(seed)) for seed in range(5)]
    assert first == [call_seconds(A2, TABLE_ARGS, random.Random(seed)) for seed in range(5)]
    assert len(set(first)) == 5  # jitter: no two calls alike
    rng = random.Random(2024)
    draws = [call_seconds(A2, TABLE_ARGS, rng) for _ in range(5000)]
    profile = PROFILES[A2.name]
    plain = [seconds for seconds in draws if seconds <= 1.06 * (1 + profile.jitter) + 1e-9]
    tail = [seconds for seconds in draws if seconds > 1.06 * (1 + profile.jitter) + 1e-9]
    assert min(plain) >= 1.06 * (1 - profile.jitter) - 1e-9
    assert sum(plain) / len(plain) == pytest.approx(1.06, rel=0.02)
    # about 2 % of the calls are 2.7 times slower (a tail draw can land below the plain band's top)
    assert 0.005 <= len(tail) / len(draws) <= 0.03
    assert max(tail) <= 1.06 * (1 + profile.jitter) * profile.tail_factor + 1e-9


class FakeClock:
    def __init__(self, now):
        self.now = now
        self.slept = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.now += seconds


def _start_time(sim):
    with open(os.path.join(sim.env[STATE_ENV], STATE_FILE), encoding="utf-8") as handle:
        return json.load(handle)["start_time"]


def _in_process(sim, seed=1):
    clock = FakeClock(_start_time(sim))
    spawn = InProcessNpuSmi(clock=clock, sleep=clock.sleep, rng=random.Random(seed))
    return CommandRunner(sim.npu_smi_argv, 10, env=sim.env, spawn=spawn), clock


def test_the_in_process_simulator_waits_the_models_seconds_on_its_clock(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-a3", latency_scale=1)
    runner, clock = _in_process(sim, seed=3)
    expected_rng = random.Random(3)
    for args in (TABLE_ARGS, CARD_ARGS, CHIP_ARGS, ["info", "-m"], ["-v"]):
        result = runner.run(args)
        expected = call_seconds(A3, args, expected_rng)
        assert result.returncode == 0 and clock.slept[-1] == pytest.approx(expected), args
        assert result.duration_seconds == pytest.approx(expected, abs=1e-3)
    assert clock.slept[0] > 2.0 and clock.slept[-1] < 0.1  # the 16-chip table against `-v`


def test_the_executable_sleeps_the_models_seconds_before_it_answers(tmp_path, monkeypatch, capsys):
    sim = prepare_simulation(str(tmp_path), "healthy", latency_scale=2)
    expected = 2 * call_seconds(A2, TABLE_ARGS, random.Random(5))
    seeded = random.Random
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(random, "Random", lambda: seeded(5))  # the executable's fresh generator, seeded
    monkeypatch.setenv(STATE_ENV, sim.env[STATE_ENV])
    assert main(TABLE_ARGS) == 0 and "910B3" in capsys.readouterr().out
    assert slept == [pytest.approx(expected)]


def test_the_executables_own_start_is_part_of_the_calls_time(tmp_path, monkeypatch, capsys):
    sim = prepare_simulation(str(tmp_path), "healthy", latency_scale=1)
    expected = call_seconds(A2, TABLE_ARGS, random.Random(5))
    seeded = random.Random
    slept = []
    monkeypatch.setattr(time, "sleep", slept.append)
    monkeypatch.setattr(random, "Random", lambda: seeded(5))
    monkeypatch.setenv(STATE_ENV, sim.env[STATE_ENV])
    assert main(TABLE_ARGS, started_seconds_ago=0.3) == 0 and "910B3" in capsys.readouterr().out
    assert slept == [pytest.approx(expected - 0.3)]
    assert main(["-v"], started_seconds_ago=0.3) == 0 and slept[1:] == []  # started slower than the call takes


def test_a_process_knows_how_long_it_has_run():
    code = ("import time; from npumon.sim.latency import seconds_since_start as age; first = age(); "
            "time.sleep(0.3); print(first, age() - first)")
    first, later = map(float, subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                             check=True, cwd=REPO).stdout.split())
    assert 0 < first < 5 and later == pytest.approx(0.3, abs=0.05)  # /proc's clock ticks: 10 ms


@pytest.mark.e2e
@pytest.mark.realistic_latency
def test_the_executable_run_as_a_subprocess_takes_hardware_time(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy")
    assert sim.latency_scale == 1.0 and sim.spawn is None
    runner = CommandRunner(sim.npu_smi_argv, 20, env=sim.env)
    started = time.monotonic()
    table = runner.run(TABLE_ARGS)
    took = time.monotonic() - started
    assert table.returncode == 0 and len([line for line in table.stdout.splitlines() if "910B3" in line]) == 8
    assert 1.06 * 0.8 <= took <= 1.06 * 1.2 * 2.7 + 2.0  # the model's spread plus a Python start
    started = time.monotonic()
    assert runner.run(["-v"]).returncode == 0 and time.monotonic() - started < 0.05 * 1.2 * 2.7 + 2.0


def test_scale_zero_turns_it_off_and_the_scales_multiply(tmp_path):
    off = prepare_simulation(str(tmp_path / "off"), "healthy", product="atlas-a3", latency_scale=0)
    runner, clock = _in_process(off)
    assert runner.run(TABLE_ARGS).returncode == 0 and clock.slept == []
    assert off.latency_scale == 0.0

    # the slow scenario runs at three times the model; the simulation's own scale multiplies that
    slow = prepare_simulation(str(tmp_path / "slow"), "slow", latency_scale=0.5)
    runner, clock = _in_process(slow, seed=9)
    runner.run(CARD_ARGS)
    assert clock.slept == [pytest.approx(1.5 * call_seconds(A2, CARD_ARGS, random.Random(9)))]
    assert load_scenario("healthy")["latency_scale"] == 1.0

    # a running simulation can change its scale; a scenario's delay_seconds adds to the model's time
    set_latency_scale(slow.env[STATE_ENV], 0)
    runner.run(CARD_ARGS)
    assert len(clock.slept) == 1
    with pytest.raises(ValueError, match="latency_scale must be a finite number >= 0"):
        set_latency_scale(slow.env[STATE_ENV], -1)


def test_the_scenarios_delay_comes_on_top_of_the_model_and_a_long_wait_times_out(tmp_path):
    path = tmp_path / "late.yaml"
    path.write_text("product: atlas-a3\ndelay_seconds: 0.5\nlatency_scale: 4\n")
    sim = prepare_simulation(str(tmp_path / "state"), str(path), latency_scale=1)
    runner, clock = _in_process(sim, seed=11)
    runner.run(["-v"])
    assert clock.slept == [pytest.approx(0.5 + 4 * call_seconds(A3, ["-v"], random.Random(11)))]
    started = clock.now
    late = runner.run(TABLE_ARGS, timeout_seconds=5)  # 4 x 2.6 s: past the deadline, killed without an answer
    assert late.timed_out and late.stdout == "" and clock.now - started == pytest.approx(5, abs=1e-3)


def test_the_environment_variable_sets_the_default_scale_and_bad_values_are_refused(tmp_path, monkeypatch):
    monkeypatch.setenv(LATENCY_SCALE_ENV, "0.25")
    assert prepare_simulation(str(tmp_path / "a"), "healthy").latency_scale == 0.25
    assert prepare_simulation(str(tmp_path / "b"), "healthy", latency_scale=2).latency_scale == 2.0  # argument wins
    monkeypatch.delenv(LATENCY_SCALE_ENV)
    assert prepare_simulation(str(tmp_path / "c"), "healthy").latency_scale == 1.0  # users get hardware speed
    monkeypatch.setenv(LATENCY_SCALE_ENV, "fast")
    with pytest.raises(ValueError, match="NPUMON_SIM_LATENCY_SCALE must be a number >= 0, got 'fast'"):
        prepare_simulation(str(tmp_path / "d"), "healthy")
    for bad in (-1, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="latency_scale"):
            prepare_simulation(str(tmp_path / "e"), "healthy", latency_scale=bad)
    path = tmp_path / "bad.yaml"
    path.write_text("product: atlas-800i-a2\nlatency_scale: -2\n")
    with pytest.raises(ScenarioError, match=r":2: latency_scale: must be within \[0.0, inf\], got -2"):
        load_scenario(str(path))


@pytest.mark.realistic_latency
def test_a_test_marked_realistic_latency_gets_hardware_speed(tmp_path):
    assert os.environ[LATENCY_SCALE_ENV] == "1"
    assert prepare_simulation(str(tmp_path), "healthy").latency_scale == 1.0
