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
row it left out and why; the chip left out keeps its query values (it may not have left), and the parts it
contributes name it as unreadable (Parts.unreadable_chips), so that the chip count does not take it for gone.
Output that stops mid-line (cut short) is refused whole, like one cut by a signal: it cannot say which cards
come after the cut.

The answers of a query tier are taken in as each call returns, so a tier holds at most one answer per
running call, each within the runner's output cap.

Nothing here raises for a hardware or tool fault: every poll reports an Outcome, which the PollRecorder
(sources/base.py) times and turns into its tier's SourceStatus.

Tiers: `npu-smi` (the main table, the primary tier: the daemon judges the rules after each of its polls) and
one `npu-smi:<query>` per `-t` query; the interconnect links (`hccs`, `hccs_bw`, `sio`) are per-chip queries
swept one call at a time, like the die ids. A query tier that ran before the first table was read asks again within
FIRST_TABLE_WAIT_SECONDS; a slow query tier whose poll failed asks again after RETRY_FAILED_TIER_SECONDS rather
than a whole interval later.
"""

import dataclasses
import logging
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...model import MIB, ChipSample, ProcessSample, SourceStatus
from ..base import Outcome, Parts, PollRecorder, Section, SourceContext, SourceSpec, Tier, TierMarks, allowed_age
from ..dcmi import backend as dcmi_backend
from ..dcmi.config import CollectConfig, collect_problems
from . import extras as npusmi_extras
from . import kv as npusmi_kv
from . import links as npusmi_links
from .common import NpuSmiParseError
from .identity import IdentityCache, cache_path, read_mapping
from .table import MainTable, parse_info
from ..runner import CommandResult, CommandRunner

log = logging.getLogger(__name__)

TABLE_SOURCE = "npu-smi"

QUERY_PARSERS = {
    "usages": npusmi_extras.merged(npusmi_kv.parse_usages, npusmi_extras.parse_usages_extra),
    "power": npusmi_kv.parse_power,
    "health": npusmi_kv.parse_health,
    "ecc": npusmi_extras.merged(npusmi_kv.parse_ecc, npusmi_extras.parse_ecc_counters),
    "board": npusmi_extras.merged(npusmi_kv.parse_board, npusmi_extras.parse_card_serial),
    # Only npu-exporter's families need these three: off unless the config or npu_exporter_compat turns them on.
    "common": npusmi_extras.parse_common_extra,  # AI Core frequency
    "memory": npusmi_extras.parse_memory_extra,  # HBM temperature
    "volt": npusmi_extras.parse_volt,
    # The chip's ids and die id: `info -m` (read first, in the same poll), then `-t board -i N -c C` per chip.
    "identity": npusmi_extras.parse_chip_identity,
    # The interconnect links (910B, A3): one call per chip each; a product without them refuses the type once.
    "hccs": npusmi_links.parse_hccs,
    "hccs_bw": npusmi_links.parse_hccs_bandwidth,
    "sio": npusmi_links.parse_sio,
}
QUERY_TYPES = tuple(QUERY_PARSERS)
# The npu-smi `-t` type a query asks, where its name is not that type.
NPU_SMI_TYPES = {"identity": "board", "hccs_bw": "hccs-bw", "sio": "sio-info"}
PER_CHIP_QUERIES = frozenset(("health", "volt", "identity", "hccs", "hccs_bw", "sio"))
# Per-chip sweeps that take one slot at a time, never every slot for a minute: values that hardly change, and
# the link queries (16 calls on an A3, each hccs-bw call holding its slot for the profiling window).
BACKGROUND_QUERIES = frozenset(("volt", "identity", "hccs", "hccs_bw", "sio"))
# the queries whose answers carry faults (health codes, ECC counts, HCCS/SIO link state): judged soon after
JUDGED_QUERIES = frozenset(("health", "ecc", "hccs", "sio"))
# hccs-bw measures over this window (npu-smi `-time`, 1-1000 ms; npu-exporter's -hccsBWProfilingTime default)
HCCS_BW_PROFILING_MS = 200
QUERY_OPTIONS = {"hccs_bw": ["-time", str(HCCS_BW_PROFILING_MS)]}
# Seconds between polls of the compat-only queries when the config leaves them unset and npu_exporter_compat
# is on: slow enough for an A3 (2 s a call, 16 chips) to keep up with its other tiers on two npu-smi slots.
COMPAT_QUERY_SECONDS = {"common": 120.0, "memory": 300.0, "volt": 600.0}
# What a default `npumon check` asks besides the table: error codes and ECC counts, what fits NRPE's 10 s at
# real npu-smi speed on 8 cards. Power and AI Core are in the main table on every product; usages (vector,
# cube, memory bandwidth) and board (firmware, compatibility) come with --full.
QUICK_QUERIES = frozenset(("health", "ecc"))
# A quick pass under a deadline (`npumon check`) asks its card-level queries beside the main table, for the
# cards `npu-smi info -l` lists: on a 16-chip A3 the table and a card query take 2-3 s each, and one after the
# other they left no room in NRPE's 10 s for a slow call (benchmarks/results/check-a3-quick.md).
BESIDE_THE_TABLE = frozenset(query for query in QUICK_QUERIES if query not in ("health",))
# Their card-level answer describes the whole card (firmware, driver, compatibility): every chip of the
# card gets it, not only chip 0 under which the parser returns it.
CARD_WIDE_QUERIES = frozenset(("board",))


# The die-id sweep follows info -m at once (one call at a time, so the other tiers keep a slot): the compat
# series are held until it has run (identity_pending), and consumers join on vdie_id from their first scrape.
IDENTITY_SWEEP_AFTER_SECONDS = 1.0
RETRY_FAILED_TIER_SECONDS = 60.0  # a query tier with a longer interval whose poll failed tries again this soon
FIRST_TABLE_WAIT_SECONDS = 1.0  # a query tier that ran before the first main table was read tries again this soon


_Outcome = Tuple[bool, Optional[str]]  # one query call: (left out for lack of time or a slot, its problem)
_STOPPED = "stopped"  # the problem of a call npumon's own stop or reload ended (CommandResult.stopped)


def query_source_name(query: str) -> str:
    return "{}:{}".format(TABLE_SOURCE, query)


def query_of(tier: str) -> Optional[str]:
    """"npu-smi:usages" -> "usages"; None for the main table."""
    return tier.split(":", 1)[1] if tier.startswith(TABLE_SOURCE + ":") else None


class NpuSmiSource:
    name = TABLE_SOURCE

    def __init__(self, runner: CommandRunner, clock: Callable[[], float] = time.time,
                 intervals: Optional[Dict[str, float]] = None, table_interval: float = 15.0,
                 max_age: float = 120.0, quick_pass: bool = False, identity_cache: Optional[IdentityCache] = None,
                 backend: Optional[Callable[[], Tuple[str, Optional[str]]]] = None,
                 skip_query: Optional[Callable[[str], bool]] = None):
        self.runner = runner
        self.skip_query = skip_query  # query -> True while DCMI reads its values (dcmi/backend.py Decision.covers)
        # () -> (what reads the chip values, why npu-smi if it is a fallback): named on the table's status
        self.backend = backend
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
        self.recorder = PollRecorder(TABLE_SOURCE, self._allowed, clock)
        self._moved = TierMarks()  # query types that stored a value other than the one they had (Outcome.changed)
        self._unsupported: Dict[str, str] = {}  # query type -> why the product refuses it (not asked again)
        self._chip_option_unsupported = False  # 950: "does not support input parameter of -c"
        self._resume_at: Dict[str, int] = {}  # query type -> index of the first call its last poll left out
        self._overrunning = set()  # tiers whose last poll left calls out (warned once until they finish again)
        # The identity tier's answers outlive the process in this file: a quick `npumon check` reads the ids from
        # it rather than ask npu-smi (info -m and one -t board per chip are too slow for NRPE's 10 s).
        self._identity_cache = identity_cache
        # The daemon takes them too: after a restart the ids are there with the first table, and the hourly sweep
        # need not crowd the other tiers at start.
        self._cached_identity = identity_cache.load(clock()) if identity_cache is not None else None
        self._identity_from_cache = False
        self._mapping_read = False  # the daemon's first identity poll reads info -m alone
        self._identity_settled = False  # the die ids were asked (or taken from the cache): not pending any more
        # query -> {(npu, None): outcome} of the calls a one-shot quick pass made beside its table, and the thread
        self._beside: Dict[str, Dict[Tuple[int, Optional[int]], "_Outcome"]] = {}
        self._beside_thread: Optional[threading.Thread] = None
        self._mapping_unsupported = False

    # -- the source contract (sources/base.py) ------------------------------------------------------

    def tiers(self) -> List[Tier]:
        # The identity tier runs at once (every compat series needs its ids), then rarely.
        return [Tier(TABLE_SOURCE, self.table_interval, primary=True, first_run=0.0)] + [
            Tier(query_source_name(query), self.intervals.get(query, 0.0), quick=query in QUICK_QUERIES,
                 first_run=0.0 if query == "identity" else None, background=query in BACKGROUND_QUERIES,
                 judged=query in JUDGED_QUERIES)
            for query in QUERY_TYPES]

    def poll(self, tier: str, chips: Sequence[ChipSample] = ()) -> Optional[float]:
        query = query_of(tier)
        if query is None:  # the main table: a slot of its own, never stretched
            return self.recorder.execute(tier, lambda started: self._poll(tier, started))
        return self.recorder.execute(tier, lambda started: self._poll(tier, started).paced(
            self.intervals.get(query, 0.0), self.runner.budget.stretch(tier)))

    def _poll(self, tier: str, started: float) -> Outcome:
        query = query_of(tier)
        if query is None:
            return self._read_table(started)
        if self.skip_query is not None and self.skip_query(query):
            return Outcome(shown=False)  # not asked: no status of its own (the dcmi source has it)
        interval = self.intervals.get(query, 0.0)
        if query == "identity" and self._identity_from_cache:
            self._identity_from_cache = False  # taken from the cache: nothing to ask until the next sweep
            self._identity_settled = True
            return Outcome()
        if query == "identity" and self.table_read() and not self._mapping_read and self.runner.not_after is None:
            return self._first_mapping_only(started)
        mapping_problem = self._poll_mapping() if query == "identity" and self.table_read() else None
        # The whole tier (one call per card) must end before its next run is due (later while the call budget
        # stretches it), however many cards hang.
        due = interval * self.runner.budget.stretch()
        outcome = self._read_query(query, started, budget_seconds=max(due, self.runner.timeout_seconds))
        if query == "identity":
            outcome = self._after_identity_poll(tier, outcome, mapping_problem)
            # asked, whatever came back: a chip whose die id cannot be read is served without one
            self._identity_settled = self._identity_settled or self.table_read()
        # A query tier that could not run must not leave its values empty for a whole interval.
        if not self.table_read():  # it ran before npu-smi's first table came back, so it asked no card
            return dataclasses.replace(outcome, retry=FIRST_TABLE_WAIT_SECONDS)
        if interval > RETRY_FAILED_TIER_SECONDS and not self._ok_after(tier, outcome):
            return dataclasses.replace(outcome, retry=RETRY_FAILED_TIER_SECONDS)
        return outcome

    def _ok_after(self, tier: str, outcome: Outcome) -> bool:
        """Whether the tier works once `outcome` is recorded."""
        return self.recorder.last(tier).ok if outcome.ok is None else outcome.ok

    def _allowed(self, tier: str) -> float:
        query = query_of(tier)
        return self.max_age if query is None else self.allowed_age(query, self.max_age)

    def contribute(self, parts: Parts, now: float) -> Parts:
        tool_version, driver_version = self.versions()
        chips = tuple(self.chips(now))
        table = self._table
        unreadable = table.unreadable_chips if chips and table is not None else ()
        return dataclasses.replace(parts, chips=chips, tool_version=tool_version, driver_version=driver_version,
                                   unreadable_chips=unreadable)

    def close(self) -> None:
        pass  # the runner is shared: whoever made it kills its calls

    # -- polling -------------------------------------------------------------------------------------

    def _read_table(self, started: float) -> Outcome:
        if self.quick_pass and self.runner.not_after is not None and self._beside_thread is None:
            self._beside_thread = threading.Thread(target=self._ask_beside_the_table, args=(started,),
                                                   name="npu-smi-beside-table", daemon=True)
            self._beside_thread.start()
        result = self.runner.run(["info"], priority=True, label=TABLE_SOURCE)  # a slot of its own
        if result.stopped:
            log.debug("%s: poll ended by npumon's stop; its status stays as it was", TABLE_SOURCE)
            return Outcome(stopped=True)
        table, error = _parse_table(result)
        if table is None:
            return Outcome.failed(error)
        with self._lock:
            self._table, self._table_time = table, started
            if table.problems:
                # A card whose row was unreadable has not left: nothing is forgotten on a degraded table.
                return Outcome(degraded=True, error="degraded: {} unreadable row(s) left out, {} chips read; "
                               "{}{}".format(len(table.problems), len(table.chips), table.problems[0],
                                             "" if len(table.problems) == 1
                                             else " (and {} more)".format(len(table.problems) - 1)))
            self._apply_cached_identity(table, started)
            known = {chip.npu for chip in table.chips}
            # forget per-chip values of chips that left the table
            for key in [key for key in self._query_values if key[0] not in known]:
                del self._query_values[key]
        return Outcome()

    def _ask_beside_the_table(self, started: float) -> None:
        """Every card's quick card-level queries while the table is read: the cards the identity file lists
        (kept by the daemon), else those `info -l` lists (1.5 s more on an A3). Anything that goes wrong here
        only means the tier asks after the table, as it would without this; a card the file lists that is gone
        fails its call and is asked for nothing, one it lacks is asked after the table."""
        queries = sorted(query for query in BESIDE_THE_TABLE if self.intervals.get(query, 0.0) > 0
                         and not (self.skip_query is not None and self.skip_query(query)))
        if not queries:
            return
        cards = sorted({npu for npu, _ in self._cached_identity.chips}) if self._cached_identity else None
        if cards is None:
            cards = self._listed_cards(query_source_name(queries[0]))
        if not cards:
            return
        for query in queries:
            targets = [((npu, None), ["info", "-t", NPU_SMI_TYPES.get(query, query), "-i", str(npu)]) for npu in cards]
            outcomes = self._run_many(targets, query_source_name(query), None, self._taker(query, started))
            with self._lock:
                self._beside[query] = {target: outcome for (target, _), outcome in zip(targets, outcomes)
                                       if not outcome[0] and outcome[1] is None}  # answered and stored

    def _listed_cards(self, label: str) -> Optional[List[int]]:
        listed = self.runner.run(["info", "-l"], label=label)
        if not listed.started or listed.timed_out or listed.error or listed.killed_by_signal:
            return None
        try:
            return sorted({npu.npu for npu in npusmi_kv.parse_list(listed.output)})
        except NpuSmiParseError:
            return None

    def _answered_beside_the_table(self, query: str) -> Dict[Tuple[int, Optional[int]], "_Outcome"]:
        """The calls of `query` this pass already made beside the table (waiting for them to end)."""
        thread = self._beside_thread
        if thread is None or query not in BESIDE_THE_TABLE:
            return {}
        thread.join()
        with self._lock:
            return self._beside.pop(query, {})  # taken once: a later poll asks again

    def _taker(self, query: str, started: float) -> Callable[[Tuple[int, Optional[int]], CommandResult], "_Outcome"]:
        def take_in(target: Tuple[int, Optional[int]], result: CommandResult) -> "_Outcome":
            """Each answer is parsed and stored as its call returns and then dropped: (left out, problem)."""
            if result.stopped:
                return True, _STOPPED
            if not result.started or result.cut_off:
                return True, None  # no time or slot left: not npu-smi's failure; the card is asked first next time
            return False, self._absorb(query, target, result, started)
        return take_in

    def table_read(self) -> bool:
        """Whether a main table has been read since the source started (the query tiers need its cards)."""
        with self._lock:
            return self._table is not None

    def _read_query(self, query: str, started: float, budget_seconds: Optional[float] = None) -> Outcome:
        """One call per card (or chip). With a budget, the whole poll ends within it: each call's deadline
        is cut to the time left, and calls that would start after it are not made (they count as failed)."""
        if query in self._unsupported:
            return Outcome(error=self._unsupported[query], unsupported=True, read=False)
        with self._lock:
            table = self._table
        if table is None or not self.recorder.last(TABLE_SOURCE).ok:
            return Outcome.failed("skipped while the main table cannot be read", waiting_on=TABLE_SOURCE)
        chip_level = query in PER_CHIP_QUERIES and not self._chip_option_unsupported
        targets = self._targets(query, table)
        # Begin where the previous poll ran out of time or slots, so that while some cards hang it is not
        # always the same cards that are left out.
        first = self._resume_at.get(query, 0) % len(targets) if targets else 0
        targets = targets[first:] + targets[:first]
        deadline = None if budget_seconds is None else time.monotonic() + budget_seconds
        name = query_source_name(query)
        early = self._answered_beside_the_table(query)  # cards of this table already answered this pass
        pending = [target for target in targets if target[0] not in early]
        # In the daemon, per-chip sweeps of what hardly changes take one slot at a time, never every slot for a
        # minute (and their tiers run one at a time: Tier.background). A one-shot pass under its deadline (check, diag: runner.not_after) has nothing to keep a slot
        # for and asks them as fast as its slots allow.
        background = query in BACKGROUND_QUERIES and self.runner.not_after is None
        asked = dict(zip((target for target, _ in pending), self._run_many(
            pending, name, deadline, self._taker(query, started), one_at_a_time=background)))
        outcomes = [early[target] if target in early else asked[target] for target, _ in targets]
        if any(problem == _STOPPED for _, problem in outcomes):
            # what answered before the stop is kept; the calls it ended are neither failed nor left out
            log.debug("%s: poll ended by npumon's stop; its status stays as it was", name)
            return Outcome(stopped=True)
        if chip_level and self._chip_option_unsupported:
            # npu-smi refused `-c` (the 950): ask again at once in the card-level form, within the same budget,
            # so that a single pass (`npumon check`) still reads these values
            self._resume_at[query] = 0
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            return self._read_query(query, started, budget_seconds=left)
        # Not started, or cut off at the budget before its own deadline: asked first next time, no failure.
        left_out = [index for index, (skipped, _) in enumerate(outcomes) if skipped]
        self._resume_at[query] = first + left_out[0] if left_out else 0
        failures: List[str] = []
        for (target, args), (skipped, problem) in zip(targets, outcomes):
            if skipped:
                continue
            if problem == "unsupported":
                return Outcome(error=self._unsupported[query], unsupported=True, read=False)
            if problem:
                failures.append("npu {}{}: {}".format(target[0], "" if target[1] is None else " chip {}".format(
                    target[1]), problem))
        ran = len(targets) - len(left_out)
        if left_out:
            self.runner.stats.overran(name)
            self._warn_overrun(name, len(left_out), len(targets), budget_seconds)
        else:
            self._overrunning.discard(name)
        if failures:
            return Outcome.failed("{} of {} calls failed; first: {}".format(len(failures), ran, failures[0]),
                                  left_out=len(left_out))
        # Slow, not failing: what was read is good, and the cards left out are asked first next time. A poll
        # that could start no call at all read nothing new: its values age as they would without it, and it
        # cannot tell whether the tier works (unless it never worked: then nothing says it does not).
        return Outcome(ok=True if ran or self.recorder.last(name).last_success is None else None,
                       read=bool(ran or not targets),  # nothing to ask (e.g. health of OK chips) is a success
                       changed=self._moved.take(query),  # a value moved since the query's last poll took it
                       error=None if not left_out else "{} of {} calls left out: {}".format(
                           len(left_out), len(targets), self._why_left_out(budget_seconds)),
                       left_out=len(left_out))

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
        npu_smi_type = NPU_SMI_TYPES.get(query, query)
        if query in PER_CHIP_QUERIES and not self._chip_option_unsupported:
            return [((chip.npu, chip.chip), ["info", "-t", npu_smi_type, "-i", str(chip.npu), "-c", str(chip.chip)]
                     + QUERY_OPTIONS.get(query, [])) for chip in rows]
        return [((npu, None), ["info", "-t", npu_smi_type, "-i", str(npu)] + QUERY_OPTIONS.get(query, []))
                for npu in cards]

    def _run_many(self, targets: Sequence[Tuple[Tuple[int, Optional[int]], List[str]]], label: str,
                  deadline: Optional[float],
                  take_in: Callable[[Tuple[int, Optional[int]], CommandResult], _Outcome],
                  one_at_a_time: bool = False) -> List[_Outcome]:
        """The calls, as many at a time as the runner has slots (one at a time in this thread with
        `one_at_a_time`), each answer handed to `take_in` as it comes;
        with a deadline (time.monotonic()) a call that cannot start before it is left out (started=False) and
        one that runs is cut off at it."""
        def run_one(target_and_args: Tuple[Tuple[int, Optional[int]], List[str]]) -> _Outcome:
            target, args = target_and_args
            return take_in(target, self.runner.run(args, not_after=deadline, label=label))

        if one_at_a_time:
            return [run_one(target) for target in targets]
        return self.runner.pool.map(run_one, targets, deadline)  # its threads follow the slots and serve every tier

    def _absorb(self, query: str, target: Tuple[int, Optional[int]], result: CommandResult,
                when: float) -> Optional[str]:
        """Store one call's values; return None, "unsupported", or what went wrong."""
        error = npusmi_kv.classify_error(result.output) if not result.timed_out else None
        if error is not None and error.kind == "unsupported":
            if error.query == "-c" or "parameter of -c" in error.message:
                self._chip_option_unsupported = True  # retry the card-level form on the next poll
                return "chip-level query not supported; using the card-level form from now on"
            self._unsupported[query] = "not supported on this product: " + error.message
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
                    if name not in fields or fields[name][2] != value:
                        self._moved.mark(query)
                    fields[name] = (query, when, value)
        return None

    # -- identity: info -m, the die ids, and their cache ---------------------------------------------------

    def _poll_mapping(self) -> Optional[str]:
        """Read `npu-smi info -m` into every chip's device_id / phy_id; None, or what went wrong."""
        if self._mapping_unsupported:
            return None
        started = self.clock()
        values, problem, self._mapping_unsupported = read_mapping(self.runner, query_source_name("identity"))
        with self._lock:
            for key, chip_values in values.items():
                fields = self._query_values.setdefault(key, {})
                for name, value in chip_values.items():
                    fields[name] = ("identity", started, value)
        return problem

    def _after_identity_poll(self, tier: str, outcome: Outcome, mapping_problem: Optional[str]) -> Outcome:
        if mapping_problem is not None:
            outcome = dataclasses.replace(outcome, ok=False, error=mapping_problem if outcome.error is None
                                          else "{}; {}".format(mapping_problem, outcome.error))
        if self._identity_cache is not None and self._ok_after(tier, outcome) and self.table_read():
            self._identity_cache.save(self.chips(self.clock()), self.clock())
        return outcome

    def _apply_cached_identity(self, table: MainTable, when: float) -> None:
        """A quick pass takes the ids the cache holds when the cache describes this very table (same chips,
        same bus ids); called with the lock held."""
        cached, self._cached_identity = self._cached_identity, None
        if not cached:
            return
        matching = cached.matching(table.chips)
        for key, values in matching.items():
            fields = self._query_values.setdefault(key, {})
            for name, value in values.items():
                fields.setdefault(name, ("identity", when, value))
        self._identity_from_cache = bool(matching)
        self._identity_settled = self._identity_settled or bool(matching)

    def _first_mapping_only(self, started: float) -> Outcome:
        """The daemon's first identity poll reads only `info -m` (one call: the ids every compat series needs);
        the per-chip die-id sweep follows once the other tiers have had their first polls."""
        problem = self._poll_mapping()
        if problem is not None:
            return Outcome.failed(problem, retry=RETRY_FAILED_TIER_SECONDS)
        self._mapping_read = True
        return Outcome(retry=min(IDENTITY_SWEEP_AFTER_SECONDS,
                                 self.intervals.get("identity") or IDENTITY_SWEEP_AFTER_SECONDS))

    # -- reading ---------------------------------------------------------------------------------------

    def allowed_age(self, query: str, max_age: float) -> float:
        """How old a query's values may be: a slow tier (ecc every 5 min, board every hour) does not go stale
        between two polls."""
        stretch = self.runner.budget.freshness_stretch(query_source_name(query))
        return allowed_age(max_age, self.intervals.get(query, 0.0) * stretch)

    def identity_pending(self) -> bool:
        """Whether the die ids (vdie_id, model_name) are still to be asked: the identity tier will run in this
        process and has not swept yet, nor found them in the cache. The npu-exporter compatible series wait
        for them, so that no series changes identity minutes after start."""
        return not (self._identity_settled or self.quick_pass or self.intervals.get("identity", 0.0) <= 0
                    or "identity" in self._unsupported or (self.skip_query is not None and self.skip_query("identity")))

    def chips(self, now: float, max_age: Optional[float] = None) -> List[ChipSample]:
        """The chips of the latest main table with every query value that is still fresh."""
        max_age = self.max_age if max_age is None else max_age
        with self._lock:
            table, table_time = self._table, self._table_time
            query_values = {key: dict(per_query) for key, per_query in self._query_values.items()}
        if table is None or table_time is None or now - table_time > max_age:
            return []
        samples = []
        allowed: Dict[str, float] = {}  # query -> its allowed age, worked out once, not once per field and chip
        pending = self.identity_pending()
        for row in table.chips:
            sample = ChipSample(npu=row.npu, chip=row.chip, driver_version=table.driver_version)
            if pending:
                sample.extra["identity_pending"] = True
            fields = query_values.get((row.npu, row.chip), {})
            fresh = {}
            for name, (query, when, value) in fields.items():
                if query not in allowed:
                    allowed[query] = self.allowed_age(query, max_age)
                if now - when <= allowed[query]:
                    fresh[name] = value
            sample.update(fresh)
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

    def statuses(self, now: float) -> Dict[str, SourceStatus]:
        result = self.recorder.statuses(now, unpolled=[TABLE_SOURCE])
        if self.backend is not None:
            backend, fallback_reason = self.backend()
            result[TABLE_SOURCE] = dataclasses.replace(result[TABLE_SOURCE], backend=backend,
                                                       fallback_reason=fallback_reason)
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
    priority slot keeps the main table from waiting behind hanging query calls. With DCMI in use
    (collect.backend), a query DCMI reads is not asked while DCMI answers (the DCMI source supplies its values)."""
    config = context.config
    decision = dcmi_backend.decide(config, context.target)
    return NpuSmiSource(context.npu_smi, clock=context.clock, intervals=query_intervals(config),
                        table_interval=config.poll.table_seconds, max_age=config.max_age_seconds,
                        quick_pass=context.quick_pass, identity_cache=IdentityCache(cache_path(context)),
                        backend=decision.status_backend,
                        skip_query=decision.covers if decision.backend == dcmi_backend.DCMI else None)


def query_intervals(config) -> Dict[str, float]:
    """Seconds between polls of each query; a compat-only query left unset polls when npu_exporter_compat is on."""
    compat = config.exporter.npu_exporter_compat
    intervals = {}
    for query in QUERY_TYPES:
        seconds = getattr(config.poll, query + "_seconds")
        if seconds is None:
            seconds = COMPAT_QUERY_SECONDS.get(query, 0.0) if compat else 0.0
        intervals[query] = seconds
    return intervals


# The chip record's own facts and families (temperature, utilisation, memory, ECC, ...) belong to the model
# (rules/facts.py, outputs/exporter.py): DCMI will fill the same records.
# `collect:` (which backend reads the chip values) is this source's section: it decides which of its tiers run.
SPEC = SourceSpec(TABLE_SOURCE, build, section=Section("collect", CollectConfig, collect_problems), lists_chips=True)
