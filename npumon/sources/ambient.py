"""The ambient source: the inlet/board temperature the governor's ambient rule reads.

`control.ambient.sensor` chooses where it comes from:

* npu-smi - the card MCU's board sensors. `npu-smi info -t temp -i N` lists them in the MCU block
  (`LM75A_TE (C) : 36` on 910B cards, FORMATS.md 4.4); where a product prints no sensor there, the MCU
  block of `npu-smi info -t common -i N` has the MCU's own `Temperature(C)` (310/310B boards), used
  instead. One call per card; the form that worked is remembered per card.
* hwmon - `temp*_input` of a hwmon device named in the config (one labelled sensor, or the hottest).

The value is the hottest sensor found, in `snapshot.host.ambient_temperature_celsius`; the source reports
itself as `ambient` in Snapshot.sources, and its last success is the reading's time. poll() never raises.
"""

import dataclasses
import re
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ..model import ChipSample
from . import hwmon
from .base import Parts, SingleTierSource, SourceContext, SourceError, SourceSpec
from .npusmi.kv import npu_smi_problem
from .runner import CommandRunner

AMBIENT_SOURCE_NAME = "ambient"  # the tier and the key in Snapshot.sources
_LINE = re.compile(r"^\s*(?P<key>[^:]*?)\s*:\s*(?P<value>.*?)\s*$")
TEMP_FORM = "temp"
COMMON_FORM = "common"


@dataclass(frozen=True)
class AmbientConfig:  # `control.ambient`: the control section holds this source's settings
    sensor: str = "none"  # none | npu-smi (the card MCU's board sensors) | hwmon
    threshold_celsius: float = 35.0  # above this inlet/board temperature ...
    min_duty_percent: float = 60.0  # ... the duty is at least this
    hwmon_name: str = ""  # sensor hwmon: the device's `name` file
    hwmon_label: str = ""  # sensor hwmon: the temp*_label to read; empty = the hottest temp*_input
    poll_seconds: float = 15.0


def mcu_temperatures(text: str) -> List[float]:
    """Every `<name> (C)` / `Temperature(C)` value in the blocks that end in `Chip Name : MCU|mcu`.

    Blocks are separated by blank lines; `NA` and `Failed` readings are left out."""
    values: List[float] = []
    for block in re.split(r"\n\s*\n", text):
        fields = {}
        for line in block.splitlines():
            match = _LINE.match(line)
            if match:
                fields[match.group("key")] = match.group("value")
        if fields.get("Chip Name", "").lower() != "mcu":
            continue
        for key, value in fields.items():
            if key.endswith("(C)"):
                try:
                    values.append(float(value))
                except ValueError:
                    continue  # NA, Failed
    return values


class AmbientSource(SingleTierSource[float]):
    """The inlet/board temperature as a source: one tier, `ambient`."""

    name = AMBIENT_SOURCE_NAME

    def __init__(self, config: AmbientConfig, root: str, runner: CommandRunner, clock=time.time, max_age: float = 120.0):
        super().__init__(config.poll_seconds, max_age, clock)
        self.config = config
        self.root = root
        self.runner = runner
        self._form: Dict[int, str] = {}  # card -> the query form that shows its board sensors

    def read(self, chips: Sequence[ChipSample]) -> float:
        if self.config.sensor == "hwmon":
            value, error = self._read_hwmon()
        else:
            value, error = self._read_npu_smi(sorted({chip.npu for chip in chips}))
        if value is None:
            raise SourceError(error)
        return value

    def _read_hwmon(self):
        try:
            device = hwmon.find_device(self.root, self.config.hwmon_name)
            values = hwmon.temperatures(device, self.config.hwmon_label)
        except hwmon.HwmonError as exc:
            return None, str(exc)
        if not values:
            label = " labelled {!r}".format(self.config.hwmon_label) if self.config.hwmon_label else ""
            return None, "hwmon {} has no temp*_input{}".format(self.config.hwmon_name, label)
        return max(values), None

    def _read_npu_smi(self, cards: Sequence[int]):
        if not cards:
            return None, "skipped while the main table cannot be read"
        values: List[float] = []
        for card in cards:
            card_values, error = self._card_sensors(card)
            if error is not None:
                return None, "npu {}: {}".format(card, error)
            values.extend(card_values)
        return max(values), None

    def _card_sensors(self, card: int):
        forms = [self._form[card]] if card in self._form else [TEMP_FORM, COMMON_FORM]
        for form in forms:
            result = self.runner.run(["info", "-t", form, "-i", str(card)], label=self.name)
            problem = npu_smi_problem(result)
            if problem is not None and "does not support" not in problem:
                return [], "npu-smi info -t {}: {}".format(form, problem)
            values = [] if problem else mcu_temperatures(result.output)
            if values:
                self._form[card] = form
                return values, None
        return [], "no board sensor in the MCU block of npu-smi info -t temp or -t common"

    def contribute(self, parts: Parts, now: float) -> Parts:
        return dataclasses.replace(parts, host=dataclasses.replace(
            parts.host, ambient_temperature_celsius=self.reading.value(now)))


def build(context: SourceContext) -> Optional[AmbientSource]:
    """The ambient source when the config names a sensor; its npu-smi calls go through the one npu-smi runner."""
    ambient = context.config.control.ambient
    if ambient.sensor == "none":
        return None
    return AmbientSource(ambient, context.target.root, context.npu_smi, context.clock, context.config.max_age_seconds)


SPEC = SourceSpec(AMBIENT_SOURCE_NAME, build)
