"""Fan drivers: npu-smi pwm against the documented texts and the simulated boards, hwmon against a fake
sysfs tree in a temp directory, and the command driver with real subprocesses (no shell, a deadline)."""

import stat
import sys
from pathlib import Path

import pytest

from npumon.services.control.drivers import (AUTO, FULL_SPEED, MANUAL, MIXED, CommandFanDriver, FanReading, HwmonFanDriver,
                                    NpuSmiFanDriver, apply_safe_state, build_fan_driver, driver_from_spec,
                                    npu_smi_set_outcome, parse_pwm, substitute_duty)
from npumon.services.control.settings import ControlConfig, FanConfig
from npumon.sim.simulation import prepare_simulation
from npumon.sources.runner import CommandResult, CommandRunner
from paths import FIXTURES

FIXTURES = Path(FIXTURES)


def doc_examples():
    """The four official examples of the pwm commands, keyed by their command line."""
    text = (FIXTURES / "doc_fan-control_pwm_atlas200idk-a2.txt").read_text().split("# ---\n", 1)[1]
    examples = {}
    for block in text.strip().split("\n\n"):
        command, _, output = block.partition("\n")
        examples[command] = output + "\n"
    return examples


def result(stdout, returncode=0):
    return CommandResult(["npu-smi"], returncode, stdout, "", 0.1)


# -- npu-smi: texts ----------------------------------------------------------------------------------------


def test_the_documented_pwm_outputs_parse_whatever_their_spacing():
    examples = doc_examples()
    assert parse_pwm(examples["npu-smi info -t pwm-mode"]) == ("auto", None)
    assert parse_pwm(examples["npu-smi info -t pwm-duty-ratio"]) == (None, 40)
    assert npu_smi_set_outcome(result(examples["npu-smi set -t pwm-mode -d 0"])).message == \
        "Set pwm manual mode success"
    outcome = npu_smi_set_outcome(result(examples["npu-smi set -t pwm-duty-ratio -d 40"]))
    assert outcome.ok and outcome.message == "Set pwm duty ratio 40 success"


def test_set_outcomes_that_are_not_ok_are_failures_with_npu_smis_words():
    refused = npu_smi_set_outcome(result("Setting duty ratio is not allowed in the current auto mode.\n"))
    assert not refused.ok and refused.message == "Setting duty ratio is not allowed in the current auto mode."
    failed = npu_smi_set_outcome(result("\tStatus                         : Fail\n"
                                        "\tMessage                        : Failed to set chip nve-level\n"))
    assert not failed.ok and failed.message == "Failed to set chip nve-level"
    assert npu_smi_set_outcome(result("This device does not support setting pwm-mode.\n")).message == \
        "This device does not support setting pwm-mode."
    assert "timed out" in npu_smi_set_outcome(CommandResult(["npu-smi"], None, "", "", 5.0, timed_out=True)).message


# -- npu-smi: the simulated boards -------------------------------------------------------------------------


def sim_driver(tmp_path, product):
    sim = prepare_simulation(str(tmp_path), "healthy", product=product, time_scale=0)
    # npu-smi answered in-process (sim.spawn): no interpreter start per pwm call
    runner = CommandRunner(sim.npu_smi_argv, 10, 1, env=sim.env, spawn=sim.spawn)
    return NpuSmiFanDriver(runner, sim.npu_smi_argv, sim.env, 10)


def test_the_310b_board_is_probed_driven_read_back_and_handed_back_to_auto(tmp_path):
    driver = sim_driver(tmp_path, "atlas-200i-a2")
    probe = driver.probe()
    assert probe.available and probe.detail == "npu-smi pwm, mode auto"
    reading, error = driver.read()
    assert error is None and reading.mode == AUTO
    assert reading.duty_percent <= 39  # the documented ceiling of the auto curve
    assert driver.set_duty(65).ok
    assert driver.read() == (FanReading(MANUAL, 65), None)
    assert driver.set_auto().message == "Set pwm auto mode success"
    assert driver.read()[0].mode == AUTO


@pytest.mark.parametrize("product", ["atlas-800i-a2", "atlas-300i-duo"])
def test_servers_and_cards_report_fan_control_unavailable_with_the_reason(tmp_path, product):
    driver = sim_driver(tmp_path, product)
    probe = driver.probe()
    assert not probe.available
    assert probe.detail.startswith("npu-smi: This device does not support querying pwm-mode.")
    assert "the BMC owns the fans" in probe.detail
    failed = driver.set_duty(60)
    assert not failed.ok and "This device does not support setting pwm-mode." in failed.message


def test_a_missing_npu_smi_is_an_unavailable_driver_not_a_crash(tmp_path):
    driver = NpuSmiFanDriver(CommandRunner([str(tmp_path / "npu-smi")], 5, 1))
    probe = driver.probe()
    assert not probe.available and "cannot run" in probe.detail


# -- hwmon ---------------------------------------------------------------------------------------------------


def hwmon_tree(root, enable="2", pwm="100"):
    base = root / "sys" / "class" / "hwmon"
    (base / "hwmon0").mkdir(parents=True)
    (base / "hwmon0" / "name").write_text("acpitz\n")
    fan = base / "hwmon3"
    fan.mkdir()
    (fan / "name").write_text("pwmfan\n")
    for channel in (1, 2):
        (fan / "pwm{}".format(channel)).write_text(pwm + "\n")
        if enable is not None:
            (fan / "pwm{}_enable".format(channel)).write_text(enable + "\n")
    return fan


