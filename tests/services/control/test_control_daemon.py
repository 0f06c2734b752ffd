"""Stopping the daemon leaves the simulated fans in the safe state: SIGTERM, kill -9 (the watchdog process
steps in), and a crash of the control job. `npumon run` is a real process here (tests/daemon_harness.py),
except for the crash, which needs a broken function injected in-process."""

import json
import os
import signal
import time

import psutil
import pytest

from daemon_harness import DaemonProcess, kill_leftovers, wait_until
from npumon.settings import parse_config
from npumon.services.control import service as service_module
from npumon.daemon.daemon import Daemon
from npumon.sim.knobs import read_knobs
from npumon.sim.simulation import prepare_simulation
from npumon.sim.target import simulated_target

CONFIG = """\
state_dir: {state}
npu_smi_timeout_seconds: 10
poll: {{table_seconds: 1, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 0, board_seconds: 0}}
control:
  enabled: true
  interval_seconds: 0.5
  stale_after_seconds: 6
"""
SCENARIO = "product: atlas-200i-a2\nchips:\n  default: {temperature_celsius: 65, board_temperature_celsius: 30}\n"


@pytest.fixture
def host(tmp_path):
    (tmp_path / "board.yaml").write_text(SCENARIO)
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state"))
    sim_state = tmp_path / "sim"
    args = ["--config", str(config), "--simulate", str(tmp_path / "board.yaml"), "--sim-state", str(sim_state),
            "--listen", "127.0.0.1:0", "--log-level", "info"]
    daemons = []

    def start():
        daemons.append(DaemonProcess(args))
        return daemons[-1]

    yield start, sim_state, tmp_path / "state"
    for daemon in daemons:
        daemon.close()
    kill_leftovers(str(sim_state))


def fan_mode(sim_state):
    return read_knobs(str(sim_state))["pwm_mode"]


def watchdog_pid(state_dir):
    """The watchdog's pid from the daemon's control.json (written at the end of the tick that set the fans)."""
    path = state_dir / "control.json"
    return wait_until(lambda: path.exists() and json.loads(path.read_text())["watchdog_pid"], timeout=10,
                      what="control.json naming the watchdog")


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_sigterm_hands_the_fans_back_and_the_watchdog_leaves(host):
    start, sim_state, state_dir = host
    daemon = start()
    daemon.wait_for_line(r"set the fan duty to 55%", timeout=30)
    assert fan_mode(sim_state) == "manual"
    watchdog = watchdog_pid(state_dir)
    daemon.stop(timeout=15)
    assert daemon.proc.returncode == 0
    assert fan_mode(sim_state) == "auto"
    assert any("put the fans in the safe state (automatic control) (npumon is stopping)" in line
               for line in daemon.lines)
    wait_until(lambda: gone(watchdog), timeout=10, what="the disarmed watchdog to exit")
    assert not (state_dir / "control.json").exists()


def test_kill_9_leaves_the_watchdog_to_put_the_fans_in_the_safe_state(host):
    start, sim_state, state_dir = host
    daemon = start()
    daemon.wait_for_line(r"set the fan duty to 55%", timeout=30)
    watchdog = watchdog_pid(state_dir)
    os.kill(daemon.proc.pid, signal.SIGKILL)  # the daemon alone: the watchdog lives in a session of its own
    daemon.proc.wait(10)
    wait_until(lambda: fan_mode(sim_state) == "auto", timeout=20, what="the fans back in auto mode")
    wait_until(lambda: gone(watchdog), timeout=10, what="the watchdog to exit after acting")
    daemon._reader.join(5)
    assert any("npumon control watchdog: npumon exited without handing the fans back; fans put in the safe state"
               in line for line in daemon.lines)


def test_a_crash_of_the_control_job_puts_the_fans_in_the_safe_state_and_stop_keeps_them_there(tmp_path,
                                                                                            monkeypatch):
    (tmp_path / "board.yaml").write_text(SCENARIO)
    sim = prepare_simulation(str(tmp_path / "sim"), str(tmp_path / "board.yaml"))
    config = parse_config(CONFIG.format(state=tmp_path / "state"))
    daemon = Daemon(config, simulated_target(sim),
                    listen="127.0.0.1:0")
    daemon.start()
    try:
        wait_until(lambda: fan_mode(tmp_path / "sim") == "manual", timeout=30, what="the governor taking over")

        def broken(*_args):
            raise RuntimeError("a bug in the control code")

        monkeypatch.setattr(service_module, "decide", broken)
        control = [service for service in daemon.services if service.name == "control"][0]
        wait_until(lambda: control.state.mode == "safe" and control.state.safe_confirmed, timeout=20,
                   what="the safe state after the crash")
        assert fan_mode(tmp_path / "sim") == "auto"
    finally:
        daemon.stop()
    assert fan_mode(tmp_path / "sim") == "auto"
    time.sleep(0.2)
    kill_leftovers(str(tmp_path / "sim"))
