"""The worked example of a new source in docs/development.md: how often each chip was reset, from the log that an
operator's reset tooling keeps (`<root>/var/lib/npu-resets`, one `NPU CHIP COUNT` line per chip).

Everything a source needs is here: the source (one tier, one Reading, new Parts with its values), its
build function, the rule fact and the metric family it adds, and the SourceSpec that the source list holds.
tests/sources/test_sources_contract.py registers it through the same list as the built-in sources.
"""

import dataclasses
import os
import time
from typing import Dict, Optional, Sequence, Tuple

from npumon.model import ChipSample, HostSample, Snapshot
from npumon.outputs.families import Families, MetricSpec
from npumon.sources.base import Facts, Parts, SingleTierSource, SourceContext, SourceError, SourceSpec

NAME = "chip-resets"
LOG_PATH = "var/lib/npu-resets"

Counts = Dict[Tuple[int, int], int]


def parse_reset_log(text: str, path: str) -> Counts:
    """`NPU CHIP COUNT` lines -> {(npu, chip): count}; a bad line is a one-line error naming it."""
    counts: Counts = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 3 or not all(field.isdigit() for field in fields):
            raise SourceError("{}:{}: expected 'NPU CHIP COUNT', got {!r}".format(path, number, line[:60]))
        npu, chip, count = (int(field) for field in fields)
        counts[(npu, chip)] = count
    return counts


class ChipResetSource(SingleTierSource[Counts]):
    name = NAME

    def __init__(self, path: str, interval: float, max_age: float, clock=time.time):
        super().__init__(interval, max_age, clock)
        self.path = path

    def read(self, chips: Sequence[ChipSample]) -> Counts:
        try:
            with open(self.path, encoding="utf-8") as handle:
                text = handle.read(1024 * 1024)  # bounded: a runaway log cannot eat the daemon's memory
        except OSError as exc:
            raise SourceError("{}: {}".format(self.path, exc.strerror or exc)) from None
        return parse_reset_log(text, self.path)

    def contribute(self, parts: Parts, now: float) -> Parts:
        counts = self.reading.value(now)
        if counts is None:
            return parts
        chips = tuple(dataclasses.replace(chip, extra=dict(chip.extra, reset_count=counts[chip.key]))
                      if chip.key in counts else chip for chip in parts.chips)
        return dataclasses.replace(parts, chips=chips)


def build(context: SourceContext) -> Optional[ChipResetSource]:
    return ChipResetSource(os.path.join(context.target.root, LOG_PATH), interval=60.0,
                           max_age=context.config.max_age_seconds, clock=context.clock)


def chip_facts(chip: ChipSample, host: HostSample) -> Facts:
    return {"reset_count": chip.extra.get("reset_count")}


METRICS = (MetricSpec("npumon_chip_resets", ("npu", "chip"), "Resets of the chip that the reset log records."),)


def export(snapshot: Snapshot, out: Families) -> None:
    for chip in snapshot.chips:
        out.add("npumon_chip_resets", chip.extra.get("reset_count"), (chip.npu, chip.chip))


SPEC = SourceSpec(NAME, build, chip_facts=chip_facts, metrics=METRICS, export=export)

RULE = """\
rules:
  - id: chip-reset-often
    subject: chip
    expr: reset_count > 3
    severity: warning
    summary: "reset {reset_count} times"
    hint: "A chip that keeps being reset is failing: drain it and run the hardware diagnostics."
"""
