"""The simulated hardware knobs: the fan (pwm mode and duty ratio), nve-level and cpu-freq-up.

A product declares the knobs it has (`Product.knobs`); on every other product npu-smi's own refusal is
printed ("This device does not support setting pwm-mode."). Settings live in the state directory
(knobs.json, changed under knobs.lock), so they persist from one simulator call to the next, as they do
on a real board (npu-smi keeps the fan settings in /home/data/fan_config.ini).

The chips feel the fan: in manual mode a chip runs COOLING_PER_PERCENT degrees cooler for every duty
percent above the default duty (warmer below it), reached with a first-order lag over scenario time, so a
control loop can be watched closing. In auto mode the scenario's temperatures are what the firmware's
own curve gives, unchanged.

Texts, from the npu-smi documentation and source (FORMATS.md section 5, every line `\\t%-30s : %s`):
* `info -t pwm-mode` -> `pwm-mode : auto|manual`; `info -t pwm-duty-ratio` -> `pwm-duty-ratio(%) : 40`;
* `set -t pwm-mode -d 0|1` -> `Status : OK` / `Message : Set pwm manual mode success` (or auto);
* `set -t pwm-duty-ratio -d N` -> `Message : Set pwm duty ratio N success`, refused in auto mode;
* `set -t nve-level -i N -c C -d V` -> `Message : The nve-level of the chip is set successfully.`;
* `set -t cpu-freq-up -i N -d 0|1` -> `Message : The cpu-freq-up is set successfully. Reset system for the
  configuration to take effect.`
`info -t nve-level` prints `nve level : <level name>` as scripts that parse it expect (not in a capture).
"""

import contextlib
import fcntl
import json
import math
import os
import tempfile
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .products import BOARD_WIDE_KNOBS, CPU_FREQ_UP, NVE_LEVEL, PWM_DUTY, PWM_MODE, Product

KNOBS_FILE = "knobs.json"
KNOBS_LOCK = "knobs.lock"
SET_TYPES = frozenset((PWM_MODE, PWM_DUTY, NVE_LEVEL, CPU_FREQ_UP))

DEFAULT_DUTY = 40  # npu-smi docs: default duty ratio 40
AUTO_DUTY_MIN = 20
AUTO_DUTY_MAX = 39  # npu-smi docs: in auto mode the duty ratio is at most 39
COOLING_PER_PERCENT = 0.25  # degrees C per duty percent away from DEFAULT_DUTY
COOLING_TIME_CONSTANT = 20.0  # scenario seconds for the chips to get ~63% of the way to a new temperature

EXIT_INVALID_PARAMETER = 215  # npu-smi's -9001 truncated to a byte, as in npusmi.py
USAGE = "Usage: npu-smi set -t <type> [-i <id>] [-c <chip>] -d <value>"


def default_knobs() -> Dict[str, Any]:
    return {
        "pwm_mode": "auto",
        "pwm_duty": DEFAULT_DUTY,
        "nve_level": {},  # "npu/chip" -> level index; absent = 0, the factory default
        "cpu_freq_up": {},  # "npu" -> 0|1; absent = 0
        # the cooling offset moves from `from` to `to` degrees starting at scenario time `since`
        "cooling": {"from": 0.0, "to": 0.0, "since": 0.0},
    }


