"""The listed sources, built for one config and one target: they poll their tiers and make Snapshots.

`SourceSet.poll(tier)` runs one tier (the daemon schedules these); `SourceSet.snapshot()` walks the list,
each source adding its fresh values to new Parts; `SourceSet.collect_once()` is one pass of every tier, for
`npumon check`. Nothing here knows a particular source: registry.SOURCES says which there are.

Every npu-smi call of every source goes through `npu_smi`, one bounded runner, so `npu_smi_max_concurrent`
bounds them all; its priority slot is kept for the primary tier (the main table).
"""

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..config.schema import Config
from ..model import ChipSample, HostSample, Snapshot
from .base import Parts, Source, SourceContext, SourceSpec, Tier
from . import registry
from .runner import CommandRunner
from .target import Target

log = logging.getLogger(__name__)


class SourceSet:
    def __init__(self, config: Config, target: Target, clock: Callable[[], float] = time.time,
                 skip: Sequence[str] = (), specs: Optional[Sequence[SourceSpec]] = None, quick_pass: bool = False,
                 max_concurrent: Optional[int] = None, one_pass: bool = False):
        """`skip`: names of sources to leave out (`check --no-probe`); `specs`: the source list (tests);
        `quick_pass`: for one quick pass of `npumon check`, where sources may ask less; `one_pass`: for
        `npumon check`, where sources keep no state across runs; `max_concurrent`:
        npu-smi calls at a time (default: npu_smi_max_concurrent)."""
        self.config = config
        self.target = target
        self.clock = clock
        self.npu_smi = CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds,
                                     max_concurrent or config.npu_smi_max_concurrent,
                                     env=target.env, priority_slots=1,
                                     spawn=target.spawn, max_output_bytes=config.npu_smi_max_output_bytes)
        context = SourceContext(config, target, self.npu_smi, clock, quick_pass, one_pass)
        self.sources: List[Source] = []
        for spec in registry.SOURCES if specs is None else specs:
            if spec.name in skip:
                continue
            source = spec.build(context)
            if source is not None:
                self.sources.append(source)
        self._tiers: Dict[str, Tuple[Tier, Source]] = {
            tier.name: (tier, source) for source in self.sources for tier in source.tiers()}
        self._hostname = target.host_name()
        self._lock = threading.Lock()
        self._polling: Dict[str, int] = {}
        # The latest Snapshot built and how many polls had ended then: a poll that starts before another one
        # ends takes its chips from it instead of building its own (tiers due together start together).
        self._ended_polls = 0
        self._latest: Optional[Tuple[int, Snapshot]] = None

    def close(self) -> None:
        """Kill the calls still running and refuse new ones, so that nothing outlives npumon."""
        self.npu_smi.terminate_all()
        for source in self.sources:
            _guarded(source.name, source.close)

    def tiers(self) -> List[Tier]:
        """Every tier of every source, the primary first (0-second intervals are off)."""
        tiers = [tier for tier, _ in self._tiers.values()]
        return sorted(tiers, key=lambda tier: not tier.primary)

    def primary(self) -> Tier:
        return self.tiers()[0]

    def poll(self, tier: str) -> Optional[float]:
        """Poll one tier with the latest chips; returns the retry delay its source asks for (or None)."""
        _, source = self._tiers[tier]
        with self._lock:
            self._polling[tier] = self._polling.get(tier, 0) + 1
        try:
            return _guarded(tier, source.poll, tier, self._latest_chips())
        finally:
            with self._lock:
                self._polling[tier] -= 1
                if not self._polling[tier]:
                    del self._polling[tier]
                self._ended_polls += 1

    def _latest_chips(self) -> List[ChipSample]:
        """The chips of a Snapshot built after the last poll ended (the one just built, or a new one)."""
        with self._lock:
            latest = self._latest
            if latest is not None and latest[0] == self._ended_polls:
                return latest[1].chips
        return self.snapshot().chips

    def polling(self) -> List[str]:
        """The tiers whose poll is running now."""
        with self._lock:
            return sorted(self._polling)

    def snapshot(self) -> Snapshot:
        with self._lock:
            ended_polls = self._ended_polls
        now = self.clock()
        parts = Parts(time=now, host=HostSample(hostname=self._hostname))
        statuses = {}
        for source in self.sources:
            parts = _guarded(source.name, source.contribute, parts, now) or parts
            statuses.update(_guarded(source.name, source.statuses, now) or {})
        snapshot = parts.snapshot(statuses)
        with self._lock:
            self._latest = (ended_polls, snapshot)
        return snapshot

    def collect_once(self, full: bool = True, also: Sequence[str] = (), within: Optional[float] = None) -> Snapshot:
        """Every tier once (`full`; else the quick ones and those named in `also`): the primary first (the
        others need its chip list), then the rest at once. `within` seconds: no npu-smi call runs past that;
        the calls that could not start are left out (their tiers say so), so the pass ends in time."""
        if within is not None:
            self.npu_smi.not_after = time.monotonic() + within
        tiers = [tier for tier in self.tiers() if tier.interval > 0
                 and (full or tier.quick or tier.primary or tier.name in also)]
        if not tiers:
            return self.snapshot()
        self.poll(tiers[0].name)
        threads = [threading.Thread(target=self.poll, args=(tier.name,), name="poll-" + tier.name)
                   for tier in tiers[1:]]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return self.snapshot()


def _guarded(what: str, func: Callable, *args):
    """A bug in one source must not take the others down: log it and go on without its part."""
    try:
        return func(*args)
    except Exception:  # noqa: BLE001 - the contract says a source never raises; this is the net below it
        log.exception("source %s failed", what)
        return None
