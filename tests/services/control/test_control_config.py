"""The `control:` config section: defaults (off), and every mistake as one `file:line: key: problem` line."""

import pytest

from npumon.config.errors import ConfigError
from npumon.settings import parse_config
from npumon.services.control.settings import curve_problems


def test_control_is_off_by_default_with_a_safe_governor():
    control = parse_config("").control
    assert (control.enabled, control.dry_run, control.safe_state) == (False, False, "auto")
    assert (control.fan.driver, control.fan.floor_percent, control.ambient.sensor) == ("npu-smi", 30.0, "none")
    assert curve_problems(control.fan.curve) == []


def test_a_full_control_section_is_read():
    control = parse_config("""\
control:
  enabled: true
  dry_run: true
  safe_state: full
  fan:
    driver: command
    command: [ipmitool, raw, "0x30", "0x91", "{duty_hex}"]
    curve: [[40, 35], [80, 100]]
    floor_percent: 35
    npus: [0, 1]
  ambient: {sensor: hwmon, hwmon_name: nct6775, hwmon_label: SYSTIN, threshold_celsius: 33}
  power:
    profiles:
      balanced: {nve-level: 2}
""").control
    assert control.fan.command[-1] == "{duty_hex}" and control.fan.curve == [[40.0, 35.0], [80.0, 100.0]]
    assert control.ambient.threshold_celsius == 33.0 and control.power.profiles == {"balanced": {"nve-level": 2}}


@pytest.mark.parametrize("text, expected", [
    ("control:\n  safe_state: quiet\n", "cfg.yaml:2: control.safe_state: must be one of auto, full"),
    ("control:\n  fan:\n    driver: bmc\n", "cfg.yaml:3: control.fan.driver: must be one of npu-smi, hwmon, command"),
    ("control:\n  fan:\n    curve: [[60, 40], [50, 60]]\n",
     "cfg.yaml:3: control.fan.curve: temperatures must rise from point to point"),
    ("control:\n  fan:\n    curve: [[50, 60], [60, 40]]\n",
     "cfg.yaml:3: control.fan.curve: duties must not fall as temperatures rise"),
    ("control:\n  fan:\n    curve: [[50, 160]]\n", "cfg.yaml:3: control.fan.curve: duties must be within 0..100"),
    ("control:\n  fan:\n    curve: [[50]]\n", "cfg.yaml:3: control.fan.curve: every point is [temperature C, duty %]"),
    ("control:\n  fan:\n    floor_percent: 120\n", "cfg.yaml:3: control.fan.floor_percent: must be within 0..100"),
    ("control:\n  fan:\n    max_changes_per_minute: 0\n",
     "cfg.yaml:3: control.fan.max_changes_per_minute: must be at least 1"),
    ("control:\n  fan:\n    driver: hwmon\n", "cfg.yaml:3: control.fan.hwmon_name: required with driver: hwmon"),
    ("control:\n  fan:\n    driver: command\n    command: [ipmitool, raw]\n",
     "cfg.yaml:4: control.fan.command: required with driver: command, and must contain {duty} or {duty_hex}"),
    ("control:\n  fan:\n    driver: command\n    command: [fanctl, '{duty}']\n",
     "cfg.yaml:3: control.fan.auto_command: required with driver: command and safe_state: auto"),
    ("poll:\n  table_seconds: 30\ncontrol:\n  stale_after_seconds: 20\n",
     "cfg.yaml:4: control.stale_after_seconds: must be longer than poll.table_seconds (30s)"),
    ("control:\n  ambient:\n    sensor: lm75\n", "cfg.yaml:3: control.ambient.sensor: must be one of none, npu-smi, hwmon"),
    ("control:\n  power:\n    profiles:\n      turbo: {power-limit: 300}\n",
     "cfg.yaml:4: control.power.profiles.turbo.power-limit: unknown knob (known: cpu-freq-up, nve-level)"),
    ("control:\n  power:\n    profiles:\n      turbo: {nve-level: 9}\n",
     "cfg.yaml:4: control.power.profiles.turbo.nve-level: must be within 0..3"),
    ("control:\n  enabled: yes please\n", "cfg.yaml:2: control.enabled: expected a boolean (true/false)"),
    ("control:\n  fan:\n    speed: 3\n", "cfg.yaml:3: control.fan.speed: unknown key"),
])
def test_every_mistake_is_one_line_naming_file_line_and_key(text, expected):
    with pytest.raises(ConfigError) as error:
        parse_config(text, "cfg.yaml")
    message = str(error.value)
    assert message.startswith(expected) and "\n" not in message
