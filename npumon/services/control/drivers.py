"""Fan drivers: npu-smi's pwm commands, Linux hwmon, or a command the user configures (e.g. ipmitool).

Every driver is probed before use and answers with a Probe (available, and what was found or why not). A
driver's outside effects go through one small object: a CommandRunner (argv lists, a deadline, the process
group killed on timeout) for npu-smi and commands, plain file reads and writes under a root for hwmon, so
tests swap in fakes or fake trees. No driver raises for a hardware fault: every call returns a
DriverResult, or an error string for reads.

Messages never contain a command's arguments: a BMC command line may carry a password.
"""

import os
import re
import shutil
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple

from ...sources import hwmon
from ...sources.npusmi.kv import npu_smi_problem
from ...sources.runner import CommandResult, CommandRunner
from .settings import ControlConfig

AUTO = "auto"
MANUAL = "manual"
FULL_SPEED = "full"  # hwmon pwmN_enable 0: no control, fans at full speed
MIXED = "mixed"  # hwmon channels disagree

NPU_SMI_FAN_HINT = ("npu-smi drives fans only on Atlas 200I A2 / 200I DK A2 boards (Ascend 310B, as root on bare "
                    "metal); on servers the BMC owns the fans: use control.fan.driver: command with your BMC's tool")


@dataclass(frozen=True)
class Probe:
    available: bool
    detail: str  # what was found, or why the driver cannot be used


@dataclass(frozen=True)
class FanReading:
    mode: str  # AUTO | MANUAL | FULL_SPEED | MIXED
    duty_percent: Optional[int]


@dataclass(frozen=True)
class DriverResult:
    ok: bool
    message: str


class Runner(Protocol):
    def run(self, args: Sequence[str], timeout_seconds: Optional[float] = None, label: str = "") -> CommandResult: ...

    def terminate_all(self) -> None: ...


class FanDriver(Protocol):
    name: str
    can_read: bool  # whether read() can tell the fans' state (a command driver cannot)

    def probe(self) -> Probe: ...

    def read(self) -> Tuple[Optional[FanReading], Optional[str]]: ...  # (reading, error)

    def set_duty(self, percent: int) -> DriverResult: ...

    def set_auto(self) -> DriverResult: ...

    def spec(self) -> Dict[str, Any]: ...  # JSON the watchdog process rebuilds this driver from

    def abort(self) -> None: ...  # kill calls in flight (at shutdown)


def apply_safe_state(driver: FanDriver, safe_state: str) -> DriverResult:
    """auto: hand the fans back to automatic control; full: run them at 100%."""
    return driver.set_auto() if safe_state == AUTO else driver.set_duty(100)


# -- npu-smi ----------------------------------------------------------------------------------------------

_STATUS = re.compile(r"^\s*Status\s*:\s*(\S+)", re.MULTILINE)
_MESSAGE = re.compile(r"^\s*Message\s*:\s*(.*?)\s*$", re.MULTILINE)
_PWM_MODE = re.compile(r"^\s*pwm-mode\s*:\s*(\w+)", re.MULTILINE)
_PWM_DUTY = re.compile(r"^\s*pwm-duty-ratio\(%\)\s*:\s*(\d+)", re.MULTILINE)


def npu_smi_set_outcome(result: CommandResult) -> DriverResult:
    """`npu-smi set` prints `Status : OK` and a `Message` on success; anything else is a failure."""
    problem = npu_smi_problem(result)
    if problem is not None:
        return DriverResult(False, problem)
    status = _STATUS.search(result.output)
    message = _MESSAGE.search(result.output)
    text = message.group(1) if message else ""
    if status and status.group(1) == "OK":
        return DriverResult(True, text or "OK")
    first = result.output.strip().splitlines()
    return DriverResult(False, text or (first[0][:200] if first else result.describe_failure()))


