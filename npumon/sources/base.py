"""The source contract: every origin of numbers is a Source, declared once in sources/registry.py.

In the spirit of gpud's components and node_exporter's collectors: a source has a name, says which tiers it
polls and how often, polls under a deadline without ever raising, reports a SourceStatus per tier, and
contributes its fresh values to each Snapshot by returning new Parts (never by changing an object that an
earlier Snapshot holds). Its module declares the rest in a SourceSpec: how to build it for a config and a
target (or not, where it is off), its config section, the rule facts and the metric families it adds.
`npumon check` and the daemon walk the same list (sources/collection.py).

Status is made in one place (`PollRecorder.execute`, as node_exporter's execute()): it times every poll of
every tier, catches what escapes it, and turns what the poll reports (an `Outcome`) into the tier's
SourceStatus. Freshness is one rule for every source (`allowed_age`, `judge_status`, `Reading`): the last good
value is kept while it is fresh, then it goes and the status says why.
"""

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generic, Optional, Protocol, Sequence, Set, Tuple,
                    TypeVar, runtime_checkable)

from ..config.schema import Section
from ..logrepeat import Repeats
from ..model import NOT_POLLED, ChipSample, HostSample, Snapshot, SourceStatus

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from .runner import CommandRunner
    from .target import Target

Facts = Dict[str, Any]
T = TypeVar("T")
# The whole config (npumon/settings.py). It is built from the sections the sources declare, so sources name it
# loosely rather than import it back.
AnyConfig = Any


@dataclass(frozen=True)
class Tier:
    """One scheduled poll of a source."""

    name: str  # the scheduler's job id and the key of its status in Snapshot.sources
    interval: float  # seconds between polls; 0 = off
    primary: bool = False  # after each of its polls the daemon judges the rules and publishes a Snapshot
    first_run: Optional[float] = None  # seconds until its first poll; None: spread over its first interval
    quick: bool = True  # polled by a default `npumon check` (False: only with --full; slow or costly tiers)
    # a sweep of what hardly changes, one call at a time: the daemon runs it, as every tier of the shared npu-smi
    # runner polled less often than every minute, on one thread of their own, so that they never hold the
    # threads the minute tiers' calls need
    background: bool = False
    # it reads faults a rule fires on (a driver fault, an ECC count, a link): the daemon judges the rules soon
    # after each of its polls instead of at the primary tier's next pass, up to a table interval later
    judged: bool = False


@dataclass(frozen=True)
class Parts:
    """What a Snapshot is built from. Each source's contribute() returns new Parts (dataclasses.replace), so
    a HostSample or ChipSample that an earlier Snapshot holds is never changed."""

    time: float
    host: HostSample
    chips: Tuple[ChipSample, ...] = ()
    tool_version: Optional[str] = None
    driver_version: Optional[str] = None
    # npu-smi's table: per chip whose rows could not be read, the bus id they show (None where none): a chip
    # still there, only unreadable (the chip count must not take it for a chip gone)
    unreadable_chips: Tuple[Optional[str], ...] = ()

    def snapshot(self, sources: Dict[str, SourceStatus]) -> Snapshot:
        return Snapshot(time=self.time, host=self.host, chips=list(self.chips), sources=sources,
                        tool_version=self.tool_version, driver_version=self.driver_version)


@runtime_checkable
class Source(Protocol):
    name: str  # the source's name: its (first) tier and its key in Snapshot.sources

    def tiers(self) -> Sequence[Tier]: ...

    def poll(self, tier: str, chips: Sequence[ChipSample]) -> Optional[float]:
        """Poll one tier within its deadline, through its PollRecorder (which times it, records its Outcome and
        catches what escapes); never raises. `chips`: the latest Snapshot's chips. Returns the seconds after
        which this tier wants to run again (sooner: a retry; later: the call budget's stretch), or None to keep
        its interval."""

    def statuses(self, now: float) -> Dict[str, SourceStatus]: ...  # tier name -> status, staleness judged

    def contribute(self, parts: Parts, now: float) -> Parts: ...  # the parts with its fresh values in

    def close(self) -> None: ...  # kill what still runs, refuse new polls


