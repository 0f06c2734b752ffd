"""npu-smi-sim: an npu-smi-compatible executable that answers from a simulation's state directory.

    NPUMON_SIM_STATE=<dir> python -m npumon.sim.npusmi info -t usages -i 0

It accepts real npu-smi's argument syntax (`info`, `info -l`, `info -m`, `info -t TYPE -i N [-c C]`,
`-v`) and prints real npu-smi's texts, errors included, so npumon runs it exactly as it runs npu-smi.
Each call reads the state, computes scenario time, advances the fake host's CPU counters, decides how
long it takes, then behaves as the scenario says: answer, answer garbage, refuse every `-t` query, or hang.

How long a call takes: real npu-smi's time for this product and argv (latency.py), times the simulation's
latency scale, plus the scenario's `delay_seconds`. The two add up: `delay_seconds` is a fault on top of
the hardware's own cost (a wedged driver answering late), `latency_scale` a host slower or faster than the
public figures (the `slow` scenario; 0 in the test suite).

Kept light on purpose: it starts once per npu-smi call, so it reads the scenario as JSON checked
earlier by prepare_simulation and imports no YAML.
"""

import dataclasses
import os
import random
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .hostroot import advance_cpu
from .hostspec import host_root_spec
from .latency import call_seconds, seconds_since_start
from .products import BOARD_WIDE_KNOBS, PWM_MODE, QUERYABLE_KNOBS, ChipSlot, Product, get_product
from .render_query import render_query
from .render_table import Chip, render_info, render_list, render_mapping
from .state import STATE_ENV, SimStateError, cpu_clock, read_state_shared, scenario_time
from .diag_load import LOAD_POWER_WATTS, LOAD_TEMPERATURE_RISE, THROTTLED_TEMPERATURE, loads_now
from .values import ChipValues, chip_present_at, chip_values_at, host_cpu_busy_at

USAGE = "Usage: npu-smi info <watch|proc|-h|-m|-l|-t type> [Options...]"
NOT_FOUND = "Command or option is not found."
# npu-smi exits with its internal error code truncated to a byte: -9001 (invalid parameter) -> 215.
EXIT_INVALID_PARAMETER = 215
EXIT_SIMULATOR_MISUSE = 2
# Every `-t` type npu-smi 23.x-25.x accepts; the product decides which of them it supports.
KNOWN_TYPES = frozenset((
    "board", "flash", "memory", "usages", "sensors", "temp", "power", "volt", "mac-addr", "common", "health",
    "product", "ecc", "ip", "sys-time", "i2c_check", "work-mode", "ecc-enable", "p2p-enable", "ssh-enable",
    "license", "customized-info", "device-share", "nve-level", "aicpu-config", "pcie-err", "mcu-monitor",
    "err-count", "boot-area", "vnpu-mode", "info-vnpu", "vnpu-svm", "cpu-num-cfg", "first-power-on-date",
    "proc-mem", "phyid-remap", "vnpu-cfg-recover", "key-manage", "template-info", "pkcs-enable",
    "p2p-mem-cfg", "pwm-mode", "pwm-duty-ratio", "boot-select", "topo", "hccs", "sio-info", "spod-info",
    "hccs-bw", "cpu-freq-up", "op-timeout", "current-fault-event",
))
HANG_PIDS_FILE = "hang-pids"
HOST_CPU_STEP_SECONDS = 0.25  # the fake host's /proc/stat moves on at most this often (_advance_host_cpu)
ADVANCED_KEPT = 16  # simulations whose last CPU move this process remembers


@dataclass
class SimHost:
    """Everything one call needs to answer: the product, its chips' values now, the versions. A chip's values
    are worked out when a call first needs them: most calls ask about one chip of many."""

    product: Product
    values_of: Callable[[ChipSlot], Optional[ChipValues]]  # a slot's values now; None: its chip is not there now
    driver_version: str
    firmware_version: str
    refuse_queries: bool = False  # the "unsupported" behaviour: every `-t` query is refused
    knobs: Optional[Dict] = None  # fan / nve-level / cpu-freq-up settings (sim/knobs.py)
    _chips: Optional[List[Chip]] = field(default=None, init=False, repr=False)

    @property
    def chips(self) -> List[Chip]:
        """Every chip there now, with its values."""
        if self._chips is None:
            self._chips = self._present(self.product.slots())
        return self._chips

    def card_chips(self, npu: int) -> List[Chip]:
        """The chips of card `npu` there now, with their values."""
        if self._chips is not None:
            return [(slot, values) for slot, values in self._chips if slot.npu == npu]
        return self._present(slot for slot in self.product.slots() if slot.npu == npu)

    def _present(self, slots: Iterable[ChipSlot]) -> List[Chip]:
        chips = ((slot, self.values_of(slot)) for slot in slots)
        return [(slot, values) for slot, values in chips if values is not None]


