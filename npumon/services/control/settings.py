"""The `control:` section of the config: the fan governor, its driver, the ambient sensor, power profiles.

Control is off by default. With `control.enabled: true` npumon drives the fans (and `npumon control` may
act); with `control.dry_run: true` as well it decides and logs, but touches nothing. Field names are the
YAML keys (config.py converts by type hints); `control_config_problems` holds the checks types cannot
express, as (dotted key, problem) pairs that config.py turns into `file:line: key: problem`.
"""

from dataclasses import dataclass, field
from typing import Dict, List, Tuple

from ...sources.ambient import AmbientConfig

FAN_DRIVERS = ("npu-smi", "hwmon", "command", "none")
SAFE_STATES = ("auto", "full")  # hand the fans back to the firmware's own curve, or run them at 100%
AMBIENT_SENSORS = ("none", "npu-smi", "hwmon")
# npu-smi power knobs and the values npu-smi accepts (nve-level: up to 3 on the 20T module, 1 on the 8T one)
POWER_KNOB_VALUES = {"nve-level": (0, 3), "cpu-freq-up": (0, 1)}
DUTY_PLACEHOLDERS = ("{duty}", "{duty_hex}")


def _default_curve() -> List[List[float]]:
    return [[45.0, 30.0], [60.0, 45.0], [70.0, 65.0], [80.0, 85.0], [85.0, 100.0]]


@dataclass(frozen=True)
class FanConfig:
    driver: str = "npu-smi"  # npu-smi | hwmon | command | none
    # [chip temperature C, duty %] points, interpolated; outside them the nearest point's duty
    curve: List[List[float]] = field(default_factory=_default_curve)
    floor_percent: float = 30.0  # the governor never sets a lower duty, and refuses manual ones below it
    hysteresis_celsius: float = 3.0  # the duty goes down only once temperatures fell this far below its point
    min_hold_seconds: float = 30.0  # a duty is kept at least this long before it may go down
    max_changes_per_minute: int = 4
    npus: List[int] = field(default_factory=list)  # cards whose chips drive the curve; empty = every card
    hwmon_name: str = ""  # hwmon driver: the device's `name` file, e.g. "pwmfan" or "nct6775"
    hwmon_pwm: List[int] = field(default_factory=lambda: [1])  # hwmon driver: pwm channels (pwm1, ...)
    # command driver: argv templates, run without a shell; {duty} = 0..100, {duty_hex} = 0x00..0x64
    command: List[str] = field(default_factory=list)
    auto_command: List[str] = field(default_factory=list)  # hands the fans back to automatic control
    probe_command: List[str] = field(default_factory=list)  # must exit 0 for the driver to count as there
    command_timeout_seconds: float = 10.0


@dataclass(frozen=True)
class PowerConfig:
    # profile name -> {knob: value}; adds to (or replaces) the built-in performance/quiet profiles
    profiles: Dict[str, Dict[str, int]] = field(default_factory=dict)


@dataclass(frozen=True)
class ControlConfig:
    enabled: bool = False
    dry_run: bool = False  # decide and log every decision, touch nothing
    safe_state: str = "auto"  # where the fans go when data is stale, a driver fails or npumon stops
    interval_seconds: float = 5.0  # the control loop
    stale_after_seconds: float = 60.0  # temperatures older than this count as missing
    retry_after_failure_seconds: float = 60.0  # after a failed driver call, stay in the safe state this long
    verify_seconds: float = 60.0  # read the fans back this often; re-assert when changed outside npumon; 0 = off
    watchdog: bool = True  # a separate process returns the fans to the safe state if npumon dies
    fan: FanConfig = field(default_factory=FanConfig)
    ambient: AmbientConfig = field(default_factory=AmbientConfig)
    power: PowerConfig = field(default_factory=PowerConfig)


