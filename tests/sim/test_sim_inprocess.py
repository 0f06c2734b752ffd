"""The in-process simulated npu-smi answers exactly what the executable prints, honours the deadline like
the subprocess path (a hang or a late answer times out at the deadline, with nothing printed and nothing
changed), and can run on a test's own clock."""

import json
import os

import pytest

from npumon.sim.inprocess import InProcessNpuSmi, run_in_process
from npumon.sim.knobs import read_knobs
from npumon.sim.npusmi import EXIT_SIMULATOR_MISUSE, HANG_PIDS_FILE, main
from npumon.sim.simulation import prepare_simulation
from npumon.sim.state import STATE_ENV, STATE_FILE
from npumon.sources.runner import CommandRunner

QUERIES = ["usages", "power", "health", "ecc", "board", "temp", "memory", "common", "pwm-mode", "pwm-duty-ratio",
           "nve-level", "cpu-freq-up", "sensors", "current-fault-event", "no-such-type"]
ARGUMENTS = [["info"], ["info", "-l"], ["info", "-m"], ["-v"], ["-h"], ["info", "-h"], [], ["bogus"], ["info", "-x"],
             ["info", "-t", "usages"], ["info", "-t", "usages", "-i", "99"],
             ["info", "-t", "health", "-i", "0", "-c", "7"]]
ARGUMENTS += [["info", "-t", query, "-i", "0"] for query in QUERIES]
ARGUMENTS += [["info", "-t", "health", "-i", "0", "-c", "0"], ["set", "-t", "pwm-mode", "-d", "0"],
              ["set", "-t", "pwm-duty-ratio", "-d", "70"], ["set", "-t", "nve-level", "-i", "0", "-d", "1"],
              ["set", "-t", "cpu-freq-up", "-i", "0", "-d", "1"], ["set", "-t", "bogus", "-d", "1"]]
SCENARIOS = [("healthy", None), ("health-alarm", None), ("unsupported", None), ("garbage", None),
             ("healthy", "atlas-200i-a2"), ("healthy", "atlas-300i-duo"), ("healthy", "atlas-a3"),
             ("healthy", "atlas-800-9000"), ("health-alarm", "atlas-350")]


def executable_answer(monkeypatch, capsys, state_dir, args):
    """What `python -m npumon.sim.npusmi ARGS` prints and exits with (its main(), in this process)."""
    monkeypatch.setenv(STATE_ENV, state_dir)
    status = main(args)
    out, err = capsys.readouterr()
    return out, err, status


@pytest.mark.parametrize("scenario, product", SCENARIOS, ids=["{}-{}".format(*row) for row in SCENARIOS])
def test_every_answer_is_the_executables(tmp_path, monkeypatch, capsys, scenario, product):
    # two simulations of the same frozen scenario: each `set` changes its own knobs in the same way
    by_main = prepare_simulation(str(tmp_path / "main"), scenario, product=product, time_scale=0)
    in_process = prepare_simulation(str(tmp_path / "inprocess"), scenario, product=product, time_scale=0)
    runner = CommandRunner(in_process.npu_smi_argv, 10, env=in_process.env, spawn=run_in_process)
    for args in ARGUMENTS:
        expected = executable_answer(monkeypatch, capsys, by_main.env[STATE_ENV], args)
        result = runner.run(args)
        assert (result.stdout, result.stderr, result.returncode) == expected, args
        assert not result.timed_out and result.error is None and result.argv == in_process.npu_smi_argv + args
    assert read_knobs(by_main.env[STATE_ENV]) == read_knobs(in_process.env[STATE_ENV])


@pytest.mark.e2e
def test_answers_match_the_executable_run_as_a_subprocess(tmp_path):
    sim = prepare_simulation(str(tmp_path / "a"), "garbage", time_scale=0)
    real = CommandRunner(sim.npu_smi_argv, 20, env=sim.env)
    fast = CommandRunner(sim.npu_smi_argv, 20, env=sim.env, spawn=run_in_process)
    for args in (["info"], ["info", "-t", "usages", "-i", "0"], ["info", "-l"], ["bogus"]):
        expected, got = real.run(args), fast.run(args)
        assert (got.stdout, got.stderr, got.returncode, got.timed_out) == \
            (expected.stdout, expected.stderr, expected.returncode, expected.timed_out), args