def read_knobs(state_dir: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(state_dir, KNOBS_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except FileNotFoundError:
        return default_knobs()


def reset_knobs(state_dir: str) -> None:
    """Back to the factory settings (a new simulation starts with the fan in auto mode)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(state_dir, KNOBS_FILE))


@contextlib.contextmanager
def _knobs_for_update(state_dir: str) -> Iterator[Dict[str, Any]]:
    """Exclusive access to the knob settings; changes made to the yielded dict are saved."""
    with open(os.path.join(state_dir, KNOBS_LOCK), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        knobs = read_knobs(state_dir)
        yield knobs
        handle, temp_path = tempfile.mkstemp(dir=state_dir, prefix=".tmp-")
        try:
            with os.fdopen(handle, "w", encoding="utf-8") as temp:
                json.dump(knobs, temp, indent=1, sort_keys=True)
            os.replace(temp_path, os.path.join(state_dir, KNOBS_FILE))
        except BaseException:
            os.unlink(temp_path)
            raise


# -- the fan's effect on temperatures -------------------------------------------------------------------


def cooling_offset(knobs: Dict[str, Any], t: float) -> float:
    """Degrees to add to the scenario's chip temperatures at scenario time t (negative = cooler)."""
    cooling = knobs["cooling"]
    elapsed = max(0.0, t - cooling["since"])
    return cooling["to"] + (cooling["from"] - cooling["to"]) * math.exp(-elapsed / COOLING_TIME_CONSTANT)


def _target_offset(knobs: Dict[str, Any]) -> float:
    if knobs["pwm_mode"] != "manual":
        return 0.0
    return -COOLING_PER_PERCENT * (knobs["pwm_duty"] - DEFAULT_DUTY)


def _retarget_cooling(knobs: Dict[str, Any], t: float) -> None:
    """After a mode or duty change: start moving from where the temperature is now to the new target."""
    knobs["cooling"] = {"from": cooling_offset(knobs, t), "to": _target_offset(knobs), "since": t}


def auto_duty(hottest_celsius: float) -> int:
    """What the firmware's own curve runs the fan at: more when hot, never above AUTO_DUTY_MAX."""
    return int(min(AUTO_DUTY_MAX, max(AUTO_DUTY_MIN, AUTO_DUTY_MIN + hottest_celsius - 40)))


# -- answering -------------------------------------------------------------------------------------------


def _kv(key: str, value: object) -> str:
    return "\t%-30s : %s\n" % (key, value)


def _not_supported(verb: str, knob: str) -> Tuple[str, int]:
    # real npu-smi exits 0 after refusing what the hardware does not support
    return "This device does not support {} {}.\n".format(verb, knob), 0


def render_knob_query(product: Product, query: str, npu: Optional[int], chip: Optional[int],
                      knobs: Dict[str, Any], hottest_celsius: float) -> Tuple[str, int]:
    """`info -t pwm-mode|pwm-duty-ratio|nve-level` on a product that has the knob; the caller has checked
    that, and -i/-c where the type needs them."""
    if query == PWM_MODE:
        return _kv("pwm-mode", knobs["pwm_mode"]), 0
    if query == PWM_DUTY:
        duty = knobs["pwm_duty"] if knobs["pwm_mode"] == "manual" else auto_duty(hottest_celsius)
        return _kv("pwm-duty-ratio(%)", duty), 0
    level = knobs["nve_level"].get("{}/{}".format(npu, 0 if chip is None else chip), 0)
    return _kv("nve level", product.nve_levels[level]), 0


def respond_set(words: List[str], product: Product, state_dir: str, t: float) -> Tuple[str, int]:
    """`npu-smi set -t TYPE [-i N] [-c C] -d VALUE`: change the knob, print npu-smi's answer."""
    options = _parse_set_options(words)
    if options is None or "-t" not in options:
        return "Command or option is not found.\n", EXIT_INVALID_PARAMETER
    knob = options["-t"]
    if knob not in SET_TYPES:
        # other settable types exist on real npu-smi; the simulator models only the knobs above
        return _not_supported("setting", knob)
    if knob not in product.knobs:
        return _not_supported("setting", knob)
    if "-d" not in options:
        return "Must input parameter of -d.\n", EXIT_INVALID_PARAMETER
    problem = _check_ids(knob, options, product)
    if problem is not None:
        return problem
    value = options["-d"]
    if not value.isdigit() or len(value) > 3:
        return "Error parameter of -d\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
    number = int(value)
    with _knobs_for_update(state_dir) as knobs:
        if knob == PWM_MODE:
            if number not in (0, 1):
                return "Error parameter of -d\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
            knobs["pwm_mode"] = "manual" if number == 0 else "auto"
            _retarget_cooling(knobs, t)
            return _ok("Set pwm {} mode success".format(knobs["pwm_mode"]))
        if knob == PWM_DUTY:
            if number > 100:
                return "Error parameter of -d\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
            if knobs["pwm_mode"] != "manual":
                # the exit status of this refusal is not documented; npumon reads the text
                return "Setting duty ratio is not allowed in the current auto mode.\n", 0
            knobs["pwm_duty"] = number
            _retarget_cooling(knobs, t)
            return _ok("Set pwm duty ratio {} success".format(number))
        if knob == NVE_LEVEL:
            if number >= len(product.nve_levels):
                return "Error parameter of -d\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
            chip = options.get("-c")
            for slot in product.slots():
                if str(slot.npu) == options["-i"] and (chip is None or str(slot.chip) == chip):
                    knobs["nve_level"]["{}/{}".format(slot.npu, slot.chip)] = number
            return _ok("The nve-level of the {} is set successfully.".format("card" if chip is None else "chip"))
        if number not in (0, 1):
            return "Error parameter of -d\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
        knobs["cpu_freq_up"][options["-i"]] = number
        which = "cpu-freq-up" if "-c" not in options else "cpu-freq-up of the chip"
        return _ok("The {} is set successfully. Reset system for the configuration to take effect.".format(which))


def _ok(message: str) -> Tuple[str, int]:
    return _kv("Status", "OK") + _kv("Message", message), 0


def _check_ids(knob: str, options: Dict[str, str], product: Product) -> Optional[Tuple[str, int]]:
    """nve-level and cpu-freq-up name a card (and chip); the fan types are board wide."""
    if knob in BOARD_WIDE_KNOBS:
        return None
    npu = options.get("-i", "")
    if not npu.isdigit() or int(npu) not in product.cards:
        return "Invalid card id.\nError parameter of -i\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
    chip = options.get("-c")
    if chip is not None and (not chip.isdigit() or int(chip) >= product.chips_per_card):
        return "Invalid chip id.\nError parameter of -c\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
    return None


def _parse_set_options(words: List[str]) -> Optional[Dict[str, str]]:
    options: Dict[str, str] = {}
    index = 0
    while index < len(words):
        if words[index] in ("-t", "-i", "-c", "-d") and index + 1 < len(words):
            options[words[index]] = words[index + 1]
            index += 2
        else:
            return None
    return options
