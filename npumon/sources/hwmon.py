"""Linux hwmon devices (Documentation/hwmon/sysfs-interface): find one by name, read and write its files.

A device is a directory /sys/class/hwmon/hwmonN whose number can change from boot to boot, so the config
names it by the content of its `name` file. Files of interest: pwmN (duty 0..255), pwmN_enable (0 = no
control, fans at full speed; 1 = manual, pwmN is obeyed; 2 and up = automatic, chip specific),
tempN_input (millidegrees Celsius) and tempN_label. Every path is under `root`, so tests use a fake tree.
"""

import glob
import os
import re
from typing import Dict, List, Optional

HWMON_DIR = "sys/class/hwmon"
PWM_MAX = 255


class HwmonError(Exception):
    """One line: which file, what went wrong."""


def hwmon_devices(root: str) -> Dict[str, str]:
    """name -> device directory, for every hwmon device under root (the first of equal names wins)."""
    devices: Dict[str, str] = {}
    for directory in sorted(glob.glob(os.path.join(root, HWMON_DIR, "hwmon*")), key=_natural):
        try:
            name = read_text(os.path.join(directory, "name"))
        except HwmonError:
            continue
        devices.setdefault(name, directory)
    return devices


def find_device(root: str, name: str) -> str:
    """The directory of the hwmon device called `name`; HwmonError naming the devices there otherwise."""
    devices = hwmon_devices(root)
    if name not in devices:
        found = ", ".join(sorted(devices)) or "none"
        raise HwmonError("no hwmon device named {!r} under /{} (found: {})".format(name, HWMON_DIR, found))
    return devices[name]


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise HwmonError("cannot read {}: {}".format(path, getattr(exc, "strerror", None) or exc)) from None


def read_int(path: str) -> int:
    text = read_text(path)
    try:
        return int(text)
    except ValueError:
        raise HwmonError("{}: expected a whole number, got {!r}".format(path, text[:40])) from None


def write_text(path: str, text: str) -> None:
    """One write of the whole value, as sysfs attributes want it."""
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    except OSError as exc:
        raise HwmonError("cannot write {}: {}".format(path, exc.strerror or exc)) from None


def temperatures(device: str, label: str = "") -> List[float]:
    """Degrees Celsius of the device's temp*_input files (only the one labelled `label`, if given)."""
    values = []
    for path in sorted(glob.glob(os.path.join(device, "temp*_input")), key=_natural):
        if label:
            label_path = path[:-len("_input")] + "_label"
            if not os.path.exists(label_path) or read_text(label_path) != label:
                continue
        values.append(read_int(path) / 1000.0)
    return values


def percent_to_pwm(percent: int) -> int:
    return int(percent * PWM_MAX / 100.0 + 0.5)  # half up (round() would give 178 for 70%)


def pwm_to_percent(value: int) -> int:
    return int(value * 100.0 / PWM_MAX + 0.5)


def _natural(path: str) -> List[object]:
    """hwmon2 before hwmon10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", os.path.basename(path))]


def optional_int(path: str) -> Optional[int]:
    """The number in `path`, or None when the file does not exist."""
    if not os.path.exists(path):
        return None
    return read_int(path)