def control_config_problems(config: ControlConfig, table_seconds: float) -> List[Tuple[str, str]]:
    """(dotted key, problem) for every setting that cannot work. `table_seconds`: poll.table_seconds."""
    problems: List[Tuple[str, str]] = []
    fan, ambient = config.fan, config.ambient

    def check(ok: bool, key: str, problem: str) -> None:
        if not ok:
            problems.append(("control." + key, problem))

    check(config.safe_state in SAFE_STATES, "safe_state", "must be one of " + ", ".join(SAFE_STATES))
    check(config.interval_seconds > 0, "interval_seconds", "must be greater than 0")
    check(config.stale_after_seconds > table_seconds, "stale_after_seconds",
          "must be longer than poll.table_seconds ({:g}s), or every temperature counts as stale".format(table_seconds))
    check(config.retry_after_failure_seconds >= 0, "retry_after_failure_seconds", "must be 0 or more")
    check(config.verify_seconds >= 0, "verify_seconds", "must be 0 (off) or more")
    check(fan.driver in FAN_DRIVERS, "fan.driver", "must be one of " + ", ".join(FAN_DRIVERS))
    problems.extend(("control.fan.curve", problem) for problem in curve_problems(fan.curve))
    check(0 <= fan.floor_percent <= 100, "fan.floor_percent", "must be within 0..100")
    check(fan.hysteresis_celsius >= 0, "fan.hysteresis_celsius", "must be 0 or more")
    check(fan.min_hold_seconds >= 0, "fan.min_hold_seconds", "must be 0 or more")
    check(fan.max_changes_per_minute >= 1, "fan.max_changes_per_minute", "must be at least 1")
    check(all(npu >= 0 for npu in fan.npus), "fan.npus", "card ids are 0 or more")
    if fan.driver == "hwmon":
        check(bool(fan.hwmon_name), "fan.hwmon_name", "required with driver: hwmon (the device's name file)")
        check(bool(fan.hwmon_pwm) and all(channel >= 1 for channel in fan.hwmon_pwm), "fan.hwmon_pwm",
              "list the pwm channels to drive, e.g. [1] for pwm1")
    if fan.driver == "command":
        check(bool(fan.command) and any(place in word for word in fan.command for place in DUTY_PLACEHOLDERS),
              "fan.command", "required with driver: command, and must contain {duty} or {duty_hex}")
        check(config.safe_state != "auto" or bool(fan.auto_command), "fan.auto_command",
              "required with driver: command and safe_state: auto (or use safe_state: full)")
        check(fan.command_timeout_seconds > 0, "fan.command_timeout_seconds", "must be greater than 0")
    check(ambient.sensor in AMBIENT_SENSORS, "ambient.sensor", "must be one of " + ", ".join(AMBIENT_SENSORS))
    check(0 <= ambient.min_duty_percent <= 100, "ambient.min_duty_percent", "must be within 0..100")
    check(ambient.poll_seconds > 0, "ambient.poll_seconds", "must be greater than 0")
    if ambient.sensor == "hwmon":
        check(bool(ambient.hwmon_name), "ambient.hwmon_name", "required with sensor: hwmon (the device's name file)")
    for name, knobs in config.power.profiles.items():
        if not knobs:
            problems.append(("control.power.profiles." + name, "set at least one knob ({})".format(
                ", ".join(sorted(POWER_KNOB_VALUES)))))
        for knob, value in knobs.items():
            key = "control.power.profiles.{}.{}".format(name, knob)
            if knob not in POWER_KNOB_VALUES:
                problems.append((key, "unknown knob (known: {})".format(", ".join(sorted(POWER_KNOB_VALUES)))))
            elif not POWER_KNOB_VALUES[knob][0] <= value <= POWER_KNOB_VALUES[knob][1]:
                problems.append((key, "must be within {}..{}".format(*POWER_KNOB_VALUES[knob])))
    return problems


def curve_problems(curve: List[List[float]]) -> List[str]:
    """What is wrong with a fan curve: [[temperature, duty], ...], temperatures rising, duties not falling."""
    if not curve:
        return ["needs at least one [temperature, duty] point"]
    if any(len(point) != 2 for point in curve):
        return ["every point is [temperature C, duty %]"]
    if any(not 0 <= duty <= 100 for _, duty in curve):
        return ["duties must be within 0..100"]
    temperatures = [temperature for temperature, _ in curve]
    if any(later <= earlier for earlier, later in zip(temperatures, temperatures[1:])):
        return ["temperatures must rise from point to point"]
    duties = [duty for _, duty in curve]
    if any(later < earlier for earlier, later in zip(duties, duties[1:])):
        return ["duties must not fall as temperatures rise"]
    return []