@dataclass
class Call:
    """One simulator call, decided before it behaves: how it behaves (answer, answer late, hang), and
    `answer()`, its stdout and exit status. The executable and the in-process simulator (sim/inprocess.py)
    both run calls through here, so they answer alike."""

    args: List[str]
    state_dir: str
    state: Dict
    t: float  # scenario time of the call's start
    latency_seconds: float = 0.0  # real npu-smi's time for this call, scaled (latency.py)

    @property
    def hangs(self) -> bool:
        return self.state["scenario"]["behaviour"] == "hang"

    @property
    def delay_seconds(self) -> float:
        return self.state["scenario"]["delay_seconds"] or 0.0

    @property
    def wait_seconds(self) -> float:
        """How long the call takes before it answers: the hardware's time plus the scenario's delay."""
        return self.latency_seconds + self.delay_seconds

    def answer(self) -> Tuple[str, int]:
        """stdout and exit status. A `set` changes the knobs here, so a call that never answers changes none."""
        args, state, t = self.args, self.state, self.t
        product = get_product(state["product"])
        if args[:1] == ["set"]:
            from .knobs import respond_set  # the knob module is loaded only by the calls that need it

            text, status = respond_set(args[1:], product, self.state_dir, t)
            if product.knobs:  # the fan moves the chips' temperatures: DCMI reads them too
                from .dcmi.state import write_dcmi_state

                write_dcmi_state(self.state_dir)
        else:
            text, status = respond(args, sim_host(state, t, _knobs_of(product, self.state_dir),
                                                  loads_now(self.state_dir, time.time())))
        scenario = state["scenario"]
        if scenario["behaviour"] == "garbage":
            text = garble(args, text, scenario["garbage"])
        return text, status


def begin_call(args: Sequence[str], state_dir: Optional[str], now: float,
               rng: Optional[random.Random] = None) -> Call:
    """Read the state, compute scenario time at wall time `now`, advance the host's CPU to it and draw the
    call's latency from `rng` (a fresh generator by default). Raises SimStateError, OSError or ValueError
    for a missing or damaged simulation."""
    state = read_state_shared(state_dir)
    t = scenario_time(state, now)
    _advance_host_cpu(state_dir, state, now, t)
    return Call(list(args), state_dir, state, t, latency_seconds(state, args, rng))


def latency_seconds(state: Dict, args: Sequence[str], rng: Optional[random.Random] = None) -> float:
    """This call's share of real npu-smi time: the model's seconds times the simulation's latency scale
    and the scenario's (a state written before either existed has scale 1)."""
    scale = state.get("latency_scale", 1.0) * state["scenario"].get("latency_scale", 1.0)
    if not scale:
        return 0.0
    return scale * call_seconds(get_product(state["product"]), args, rng or random.Random())


def misuse_message(exc: Exception) -> str:
    """What the simulator prints on stderr (exit status EXIT_SIMULATOR_MISUSE) for a broken simulation."""
    return "npu-smi-sim: {}\n".format(exc)


def main(argv: Optional[Sequence[str]] = None, started_seconds_ago: float = 0.0) -> int:
    """`started_seconds_ago`: how long the process has run already (its start is part of the call's time)."""
    args = list(sys.argv[1:] if argv is None else argv)
    state_dir = os.environ.get(STATE_ENV)
    try:
        call = begin_call(args, state_dir, time.time())
    except (SimStateError, OSError, ValueError) as exc:  # a missing or damaged simulation, not an npu-smi error
        sys.stderr.write(misuse_message(exc))
        return EXIT_SIMULATOR_MISUSE
    if call.hangs:
        _hang(state_dir)
    wait = call.wait_seconds - started_seconds_ago
    if wait > 0:
        time.sleep(wait)
    text, status = call.answer()
    sys.stdout.write(text)
    sys.stdout.flush()
    return status


def sim_host(state: Dict, t: float, knobs: Optional[Dict] = None, loads: Optional[Dict[int, float]] = None) -> SimHost:
    """The host at scenario time t; with `knobs`, the chips of a product with a fan feel its duty; `loads`
    (device -> AI Core clock ratio) the chips a diag load runs on now (diag_load.py)."""
    product = get_product(state["product"])
    chips_spec = state["scenario"]["chips"]
    offset = 0.0
    if knobs is not None and PWM_MODE in product.knobs:
        from .knobs import cooling_offset

        offset = cooling_offset(knobs, t)

    def values_of(slot: ChipSlot) -> Optional[ChipValues]:
        if not chip_present_at(chips_spec, slot.device_id, t):
            return None
        values = chip_values_at(chips_spec, slot.device_id, t, slot.memory_total_mb, product.aicore_rated_mhz,
                                slot.ddr_total_mb)
        if offset:
            values = dataclasses.replace(values, temperature_celsius=int(round(values.temperature_celsius + offset)))
        if loads and slot.device_id in loads:
            values = _loaded(values, loads[slot.device_id])
        return values

    host = state["host"]
    return SimHost(product=product, values_of=values_of, driver_version=host["driver_version"],
                   firmware_version=host["firmware_version"],
                   refuse_queries=state["scenario"]["behaviour"] == "unsupported", knobs=knobs)


