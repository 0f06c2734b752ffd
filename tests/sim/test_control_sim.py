"""The simulator's knobs: pwm, nve-level and cpu-freq-up in npu-smi's own texts where the product has them,
"This device does not support ..." where it does not, and chip temperatures that follow the fan."""

import os
import subprocess
import sys

import pytest

from npumon.sim.knobs import COOLING_PER_PERCENT, cooling_offset, default_knobs, read_knobs
from npumon.sim.npusmi import sim_host
from npumon.sim.simulation import prepare_simulation
from npumon.sim.state import read_state

OK = "\tStatus                         : OK\n"


def npu_smi(sim, *args):
    proc = subprocess.run([sys.executable, "-m", "npumon.sim.npusmi", *args], env=dict(os.environ, **sim.env),
                          capture_output=True, text=True, timeout=30)
    return proc.stdout, proc.returncode


def test_the_310b_fan_answers_in_the_documented_formats(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-200i-a2", time_scale=0)
    assert npu_smi(sim, "info", "-t", "pwm-mode") == ("\tpwm-mode                       : auto\n", 0)
    assert npu_smi(sim, "set", "-t", "pwm-duty-ratio", "-d", "50") == (
        "Setting duty ratio is not allowed in the current auto mode.\n", 0)
    assert npu_smi(sim, "set", "-t", "pwm-mode", "-d", "0") == (
        OK + "\tMessage                        : Set pwm manual mode success\n", 0)
    assert npu_smi(sim, "set", "-t", "pwm-duty-ratio", "-d", "70") == (
        OK + "\tMessage                        : Set pwm duty ratio 70 success\n", 0)
    assert npu_smi(sim, "info", "-t", "pwm-duty-ratio") == ("\tpwm-duty-ratio(%)              : 70\n", 0)
    assert npu_smi(sim, "info", "-t", "pwm-mode")[0].endswith(": manual\n")


@pytest.mark.parametrize("args, first_line", [
    (("set", "-t", "pwm-duty-ratio", "-d", "101"), "Error parameter of -d"),
    (("set", "-t", "pwm-duty-ratio", "-d", "0050"), "Error parameter of -d"),
    (("set", "-t", "pwm-mode", "-d", "2"), "Error parameter of -d"),
    (("set", "-t", "pwm-mode"), "Must input parameter of -d."),
    (("set", "-t", "nve-level", "-i", "7", "-c", "0", "-d", "1"), "Invalid card id."),
])
def test_bad_settings_get_npu_smis_parameter_errors(tmp_path, args, first_line):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-200i-a2", time_scale=0)
    text, status = npu_smi(sim, *args)
    assert text.splitlines()[0] == first_line and status == 215


@pytest.mark.parametrize("product", ["atlas-800i-a2", "atlas-a3", "atlas-300i-duo", "atlas-800-9000", "atlas-350"])
def test_products_without_a_fan_knob_refuse_it_in_npu_smis_words(tmp_path, product):
    sim = prepare_simulation(str(tmp_path), "healthy", product=product, time_scale=0)
    assert npu_smi(sim, "info", "-t", "pwm-mode") == ("This device does not support querying pwm-mode.\n", 0)
    assert npu_smi(sim, "set", "-t", "pwm-mode", "-d", "0") == ("This device does not support setting pwm-mode.\n", 0)
    assert npu_smi(sim, "set", "-t", "nve-level", "-i", "0", "-c", "0", "-d", "1") == (
        "This device does not support setting nve-level.\n", 0)


def test_nve_level_on_the_310b_board_and_cpu_freq_up_on_310p_cards(tmp_path):
    board = prepare_simulation(str(tmp_path / "board"), "healthy", product="atlas-200i-a2", time_scale=0)
    assert npu_smi(board, "info", "-t", "nve-level", "-i", "0", "-c", "0") == (
        "\tnve level                      : 8T_1.0GHz\n", 0)
    assert npu_smi(board, "set", "-t", "nve-level", "-i", "0", "-c", "0", "-d", "1") == (
        OK + "\tMessage                        : The nve-level of the chip is set successfully.\n", 0)
    assert npu_smi(board, "info", "-t", "nve-level", "-i", "0", "-c", "0")[0].endswith(": 4T_1.0GHz\n")
    assert npu_smi(board, "set", "-t", "nve-level", "-i", "0", "-c", "0", "-d", "2")[1] == 215  # 8T module: 0, 1
    assert npu_smi(board, "set", "-t", "cpu-freq-up", "-i", "0", "-d", "1") == (
        "This device does not support setting cpu-freq-up.\n", 0)
    cards = prepare_simulation(str(tmp_path / "cards"), "healthy", product="atlas-300i-duo", time_scale=0)
    assert npu_smi(cards, "set", "-t", "cpu-freq-up", "-i", "5", "-d", "1") == (
        OK + "\tMessage                        : The cpu-freq-up is set successfully. Reset system for the "
             "configuration to take effect.\n", 0)
    assert read_knobs(cards.env["NPUMON_SIM_STATE"])["cpu_freq_up"] == {"5": 1}


def test_chips_cool_down_with_more_duty_and_the_change_takes_time(tmp_path):
    knobs = default_knobs()
    assert cooling_offset(knobs, 100.0) == 0.0  # auto mode: the scenario's temperatures as they are
    knobs.update(pwm_mode="manual", pwm_duty=100, cooling={"from": 0.0, "to": -15.0, "since": 10.0})
    assert cooling_offset(knobs, 10.0) == 0.0
    assert -11.0 < cooling_offset(knobs, 30.0) < -9.0  # about 63% of the way after one time constant
    assert cooling_offset(knobs, 200.0) == pytest.approx(-15.0, abs=0.01)
    assert COOLING_PER_PERCENT * (100 - 40) == 15.0
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-200i-a2", time_scale=0)
    state = read_state(sim.env["NPUMON_SIM_STATE"])
    before = sim_host(state, 0.0, default_knobs()).chips[0][1].temperature_celsius
    assert sim_host(state, 0.0, knobs).chips[0][1].temperature_celsius == before  # at t=0 nothing changed yet
    assert sim_host(state, 200.0, knobs).chips[0][1].temperature_celsius == \
        sim_host(state, 200.0, default_knobs()).chips[0][1].temperature_celsius - 15


def test_a_new_simulation_starts_with_the_fan_back_in_auto(tmp_path):
    sim = prepare_simulation(str(tmp_path), "healthy", product="atlas-200i-a2", time_scale=0)
    npu_smi(sim, "set", "-t", "pwm-mode", "-d", "0")
    assert read_knobs(str(tmp_path))["pwm_mode"] == "manual"
    prepare_simulation(str(tmp_path), "healthy", product="atlas-200i-a2", time_scale=0)
    assert read_knobs(str(tmp_path))["pwm_mode"] == "auto"
