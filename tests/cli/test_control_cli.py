"""`npumon control` end to end against a simulated board that persists between calls (npu_smi in the config
points at the simulator), with the event history in a temp state_dir. The commands run in-process through
npumon.cli.main.main (the npu-smi calls are real subprocesses); one test runs the real entry point."""

import json
import os
import stat
import subprocess
import sys

import pytest

from npumon.cli import control as control_cli
from npumon.cli import main as cli
from npumon.services.events.store import EventStore, events_path
from npumon.sim.knobs import read_knobs
from npumon.sim.simulation import prepare_simulation


@pytest.fixture
def make_host(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(control_cli, "setup_logging", lambda level: None)  # leave pytest's log capture alone

    def make(product, control="  enabled: true\n", where=""):
        host = Host(tmp_path / where if where else tmp_path, product, control, capsys)
        monkeypatch.setenv("NPUMON_SIM_STATE", host.sim.env["NPUMON_SIM_STATE"])
        return host

    return make


class Host:
    """A simulated host, a config for it, and a way to run `npumon control ...` against it."""

    def __init__(self, tmp_path, product, control, capsys):
        self.capsys = capsys
        self.state_dir = tmp_path / "state"
        self.sim = prepare_simulation(str(tmp_path / "sim"), "healthy", product=product, time_scale=0)
        wrapper = tmp_path / "npu-smi"
        wrapper.write_text("#!{}\nimport sys\nfrom npumon.sim.npusmi import main\nsys.exit(main())\n".format(
            sys.executable))
        wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
        self.config = tmp_path / "npumon.yaml"
        self.config.write_text("npu_smi: {}\nstate_dir: {}\ncontrol:\n{}".format(wrapper, self.state_dir, control))

    def run(self, *args):
        """(exit status, stdout, stderr) of `npumon control ARGS --config CONFIG`, with this host's simulator."""
        os.environ["NPUMON_SIM_STATE"] = self.sim.env["NPUMON_SIM_STATE"]
        self.capsys.readouterr()
        try:
            status = cli.main(["control", *args, "--config", str(self.config)])
        except SystemExit as exit:  # argparse on bad usage
            status = exit.code
        out, err = self.capsys.readouterr()
        return status, out, err

    def knobs(self):
        return read_knobs(self.sim.env["NPUMON_SIM_STATE"])

    def events(self):
        return [(event.kind, event.message) for event in EventStore(events_path(str(self.state_dir))).query()]


def test_status_on_the_310b_board_shows_the_driver_the_fans_and_the_power_profiles(make_host):
    host = make_host("atlas-200i-a2")
    status, out, err = host.run("status")
    assert status == 0, err
    assert "fan driver:  npu-smi: npu-smi pwm, mode auto\n" in out
    assert "fans now:    auto " in out and "daemon:      no running npumon drives the fans\n" in out
    assert "power:       310B4: performance (nve-level 0), quiet (nve-level 1)\n" in out
    report = json.loads(host.run("status", "--json")[1])
    assert report["available"] is True and report["fans"]["mode"] == "auto" and report["daemon"] is None
    assert not host.state_dir.exists()  # looking changes nothing, not even the history


def test_status_on_a_910b_host_says_why_fan_control_is_unavailable(make_host):
    status, out, _ = make_host("atlas-800i-a2").run("status")
    assert status == 0
    assert "fan driver:  npu-smi: unavailable: npu-smi: This device does not support querying pwm-mode." in out
    assert "power:       910B3: no power knob on this product\n" in out


def test_a_manual_duty_is_set_and_recorded_and_one_below_the_floor_is_refused(make_host):
    host = make_host("atlas-200i-a2")
    assert host.run("fan", "--duty", "20")[:2] == (1, "")
    assert host.knobs()["pwm_mode"] == "auto"
    status, out, err = host.run("fan", "--duty", "70")
    assert (status, out) == (0, "set the fan duty to 70%: Set pwm duty ratio 70 success\n"), err
    assert (host.knobs()["pwm_mode"], host.knobs()["pwm_duty"]) == ("manual", 70)
    assert host.run("fan", "--auto")[0] == 0 and host.knobs()["pwm_mode"] == "auto"
    assert host.events() == [
        ("control_refused", "refused (fan_duty): duty 20% is below the floor of 30% (control.fan.floor_percent)"),
        ("control_action", "set the fan duty to 70%: Set pwm duty ratio 70 success"),
        ("control_action", "hand the fans back to automatic control: Set pwm auto mode success")]


def test_the_safe_state_is_applied_when_control_is_on_and_nothing_happens_when_it_is_off(make_host):
    host = make_host("atlas-200i-a2", control="  enabled: true\n  safe_state: full\n")
    assert host.run("fan", "--safe")[:2] == (0, "put the fans in the safe state (full): Set pwm duty ratio 100 "
                                                 "success\n")
    assert (host.knobs()["pwm_mode"], host.knobs()["pwm_duty"]) == ("manual", 100)
    off = make_host("atlas-200i-a2", control="  enabled: false\n", where="off")
    status, out, _ = off.run("fan", "--safe")
    assert status == 0 and "control is off" in out and off.knobs()["pwm_mode"] == "auto"
    status, _, err = off.run("fan", "--duty", "50")
    assert status == 1 and "refused: control is off: set control.enabled: true in" in err


def test_on_a_910b_host_fan_commands_are_refused_with_the_reason_and_safe_is_a_no_op(make_host):
    host = make_host("atlas-800i-a2")
    status, _, err = host.run("fan", "--duty", "50")
    assert status == 1 and "refused: fan control unavailable: npu-smi: This device does not support" in err
    status, out, _ = host.run("fan", "--safe")
    assert status == 0 and "nothing to put in the safe state" in out


def test_a_dry_run_says_what_it_would_do_and_does_nothing(make_host):
    host = make_host("atlas-200i-a2", control="  enabled: true\n  dry_run: true\n")
    assert host.run("fan", "--duty", "60")[:2] == (0, "dry run: would set the fan duty to 60%\n")
    assert host.run("power", "quiet")[:2] == (0, "dry run: would set nve-level 1 on npu 0 chip 0 (profile quiet)\n")
    assert host.knobs()["pwm_mode"] == "auto" and host.knobs()["nve_level"] == {}


def test_power_profiles_use_the_knob_the_product_has_and_are_refused_where_there_is_none(make_host):
    board = make_host("atlas-200i-a2", where="board", control="  enabled: true\n  power:\n    profiles:\n"
                                                               "      balanced: {cpu-freq-up: 1}\n")
    status, out, _ = board.run("power", "quiet")
    assert (status, out) == (0, "set nve-level 1 on npu 0 chip 0 (profile quiet): The nve-level of the chip is set "
                                "successfully.\n")
    assert board.knobs()["nve_level"] == {"0/0": 1}
    status, _, err = board.run("power", "balanced")
    assert status == 1 and "profile 'balanced' sets cpu-freq-up, which 310B4 does not have (it has nve-level)" in err
    status, _, err = board.run("power", "turbo")
    assert status == 1 and "no profile 'turbo' for 310B4 (defined: performance, quiet" in err
    cards = make_host("atlas-300i-duo", where="cards")
    status, out, _ = cards.run("power", "quiet")
    assert status == 0 and out.count("Reset system for the configuration to take effect.") == 2
    assert cards.knobs()["cpu_freq_up"] == {"2": 1, "5": 1}
    server = make_host("atlas-800i-a2", where="server")
    status, _, err = server.run("power", "performance")
    assert status == 1 and "910B3 has no power knob" in err and "no power-mode or power-limit setting" in err
    assert server.events()[-1][0] == "control_refused"


def test_a_running_daemon_is_named_when_the_fans_are_set_by_hand(make_host):
    host = make_host("atlas-200i-a2")
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "npumon"])
    try:
        host.state_dir.mkdir()
        (host.state_dir / "control.json").write_text(json.dumps({"pid": daemon.pid, "mode": "curve",
                                                                 "duty_percent": 55, "decision": "x"}))
        status, _, err = host.run("fan", "--duty", "80")
        assert status == 0
        assert "the daemon (pid {}) drives these fans and will put its own duty back".format(daemon.pid) in err
        assert "daemon:      pid {} drives the fans: curve 55% (x)".format(daemon.pid) in host.run("status")[1]
    finally:
        daemon.kill()
        daemon.wait()
    assert "no running npumon drives the fans" in host.run("status")[1]  # a stale file is ignored


@pytest.mark.parametrize("args, expected", [
    (("fan",), "one of the arguments --duty --auto --safe is required"),
    (("fan", "--duty", "150"), "expected a whole percent 0..100"),
])
def test_bad_usage_exits_2(make_host, args, expected):
    status, _, err = make_host("atlas-200i-a2").run(*args)
    assert status == 2 and expected in err


def test_the_real_entry_point_a_bad_config_is_one_line_and_exit_2(make_host):
    host = make_host("atlas-200i-a2", control="  enabled: true\n  fan: {floor_percent: 300}\n")
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "control", "fan", "--safe", "--config",
                           str(host.config)], capture_output=True, text=True, timeout=120)
    assert (proc.returncode, proc.stdout) == (2, "")
    assert proc.stderr == "npumon: {}:5: control.fan.floor_percent: must be within 0..100\n".format(host.config)
