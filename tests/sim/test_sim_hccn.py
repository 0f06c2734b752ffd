"""The simulated hccn_tool (npumon/sim/hccn.py): the executable takes the real grammar, prints the layouts of the
real captures line for line (keys, padding, prefixes), its errors on the streams and with the exit codes the tool
uses, and answers in-process alike; its latency follows the model."""

import os
import random
import subprocess
import sys

import pytest

from hccn_captures import capture
from npumon.sim import hccn as sim_hccn
from npumon.sim.inprocess import InProcessNpuSmi
from npumon.sim.simulation import prepare_simulation
from npumon.sources.hccn import parse
from npumon.sources.hccn.optical import parse_optical
from npumon.sources.runner import CommandRunner


def run_tool(sim, *args):
    proc = subprocess.run([sys.executable, "-m", "npumon.sim.hccn", *args], capture_output=True, text=True,
                          env=dict(os.environ, **sim.env), timeout=60)
    return proc.stdout, proc.stderr, proc.returncode


def layout(text):
    """Each line's key part (everything up to and including ': '), or the line itself when it has none."""
    return [line[:line.index(": ") + 2] if ": " in line else line for line in text.splitlines()]


@pytest.fixture
def sim(tmp_path):
    return prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0, latency_scale=0)


@pytest.mark.integration
def test_the_executable_prints_the_captures_layouts(sim):
    out, err, code = run_tool(sim, "-i", "0", "-optical", "-g")
    assert (err, code) == ("", 0)
    assert layout(out) == layout(capture("optical_4lane_qsfp_910a_faultdiag-test.txt"))
    assert parse_optical(out).present is True
    out, _, _ = run_tool(sim, "-i", "0", "-link_stat", "-g")
    real = capture("link_stat_with-link-down-count_hccl-doc.txt").splitlines()
    assert layout(out)[:4] == layout("\n".join(real))[:4]
    assert out.splitlines()[4].startswith("[devid 0]    ") and out.splitlines()[4].endswith("    LINK UP")
    assert run_tool(sim, "-i", "0", "-link", "-g")[0] == capture("link_up_mc-faultdiag-doc.txt")
    assert run_tool(sim, "-i", "0", "-net_health", "-g")[0] == capture("net_health_success_mc-elastic-doc.txt")
    assert run_tool(sim, "-i", "0", "-speed", "-g")[0] == capture("speed_inline-quote_thirdparty-note.txt")
    assert run_tool(sim, "-i", "0", "-ip", "-g")[0] == capture("ip_910a_faultdiag-test.txt")
    assert run_tool(sim, "-i", "1", "-ip", "-g")[0] == capture("ip_dev1_910a_faultdiag-test.txt")
    stat = parse.parse_stat(run_tool(sim, "-i", "0", "-stat", "-g")[0])
    assert list(stat) == sim_hccn.STAT_KEYS and len(stat) == 48  # 49 lines with the header on 910B
    tx, rx = parse.parse_bandwidth(run_tool(sim, "-i", "0", "-bandwidth", "-g")[0])
    assert tx > 0 and rx > 0


@pytest.mark.integration
def test_the_executable_fails_as_the_tool_does(tmp_path, sim):
    assert run_tool(sim, "-link", "-g") == ("", 'Get invalid major cmd type. The valid major cmd type should be '
                                            '"-a" or "-i".\nEnter [ hccn_tool -h ] for more details.\n', 1)
    assert run_tool(sim, "-i", "123", "-link", "-g") == ("", "Get invalid device id.\n", 4)
    assert run_tool(sim, "-i", "0", "-nosuch", "-g")[1:] == (
        "Get invalid major cmd.\nEnter [ hccn_tool -h ] for more details.\n", 3)
    misconfigured = prepare_simulation(str(tmp_path / "mis"), "network-misconfigured", time_scale=0, latency_scale=0)
    assert run_tool(misconfigured, "-i", "7", "-ip", "-g") == (
        "", "Get ipconf failed, because no ip was preset there!\n", 13)  # 0x400D & 0xFF
    assert run_tool(misconfigured, "-i", "7", "-gateway", "-g") == (
        "", "Get gateway failed, because no gateway was preset there!\n", 2)
    duo = prepare_simulation(str(tmp_path / "duo"), "healthy", product="atlas-300i-duo", time_scale=0,
                             latency_scale=0)
    assert run_tool(duo, "-i", "0", "-link", "-g") == ("The command is not supported on this product.\n", "", 13)


def test_in_process_answers_alike_and_a_blocking_chip_waits_out_the_deadline(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "network-not-ready", time_scale=0, latency_scale=0)
    slept = []
    spawn = InProcessNpuSmi(sleep=slept.append)
    runner = CommandRunner([], 5.0, env=sim.env, spawn=spawn)
    result = runner.run(["-i", "0", "-link", "-g"], program=[sys.executable, "-m", sim_hccn.MODULE])
    assert (result.returncode, result.stdout) == (0, "link status: UP\n")
    blocked = runner.run(["-i", "2", "-link", "-g"], program=[sys.executable, "-m", sim_hccn.MODULE])
    assert blocked.timed_out and slept[-1] == 5.0  # the tool would wait 300 s for the chip
    call = sim_hccn.begin_call(["-i", "2", "-link", "-g"], sim.env["NPUMON_SIM_STATE"], 0.0)
    assert call.wait_seconds >= sim_hccn.NOT_READY_SECONDS
    assert call.answer() == ("", "Get device health status failed!\n", 3)


def test_latency_model():
    rng = random.Random(7)
    link = [sim_hccn.call_seconds(["-i", "0", "-link", "-g"], rng) for _ in range(200)]
    bandwidth = [sim_hccn.call_seconds(["-i", "0", "-bandwidth", "-g"], rng) for _ in range(200)]
    assert 0.12 <= min(link) and max(link) <= 0.18
    assert 0.92 <= min(bandwidth) and max(bandwidth) <= 1.38  # the 1 s sample window dominates
