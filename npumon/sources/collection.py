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

from ..logrepeat import Repeats
from ..model import ChipSample, HostSample, Snapshot
from .base import AnyConfig, Parts, Source, SourceContext, SourceSpec, Tier
from . import registry
from .children import set_call_owner
from .runner import CommandRunner
from .target import Target

log = logging.getLogger(__name__)
_repeats = Repeats(log)  # a source failing the same way on every poll: one line per 10 minutes, with a count


class SourceSet:
    def __init__(self, config: AnyConfig, target: Target, clock: Callable[[], float] = time.time,
                 skip: Sequence[str] = (), specs: Optional[Sequence[SourceSpec]] = None, quick_pass: bool = False,
                 max_concurrent: Optional[int] = None, one_pass: bool = False,
                 sleep: Callable[[float], None] = time.sleep):
        """`skip`: names of sources to leave out (`check --no-probe`); `specs`: the source list (tests);
        `quick_pass`: for one quick pass of `npumon check`, where sources may ask less; `one_pass`: for
        `npumon check`, where sources keep no state across runs; `max_concurrent`:
        npu-smi calls at a time (default: npu_smi_max_concurrent); `sleep`: a source's wait within a poll (a test's
        fake clock moves on instead)."""
        self.config = config
        self.target = target
        self.clock = clock
        self.npu_smi = CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds,
                                     max_concurrent or config.npu_smi_max_concurrent,
                                     env=target.env, priority_slots=1,
                                     spawn=target.spawn, max_output_bytes=config.npu_smi_max_output_bytes)
        set_call_owner(config.state_dir)  # a restart of this instance kills what its killed predecessor's calls left
        context = SourceContext(config, target, self.npu_smi, clock, quick_pass, one_pass, sleep)
        self.sources: List[Source] = []
        self._chip_sources: List[Source] = []  # those whose contribute makes the chips (SourceSpec.lists_chips)
        for spec in registry.SOURCES if specs is None else specs:
            if spec.name in skip:
                continue
            source = spec.build(context)
            if source is not None:
                self.sources.append(source)
                if spec.lists_chips:
                    self._chip_sources.append(source)
        self._tiers: Dict[str, Tuple[Tier, Source]] = {
            tier.name: (tier, source) for source in self.sources for tier in source.tiers()}
        self._hostname = target.host_name()
        self._lock = threading.Lock()
        self._polling: Dict[str, int] = {}
        # The chips of the latest Snapshot (or chip list) built and how many polls had ended then: a poll that
        # starts before another one ends takes them instead of building its own (tiers due together start
        # together).
        self._ended_polls = 0
        self._latest: Optional[Tuple[int, Tuple[ChipSample, ...]]] = None

    def close(self) -> None:
        """Kill the calls still running and refuse new ones, so that nothing outlives npumon."""
        self.npu_smi.terminate_all()
        for source in self.sources:
            _guarded(source.name, source.close)

    def tiers(self) -> List[Tier]:
        """Every tier of every source, the primary first (0-second intervals are off)."""
        tiers = [tier for tier, _ in self._tiers.values()]
        return sorted(tiers, key=lambda tier: not tier.primary)

    def shares_slots(self, tier: str) -> bool:
        """Whether the tier's calls go through the shared npu-smi runner, and so wait for its slots."""
        return getattr(self._tiers[tier][1], "runner", None) is self.npu_smi

    def judged(self, tier: str) -> bool:
        """Whether the rules should be judged soon after every poll of this tier (Tier.judged)."""
        return self._tiers[tier][0].judged

    def wants_judgement(self, tier: str) -> bool:
        """Whether the rules should be judged soon after the poll of this tier that just ended: one that went
        down or came back in it (source-down starts counting then), or a judged tier that read something new
        (Outcome.changed: the same answer again would give the same findings)."""
        recorder = getattr(self._tiers[tier][1], "recorder", None)
        if recorder is None:  # a source without a PollRecorder (a test's): judged tiers on every poll
            return self.judged(tier)
        flipped, changed = recorder.take_news(tier)
        return flipped or (changed and self.judged(tier))

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

    def _latest_chips(self) -> Sequence[ChipSample]:
        """The chips as they stand after the last poll ended: those of the Snapshot or chip list built since,
        or else the chips the listing sources (npu-smi, DCMI) make now. No poll reads what the other sources
        add to a chip (its network, faults, PCIe link), so they are not walked: that walk cost each poll about
        as much as the poll itself."""
        with self._lock:
            latest = self._latest
            ended_polls = self._ended_polls
            if latest is not None and latest[0] == ended_polls:
                return latest[1]
        now = self.clock()
        parts = Parts(time=now, host=HostSample(hostname=self._hostname))
        for source in self._chip_sources:
            parts = _guarded(source.name, source.contribute, parts, now) or parts
        with self._lock:
            self._latest = (ended_polls, parts.chips)
        return parts.chips

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
            self._latest = (ended_polls, parts.chips)
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
    except Exception as exc:  # noqa: BLE001 - the contract says a source never raises; this is the net below it
        _repeats.log(logging.ERROR, "{} {}".format(what, type(exc).__name__), "source %s failed: %s: %s", what,
                     type(exc).__name__, exc, exc=exc)
        return None
