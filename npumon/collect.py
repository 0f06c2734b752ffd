"""Sources -> Snapshot. The one place that knows every source; `check` and the daemon both use it.

`Collector.poll(tier)` runs one tier of one source (the daemon schedules these); `Collector.snapshot()`
assembles the latest fresh values of every source into a Snapshot; `Collector.collect_once()` is one full
pass of every tier, for `npumon check`.
"""

import logging
import shutil
import socket
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

from .config import Config
from .model import HostSample, Snapshot, SourceStatus
from .sources.host import HostCollector
from .sources.npusmi import QUERY_TYPES, NpuSmiSource
from .sources.runner import CommandRunner

log = logging.getLogger(__name__)

HOST_SOURCE = "host"


@dataclass(frozen=True)
class Target:
    """Where npu-smi and the host facts come from: the real host, or a simulated one."""

    npu_smi_argv: List[str]
    env: Optional[Dict[str, str]]
    root: str
    simulated: bool = False

    @classmethod
    def real(cls, config: Config) -> "Target":
        return cls([config.npu_smi], None, config.root)


class NpuSmiMissing(RuntimeError):
    """The configured npu-smi is not there: `check` answers UNKNOWN."""


def find_npu_smi(command: str) -> str:
    path = shutil.which(command)
    if path is None:
        raise NpuSmiMissing("npu-smi not found: {!r} is not an executable file or on PATH "
                            "(set npu_smi in the config, or use --simulate)".format(command))
    return path


class Collector:
    def __init__(self, config: Config, target: Target, clock: Callable[[], float] = time.time):
        self.config = config
        self.target = target
        self.clock = clock
        self.runner = CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds,
                                    config.npu_smi_max_concurrent, env=target.env)
        self.npusmi = NpuSmiSource(self.runner, clock=clock)
        self.host = HostCollector(root=target.root, ascend_dir=config.ascend_dir)
        self._host_lock = threading.Lock()
        self._host_sample = HostSample(hostname=socket.gethostname())
        self._host_pcie: Dict = {}
        self._host_status = SourceStatus(ok=False, error="not polled yet")

    def close(self) -> None:
        self.runner.terminate_all()

    def tiers(self) -> Dict[str, float]:
        """Tier name -> interval in seconds, for the scheduler (0 = off)."""
        poll = self.config.poll
        tiers = {"table": poll.table_seconds, "host": poll.host_seconds}
        for query in QUERY_TYPES:
            tiers[query] = getattr(poll, query + "_seconds")
        return tiers

    def poll(self, tier: str) -> None:
        if tier == "table":
            self.npusmi.poll_table()
        elif tier == "host":
            self.poll_host()
        elif tier in QUERY_TYPES:
            self.npusmi.poll_query(tier)
        else:
            raise ValueError("unknown tier {!r}".format(tier))

    def poll_host(self) -> None:
        bus_ids = [chip.bus_id for chip in self.npusmi.chips(self.clock(), float("inf")) if chip.bus_id]
        started = self.clock()
        result = self.host.collect(bus_ids)
        duration = self.clock() - started
        with self._host_lock:
            self._host_sample, self._host_pcie = result.sample, result.pcie
            error = "; ".join(result.errors) if result.errors else None
            # Host facts are many independent files: a few unreadable ones do not make the source down.
            self._host_status = SourceStatus(ok=True, error=error, duration_seconds=duration, last_success=started)

    def collect_once(self) -> Snapshot:
        """Every tier once, in dependency order (the table first: the queries need its chip list)."""
        self.npusmi.poll_table()
        queries = [query for query, seconds in self.tiers().items() if query in QUERY_TYPES and seconds > 0]
        threads = [threading.Thread(target=self.npusmi.poll_query, args=(query,), name="query-" + query)
                   for query in queries]
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
            host, pcie, host_status = self._host_sample, self._host_pcie, self._host_status
        if host_status.last_success is not None and now - host_status.last_success > max_age:
            host_status = SourceStatus(ok=False, error="stale: last success {:.0f}s ago".format(
                now - host_status.last_success), last_success=host_status.last_success)
        sources[HOST_SOURCE] = host_status
        for chip in chips:
            if chip.bus_id:
                chip.pcie = pcie.get(chip.bus_id)
        tool_version, driver_version = self.npusmi.versions()
        return Snapshot(time=now, host=host, chips=chips, sources=sources,
                        tool_version=tool_version, driver_version=driver_version)
