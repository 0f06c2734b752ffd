"""How long a real npu-smi call takes: the simulator's latency model, per product and per kind of call.

Real npu-smi is slow: every call is a fresh process that initialises DCMI (opening every device) before it
asks the driver anything, and some answers go through the card's MCU over I2C. A simulator that answers in
milliseconds hides every scheduling problem npumon has on a real host, so each simulated call waits

    seconds = scale * (start + work(kind)) * jitter

`call_seconds(product, args, rng)` is that number for scale 1 (pure: the same rng state gives the same
number); the simulation's latency scale multiplies it (`prepare_simulation(latency_scale=...)`, the
NPUMON_SIM_LATENCY_SCALE environment variable, a scenario's `latency_scale`; 0 turns it off).

Kinds of call (by their argv, whatever the answer):

| kind | argv | cost |
|---|---|---|
| table | `info` | start + table_per_chip x chips on the host |
| card query | `info -t TYPE -i N` (and board-wide `info -t pwm-mode`) | start + query_per_chip x chips of the card |
| chip query | `info -t TYPE -i N -c C` | start + chip_query |
| mapping / list | `info -m` / `info -l` | start + enumerate |
| set | `set -t KNOB ...` | start + set |
| version | `-v`, `-h`, and arguments npu-smi rejects before it opens the driver | version |

The numbers, and where each comes from (shared/reference/npu-exporter-and-dcmi.md, section 2.6 and 5, and
the sources it cites; no capture in shared/reference/npu-smi/ records a timing):

| parameter | 910B3 (atlas-800i-a2) | A3 (atlas-a3) | 310P3 (atlas-300i-duo) | 310B4 (atlas-200i-a2) | source |
|---|---|---|---|---|---|
| start | 0.50 s | 1.50 s | 0.40 s | 0.50 s | 910B3: nvitop PR #227 libnpu.py ("npu-smi has a startup cost of roughly half a second per invocation", 8 x 910B3, npu-smi 25.5.1). A3: the 16-chip sweep below minus chip_query. 310P3, 310B4: estimates, no public timing (fewer devices to open; the 310B4 board's slow ARM cores) |
| table_per_chip | 0.07 s | 0.07 s | 0.07 s | 0.07 s | AReaL's DCMI reader: about 1.1 s for a 16-chip sweep of the driver getters, i.e. 0.07 s per chip; the table asks each chip the same kind of getters |
| query_per_chip | 0.05 s | 0.25 s | 0.05 s | 0.05 s | 910B3: fitted so that nvitop's full report on 8 x 910B3 is about 5.4 s (its `info -m`, `info`, then one 8-way parallel batch per detail type: usages, memory, common, temp, power, board, proc-mem = 0.52 + 1.06 + 7 x 0.55 s). A3: as chip_query. Others: as 910B3 (estimate) |
| chip_query | 0.05 s | 0.25 s | 0.05 s | 0.05 s | A3: AReaL's 16-chip npu-smi sweep took about 28 s, read as 16 chip-level calls one after another: 1.75 s each; 0.25 s of it is the query (the top of DCMI's measured 100-270 ms per call, mind-cluster MR !4354), the rest start. Others: as one chip of a card query |
| enumerate | 0.02 s | 0.02 s | 0.02 s | 0.02 s | estimate: `-m` and `-l` only list the devices DCMI init already opened |
| set | 0.20 s | 0.20 s | 0.20 s | 0.20 s | estimate: one DCMI setter, within the 100-270 ms per call of MR !4354 |
| version | 0.05 s | 0.05 s | 0.05 s | 0.05 s | estimate: a process start that never opens the driver |
| jitter | x 0.8-1.2 | | | | estimate: the public figures are "about" and "roughly"; no spread is published |
| slow tail | 2 % of calls x 2.7 | | | | DCMI's own spread, 100-270 ms per call (MR !4354), and its retried -8006 timeouts and I2C flock contention on MCU paths (reference section 2.6); the 2 % is an estimate |

The 8 x 910A Atlas 800 (atlas-800-9000) and the 8 x Atlas 350 (950PR) host (atlas-350) take the 910B3's
numbers: 8 cards of one chip each, and no public timing of either (estimates). A `-c` call on the 950, which
npu-smi refuses, costs what any chip query costs: the refusal comes after DCMI init.

So on the default product (8 x 910B3) the main table takes about 1.06 s, a card or chip query 0.55 s; on the
16-chip A3 the table takes about 2.6 s, a card query 2.0 s and a chip query 1.75 s. Those times are whole calls,
process start included, so the simulator executable waits them less its own Python start (0.1-0.3 s, more than
an hccn_tool call's whole model: `seconds_since_start`, passed to the executables' `main`); the in-process
simulator adds nothing.
"""

import math
import os
import random
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

from .products import BOARD_WIDE_KNOBS, Product

LATENCY_SCALE_ENV = "NPUMON_SIM_LATENCY_SCALE"  # a default scale for prepare_simulation (the test suite sets 0)