def _loaded(values: ChipValues, clock_ratio: float) -> ChipValues:
    """A chip's values while MatMuls keep its AI Cores busy; at a clock ratio below 1 it throttles, hot."""
    temperature = THROTTLED_TEMPERATURE if clock_ratio < 1 else values.temperature_celsius + LOAD_TEMPERATURE_RISE
    return dataclasses.replace(values, aicore_percent=100, aicube_percent=100, power_watts=LOAD_POWER_WATTS,
                               temperature_celsius=temperature,
                               aicore_freq_mhz=int(round(values.aicore_freq_mhz * clock_ratio)))


# -- answering -------------------------------------------------------------------------------------------


def respond(args: List[str], sim: SimHost) -> Tuple[str, int]:
    """npu-smi's stdout and exit status for one argument list."""
    if args == ["-v"]:
        return "npu-smi version: {}\n".format(sim.product.npu_smi_version), 0
    if args in (["-h"], ["info", "-h"]):
        return USAGE + "\n", 0
    if not args or args[0] != "info":
        return NOT_FOUND + "\n", EXIT_INVALID_PARAMETER
    options = _parse_options(args[1:])
    if options is None:
        return NOT_FOUND + "\n", EXIT_INVALID_PARAMETER
    product = sim.product
    if not options:
        return render_info(product, sim.chips, sim.driver_version), 0
    if "-l" in options:
        return render_list(product), 0
    if "-m" in options:
        return render_mapping(product), 0
    if "-t" not in options:
        return NOT_FOUND + "\n", EXIT_INVALID_PARAMETER
    return _query(options, sim)


def _parse_options(words: List[str]) -> Optional[Dict[str, Optional[str]]]:
    """`-t usages -i 0 -c 1` -> {"-t": "usages", "-i": "0", "-c": "1"}; None for anything npu-smi rejects."""
    options: Dict[str, Optional[str]] = {}
    index = 0
    while index < len(words):
        word = words[index]
        if word in ("-l", "-m"):
            options[word] = None
            index += 1
        elif word in ("-t", "-i", "-c", "-time") and index + 1 < len(words):
            options[word] = words[index + 1]
            index += 2
        else:
            return None
    return options


def _query(options: Dict[str, Optional[str]], sim: SimHost) -> Tuple[str, int]:
    query = options["-t"] or ""
    if query not in KNOWN_TYPES:
        return "Error parameter of -t\n", EXIT_INVALID_PARAMETER
    product = sim.product
    if query in BOARD_WIDE_KNOBS:  # the fan types need no -i
        return _knob_query(query, None, None, sim)
    npu = _integer(options.get("-i"))
    if npu is None or npu not in product.cards:
        return "Invalid card id.\nError parameter of -i\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
    chip = None
    if "-c" in options and not product.has_chip_option:
        return "This device does not support input parameter of -c.\n", 0
    if "-c" in options:
        chip = _integer(options["-c"])
        if chip is None or not (0 <= chip < product.chips_per_card or chip == product.mcu_chip):
            return "Invalid chip id.\nError parameter of -c\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
    unsupported = "This device does not support querying {}.\n".format(query)
    if sim.refuse_queries:
        return unsupported, 0
    if query in QUERYABLE_KNOBS:
        return _knob_query(query, npu, chip, sim)
    card_chips = sim.card_chips(npu)
    if not card_chips:  # every chip of the card dropped out (the card-drop scenario)
        return "Invalid card id.\nError parameter of -i\n{}\n".format(USAGE), EXIT_INVALID_PARAMETER
    if query == "hccs-bw" and query in product.queries and not 1 <= (_integer(options.get("-time")) or 0) <= 1000:
        return "This command must input profiling_time(1-1000, ms).\n", 0  # real npu-smi's words (reference 1.3)
    text = render_query(product, query, npu, chip, card_chips, sim.driver_version, sim.firmware_version)
    # real npu-smi exits 0 after refusing a query the hardware does not support
    return (unsupported, 0) if text is None else (text, 0)