def parse_pwm(text: str) -> Tuple[Optional[str], Optional[int]]:
    """(mode, duty) from `npu-smi info -t pwm-mode` / `-t pwm-duty-ratio` output; None where absent."""
    mode = _PWM_MODE.search(text)
    duty = _PWM_DUTY.search(text)
    return (mode.group(1).lower() if mode else None), (int(duty.group(1)) if duty else None)


class NpuSmiFanDriver:
    """`npu-smi set -t pwm-mode -d 0|1` and `-t pwm-duty-ratio -d N` (Atlas 200I A2 class boards)."""

    name = "npu-smi"
    can_read = True

    def __init__(self, runner: Runner, argv: Sequence[str] = (), env: Optional[Dict[str, str]] = None,
                 timeout_seconds: float = 10.0, shared_runner: bool = False):
        """`shared_runner`: the runner is the daemon's one npu-smi pool, which its owner closes."""
        self.runner = runner
        self._argv, self._env, self._timeout = list(argv), env, timeout_seconds
        self._shared_runner = shared_runner

    def probe(self) -> Probe:
        result = self.runner.run(["info", "-t", "pwm-mode"])
        problem = npu_smi_problem(result)
        if problem is not None:
            hint = " ({})".format(NPU_SMI_FAN_HINT) if "does not support" in problem else ""
            return Probe(False, "npu-smi: {}{}".format(problem, hint))
        mode, _ = parse_pwm(result.output)
        if mode not in (AUTO, MANUAL):
            return Probe(False, "npu-smi info -t pwm-mode printed no pwm-mode line ({})".format(
                result.describe_failure()))
        return Probe(True, "npu-smi pwm, mode {}".format(mode))

    def read(self) -> Tuple[Optional[FanReading], Optional[str]]:
        values = []
        for query in ("pwm-mode", "pwm-duty-ratio"):
            result = self.runner.run(["info", "-t", query])
            problem = npu_smi_problem(result)
            if problem is not None:
                return None, "npu-smi info -t {}: {}".format(query, problem)
            values.append(parse_pwm(result.output))
        mode, duty = values[0][0], values[1][1]
        if mode not in (AUTO, MANUAL) or duty is None:
            return None, "npu-smi printed no pwm-mode or pwm-duty-ratio value"
        return FanReading(mode, duty), None

    def set_duty(self, percent: int) -> DriverResult:
        # npu-smi refuses a duty ratio in auto mode, so manual mode first (a no-op when already manual)
        manual = npu_smi_set_outcome(self.runner.run(["set", "-t", "pwm-mode", "-d", "0"]))
        if not manual.ok:
            return DriverResult(False, "npu-smi set -t pwm-mode -d 0: " + manual.message)
        duty = npu_smi_set_outcome(self.runner.run(["set", "-t", "pwm-duty-ratio", "-d", str(int(percent))]))
        if not duty.ok:
            return DriverResult(False, "npu-smi set -t pwm-duty-ratio: " + duty.message)
        return duty

    def set_auto(self) -> DriverResult:
        outcome = npu_smi_set_outcome(self.runner.run(["set", "-t", "pwm-mode", "-d", "1"]))
        return outcome if outcome.ok else DriverResult(False, "npu-smi set -t pwm-mode -d 1: " + outcome.message)

    def spec(self) -> Dict[str, Any]:
        return {"driver": self.name, "argv": self._argv, "env": self._env, "timeout_seconds": self._timeout}

    def abort(self) -> None:
        if not self._shared_runner:  # a shared pool outlives the service: its owner kills its calls
            self.runner.terminate_all()


# -- hwmon ------------------------------------------------------------------------------------------------


