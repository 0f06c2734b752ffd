"""The npu-smi source: polls the main table and the `-t` queries, keeps the latest good values.

Polling cost by design: the main table is one call for every chip and runs on every poll; the `-t` queries
(one call per card; health per chip, since only the chip-level form prints error codes) run on slower tiers.
A query type the product does not support ("This device does not support querying usages.") is remembered
and not asked again until restart. While the main table itself fails, the query tiers pause: when the
driver is wedged every call would hang until its deadline and hold the few npu-smi slots.

Freshness: a query value stays until it is older than its allowed age, whatever happens to later calls. A
call that fails (timed out, left out by the tier's budget, killed mid-output, unreadable) changes nothing;
an answer that prints a value as NA replaces it with null at once; a value that answers stop printing ages
out. Only a complete main table without a card makes that card's values go at once: the card has left.

A main table with a malformed chip row keeps its whole chips: the source is up and degraded, and says which
row it left out and why; the chip left out keeps its query values (it may not have left). Output that stops
mid-line (cut short) is refused whole, like one cut by a signal: it cannot say which cards come after the cut.

The answers of a query tier are taken in as each call returns, so a tier holds at most one answer per
running call, each within the runner's output cap.

Nothing here raises for a hardware or tool fault: every failure becomes a SourceStatus.

Tiers: `npu-smi` (the main table, the primary tier: the daemon judges the rules after each of its polls) and
one `npu-smi:<query>` per `-t` query. A query tier that ran before the first table was read asks again within
FIRST_TABLE_WAIT_SECONDS; a slow query tier whose poll failed asks again after RETRY_FAILED_TIER_SECONDS rather
than a whole interval later.
"""

import concurrent.futures
import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...model import MIB, ChipSample, ProcessSample, SourceStatus
from ..base import Parts, SourceContext, SourceSpec, Tier, allowed_age, judge_status
from . import kv as npusmi_kv
from .common import NpuSmiParseError
from .table import MainTable, parse_info
from ..runner import CommandResult, CommandRunner

log = logging.getLogger(__name__)

TABLE_SOURCE = "npu-smi"

QUERY_PARSERS = {
    "usages": npusmi_kv.parse_usages,
    "power": npusmi_kv.parse_power,
    "health": npusmi_kv.parse_health,
    "ecc": npusmi_kv.parse_ecc,
    "board": npusmi_kv.parse_board,
}
QUERY_TYPES = tuple(QUERY_PARSERS)
PER_CHIP_QUERIES = frozenset(("health",))
# What a default `npumon check` asks besides the table: error codes and ECC counts, what fits NRPE's 10 s at
# real npu-smi speed on 8 cards. Power and AI Core are in the main table on every product; usages (vector,
# cube, memory bandwidth) and board (firmware, compatibility) come with --full.
QUICK_QUERIES = frozenset(("health", "ecc"))
# Their card-level answer describes the whole card (firmware, driver, compatibility): every chip of the
# card gets it, not only chip 0 under which the parser returns it.
CARD_WIDE_QUERIES = frozenset(("board",))


RETRY_FAILED_TIER_SECONDS = 60.0  # a query tier with a longer interval whose poll failed tries again this soon
FIRST_TABLE_WAIT_SECONDS = 1.0  # a query tier that ran before the first main table was read tries again this soon


_Outcome = Tuple[bool, Optional[str]]  # one query call: (left out for lack of time or a slot, its problem)


def query_source_name(query: str) -> str:
    return "{}:{}".format(TABLE_SOURCE, query)


def query_of(tier: str) -> Optional[str]:
    """"npu-smi:usages" -> "usages"; None for the main table."""
    return tier.split(":", 1)[1] if tier.startswith(TABLE_SOURCE + ":") else None


class _Poll:
    """What one poll of one source left behind."""

    def __init__(self) -> None:
        self.ok = False
        self.error: Optional[str] = "not polled yet"
        self.duration: Optional[float] = None
        self.last_success: Optional[float] = None
        self.unsupported = False
        self.left_out = 0
        self.waiting_on: Optional[str] = None
        self.degraded = False