def _knob_query(query: str, npu: Optional[int], chip: Optional[int], sim: SimHost) -> Tuple[str, int]:
    if sim.refuse_queries or query not in sim.product.knobs:
        return "This device does not support querying {}.\n".format(query), 0
    from .knobs import default_knobs, render_knob_query

    hottest = max(values.temperature_celsius for _, values in sim.chips)
    knobs = sim.knobs if sim.knobs is not None else default_knobs()
    return render_knob_query(sim.product, query, npu, chip, knobs, hottest)


def _knobs_of(product: Product, state_dir: str) -> Optional[Dict]:
    """The knob settings of a product that has knobs (None for the others: nothing to read)."""
    if not product.knobs:
        return None
    from .knobs import read_knobs

    return read_knobs(state_dir)


def _integer(text: Optional[str]) -> Optional[int]:
    if text is None or not text.isdigit():
        return None
    return int(text)


# -- misbehaving -----------------------------------------------------------------------------------------


def garble(args: List[str], text: str, garbage: Dict[str, float]) -> str:
    """The "garbage" behaviour, deterministic: corrupt cells and a mid-row cut in the main table, `-t`
    outputs cut mid-line. `-l`, `-m` and error texts pass unchanged."""
    if args == ["info"]:
        return _cut(_corrupt_first_chip(text), garbage["table_keep_fraction"])
    if "-t" in args and "\t" in text:
        return _cut(text, garbage["query_keep_fraction"])
    return text


def _corrupt_first_chip(table: str) -> str:
    lines = table.split("\n")
    first_row = next(index for index, line in enumerate(lines) if line.startswith("+===")) + 1
    for index, junk in ((first_row, "#?%!"), (first_row + 1, "??:?x")):
        cells = lines[index].split("|")
        # the third cell holds the numbers (row 1: power, temperature, hugepages; row 2: usage, memory)
        cells[3] = (" " + junk * len(cells[3]))[:len(cells[3])]
        lines[index] = "|".join(cells)
    return "\n".join(lines)


def _cut(text: str, keep_fraction: float) -> str:
    """Keep about `keep_fraction` of the text, always ending in the middle of a line."""
    cut = int(len(text) * keep_fraction)
    line_start = text.rfind("\n", 0, cut) + 1
    line_end = text.find("\n", line_start)
    line_end = len(text) if line_end < 0 else line_end
    if line_end - line_start < 2:  # an empty line cannot be cut in half; use the line before it
        line_end = max(0, line_start - 1)
        line_start = text.rfind("\n", 0, line_end) + 1
    return text[:line_start + (line_end - line_start) // 2]


def _hang(state_dir: str) -> None:
    """Never answer. A child sleeps too, so killing only this process would leave an orphan holding
    the output pipes open; the caller has to kill the whole process group."""
    child = os.fork()
    if child == 0:
        while True:
            time.sleep(3600)
    with open(os.path.join(state_dir, HANG_PIDS_FILE), "a", encoding="utf-8") as handle:
        handle.write("{} {}\n".format(os.getpid(), child))
    while True:
        time.sleep(3600)


# -- the host ----------------------------------------------------------------------------------------------


_advanced_lock = threading.Lock()
_advanced: "OrderedDict[Tuple[str, float], float]" = OrderedDict()  # simulation -> its CPU clock's last move known here


def _advance_host_cpu(state_dir: str, state: Dict, now: float, t: float) -> None:
    """Move the fake host's /proc/stat on by the wall time since the last call, at the scenario's CPU
    busy ratios of this moment. The clock record is locked, so concurrent calls never count twice. Calls
    within HOST_CPU_STEP_SECONDS of the last move leave it: a pass makes dozens of calls within a second, and
    rewriting the files on each was most of a simulated call's cost (readers judge the CPU over many seconds)."""
    simulation = (state_dir, state["start_time"])  # a simulation prepared again in the same directory is another
    with _advanced_lock:
        if now - _advanced.get(simulation, float("-inf")) < HOST_CPU_STEP_SECONDS:
            return  # this process moved it (or saw it moved) since: the record can only be later, no need to lock it
    product = get_product(state["product"])
    with cpu_clock(state_dir) as clock:
        elapsed = now - clock["advanced_at"]
        if elapsed >= HOST_CPU_STEP_SECONDS:
            spec = host_root_spec(product, state["host"], host_cpu_busy_at(state["host"], t))
            advance_cpu(state["root"], spec, elapsed)
            clock["advanced_at"] = now
        advanced_at = clock["advanced_at"]
    with _advanced_lock:
        _advanced[simulation] = max(advanced_at, _advanced.get(simulation, advanced_at))
        _advanced.move_to_end(simulation)
        while len(_advanced) > ADVANCED_KEPT:
            _advanced.popitem(last=False)


if __name__ == "__main__":
    sys.exit(main(started_seconds_ago=seconds_since_start()))
