"""The simulated libdcmi.so's faults: init failures, return codes per call and chip, a call that hangs, a
call that crashes its process, the scenario behaviours (hang, unsupported), no simulation at all, and a
running simulation's changes (scenario switch, fan) reaching the library at its next call."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from ctypes import byref, c_int, c_uint

import pytest
from fake_dcmi_binding import (DCMI_ERR_CODE_DEVICE_NOT_EXIST, DCMI_ERR_CODE_NOT_REDAY, DCMI_ERR_CODE_NOT_SUPPORT,
                               DCMI_ERR_CODE_TIME_OUT, DCMI_OK, BoardInfo, ChipInfo, Dcmi, EccInfo, HbmInfo)

from npumon.sim import prepare_simulation, set_scenario
from npumon.sim.dcmi import DCMI_CLOCK_ENV, DCMI_PRODUCTS, DCMI_STATE_ENV, set_dcmi_faults
from npumon.sim.npusmi import begin_call
from npumon.sim.state import STATE_ENV

CHIP0_CELSIUS = 52  # the healthy scenario's chip 0 (logical id 0: no wobble at t = 0)
# A process that loads the library, initialises it and makes one call on card 0 chip 0, printing the code.
CALLER = textwrap.dedent("""
    import ctypes, sys
    lib = ctypes.CDLL(sys.argv[1])
    print("init", lib.dcmi_init(), flush=True)
    value = ctypes.c_int()
    print("call", getattr(lib, sys.argv[2])(0, 0, ctypes.byref(value)), value.value, flush=True)