class HwmonFanDriver:
    """pwmN / pwmN_enable of one hwmon device, for hosts whose fans the OS drives."""

    name = "hwmon"
    can_read = True

    def __init__(self, root: str, device_name: str, channels: Sequence[int],
                 original_enable: Optional[Dict[str, int]] = None):
        self.root = root
        self.device_name = device_name
        self.channels = list(channels)
        # pwmN_enable as found at probe time: "auto" restores it when it was an automatic mode (2 and up)
        self.original_enable: Dict[str, int] = dict(original_enable or {})

    def _paths(self) -> List[Tuple[int, str, str]]:
        device = hwmon.find_device(self.root, self.device_name)
        return [(channel, os.path.join(device, "pwm{}".format(channel)),
                 os.path.join(device, "pwm{}_enable".format(channel))) for channel in self.channels]

    def probe(self) -> Probe:
        try:
            paths = self._paths()
            for channel, pwm, enable in paths:
                if not os.path.exists(pwm):
                    return Probe(False, "hwmon {}: no pwm{}".format(self.device_name, channel))
                hwmon.read_int(pwm)
                value = hwmon.optional_int(enable)
                if value is not None:
                    self.original_enable.setdefault(str(channel), value)
        except hwmon.HwmonError as exc:
            return Probe(False, "hwmon: {}".format(exc))
        return Probe(True, "hwmon {} pwm{}".format(self.device_name, ",".join(str(c) for c in self.channels)))

    def read(self) -> Tuple[Optional[FanReading], Optional[str]]:
        try:
            readings = set()
            for _, pwm, enable in self._paths():
                mode = _enable_mode(hwmon.optional_int(enable))
                readings.add(FanReading(mode, hwmon.pwm_to_percent(hwmon.read_int(pwm))))
        except hwmon.HwmonError as exc:
            return None, "hwmon: {}".format(exc)
        if len(readings) == 1:
            return readings.pop(), None
        return FanReading(MIXED, None), None

    def set_duty(self, percent: int) -> DriverResult:
        try:
            for _, pwm, enable in self._paths():
                if os.path.exists(enable) and hwmon.read_int(enable) != 1:
                    hwmon.write_text(enable, "1")
                hwmon.write_text(pwm, str(hwmon.percent_to_pwm(percent)))
        except hwmon.HwmonError as exc:
            return DriverResult(False, "hwmon: {}".format(exc))
        return DriverResult(True, "pwm {}% on {}".format(percent, self.device_name))

    def set_auto(self) -> DriverResult:
        try:
            for channel, _, enable in self._paths():
                if not os.path.exists(enable):
                    return DriverResult(False, "hwmon {}: pwm{} has no pwm{}_enable, so no automatic mode "
                                               "(use safe_state: full)".format(self.device_name, channel, channel))
                original = self.original_enable.get(str(channel), 2)
                hwmon.write_text(enable, str(original if original >= 2 else 2))
        except hwmon.HwmonError as exc:
            return DriverResult(False, "hwmon: {}".format(exc))
        return DriverResult(True, "automatic mode on {}".format(self.device_name))

    def spec(self) -> Dict[str, Any]:
        return {"driver": self.name, "root": self.root, "device_name": self.device_name,
                "channels": self.channels, "original_enable": self.original_enable}

    def abort(self) -> None:
        """File writes cannot hang for long: nothing to abort."""


def _enable_mode(value: Optional[int]) -> str:
    if value is None or value == 1:  # no enable file: pwmN is always obeyed
        return MANUAL
    return FULL_SPEED if value == 0 else AUTO


# -- a user command ---------------------------------------------------------------------------------------


def substitute_duty(template: Sequence[str], percent: int) -> List[str]:
    """The argv with {duty} (decimal percent) and {duty_hex} (0x00..0x64, for `ipmitool raw`) filled in."""
    return [word.replace("{duty_hex}", "0x%02x" % percent).replace("{duty}", str(percent)) for word in template]