def test_hwmon_sets_manual_duty_and_restores_the_automatic_mode_it_found(tmp_path):
    fan = hwmon_tree(tmp_path, enable="5")
    driver = HwmonFanDriver(str(tmp_path), "pwmfan", [1, 2])
    assert driver.probe().available
    assert driver.read() == (FanReading(AUTO, 39), None)  # pwm 100 of 255
    assert driver.set_duty(60).ok
    assert [(fan / name).read_text() for name in ("pwm1", "pwm1_enable", "pwm2", "pwm2_enable")] == \
        ["153", "1", "153", "1"]
    assert driver.read() == (FanReading(MANUAL, 60), None)
    (fan / "pwm2").write_text("40\n")
    assert driver.read() == (FanReading(MIXED, None), None)  # channels that disagree never look as expected
    assert apply_safe_state(driver, "auto").ok
    assert (fan / "pwm1_enable").read_text() == "5"  # the chip's own automatic mode, as found
    assert apply_safe_state(driver, "full").ok and (fan / "pwm2").read_text() == "255"


def test_hwmon_in_the_watchdog_restores_the_mode_found_at_probe_time(tmp_path):
    fan = hwmon_tree(tmp_path, enable="3")
    driver = HwmonFanDriver(str(tmp_path), "pwmfan", [1])
    driver.probe()
    driver.set_duty(50)
    rebuilt = driver_from_spec(driver.spec())  # as the watchdog process does, after npumon set manual mode
    assert rebuilt.set_auto().ok and (fan / "pwm1_enable").read_text() == "3"


def test_hwmon_problems_are_reported_not_raised(tmp_path):
    missing = HwmonFanDriver(str(tmp_path), "pwmfan", [1]).probe()
    assert not missing.available and "no hwmon device named 'pwmfan'" in missing.detail
    fan = hwmon_tree(tmp_path, enable=None)
    assert "found: acpitz, pwmfan" in HwmonFanDriver(str(tmp_path), "nct6775", [1]).probe().detail
    assert "no pwm3" in HwmonFanDriver(str(tmp_path), "pwmfan", [3]).probe().detail
    driver = HwmonFanDriver(str(tmp_path), "pwmfan", [1])
    assert driver.probe().available and driver.read()[0].mode == MANUAL  # no enable file: pwm always obeyed
    refused = driver.set_auto()
    assert not refused.ok and "no pwm1_enable" in refused.message
    (fan / "pwm1").unlink()
    (fan / "pwm1").mkdir()  # a write that fails
    failed = driver.set_duty(70)
    assert not failed.ok and "cannot write" in failed.message and "pwm1" in failed.message


def test_hwmon_enable_zero_reads_as_full_speed(tmp_path):
    hwmon_tree(tmp_path, enable="0", pwm="0")
    assert HwmonFanDriver(str(tmp_path), "pwmfan", [1]).read() == (FanReading(FULL_SPEED, 0), None)


# -- a user command -------------------------------------------------------------------------------------------


def recorder(tmp_path, sleep=0.0, status=0):
    """An executable that writes its arguments, one per line, to args.txt (and may sleep or fail)."""
    script = tmp_path / "fanctl"
    script.write_text("#!{} -S\nimport sys, time\ntime.sleep({})\nopen({!r}, 'w').write('\\n'.join(sys.argv[1:]))\n"
                      "sys.exit({})\n".format(sys.executable, sleep, str(tmp_path / "args.txt"), status))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


def test_the_duty_is_substituted_and_the_command_runs_without_a_shell(tmp_path):
    program = recorder(tmp_path)
    driver = CommandFanDriver(CommandRunner([], 10, 1), [program, "raw", "0x30", "{duty_hex}", "{duty}%", "a;b $X"],
                              auto_command=[program, "auto"])
    assert driver.probe().available
    assert driver.set_duty(60).ok
    assert (tmp_path / "args.txt").read_text().split("\n") == ["raw", "0x30", "0x3c", "60%", "a;b $X"]
    assert driver.set_auto().ok and (tmp_path / "args.txt").read_text() == "auto"
    assert driver.read() == (None, None) and not driver.can_read
    assert substitute_duty(["{duty}", "x{duty_hex}"], 100) == ["100", "x0x64"]


def test_a_command_past_its_deadline_is_killed_and_is_a_failure_that_names_no_arguments(tmp_path):
    program = recorder(tmp_path, sleep=30)
    driver = CommandFanDriver(CommandRunner([], 0.5, 1), [program, "-P", "s3cret", "{duty}"])
    failed = driver.set_duty(50)
    assert not failed.ok and "timed out" in failed.message and "s3cret" not in failed.message
    assert not (tmp_path / "args.txt").exists()


def test_command_probes_and_failures(tmp_path):
    assert "not an executable file or on PATH" in CommandFanDriver(
        CommandRunner([], 5, 1), [str(tmp_path / "nope"), "{duty}"]).probe().detail
    failing = recorder(tmp_path, status=3)
    probe = CommandFanDriver(CommandRunner([], 5, 1), [failing, "{duty}"], probe_command=[failing, "probe"]).probe()
    assert not probe.available and "probe_command failed: exit status 3" in probe.detail
    no_auto = CommandFanDriver(CommandRunner([], 5, 1), [failing, "{duty}"]).set_auto()
    assert not no_auto.ok and "auto_command" in no_auto.message
    assert "exit status 3" in CommandFanDriver(CommandRunner([], 5, 1), [failing, "{duty}"]).set_duty(40).message


def test_the_config_chooses_the_driver(tmp_path):
    def build(**fan):
        return build_fan_driver(ControlConfig(fan=FanConfig(**fan)), ["npu-smi"], None, str(tmp_path), 10)

    assert build().name == "npu-smi"
    assert build(driver="hwmon", hwmon_name="pwmfan").name == "hwmon"
    assert build(driver="command", command=["ipmitool", "{duty}"]).name == "command"
    assert build(driver="none") is None
