"""The shipped systemd units pass `systemd-analyze verify`, the daemon's unit rates 4.0 or better in
`systemd-analyze security`, and the example config lists every key with its true default."""

import dataclasses
import os
import re
import shutil
import subprocess
import typing

import pytest
import yaml

from npumon.config.load import parse_config
from npumon.config.schema import Config
from paths import REPO

UNIT = os.path.join(REPO, "systemd", "npumon.service")
TEXTFILE_UNITS = [os.path.join(REPO, "exporters", "textfile", name)
                  for name in ("npumon-textfile.service", "npumon-textfile.timer")]
EXAMPLE_CONFIG = os.path.join(REPO, "systemd", "npumon.yaml")
SHIPPED_EXEC = "/usr/local/bin/npumon"


def systemd_analyze():
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    return path


def installed_copy(unit_path, directory):
    """The unit with ExecStart pointing at the npumon on PATH: verify insists that the binary exists."""
    npumon = shutil.which("npumon")
    if npumon is None:
        pytest.skip("npumon is not installed on PATH (pip install -e .)")
    target = os.path.join(str(directory), os.path.basename(unit_path))
    with open(unit_path, encoding="utf-8") as source, open(target, "w", encoding="utf-8") as copy:
        copy.write(source.read().replace(SHIPPED_EXEC, npumon))
    return target


def unit_settings(path):
    """[Service] and friends as (key, value) pairs, comments dropped."""
    with open(path, encoding="utf-8") as handle:
        return [tuple(line.split("=", 1)) for line in (raw.strip() for raw in handle)
                if line and not line.startswith(("#", "[")) and "=" in line]


@pytest.mark.parametrize("units", [[UNIT], TEXTFILE_UNITS], ids=["npumon.service", "npumon-textfile"])
def test_units_verify_clean(tmp_path, units):
    analyze = systemd_analyze()
    copies = [installed_copy(unit, tmp_path) for unit in units]
    result = subprocess.run([analyze, "verify"] + copies, capture_output=True, text=True, timeout=60,
                            cwd=str(tmp_path))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr


@pytest.mark.parametrize("unit", [UNIT, TEXTFILE_UNITS[0]], ids=["npumon.service", "npumon-textfile.service"])
def test_security_exposure_is_4_or_lower(tmp_path, unit):
    analyze = systemd_analyze()
    result = subprocess.run([analyze, "security", "--offline=true", installed_copy(unit, tmp_path)],
                            capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", result.stdout)
    assert match, result.stdout + result.stderr
    assert float(match.group(1)) <= 4.0, result.stdout


def test_unit_is_a_notify_service_with_watchdog_reload_restart_and_the_npu_devices():
    settings = unit_settings(UNIT)
    values = dict(settings)
    assert values["Type"] == "notify" and values["NotifyAccess"] == "main"
    assert int(values["WatchdogSec"]) >= 30
    assert values["Restart"] == "on-failure"  # covers a watchdog timeout too
    assert values["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert values["ExecStart"].startswith(SHIPPED_EXEC + " run ")
    assert int(values["TimeoutStopSec"]) > 5  # npumon stops within 5 s
    assert values["StateDirectory"] == "npumon" and values["ProtectSystem"] == "strict"
    assert "PrivateDevices" not in values  # it would hide the NPU device nodes
    allowed = [value for key, value in settings if key == "DeviceAllow"]
    for device in ("/dev/davinci_manager rw", "/dev/devmm_svm rw", "/dev/hisi_hdc rw", "char-devdrv-cdev rw"):
        assert device in allowed
    assert values["DevicePolicy"] == "closed"


def test_timer_runs_the_textfile_service_every_minute():
    values = dict(unit_settings(TEXTFILE_UNITS[1]))
    assert values["OnUnitActiveSec"] == "1min"
    service = dict(unit_settings(TEXTFILE_UNITS[0]))
    assert service["Type"] == "oneshot" and service["SuccessExitStatus"] == "1 2"


# -- the example config -------------------------------------------------------------------------------------

SETTING_LINE = re.compile(r"(?m)^(\s*)#(\s*)([a-z_]+):(?=\s|$)")  # `#key: value`, `#  key: value`


def uncommented(text):
    """The example with every `#key:` setting switched on."""
    return SETTING_LINE.sub(r"\1\2\3:", text)


def test_example_config_loads_as_is_and_with_every_setting_switched_on():
    with open(EXAMPLE_CONFIG, encoding="utf-8") as handle:
        text = handle.read()
    assert parse_config(text, EXAMPLE_CONFIG) == dataclasses.replace(Config(), source=EXAMPLE_CONFIG)
    # the documented values are the real defaults
    assert parse_config(uncommented(text), EXAMPLE_CONFIG) == dataclasses.replace(Config(), source=EXAMPLE_CONFIG)


def missing_keys(cls, mapping, prefix=""):
    """Dotted names of the dataclass fields (recursively) that the mapping does not mention."""
    hints = typing.get_type_hints(cls)
    missing = []
    for item in dataclasses.fields(cls):
        if item.name == "source":
            continue
        name = prefix + item.name
        if not isinstance(mapping, dict) or item.name not in mapping:
            missing.append(name)
        elif dataclasses.is_dataclass(hints[item.name]):
            missing += missing_keys(hints[item.name], mapping[item.name], name + ".")
    return missing


def test_example_config_lists_every_key():
    with open(EXAMPLE_CONFIG, encoding="utf-8") as handle:
        document = yaml.safe_load(uncommented(handle.read()))
    assert missing_keys(Config, document) == []