class CommandFanDriver:
    """A configured argv per action (for example `ipmitool raw ...` for a BMC); exit status 0 = success."""

    name = "command"
    can_read = False

    def __init__(self, runner: Runner, command: Sequence[str], auto_command: Sequence[str] = (),
                 probe_command: Sequence[str] = (), timeout_seconds: float = 10.0):
        self.runner = runner
        self.command, self.auto_command, self.probe_command = list(command), list(auto_command), list(probe_command)
        self._timeout = timeout_seconds

    def probe(self) -> Probe:
        program = self.command[0]
        if shutil.which(program) is None:
            return Probe(False, "fan command {!r} is not an executable file or on PATH".format(program))
        if self.probe_command:
            result = self.runner.run(self.probe_command)
            if result.returncode != 0:
                return Probe(False, "probe_command failed: {}".format(result.describe_failure()))
        return Probe(True, "command {}".format(os.path.basename(program)))

    def read(self) -> Tuple[Optional[FanReading], Optional[str]]:
        return None, None  # a command cannot tell what the fans do

    def set_duty(self, percent: int) -> DriverResult:
        return self._run(substitute_duty(self.command, percent), "fan command")

    def set_auto(self) -> DriverResult:
        if not self.auto_command:
            return DriverResult(False, "no control.fan.auto_command to hand the fans back to automatic control")
        return self._run(self.auto_command, "auto_command")

    def _run(self, argv: List[str], what: str) -> DriverResult:
        result = self.runner.run(argv)
        if result.returncode == 0:
            return DriverResult(True, "{} succeeded".format(what))
        return DriverResult(False, "{} ({}) failed: {}".format(what, os.path.basename(argv[0]),
                                                               result.describe_failure()))

    def spec(self) -> Dict[str, Any]:
        return {"driver": self.name, "command": self.command, "auto_command": self.auto_command,
                "probe_command": self.probe_command, "timeout_seconds": self._timeout}

    def abort(self) -> None:
        self.runner.terminate_all()


# -- construction -----------------------------------------------------------------------------------------


def build_fan_driver(control: ControlConfig, npu_smi_argv: Sequence[str], env: Optional[Dict[str, str]],
                     root: str, npu_smi_timeout: float,
                     npu_smi: Optional[CommandRunner] = None) -> Optional[FanDriver]:
    """The driver the config chooses, not yet probed; None for `driver: none`. `npu_smi`: the daemon's one
    npu-smi runner, which the npu-smi driver then shares (the watchdog process builds its own from the spec)."""
    fan = control.fan
    if fan.driver == "npu-smi" and npu_smi is not None:
        return NpuSmiFanDriver(npu_smi, list(npu_smi_argv), env, npu_smi_timeout, shared_runner=True)
    if fan.driver == "npu-smi":
        return driver_from_spec({"driver": "npu-smi", "argv": list(npu_smi_argv), "env": env,
                                 "timeout_seconds": npu_smi_timeout})
    if fan.driver == "hwmon":
        return HwmonFanDriver(root, fan.hwmon_name, fan.hwmon_pwm)
    if fan.driver == "command":
        return driver_from_spec({"driver": "command", "command": fan.command, "auto_command": fan.auto_command,
                                 "probe_command": fan.probe_command,
                                 "timeout_seconds": fan.command_timeout_seconds})
    return None


def driver_from_spec(spec: Dict[str, Any]) -> FanDriver:
    """Rebuild a driver from its spec() (the watchdog process does this)."""
    kind = spec["driver"]
    if kind == "npu-smi":
        runner = CommandRunner(spec["argv"], spec["timeout_seconds"], 1, env=spec["env"])
        return NpuSmiFanDriver(runner, spec["argv"], spec["env"], spec["timeout_seconds"])
    if kind == "hwmon":
        return HwmonFanDriver(spec["root"], spec["device_name"], spec["channels"], spec["original_enable"])
    if kind == "command":
        runner = CommandRunner([], spec["timeout_seconds"], 1, log_arguments=False)
        return CommandFanDriver(runner, spec["command"], spec["auto_command"], spec["probe_command"],
                                spec["timeout_seconds"])
    raise ValueError("unknown fan driver {!r}".format(kind))