@dataclass(frozen=True)
class SourceContext:
    """What building a source may use: the config, the target host, the one npu-smi runner, the clock."""

    config: AnyConfig
    target: "Target"
    npu_smi: "CommandRunner"
    clock: Callable[[], float] = time.time
    quick_pass: bool = False  # one quick pass of `npumon check`: a source may ask less (npu-smi: health)
    one_pass: bool = False  # `npumon check` (quick or full): a source reads afresh and saves no state
    sleep: Callable[[float], None] = time.sleep  # a wait within one poll, on the clock's time (tests: a fake one)

    @property
    def state_dir(self) -> str:
        """Where a source keeps what must outlive a restart (caches, cursors): the config's state_dir (a
        simulated host's config names the simulation's own, sim/target.py)."""
        return self.config.state_dir


@dataclass(frozen=True)
class SourceSpec:
    """A source as the source list declares it. Facts functions return every key they know, None where
    unknown, so the names a rule may use can be listed from blank samples."""

    name: str
    build: Callable[[SourceContext], Optional[Source]]  # None: off for this config or host
    section: Optional[Section] = None
    chip_facts: Optional[Callable[[ChipSample, HostSample], Facts]] = None
    host_facts: Optional[Callable[[Snapshot], Facts]] = None
    metrics: Tuple[Any, ...] = ()  # outputs.metrics.MetricSpec of every family it exports
    export: Optional[Callable[[Snapshot, Any], None]] = None  # export(snapshot, families): adds its samples
    lists_chips: bool = False  # its contribute makes the chips (npu-smi, DCMI): the chips every poll is given


# -- freshness: one rule for every source ------------------------------------------------------------------

def allowed_age(max_age: float, interval: float) -> float:
    """How old a source's values may be. A source polled less often than max_age is fresh until its next poll
    is overdue (one missed poll tolerated), not only for max_age."""
    return max(max_age, 2 * interval)


def is_fresh(when: Optional[float], now: float, allowed: float) -> bool:
    return when is not None and now - when <= allowed


def judge_status(status: SourceStatus, now: float, allowed: float) -> SourceStatus:
    """The status as readers see it: a source whose last success is older than allowed is down, and says so."""
    if status.ok and not status.unsupported and status.last_success is not None \
            and now - status.last_success > allowed:
        return dataclasses.replace(status, ok=False, error="stale: last success {:.0f}s ago (max age {:.0f}s)".format(
            now - status.last_success, allowed))
    return status


@dataclass(frozen=True)
class Outcome:
    """What one poll of one tier found, as its source reports it. PollRecorder.execute makes the tier's
    SourceStatus from it: the poll's duration, and its start as the last success when it read something."""

    ok: Optional[bool] = True  # the tier works; None: this poll could not tell (it made no call): as before
    error: Optional[str] = None  # why it is down; on a tier that works, a note (not supported, calls left out)
    read: bool = True  # it read something new: the poll's start becomes the tier's last success
    unsupported: bool = False  # the product has no such thing: not news, whatever `ok` says
    left_out: int = 0  # calls it did not make for lack of time or a free slot (asked first next time)
    waiting_on: Optional[str] = None  # down only because this other source is (shown only while down)
    degraded: bool = False  # works, but part of its answer was unreadable and left out (shown only while up)
    retry: Optional[float] = None  # seconds after which it wants to run again (sooner or later); None: its interval
    shown: bool = True  # False: the tier has no status (not asked: another source reads its values)
    stopped: bool = False  # npumon's own stop or reload ended it: no news, the status stays as it was
    # what it read may differ, for a rule, from the last poll's answer; False: the same again (judging the rules
    # early on it would say nothing new, Tier.judged)
    changed: bool = True

    @classmethod
    def failed(cls, error: str, **fields: Any) -> "Outcome":
        """A poll that found no value: the tier is down, its last success stays."""
        return cls(ok=False, error=error, read=False, **fields)

    def paced(self, interval: float, stretch: float) -> "Outcome":
        """This outcome with the delay it asks of the scheduler: its own retry if it has one, else its
        interval times the call budget's stretch while that is above 1 (sources/budget.py)."""
        if self.retry is not None or interval <= 0 or stretch <= 1.0:
            return self
        return dataclasses.replace(self, retry=interval * stretch)