""")

pytestmark = pytest.mark.integration  # builds and loads a C library with the system compiler


@pytest.fixture
def dcmi(fake_dcmi_library):
    return Dcmi(fake_dcmi_library)


@pytest.fixture
def sim(tmp_path, monkeypatch):
    monkeypatch.delenv(DCMI_STATE_ENV, raising=False)
    monkeypatch.delenv(DCMI_CLOCK_ENV, raising=False)
    simulation = prepare_simulation(str(tmp_path / "sim"), scenario="healthy", product="atlas-800i-a2", time_scale=0)
    for name, value in simulation.env.items():
        monkeypatch.setenv(name, value)
    return simulation


def state_dir(sim):
    return sim.env[STATE_ENV]


def run_caller(library, function, timeout):
    """(exit status or None if it was still running at `timeout`, stdout lines) of one CALLER process."""
    process = subprocess.Popen([sys.executable, "-c", CALLER, library, function], stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=timeout)
        return process.returncode, out.split("\n")
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, _ = process.communicate()
        return None, out.split("\n")


def test_init_fails_with_the_injected_code_until_cleared(dcmi, sim):
    assert dcmi.call("dcmi_init") == DCMI_OK
    set_dcmi_faults(state_dir(sim), init=DCMI_ERR_CODE_NOT_REDAY)
    assert dcmi.call("dcmi_init") == DCMI_ERR_CODE_NOT_REDAY
    set_dcmi_faults(state_dir(sim))
    assert dcmi.call("dcmi_init") == DCMI_OK


@pytest.mark.parametrize("product", ["atlas-800-9000", "atlas-350"])
def test_each_product_answers_the_api_its_driver_speaks(dcmi, tmp_path, monkeypatch, product):
    # The 910A speaks V1 like the other 910s; the 950 speaks V2 (dcmiv2_*, one logical id per chip), where dcmi_init
    # and every V1 call return -8255 as mind-cluster's V2 header says, and a V1 product refuses the dcmiv2_* calls.
    simulation = prepare_simulation(str(tmp_path / product), scenario="healthy", product=product, time_scale=0)
    monkeypatch.setenv(STATE_ENV, simulation.env[STATE_ENV])
    assert product in DCMI_PRODUCTS
    v2 = product == "atlas-350"
    assert dcmi.call("dcmi_init") == (DCMI_ERR_CODE_NOT_SUPPORT if v2 else DCMI_OK)
    assert dcmi.call("dcmiv2_init") == (DCMI_OK if v2 else DCMI_ERR_CODE_NOT_SUPPORT)
    v1_code, _ = dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)
    v2_code, celsius = _v2_temperature(dcmi, 0)
    assert (v1_code, v2_code) == ((DCMI_ERR_CODE_NOT_SUPPORT, DCMI_OK) if v2 else (DCMI_OK, DCMI_ERR_CODE_NOT_SUPPORT))
    if v2:
        assert 20 < celsius < 90


def _v2_temperature(dcmi, logic):
    value = c_int(0)
    return dcmi.call("dcmiv2_get_device_temperature", logic, byref(value)), value.value


def test_without_a_simulation_every_call_says_no_device(dcmi, monkeypatch, tmp_path):
    monkeypatch.delenv(STATE_ENV, raising=False)
    monkeypatch.delenv(DCMI_STATE_ENV, raising=False)
    assert dcmi.call("dcmi_init") == DCMI_ERR_CODE_DEVICE_NOT_EXIST
    assert dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)[0] == DCMI_ERR_CODE_DEVICE_NOT_EXIST
    monkeypatch.setenv(DCMI_STATE_ENV, str(tmp_path / "absent.txt"))
    assert dcmi.call("dcmi_init") == DCMI_ERR_CODE_DEVICE_NOT_EXIST


def test_the_state_file_can_be_named_directly(dcmi, sim, monkeypatch):
    monkeypatch.delenv(STATE_ENV)
    monkeypatch.setenv(DCMI_STATE_ENV, os.path.join(state_dir(sim), "dcmi-state.txt"))
    assert dcmi.call("dcmi_init") == DCMI_OK
    assert dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int) == (DCMI_OK, CHIP0_CELSIUS)


def test_return_codes_are_injected_per_function_and_per_chip(dcmi, sim):
    set_dcmi_faults(state_dir(sim), codes={"dcmi_get_device_temperature@1": DCMI_ERR_CODE_TIME_OUT,
                                           "dcmi_get_device_health": DCMI_ERR_CODE_NOT_REDAY})
    assert dcmi.chip("dcmi_get_device_temperature", 1, 0, c_int)[0] == DCMI_ERR_CODE_TIME_OUT
    assert dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int) == (DCMI_OK, CHIP0_CELSIUS)
    assert [dcmi.chip("dcmi_get_device_health", card, 0, c_uint)[0] for card in range(8)] == \
        [DCMI_ERR_CODE_NOT_REDAY] * 8
    set_dcmi_faults(state_dir(sim))
    assert dcmi.chip("dcmi_get_device_temperature", 1, 0, c_int)[0] == DCMI_OK


def test_bad_fault_names_are_refused_in_one_line(sim):
    for kwargs in ({"hang": ["rm -rf /"]}, {"segfault": ["npu-smi"]}, {"codes": {"x": -8006}},
                   {"codes": {"dcmi_init": "-8006"}}, {"init": 1.5}):
        with pytest.raises(ValueError) as caught:
            set_dcmi_faults(state_dir(sim), **kwargs)
        assert "\n" not in str(caught.value)


def test_a_hanging_call_blocks_its_process_and_nothing_else(fake_dcmi_library, sim):
    set_dcmi_faults(state_dir(sim), hang=["dcmi_get_device_temperature"], hang_seconds=600)
    started = time.monotonic()
    status, lines = run_caller(fake_dcmi_library, "dcmi_get_device_temperature", timeout=3)
    assert status is None and time.monotonic() - started >= 3  # killed at the deadline, still waiting
    assert lines[0] == "init 0" and not any(line.startswith("call") for line in lines)
    assert run_caller(fake_dcmi_library, "dcmi_get_device_health", timeout=20)[1][1] == "call 0 0"


def test_a_short_hang_answers_late_with_the_value(fake_dcmi_library, sim):
    set_dcmi_faults(state_dir(sim), hang=["*"], hang_seconds=1.0)
    started = time.monotonic()
    status, lines = run_caller(fake_dcmi_library, "dcmi_get_device_temperature", timeout=20)
    assert (status, lines[:2]) == (0, ["init 0", "call 0 {}".format(CHIP0_CELSIUS)])
    assert time.monotonic() - started >= 1.0


def test_a_segfault_on_request_kills_the_calling_process(fake_dcmi_library, sim):
    set_dcmi_faults(state_dir(sim), segfault=["dcmi_get_device_health"])
    status, lines = run_caller(fake_dcmi_library, "dcmi_get_device_health", timeout=20)
    assert status == -signal.SIGSEGV
    assert lines[0] == "init 0" and not any(line.startswith("call") for line in lines)
    status, lines = run_caller(fake_dcmi_library, "dcmi_get_device_temperature", timeout=20)
    assert (status, lines[:2]) == (0, ["init 0", "call 0 {}".format(CHIP0_CELSIUS)])


def test_the_hang_scenario_hangs_every_call_after_init(fake_dcmi_library, sim):
    set_scenario(state_dir(sim), "hang")
    status, lines = run_caller(fake_dcmi_library, "dcmi_get_device_temperature", timeout=3)
    assert status is None and lines[0] == "init 0"


def test_the_unsupported_scenario_refuses_what_npu_smi_refuses(dcmi, sim):
    set_scenario(state_dir(sim), "unsupported")
    npu_smi = begin_call(["info", "-t", "ecc", "-i", "0", "-c", "0"], state_dir(sim), time.time()).answer()
    assert npu_smi == ("This device does not support querying ecc.\n", 0)
    assert dcmi.chip("dcmi_get_device_ecc_info", 0, 0, EccInfo, 2)[0] == DCMI_ERR_CODE_NOT_SUPPORT
    assert dcmi.chip("dcmi_get_device_board_info", 0, 0, BoardInfo)[0] == DCMI_ERR_CODE_NOT_SUPPORT
    assert dcmi.chip("dcmi_get_device_utilization_rate", 0, 0, c_uint, 6)[0] == DCMI_ERR_CODE_NOT_SUPPORT
    # what npu-smi's main table shows still answers
    assert dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)[0] == DCMI_OK
    assert dcmi.chip("dcmi_get_device_utilization_rate", 0, 0, c_uint, 2)[0] == DCMI_OK
    assert dcmi.chip("dcmi_get_device_hbm_info", 0, 0, HbmInfo)[0] == DCMI_OK
    assert dcmi.chip("dcmi_get_device_chip_info", 0, 0, ChipInfo)[0] == DCMI_OK


def test_a_scenario_switch_reaches_a_loaded_library_at_its_next_call(dcmi, sim):
    assert dcmi.chip("dcmi_get_device_health", 2, 0, c_uint) == (DCMI_OK, 0)
    set_scenario(state_dir(sim), "health-critical")
    assert dcmi.chip("dcmi_get_device_health", 2, 0, c_uint) == (DCMI_OK, 3)
    assert dcmi.chip("dcmi_get_device_health", 5, 0, c_uint) == (DCMI_OK, 0xFFFFFFFF)


def test_a_new_simulation_clears_the_faults_of_the_last(dcmi, sim):
    set_dcmi_faults(state_dir(sim), init=DCMI_ERR_CODE_NOT_REDAY)
    prepare_simulation(state_dir(sim), scenario="healthy", time_scale=0)
    assert dcmi.call("dcmi_init") == DCMI_OK


def test_the_fan_set_through_npu_smi_cools_what_dcmi_reads(dcmi, tmp_path, monkeypatch):
    simulation = prepare_simulation(str(tmp_path / "fan"), scenario="healthy", product="atlas-200i-a2", time_scale=1)
    for name, value in simulation.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(DCMI_STATE_ENV, raising=False)
    before = dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)
    for args in (["set", "-t", "pwm-mode", "-d", "0"], ["set", "-t", "pwm-duty-ratio", "-d", "100"]):
        assert begin_call(args, state_dir(simulation), time.time()).answer()[1] == 0
    later = time.time() + 600  # long after the fan change: the chips have cooled
    monkeypatch.setenv(DCMI_CLOCK_ENV, repr(later))
    after = dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)
    temp = begin_call(["info", "-t", "temp", "-i", "0", "-c", "0"], state_dir(simulation), later).answer()[0]
    assert after[0] == DCMI_OK and after[1] < before[1]
    assert temp.strip().endswith(": {}".format(after[1]))


@pytest.mark.parametrize("damage", [
    "format=1\ncards=0\nchips_per_card=1\nchip.0.card=0\nchip.0.temperature_celsius=r\nchip.0.health=s 99999999999\n"
    "chip.0.processes=40\nchip.0.process.0=12 pct\nchip.0.process.1=x\n",
    "format=1\ncards=0 1 x\n=\n==\nchips_per_card=-3\n\n\0\n",
    "no equals sign at all\n" * 100,
])
def test_a_damaged_state_file_gives_answers_or_codes_never_a_crash(fake_dcmi_library, tmp_path, monkeypatch, damage):
    path = tmp_path / "dcmi-state.txt"
    path.write_text(damage)
    monkeypatch.setenv(DCMI_STATE_ENV, str(path))
    for function in ("dcmi_get_device_temperature", "dcmi_get_device_health", "dcmi_get_device_power_info"):
        status, lines = run_caller(fake_dcmi_library, function, timeout=20)
        assert status == 0 and lines[1].startswith("call "), (function, lines)


def test_calls_take_the_latency_models_time_when_it_is_on(dcmi, tmp_path, monkeypatch):
    simulation = prepare_simulation(str(tmp_path / "slow"), scenario="healthy", time_scale=0, latency_scale=1.0)
    for name, value in simulation.env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv(DCMI_STATE_ENV, raising=False)
    started = time.monotonic()
    assert dcmi.call("dcmi_init") == DCMI_OK
    initialised = time.monotonic()
    for _ in range(4):
        assert dcmi.chip("dcmi_get_device_temperature", 0, 0, c_int)[0] == DCMI_OK
    done = time.monotonic()
    assert initialised - started >= 0.5  # the 910B3's npu-smi start: DCMI init opening every device
    assert done - initialised >= 4 * 0.0175
