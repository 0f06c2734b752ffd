"""The source contract: every origin of numbers is a Source, declared once in sources/registry.py.

In the spirit of gpud's components and node_exporter's collectors: a source has a name, says which tiers it
polls and how often, polls under a deadline without ever raising, reports a SourceStatus per tier, and
contributes its fresh values to each Snapshot by returning new Parts (never by changing an object that an
earlier Snapshot holds). Its module declares the rest in a SourceSpec: how to build it for a config and a
target (or not, where it is off), its config section, the rule facts and the metric families it adds.
`npumon check` and the daemon walk the same list (sources/collection.py).

Freshness is one rule for every source (`allowed_age`, `judge_status`, `Reading`): the last good value is
kept while it is fresh, then it goes and the status says why.
"""

import dataclasses
import logging
import threading
import time
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Dict, Generic, List, Optional, Protocol, Sequence, Tuple,
                    TypeVar, runtime_checkable)

from ..model import ChipSample, HostSample, Snapshot, SourceStatus

if TYPE_CHECKING:
    from .runner import CommandRunner
    from .target import Target

log = logging.getLogger(__name__)

Facts = Dict[str, Any]
T = TypeVar("T")
# The whole config (config/schema.py). It is built from the sections the sources declare, so sources name it
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


@dataclass(frozen=True)
class Parts:
    """What a Snapshot is built from. Each source's contribute() returns new Parts (dataclasses.replace), so
    a HostSample or ChipSample that an earlier Snapshot holds is never changed."""

    time: float
    host: HostSample
    chips: Tuple[ChipSample, ...] = ()
    tool_version: Optional[str] = None
    driver_version: Optional[str] = None

    def snapshot(self, sources: Dict[str, SourceStatus]) -> Snapshot:
        return Snapshot(time=self.time, host=self.host, chips=list(self.chips), sources=sources,
                        tool_version=self.tool_version, driver_version=self.driver_version)


@runtime_checkable
class Source(Protocol):
    name: str  # the source's name: its (first) tier and its key in Snapshot.sources

    def tiers(self) -> Sequence[Tier]: ...

    def poll(self, tier: str, chips: Sequence[ChipSample]) -> Optional[float]:
        """Poll one tier within its deadline; never raises. `chips`: the latest Snapshot's chips. Returns the
        seconds after which this tier wants to run again early (a retry), or None to keep its interval."""

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

    @property
    def state_dir(self) -> str:
        """Where a source keeps what must outlive a restart (caches, cursors): the config's state_dir, or a
        simulated host's own, so that a simulation never writes to the real /var/lib/npumon."""
        from ..config.location import simulation_state_dir  # late: the config schema imports the source list

        sim_dir = getattr(self.target, "sim_state_dir", None)
        return simulation_state_dir(self.config.state_dir, sim_dir) if sim_dir else self.config.state_dir


@dataclass(frozen=True)
class Section:
    """A config section a source or service owns: its YAML key, its dataclass (the schema), and the checks that
    types cannot express: problems(section, config) -> [(dotted key, problem)]."""

    key: str
    schema: type
    problems: Callable[[Any, AnyConfig], List[Tuple[str, str]]] = lambda section, config: []


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


class Reading(Generic[T]):
    """A source's latest good value and its status, thread-safe. A failed poll keeps the value while it is
    fresh; readers get the value only while it is fresh."""

    def __init__(self, allowed: float):
        self.allowed = allowed
        self._lock = threading.Lock()
        self._value: Optional[T] = None
        self._when: Optional[float] = None
        self._status = SourceStatus(ok=False, error="not polled yet")

    def succeeded(self, value: T, started: float, duration: float, warning: Optional[str] = None) -> None:
        with self._lock:
            self._value, self._when = value, started
            self._status = SourceStatus(ok=True, error=warning, duration_seconds=duration, last_success=started)

    def failed(self, error: str, duration: Optional[float] = None) -> None:
        with self._lock:
            self._status = SourceStatus(ok=False, error=error, duration_seconds=duration,
                                        last_success=self._status.last_success)

    def status(self, now: float) -> SourceStatus:
        with self._lock:
            status = self._status
        return judge_status(status, now, self.allowed)

    def value(self, now: float) -> Optional[T]:
        with self._lock:
            value, when = self._value, self._when
        return value if is_fresh(when, now, self.allowed) else None


class SingleTierSource(Generic[T]):
    """The shape of most sources: one tier named after the source, one Reading. Subclasses implement
    read(chips) -> value (raise SourceError for a one-line failure) and contribute()."""

    name = ""

    def __init__(self, interval: float, max_age: float, clock: Callable[[], float] = time.time):
        self.interval = interval
        self.clock = clock
        self.reading: Reading[T] = Reading(allowed_age(max_age, interval))

    def tiers(self) -> Sequence[Tier]:
        return [Tier(self.name, self.interval)]

    def read(self, chips: Sequence[ChipSample]) -> T:
        raise NotImplementedError

    def poll(self, tier: str, chips: Sequence[ChipSample]) -> Optional[float]:
        started, began = self.clock(), time.monotonic()
        try:
            value = self.read(chips)
        except SourceError as exc:
            self.reading.failed(str(exc), time.monotonic() - began)
        except Exception as exc:  # noqa: BLE001 - a bug in one source must not stop the others
            log.exception("source %s failed", self.name)
            self.reading.failed("internal error: {}".format(exc), time.monotonic() - began)
        else:
            self.reading.succeeded(value, started, time.monotonic() - began, self.warning(value))
        return None

    def warning(self, value: T) -> Optional[str]:
        """A problem worth showing although the poll succeeded (some files unreadable, ...)."""
        return None

    def statuses(self, now: float) -> Dict[str, SourceStatus]:
        return {self.name: self.reading.status(now)}

    def close(self) -> None:
        pass


class SourceError(Exception):
    """A one-line reason a poll found no value."""