NOT_POLLED_STATUS = SourceStatus(ok=False, error=NOT_POLLED)


class TierMarks:
    """Tiers marked by the threads of their polls until someone takes the mark (Outcome.changed, take_news)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tiers: Set[str] = set()

    def mark(self, tier: str) -> None:
        with self._lock:
            self._tiers.add(tier)

    def take(self, tier: str) -> bool:
        """Whether the tier was marked since the last take; clears its mark."""
        with self._lock:
            marked = tier in self._tiers
            self._tiers.discard(tier)
        return marked


class PollRecorder:
    """Every tier's status of one source, made in one place: `execute` times a poll, catches what escapes it
    (a bug in one source must not stop the others, nor leave its status behind), and records its Outcome;
    `statuses` judges staleness. Thread-safe: tiers poll on threads of their own."""

    def __init__(self, name: str, allowed: Callable[[str], float], clock: Callable[[], float] = time.time,
                 logger: Optional[logging.Logger] = None):
        """`name`: the source's, for the log; `allowed`: tier -> how old its last success may be; `logger`: where
        a poll's escaped failures are logged (the source's module's; default this module's)."""
        self.name = name
        self._allowed = allowed
        self._clock = clock
        self._lock = threading.Lock()
        self._statuses: Dict[str, SourceStatus] = {}
        self._flipped = TierMarks()  # tiers whose last polls took them down or brought them back
        self._changed = TierMarks()  # tiers whose last polls read something new (Outcome.changed)
        # a poll's escaped failures: one line per cause and interval, with a count (the source may log its own)
        self.repeats = Repeats(logger or log, clock=clock)

    def execute(self, tier: str, poll: Callable[[float], Outcome]) -> Optional[float]:
        """Run `poll(started)` (`started`: the clock's time, which the values it reads carry) and record what it
        found; returns the delay to its next run that it asks for (Outcome.retry)."""
        started, began = self._clock(), time.monotonic()
        try:
            outcome = poll(started)
        except Exception as exc:  # noqa: BLE001 - the contract says a poll never raises; this is the net
            self.repeats.log(logging.ERROR, type(exc).__name__, "source %s failed: internal error: %s: %s",
                              self.name, type(exc).__name__, exc, exc=exc)
            outcome = Outcome.failed("internal error: {}".format(exc))
        self.record(tier, outcome, started, time.monotonic() - began)
        return outcome.retry

    def record(self, tier: str, outcome: Outcome, started: float, duration: Optional[float]) -> None:
        if outcome.stopped:
            return
        with self._lock:
            if not outcome.shown:
                self._statuses.pop(tier, None)
                return
            previous = self._statuses.get(tier, NOT_POLLED_STATUS)
            ok = previous.ok if outcome.ok is None else outcome.ok
            # judged as readers saw it just before (stale is down): a stale tier that answers again came back
            if tier not in self._statuses or ok != judge_status(previous, started, self._allowed(tier)).ok:
                self._flipped.mark(tier)
            if outcome.read and outcome.changed:
                self._changed.mark(tier)
            self._statuses[tier] = SourceStatus(
                ok=ok, error=outcome.error, duration_seconds=duration,
                last_success=started if outcome.read else previous.last_success, unsupported=outcome.unsupported,
                left_out=outcome.left_out, waiting_on=None if ok else outcome.waiting_on,
                degraded=ok and outcome.degraded)

    def take_news(self, tier: str) -> Tuple[bool, bool]:
        """(flipped, changed) since the last call: whether a poll of the tier took it down or brought it back
        (or was its first), and whether one read something new; both cleared."""
        return self._flipped.take(tier), self._changed.take(tier)

    def last(self, tier: str) -> SourceStatus:
        """The tier's status as its last poll left it (staleness not judged)."""
        with self._lock:
            return self._statuses.get(tier, NOT_POLLED_STATUS)

    def statuses(self, now: float, unpolled: Sequence[str] = ()) -> Dict[str, SourceStatus]:
        """Every polled tier's status as readers see it (stale: down, and no longer degraded); the tiers named
        in `unpolled` show "not polled yet" until their first poll."""
        with self._lock:
            statuses = dict(self._statuses)
        for tier in unpolled:
            statuses.setdefault(tier, NOT_POLLED_STATUS)
        judged = {tier: judge_status(status, now, self._allowed(tier)) for tier, status in statuses.items()}
        return {tier: status if status.ok else dataclasses.replace(status, degraded=False)
                for tier, status in judged.items()}


class Reading(Generic[T]):
    """A source's latest good value, thread-safe: readers get it only while it is fresh (a failed poll keeps it
    until then)."""

    def __init__(self, allowed: float):
        self.allowed = allowed
        self._lock = threading.Lock()
        self._value: Optional[T] = None
        self._when: Optional[float] = None

    def succeeded(self, value: T, started: float) -> None:
        with self._lock:
            self._value, self._when = value, started

    def value(self, now: float) -> Optional[T]:
        with self._lock:
            value, when = self._value, self._when
        return value if is_fresh(when, now, self.allowed) else None


class SingleTierSource(Generic[T]):
    """The shape of most sources: one tier named after the source, one Reading. Subclasses implement
    read(chips) -> value (raise SourceError for a one-line failure) and contribute()."""

    name = ""
    judged = False  # Tier.judged of its one tier

    def __init__(self, interval: float, max_age: float, clock: Callable[[], float] = time.time):
        self.interval = interval
        self.clock = clock
        self.reading: Reading[T] = Reading(allowed_age(max_age, interval))
        self.recorder = PollRecorder(self.name, lambda tier: self.reading.allowed, clock,
                                     logging.getLogger(type(self).__module__))
        self.repeats = self.recorder.repeats  # its failure lines: once per cause and interval, with a count
        self._fingerprint: Any = None  # of the last value read

    def tiers(self) -> Sequence[Tier]:
        return [Tier(self.name, self.interval, judged=self.judged)]

    def read(self, chips: Sequence[ChipSample]) -> T:
        raise NotImplementedError

    def poll(self, tier: str, chips: Sequence[ChipSample]) -> Optional[float]:
        return self.recorder.execute(self.name, lambda started: self._read(chips, started))

    def _read(self, chips: Sequence[ChipSample], started: float) -> Outcome:
        try:
            value = self.read(chips)
        except SourceError as exc:
            return Outcome.failed(str(exc))
        self.reading.succeeded(value, started)
        fingerprint, self._fingerprint = self._fingerprint, self.fingerprint(value)
        return Outcome(error=self.warning(value), changed=self._fingerprint != fingerprint)

    def fingerprint(self, value: T) -> Any:
        """What of a value the rules read, compared from poll to poll (Outcome.changed): by default all of it."""
        return value

    def warning(self, value: T) -> Optional[str]:
        """A problem worth showing although the poll succeeded (some files unreadable, ...)."""
        return None

    def statuses(self, now: float) -> Dict[str, SourceStatus]:
        return self.recorder.statuses(now, unpolled=[self.name])

    def close(self) -> None:
        pass


class SourceError(Exception):
    """A one-line reason a poll found no value."""