class NpuSmiSource:
    name = TABLE_SOURCE

    def __init__(self, runner: CommandRunner, clock: Callable[[], float] = time.time,
                 intervals: Optional[Dict[str, float]] = None, table_interval: float = 15.0,
                 max_age: float = 120.0, quick_pass: bool = False):
        self.runner = runner
        self.clock = clock
        self.intervals = dict(intervals or {})  # query type -> seconds between polls
        self.table_interval = table_interval
        self.max_age = max_age
        self.quick_pass = quick_pass  # one quick pass (`npumon check`): ask health only of chips not OK
        self._lock = threading.Lock()
        self._table: Optional[MainTable] = None
        self._table_time: Optional[float] = None
        # (npu, chip) -> chip field -> (query type, time it was read, value). Each field has its own time, so
        # an answer that lacks a line it printed before does not erase that field: the field keeps its last
        # good value until it is older than the query's allowed age, then goes.
        self._query_values: Dict[Tuple[int, int], Dict[str, Tuple[str, float, Any]]] = {}
        self._polls: Dict[str, _Poll] = {TABLE_SOURCE: _Poll()}
        self._chip_option_unsupported = False  # 950: "does not support input parameter of -c"
        self._resume_at: Dict[str, int] = {}  # query type -> index of the first call its last poll left out
        self._overrunning = set()  # tiers whose last poll left calls out (warned once until they finish again)

    # -- the source contract (sources/base.py) ------------------------------------------------------

    def tiers(self) -> List[Tier]:
        return [Tier(TABLE_SOURCE, self.table_interval, primary=True, first_run=0.0)] + [
            Tier(query_source_name(query), self.intervals.get(query, 0.0), quick=query in QUICK_QUERIES)
            for query in QUERY_TYPES]

    def poll(self, tier: str, chips: Sequence[ChipSample] = ()) -> Optional[float]:
        query = query_of(tier)
        if query is None:
            self.poll_table()
            return None
        interval = self.intervals.get(query, 0.0)
        # The whole tier (one call per card) must end before its next run is due, however many cards hang.
        self.poll_query(query, budget_seconds=max(interval, self.runner.timeout_seconds))
        # A query tier that could not run must not leave its values empty for a whole interval.
        if not self.table_read():
            return FIRST_TABLE_WAIT_SECONDS  # it ran before npu-smi's first table came back, so it asked no card
        if interval > RETRY_FAILED_TIER_SECONDS and not self._polls[tier].ok:
            return RETRY_FAILED_TIER_SECONDS
        return None

    def contribute(self, parts: Parts, now: float) -> Parts:
        tool_version, driver_version = self.versions()
        return dataclasses.replace(parts, chips=tuple(self.chips(now)), tool_version=tool_version,
                                   driver_version=driver_version)

    def close(self) -> None:
        pass  # the runner is shared: whoever made it kills its calls

    # -- polling -------------------------------------------------------------------------------------

    def poll_table(self) -> None:
        started = self.clock()
        result = self.runner.run(["info"], priority=True, label=TABLE_SOURCE)  # a slot of its own
        table, error = _parse_table(result)
        with self._lock:
            poll = self._polls[TABLE_SOURCE]
            poll.duration = result.duration_seconds
            if table is None:
                poll.ok, poll.error, poll.degraded = False, error, False
                return
            self._table, self._table_time = table, started
            poll.ok, poll.error, poll.last_success = True, None, started
            poll.degraded = bool(table.problems)
            if table.problems:
                # A card whose row was unreadable has not left: nothing is forgotten on a degraded table.
                poll.error = "degraded: {} unreadable row(s) left out, {} chips read; {}{}".format(
                    len(table.problems), len(table.chips), table.problems[0],
                    "" if len(table.problems) == 1 else " (and {} more)".format(len(table.problems) - 1))
                return
            known = {chip.npu for chip in table.chips}
            # forget per-chip values of chips that left the table
            for key in [key for key in self._query_values if key[0] not in known]:
                del self._query_values[key]

    def table_read(self) -> bool:
        """Whether a main table has been read since the source started (the query tiers need its cards)."""
        with self._lock:
            return self._table is not None

    def poll_query(self, query: str, budget_seconds: Optional[float] = None) -> None:
        """One call per card (or chip). With a budget, the whole poll ends within it: each call's deadline
        is cut to the time left, and calls that would start after it are not made (they count as failed)."""
        poll = self._polls.setdefault(query_source_name(query), _Poll())
        if poll.unsupported:
            return
        with self._lock:
            table = self._table
            table_ok = self._polls[TABLE_SOURCE].ok
        if table is None or not table_ok:
            poll.ok, poll.error, poll.waiting_on = False, "skipped while the main table cannot be read", TABLE_SOURCE
            return
        poll.waiting_on = None
        started = self.clock()
        targets = self._targets(query, table)
        # Begin where the previous poll ran out of time or slots, so that while some cards hang it is not
        # always the same cards that are left out.
        first = self._resume_at.get(query, 0) % len(targets) if targets else 0
        targets = targets[first:] + targets[:first]
        deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
        name = query_source_name(query)

        def take_in(target: Tuple[int, Optional[int]], result: CommandResult) -> Tuple[bool, Optional[str]]:
            """Each answer is parsed and stored as its call returns and then dropped: (left out, problem)."""
            if not result.started or result.cut_off:
                return True, None  # no time or slot left: not npu-smi's failure; the card is asked first next time
            return False, self._absorb(query, target, result, started)

        outcomes = self._run_many(targets, name, deadline, take_in)
        # Not started, or cut off at the budget before its own deadline: asked first next time, no failure.
        left_out = [index for index, (skipped, _) in enumerate(outcomes) if skipped]
        self._resume_at[query] = first + left_out[0] if left_out else 0
        failures: List[str] = []
        for (target, args), (skipped, problem) in zip(targets, outcomes):
            if skipped:
                continue
            if problem == "unsupported":
                return
            if problem:
                failures.append("npu {}{}: {}".format(target[0], "" if target[1] is None else " chip {}".format(
                    target[1]), problem))
        poll.duration = self.clock() - started
        ran = len(targets) - len(left_out)
        if left_out:
            self.runner.stats.overran(name)
            self._warn_overrun(name, len(left_out), len(targets), budget_seconds)
        else:
            self._overrunning.discard(name)
        if failures:
            poll.ok = False
            poll.error = "{} of {} calls failed; first: {}".format(len(failures), ran, failures[0])
        else:
            # Slow, not failing: what was read is good, and the cards left out are asked first next time. A poll
            # that could start no call at all read nothing new: its values age as they would without it.
            if ran or poll.last_success is None:
                poll.ok = True
            if ran:
                poll.last_success = started
            poll.error = None if not left_out else "{} of {} calls left out: {}".format(
                len(left_out), len(targets), self._why_left_out(budget_seconds))
        poll.left_out = len(left_out)

    def _why_left_out(self, budget: Optional[float]) -> str:
        if self.runner.not_after is not None:
            return "the pass's time ran out (npumon check --timeout)"
        if budget:
            return "the tier did not finish within {:.0f}s".format(budget)
        return "no npu-smi slot came free for them"

    def _warn_overrun(self, name: str, left_out: int, total: int, budget: Optional[float]) -> None:
        if name in self._overrunning or self.runner.not_after is not None:
            return  # warned already; or a one-shot pass under a budget of its own, whose sources say it
        self._overrunning.add(name)
        log.warning("%s: %d of %d calls left out: the tier cannot finish within %.0fs at this npu-smi speed "
                    "(lengthen poll.%s_seconds or raise npu_smi_max_concurrent)", name, left_out, total,
                    budget or 0, name.split(":", 1)[1])

    def _targets(self, query: str, table: MainTable) -> List[Tuple[Tuple[int, Optional[int]], List[str]]]:
        rows = table.chips
        if query == "health" and self.quick_pass:
            # The table prints every chip's health; only a chip that is not OK has error codes to ask for.
            rows = [chip for chip in rows if chip.health != "OK"]
        cards = sorted({chip.npu for chip in rows})
        if query in PER_CHIP_QUERIES and not self._chip_option_unsupported:
            return [((chip.npu, chip.chip), ["info", "-t", query, "-i", str(chip.npu), "-c", str(chip.chip)])
                    for chip in rows]
        return [((npu, None), ["info", "-t", query, "-i", str(npu)]) for npu in cards]

    def _run_many(self, targets: Sequence[Tuple[Tuple[int, Optional[int]], List[str]]], label: str,
                  deadline: Optional[float],
                  take_in: Callable[[Tuple[int, Optional[int]], CommandResult], _Outcome]) -> List[_Outcome]:
        """The calls, as many at a time as the runner has slots, each answer handed to `take_in` as it comes;
        with a deadline (time.monotonic()) a call that cannot start before it is left out (started=False) and
        one that runs is cut off at it."""
        def run_one(target_and_args: Tuple[Tuple[int, Optional[int]], List[str]]) -> _Outcome:
            target, args = target_and_args
            return take_in(target, self.runner.run(args, not_after=deadline, label=label))

        if len(targets) <= 1:
            return [run_one(target) for target in targets]
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.runner.max_concurrent) as pool:
            return list(pool.map(run_one, targets))

    def _absorb(self, query: str, target: Tuple[int, Optional[int]], result: CommandResult,
                when: float) -> Optional[str]:
        """Store one call's values; return None, "unsupported", or what went wrong."""
        error = npusmi_kv.classify_error(result.output) if not result.timed_out else None
        if error is not None and error.kind == "unsupported":
            if error.query == "-c" or "parameter of -c" in error.message:
                self._chip_option_unsupported = True  # retry the card-level form on the next poll
                return "chip-level query not supported; using the card-level form from now on"
            poll = self._polls[query_source_name(query)]
            poll.ok, poll.unsupported, poll.error = True, True, "not supported on this product: " + error.message
            return "unsupported"
        if result.timed_out or result.error or result.killed_by_signal:
            return result.describe_failure()
        if error is not None:
            return error.message
        try:
            values = QUERY_PARSERS[query](result.output, chip=target[1])
        except NpuSmiParseError as exc:
            return "unreadable output: {}".format(exc)
        npu = target[0]
        with self._lock:
            if query in CARD_WIDE_QUERIES and target[1] is None and len(values) == 1 and self._table is not None:
                (card_values,) = values.values()
                values = {row.chip: card_values for row in self._table.chips if row.npu == npu} or values
            for chip, chip_values in values.items():
                fields = self._query_values.setdefault((npu, chip), {})
                for name, value in chip_values.items():
                    fields[name] = (query, when, value)
        return None

    # -- reading ---------------------------------------------------------------------------------------

    def allowed_age(self, query: str, max_age: float) -> float:
        """How old a query's values may be: a slow tier (ecc every 5 min, board every hour) does not go stale
        between two polls."""
        return allowed_age(max_age, self.intervals.get(query, 0.0))

    def chips(self, now: float, max_age: Optional[float] = None) -> List[ChipSample]:
        """The chips of the latest main table with every query value that is still fresh."""
        max_age = self.max_age if max_age is None else max_age
        with self._lock:
            table, table_time = self._table, self._table_time
            query_values = {key: dict(per_query) for key, per_query in self._query_values.items()}
        if table is None or table_time is None or now - table_time > max_age:
            return []
        samples = []
        for row in table.chips:
            sample = ChipSample(npu=row.npu, chip=row.chip, driver_version=table.driver_version)
            fields = query_values.get((row.npu, row.chip), {})
            sample.update({name: value for name, (query, when, value) in fields.items()
                           if now - when <= self.allowed_age(query, max_age)})
            # The main table is the freshest reading: it wins wherever it printed a value.
            sample.update({name: value for name, value in row.values().items() if value is not None})
            sample.processes = [
                ProcessSample(npu=p.npu, chip=p.chip, pid=p.pid, name=p.name,
                              memory_bytes=None if p.memory_mb is None else p.memory_mb * MIB,
                              container_pid=p.container_pid)
                for p in table.processes if p.npu == row.npu and (p.chip is None or p.chip == row.chip)
            ]
            samples.append(sample)
        return samples

    def versions(self) -> Tuple[Optional[str], Optional[str]]:
        table = self._table
        return (None, None) if table is None else (table.tool_version, table.driver_version)

    def statuses(self, now: float, max_age: Optional[float] = None) -> Dict[str, SourceStatus]:
        max_age = self.max_age if max_age is None else max_age
        result = {}
        for name, poll in list(self._polls.items()):
            status = SourceStatus(ok=poll.ok, error=poll.error, duration_seconds=poll.duration,
                                  last_success=poll.last_success, unsupported=poll.unsupported,
                                  left_out=poll.left_out, waiting_on=None if poll.ok else poll.waiting_on,
                                  degraded=poll.ok and poll.degraded)
            query = query_of(name)
            status = judge_status(status, now, max_age if query is None else self.allowed_age(query, max_age))
            result[name] = status if status.ok else dataclasses.replace(status, degraded=False)
        return result