def test_a_missing_simulation_says_so_on_stderr_like_the_executable(tmp_path, monkeypatch, capsys):
    expected = executable_answer(monkeypatch, capsys, str(tmp_path / "none"), ["info"])
    result = run_in_process(["python", "-m", "npumon.sim.npusmi", "info"], {STATE_ENV: str(tmp_path / "none")}, 5)
    assert (result.stdout, result.stderr, result.returncode) == expected
    assert result.returncode == EXIT_SIMULATOR_MISUSE and "cannot read simulation state" in result.stderr
    assert run_in_process(["python", "-m", "npumon.sim.npusmi", "-v"], {}, 5).stderr.startswith(
        "npu-smi-sim: NPUMON_SIM_STATE is not set")


def test_another_command_is_refused():
    with pytest.raises(ValueError, match="not the simulated npu-smi"):
        run_in_process(["npu-smi", "info"], {}, 5)


def test_a_hang_times_out_at_the_deadline_and_starts_no_process(tmp_path):
    sim = prepare_simulation(str(tmp_path), "hang")
    runner = CommandRunner(sim.npu_smi_argv, 0.4, env=sim.env, spawn=run_in_process)
    result = runner.run(["info"])
    assert result.timed_out and result.returncode is None and (result.stdout, result.stderr) == ("", "")
    assert 0.4 <= result.duration_seconds < 2.0
    # the time it took, which a loaded machine stretches past the deadline
    assert result.describe_failure() == "timed out after {:.1f}s (process group killed)".format(result.duration_seconds)
    assert not os.path.exists(os.path.join(str(tmp_path), HANG_PIDS_FILE))


def _with_delay(state_dir, seconds):
    path = os.path.join(state_dir, STATE_FILE)
    with open(path, encoding="utf-8") as handle:
        state = json.load(handle)
    state["scenario"]["delay_seconds"] = seconds
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(state, handle)


def test_a_late_answer_comes_after_its_delay_or_times_out_without_changing_anything(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-200i-a2", time_scale=0)
    state_dir = sim.env[STATE_ENV]
    _with_delay(state_dir, 0.3)
    answered = run_in_process(sim.npu_smi_argv + ["set", "-t", "pwm-mode", "-d", "0"], sim.env, 5)
    assert answered.returncode == 0 and "success" in answered.stdout and answered.duration_seconds >= 0.3
    assert read_knobs(state_dir)["pwm_mode"] == "manual"
    _with_delay(state_dir, 5)
    late = run_in_process(sim.npu_smi_argv + ["set", "-t", "pwm-mode", "-d", "1"], sim.env, 0.3)
    assert late.timed_out and late.returncode is None and late.stdout == ""
    assert 0.3 <= late.duration_seconds < 2.0
    assert read_knobs(state_dir)["pwm_mode"] == "manual"  # killed before it set anything


class FakeClock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def test_on_a_fake_clock_scenario_time_follows_it_and_waits_take_no_time(tmp_path):
    sim = prepare_simulation(str(tmp_path), "overheat")
    with open(os.path.join(sim.env[STATE_ENV], STATE_FILE), encoding="utf-8") as handle:
        start = json.load(handle)["start_time"]
    clock = FakeClock(start)
    spawn = InProcessNpuSmi(clock=clock, sleep=clock.sleep)
    runner = CommandRunner(sim.npu_smi_argv, 10, env=sim.env, spawn=spawn)

    def temperature():
        text = runner.run(["info", "-t", "temp", "-i", "0", "-c", "0"]).stdout
        return int(text.split("NPU Temperature (C)")[1].split(":")[1].split()[0])

    at_start = temperature()
    clock.now = start + 3600
    assert temperature() > at_start  # the overheat scenario heats up over its hour, not over wall time
    prepare_simulation(str(tmp_path), "hang")
    clock.now = start
    result = runner.run(["info"], timeout_seconds=30)
    assert result.timed_out and clock.now == pytest.approx(start + 30, abs=0.5) and result.duration_seconds < 31
