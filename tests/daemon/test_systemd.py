"""The shipped systemd units pass `systemd-analyze verify`, the daemon's unit rates 2.0 or better in
`systemd-analyze security` (the textfile service 4.0) without capabilities and with its limits, the optional
IPAddressAllow drop-in loads, and the example config lists every key with its true default."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import typing

import pytest
import yaml

from npumon.config.schema import STATE_DIR_ENV
from npumon.settings import Config, parse_config
from paths import REPO

UNIT = os.path.join(REPO, "systemd", "npumon.service")
TEXTFILE_UNITS = [os.path.join(REPO, "exporters", "textfile", name)
                  for name in ("npumon-textfile.service", "npumon-textfile.timer")]
EXAMPLE_CONFIG = os.path.join(REPO, "systemd", "npumon.yaml")
IP_DROPIN = os.path.join(REPO, "systemd", "npumon-ipaddressallow.conf.example")
KMSG_DROPIN = os.path.join(REPO, "systemd", "npumon-kmsg.conf.example")
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


def security_report(analyze, unit_name, cwd, *extra):
    """`systemd-analyze security --offline=true --json=short`: {setting name: (set, description)}, and the
    overall exposure from the plain report."""
    items = subprocess.run([analyze, "security", "--offline=true", "--json=short"] + list(extra) + [unit_name],
                           capture_output=True, text=True, timeout=60, cwd=str(cwd))
    assert items.returncode == 0, items.stdout + items.stderr
    plain = subprocess.run([analyze, "security", "--offline=true"] + list(extra) + [unit_name],
                           capture_output=True, text=True, timeout=60, cwd=str(cwd))
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", plain.stdout)
    assert match, plain.stdout + plain.stderr
    return {item["name"]: (item["set"], item["description"]) for item in json.loads(items.stdout)}, \
        float(match.group(1))


def test_daemon_unit_exposure_is_2_or_lower_without_capabilities(tmp_path):
    analyze = systemd_analyze()
    report, exposure = security_report(analyze, installed_copy(UNIT, tmp_path), tmp_path)
    assert exposure <= 2.0, report
    # systemd's own reading of the unit: no admin, raw I/O or permission-override capability is left,
    # and the service has its own mount namespace
    for setting in ("CapabilityBoundingSet=~CAP_SYS_ADMIN", "CapabilityBoundingSet=~CAP_SYS_RAWIO",
                    "CapabilityBoundingSet=~CAP_(DAC_*|FOWNER|IPC_OWNER)", "PrivateMounts=", "ProtectProc=",
                    "ProtectKernelLogs="):
        assert report[setting][0] is True, (setting, report[setting])


def test_unit_opens_the_npu_nodes_by_group_with_bounded_files_and_says_what_kmsg_needs():
    settings = unit_settings(UNIT)
    values = dict(settings)
    assert values["User"] == "root"  # npu-smi and DCMI test the effective uid for root-only output
    assert values["SupplementaryGroups"] == "HwHiAiUser"  # the device nodes' group (crw-rw----)
    assert values["CapabilityBoundingSet"] == ""
    assert int(values["LimitNOFILE"]) == 1024
    assert values["MemoryMax"] == "256M" and values["TasksMax"] == "128"
    assert values["ProtectProc"] == "invisible" and values["PrivateMounts"] == "yes"
    assert "ProcSubset" not in values  # the host source reads /proc/stat, /proc/meminfo and /proc/sys
    with open(UNIT, encoding="utf-8") as handle:
        text = handle.read()
    # closed today, and the unit says how to open it for the kernel-log fault source
    assert values["ProtectKernelLogs"] == "yes"
    for needed in ("ProtectKernelLogs=no", "DeviceAllow=/dev/kmsg r", "CAP_SYSLOG"):
        assert needed in text


def verified_with_dropin(analyze, tmp_path, dropin, name):
    """The unit installed in tmp_path with `dropin` as npumon.service.d/NAME beside it; `systemd-analyze verify`
    must load the two without a word. Returns the unit's path."""
    copy = installed_copy(UNIT, tmp_path)
    dropin_dir = tmp_path / "npumon.service.d"
    dropin_dir.mkdir()
    shutil.copy(dropin, str(dropin_dir / name))
    result = subprocess.run([analyze, "verify", copy], capture_output=True, text=True, timeout=60,
                            cwd=str(tmp_path))
    assert result.returncode == 0 and result.stdout + result.stderr == "", result.stdout + result.stderr
    return copy


def test_ipaddressallow_dropin_loads_clean_and_sets_an_allow_list(tmp_path):
    analyze = systemd_analyze()
    copy = verified_with_dropin(analyze, tmp_path, IP_DROPIN, "ipaddressallow.conf")
    values = dict(unit_settings(IP_DROPIN))
    assert values["IPAddressDeny"] == "any"
    assert "localhost" in [value for key, value in unit_settings(IP_DROPIN) if key == "IPAddressAllow"]
    # the drop-in as systemd loads it from /etc/systemd/system/npumon.service.d/
    system_dir = tmp_path / "root" / "etc" / "systemd" / "system"
    (system_dir / "npumon.service.d").mkdir(parents=True)
    shutil.copy(copy, str(system_dir / "npumon.service"))
    shutil.copy(IP_DROPIN, str(system_dir / "npumon.service.d" / "ipaddressallow.conf"))
    with_dropin, exposure = security_report(analyze, "npumon.service", tmp_path,
                                            "--root=" + str(tmp_path / "root"))
    assert "defines IP address allow list" in with_dropin["IPAddressDeny="][1], with_dropin["IPAddressDeny="]
    assert exposure <= 2.0


def test_kmsg_dropin_loads_clean_and_opens_only_the_kernel_log(tmp_path):
    analyze = systemd_analyze()
    verified_with_dropin(analyze, tmp_path, KMSG_DROPIN, "kmsg.conf")
    assert unit_settings(KMSG_DROPIN) == [("ProtectKernelLogs", "no"), ("DeviceAllow", "/dev/kmsg r"),
                                          ("CapabilityBoundingSet", "CAP_SYSLOG")]


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


def test_example_config_loads_as_is_and_with_every_setting_switched_on(monkeypatch):
    monkeypatch.delenv(STATE_DIR_ENV)  # the built-in defaults, not the test's own state dir (nothing is written)
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