def _parse_table(result: CommandResult) -> Tuple[Optional[MainTable], Optional[str]]:
    # A table cut short parses (the parser drops the half chip) and lists too few cards: refuse it, or the
    # cards after the cut would lose their query values as if they had left the host. Cut by a signal, or
    # cut mid-line (npu-smi ends every line it prints).
    if result.timed_out or result.error or result.killed_by_signal:
        return None, result.describe_failure()
    known = npusmi_kv.classify_error(result.output)
    if known is not None:
        return None, known.message
    failure = "" if result.returncode == 0 else " ({})".format(result.describe_failure())
    try:
        table = parse_info(result.output, skip_bad_rows=True)
    except NpuSmiParseError as exc:
        return None, "unreadable npu-smi info output: {}{}".format(exc, failure)
    if result.output.strip() and not result.output.endswith("\n"):
        return None, "unreadable npu-smi info output: it stops mid-line after {} bytes, cut short{}".format(
            len(result.output), failure)
    if not table.chips:
        if table.problems:
            return None, "unreadable npu-smi info output: {}{}".format(table.problems[0], failure)
        return None, "npu-smi info listed no chips"
    return table, None


def build(context: SourceContext) -> NpuSmiSource:
    """Always on: npu-smi is how npumon knows the chips. Its calls go through the one npu-smi runner, whose
    priority slot keeps the main table from waiting behind hanging query calls."""
    poll = context.config.poll
    return NpuSmiSource(context.npu_smi, clock=context.clock,
                        intervals={query: getattr(poll, query + "_seconds") for query in QUERY_TYPES},
                        table_interval=poll.table_seconds, max_age=context.config.max_age_seconds,
                        quick_pass=context.quick_pass)


# The chip record's own facts and families (temperature, utilisation, memory, ECC, ...) belong to the model
# (rules/facts.py, outputs/exporter.py): DCMI will fill the same records.
SPEC = SourceSpec(TABLE_SOURCE, build)
