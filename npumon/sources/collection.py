"""Sources -> Snapshot. The one place that knows every source; `check` and the daemon both use it.

`Collector.poll(tier)` runs one tier of one source (the daemon schedules these); `Collector.snapshot()`
assembles the latest fresh values of every source into a Snapshot; `Collector.collect_once()` is one full
pass of every tier, for `npumon check`.
"""

import logging
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Protocol, Sequence

from ..config.schema import Config
from .ambient import ambient_sources
from ..model import ChipSample, HostSample, Snapshot, SourceStatus
from .probe.source import build_probe_sources
from .host import HostCollector
from .npusmi.source import QUERY_TYPES, NpuSmiSource
from .runner import CommandRunner
from .target import Target
from .serving import build_serving_sources

log = logging.getLogger(__name__)

HOST_SOURCE = "host"


class ExtraSource(Protocol):
    """A source beyond npu-smi and the host facts (serving queue, probe, ...): its own tier, never raises."""

    name: str  # the tier name and the key in Snapshot.sources

    def interval(self) -> float: ...  # seconds between polls, 0 = off

    def poll(self, chips: List[ChipSample]) -> None: ...  # chips: the latest main table's chips

    def status(self, now: float, max_age: float) -> SourceStatus: ...

    def apply(self, snapshot: Snapshot, now: float, max_age: float) -> None: ...  # write fresh values in

    def close(self) -> None: ...


def build_extra_sources(config: Config, target: Target) -> List[ExtraSource]:
    """Every optional source that the config turns on. One line per source."""
    sources: List[ExtraSource] = []
    sources.extend(build_serving_sources(config.serving, target.serving_url))
    sources.extend(ambient_sources(config, target))  # inlet/board temperature for the fan governor
    sources.extend(build_probe_sources(config, target))  # the NPU liveness probe
    return sources


class Collector:
    def __init__(self, config: Config, target: Target, clock: Callable[[], float] = time.time,
                 skip: Sequence[str] = ()):
        self.config = config
        self.target = target
        self.clock = clock
        # The main table has an npu-smi slot of its own: hanging query calls can never make it wait.
        self.runner = CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds,
                                    config.npu_smi_max_concurrent, env=target.env, priority_slots=1)
        self.npusmi = NpuSmiSource(self.runner, clock=clock, intervals={
            query: getattr(config.poll, query + "_seconds") for query in QUERY_TYPES})
        self.host = HostCollector(root=target.root, ascend_dir=config.ascend_dir)
        self._host_lock = threading.Lock()
        self._host_sample = HostSample(hostname=socket.gethostname())
        self._host_pcie: Dict = {}
        self._host_numa: Dict[str, int] = {}
        self._host_status = SourceStatus(ok=False, error="not polled yet")
        self.extra = [source for source in build_extra_sources(config, target) if source.name not in skip]

    def close(self) -> None:
        self.runner.terminate_all()
        for source in self.extra:
            source.close()

    def tiers(self) -> Dict[str, float]:
        """Tier name -> interval in seconds, for the scheduler (0 = off)."""
        poll = self.config.poll
        tiers = {"table": poll.table_seconds, "host": poll.host_seconds}
        for query in QUERY_TYPES:
            tiers[query] = getattr(poll, query + "_seconds")
        for source in self.extra:
            tiers[source.name] = source.interval()
        return tiers

    def poll(self, tier: str) -> None:
        if tier == "table":
            self.npusmi.poll_table()
        elif tier == "host":
            self.poll_host()
        elif tier in QUERY_TYPES:
            # A query tier (one call per card) must end before its next run is due, however many cards hang.
            budget = max(getattr(self.config.poll, tier + "_seconds"), self.config.npu_smi_timeout_seconds)
            self.npusmi.poll_query(tier, budget_seconds=budget)
        elif tier in self._extra_by_name():
            self._extra_by_name()[tier].poll(self.npusmi.chips(self.clock(), self.config.max_age_seconds))
        else:
            raise ValueError("unknown tier {!r}".format(tier))

    def _extra_by_name(self) -> Dict[str, ExtraSource]:
        return {source.name: source for source in self.extra}

    def poll_host(self) -> None:
        bus_ids = [chip.bus_id for chip in self.npusmi.chips(self.clock(), float("inf")) if chip.bus_id]
        started = self.clock()
        result = self.host.collect(bus_ids)
        duration = self.clock() - started
        with self._host_lock:
            self._host_sample, self._host_pcie, self._host_numa = result.sample, result.pcie, result.numa_node
            error = "; ".join(result.errors) if result.errors else None
            # Host facts are many independent files: a few unreadable ones do not make the source down.
            self._host_status = SourceStatus(ok=True, error=error, duration_seconds=duration, last_success=started)

    def collect_once(self) -> Snapshot:
        """Every tier once, in dependency order (the table first: the queries need its chip list)."""
        self.npusmi.poll_table()
        tiers = [tier for tier, seconds in self.tiers().items() if tier not in ("table", "host") and seconds > 0]
        threads = [threading.Thread(target=self.poll, args=(tier,), name="poll-" + tier) for tier in tiers]
        for thread in threads:
            thread.start()
        self.poll_host()
        for thread in threads:
            thread.join()
        return self.snapshot()

    def snapshot(self) -> Snapshot:
        now = self.clock()
        max_age = self.config.max_age_seconds
        chips = self.npusmi.chips(now, max_age)
        sources = self.npusmi.statuses(now, max_age)
        with self._host_lock:
            host, pcie, numa, host_status = self._host_sample, self._host_pcie, self._host_numa, self._host_status
        if host_status.last_success is not None and now - host_status.last_success > max_age:
            host_status = SourceStatus(ok=False, error="stale: last success {:.0f}s ago".format(
                now - host_status.last_success), last_success=host_status.last_success)
        sources[HOST_SOURCE] = host_status
        for chip in chips:
            if chip.bus_id:
                chip.pcie = pcie.get(chip.bus_id)
                chip.numa_node = numa.get(chip.bus_id)
        tool_version, driver_version = self.npusmi.versions()
        snapshot = Snapshot(time=now, host=host, chips=chips, sources=sources,
                            tool_version=tool_version, driver_version=driver_version)
        for source in self.extra:
            sources[source.name] = source.status(now, max_age)
            source.apply(snapshot, now, max_age)
        return snapshot