TABLE, CARD_QUERY, CHIP_QUERY, MAPPING, LIST, SET, VERSION = (
    "table", "card query", "chip query", "mapping", "list", "set", "version")


@dataclass(frozen=True)
class LatencyProfile:
    """One product's npu-smi costs in seconds, before jitter (see the table above for their sources)."""

    start: float  # process start and DCMI init: every call that opens the driver pays it
    table_per_chip: float
    query_per_chip: float
    chip_query: float
    enumerate: float = 0.02
    set: float = 0.20
    version: float = 0.05
    jitter: float = 0.2  # every call takes between (1 - jitter) and (1 + jitter) times its cost
    tail_probability: float = 0.02  # and this share of calls takes tail_factor times longer still
    tail_factor: float = 2.7


PROFILES: Dict[str, LatencyProfile] = {
    "atlas-800i-a2": LatencyProfile(start=0.50, table_per_chip=0.07, query_per_chip=0.05, chip_query=0.05),
    "atlas-a3": LatencyProfile(start=1.50, table_per_chip=0.07, query_per_chip=0.25, chip_query=0.25),
    "atlas-300i-duo": LatencyProfile(start=0.40, table_per_chip=0.07, query_per_chip=0.05, chip_query=0.05),
    "atlas-200i-a2": LatencyProfile(start=0.50, table_per_chip=0.07, query_per_chip=0.05, chip_query=0.05),
    "atlas-800-9000": LatencyProfile(start=0.50, table_per_chip=0.07, query_per_chip=0.05, chip_query=0.05),
    "atlas-350": LatencyProfile(start=0.50, table_per_chip=0.07, query_per_chip=0.05, chip_query=0.05),
}


def kind_of(args: Sequence[str]) -> str:
    """Which kind of call an npu-smi argument list is (the table above)."""
    args = list(args)
    if args[:1] == ["set"]:
        return SET
    if args[:1] != ["info"] or "-h" in args:
        return VERSION
    if args == ["info"]:
        return TABLE
    if "-m" in args[1:]:
        return MAPPING
    if "-l" in args[1:]:
        return LIST
    if "-t" not in args:
        return VERSION  # `info watch`, `info proc`, an unknown option: rejected before the driver opens
    return CHIP_QUERY if "-c" in args else CARD_QUERY


def nominal_seconds(product: Product, args: Sequence[str]) -> float:
    """A call's cost without jitter or tail: what the table above gives for this product and argv."""
    profile = PROFILES[product.name]
    kind = kind_of(args)
    if kind == VERSION:
        return profile.version
    if kind == TABLE:
        work = profile.table_per_chip * len(product.cards) * product.chips_per_card
    elif kind == CARD_QUERY:
        board_wide = _query_type(args) in BOARD_WIDE_KNOBS  # the fan: one per board, no chip asked
        work = 0.0 if board_wide else profile.query_per_chip * product.chips_per_card
    elif kind == CHIP_QUERY:
        work = profile.chip_query
    elif kind in (MAPPING, LIST):
        work = profile.enumerate
    else:
        work = profile.set
    return profile.start + work


def call_seconds(product: Product, args: Sequence[str], rng: random.Random) -> float:
    """How long one real npu-smi call with these arguments takes on this product, jitter and tail included."""
    profile = PROFILES[product.name]
    seconds = nominal_seconds(product, args) * rng.uniform(1.0 - profile.jitter, 1.0 + profile.jitter)
    if rng.random() < profile.tail_probability:
        seconds *= profile.tail_factor
    return seconds


def check_scale(scale: object, name: str = "latency_scale") -> float:
    """A latency scale as a float; ValueError unless it is a finite number >= 0."""
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale) or scale < 0:
        raise ValueError("{} must be a finite number >= 0, got {!r}".format(name, scale))
    return float(scale)


def scale_from_environment(environ: Dict[str, str]) -> Optional[float]:
    """NPUMON_SIM_LATENCY_SCALE as a scale, None when unset; ValueError for a value that is not one."""
    text = environ.get(LATENCY_SCALE_ENV)
    if text is None or not text.strip():
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError("{} must be a number >= 0, got {!r}".format(LATENCY_SCALE_ENV, text)) from None
    return check_scale(value, LATENCY_SCALE_ENV)


def _query_type(args: Sequence[str]) -> Optional[str]:
    args = list(args)
    index = args.index("-t") + 1 if "-t" in args else len(args)
    return args[index] if index < len(args) else None


def seconds_since_start() -> float:
    """How long this process has run (the interpreter's start and the simulator's imports), from /proc; 0 where
    that cannot be read. A simulated tool run as a program sleeps its call's time less this, so that the call
    takes the modelled time however slowly the machine starts Python."""
    try:
        with open("/proc/self/stat", encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open("/proc/uptime", encoding="ascii") as handle:
            uptime = float(handle.read().split()[0])
        return max(0.0, uptime - int(fields[19]) / os.sysconf("SC_CLK_TCK"))  # field 22, starttime
    except (OSError, ValueError, IndexError):
        return 0.0
