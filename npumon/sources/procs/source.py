"""The processes source: how much CPU the processes holding each chip use, and which of them are stuck in D state.

A hung chip looks idle on npu-smi (AI Core near 0, health OK) while its processes still hold it; what tells it
from a chip that waits for input or is starved by the host is that those processes no longer use CPU either
(the Ascend Device Plugin's hang detector reads the same /proc/<pid>/stat times). A process in uninterruptible
sleep (state D) with /dev/davinciN open is stuck inside the driver: no signal reaches it (gpud's blocked-process
check).

Each poll reads /proc under the Target's root: the stat of the processes npu-smi lists on each chip and of
their threads (the thread stuck in the driver is often not the main one), and the state of every process, whose
open files it reads only when it is in D (rare), to find /dev/davinciN. CPU use is
the CPU time gained since the previous poll over the time between; a process without a previous sample (the
first poll, `npumon check`, a new process) is sampled again `processes.cpu_sample_seconds` later within the
same poll, so one pass can tell frozen CPU time from running. A process counts as blocked once it is in D on two
samples in a row; its duration is how long the samples have seen it there.
"""

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from ...model import ChipSample, HostSample, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Facts, Parts, Section, SingleTierSource, SourceContext, SourceSpec, Tier
from .parse import ProcStat, ProcStatError, davinci_device, parse_stat

NAME = "processes"
EXTRA = "process_activity"  # the chip's ChipSample.extra key (and key in check --json)
# Bounds on one poll: the process directories read (a host has thousands, rarely more), the open files read of
# one process in D state, the threads read of one listed process, and the blocked processes named in a finding.
MAX_PROCESSES = 65536
MAX_FDS = 4096
MAX_THREADS = 4096
MAX_NAMED = 5
Key = Tuple[int, int]  # (npu, chip)
# The hang detector's CPU level, the rules' `chip_hung_cpu_seconds_per_minute` (rules/builtin.yaml: the Ascend
# Device Plugin's default; a config's `thresholds` may move it). A poll judged early (Tier.judged) only when a
# chip's processes crossed it or their blocked set changed: a rate that stays on one side of it tells no rule
# anything new before the main table's next pass.
HUNG_CPU_PARAM = "chip_hung_cpu_seconds_per_minute"
HUNG_CPU_DEFAULT = 5.0
Identity = Tuple[int, int]  # (pid, start ticks): one process, even after its pid is reused


@dataclass(frozen=True)
class ProcessesConfig:
    """The `processes:` section of the config file."""

    interval_seconds: float = 30.0  # 0: off
    # a process without a CPU sample from the poll before is sampled again this much later in the same poll
    cpu_sample_seconds: float = 1.0


def processes_config_problems(config: ProcessesConfig) -> List[Tuple[str, str]]:
    problems = []
    if config.interval_seconds < 0:
        problems.append(("processes.interval_seconds", "must be >= 0 (0 turns the source off)"))
    if not 0.1 <= config.cpu_sample_seconds <= 10:
        problems.append(("processes.cpu_sample_seconds", "must be within 0.1..10 seconds"))
    return problems


@dataclass(frozen=True)
class Blocked:
    pid: int
    name: str
    seconds: float  # how long the samples have seen it in D


@dataclass(frozen=True)
class ChipProcesses:
    cpu_seconds_per_minute: Optional[float]  # of the processes npu-smi lists on the chip; None: none readable
    blocked: Tuple[Blocked, ...] = ()

    def as_extra(self) -> Dict[str, Any]:
        """As the chip's `process_activity` (plain values: check --json shows it)."""
        return {"cpu_seconds_per_minute": self.cpu_seconds_per_minute,
                "blocked": [dataclasses.asdict(blocked) for blocked in self.blocked]}


class ProcReader:
    """/proc under a host root. Every read answers None (or nothing) for a process that is gone or unreadable."""

    def __init__(self, proc_dir: str):
        self.proc_dir = proc_dir

    def pids(self) -> List[int]:
        try:
            names = os.listdir(self.proc_dir)
        except OSError:
            return []
        return [int(name) for name in names if name.isdigit()][:MAX_PROCESSES]

    def stat(self, pid: int) -> Optional[ProcStat]:
        try:
            with open(os.path.join(self.proc_dir, str(pid), "stat"), encoding="utf-8", errors="replace") as handle:
                return parse_stat(handle.read(4096))
        except (OSError, ProcStatError):
            return None

    def thread_in_d(self, pid: int) -> bool:
        """Whether a thread of the process is in D: the one stuck in the driver is often not the main thread."""
        task_dir = os.path.join(self.proc_dir, str(pid), "task")
        try:
            tids = [name for name in os.listdir(task_dir) if name.isdigit()][:MAX_THREADS]
        except OSError:
            return False
        for tid in tids:
            try:
                with open(os.path.join(task_dir, tid, "stat"), encoding="utf-8", errors="replace") as handle:
                    if parse_stat(handle.read(4096)).state == "D":
                        return True
            except (OSError, ProcStatError):
                continue
        return False

    def devices(self, pid: int) -> Set[int]:
        """The NPUs (logical ids) the process has open."""
        fd_dir = os.path.join(self.proc_dir, str(pid), "fd")
        try:
            names = os.listdir(fd_dir)[:MAX_FDS]
        except OSError:
            return set()
        held = set()
        for name in names:
            try:
                device = davinci_device(os.readlink(os.path.join(fd_dir, name)))
            except OSError:
                continue
            if device is not None:
                held.add(device)
        return held


class ProcessesSource(SingleTierSource[Dict[Key, ChipProcesses]]):
    name = NAME

    def __init__(self, reader: ProcReader, config: ProcessesConfig, max_age: float, clock: Callable[[], float],
                 sleep: Callable[[float], None], before_read: Optional[Callable[[float], Any]] = None,
                 ticks_per_second: float = 100.0, hung_cpu_seconds_per_minute: float = HUNG_CPU_DEFAULT):
        super().__init__(config.interval_seconds, max_age, clock)
        self.hung_cpu = hung_cpu_seconds_per_minute
        self.reader = reader
        self.sample_seconds = config.cpu_sample_seconds
        self.sleep = sleep
        self.before_read = before_read
        self.ticks = ticks_per_second
        self._previous: Dict[Identity, Tuple[float, ProcStat]] = {}  # the last sample of each process read
        self._blocked_since: Dict[Identity, float] = {}

    def tiers(self) -> Sequence[Tier]:
        # not in a quick `npumon check`: a new process costs a second sample, cpu_sample_seconds later
        return [Tier(self.name, self.interval, quick=False, judged=True)]  # hung and D-state processes

    def fingerprint(self, value: Dict[Key, ChipProcesses]) -> Any:
        """Per chip: whether its processes' CPU is known and below the hang level, and which are blocked."""
        return {key: (found.cpu_seconds_per_minute is None,
                      found.cpu_seconds_per_minute is not None and found.cpu_seconds_per_minute < self.hung_cpu,
                      tuple(blocked.pid for blocked in found.blocked))
                for key, found in value.items()}

    def _moment(self) -> float:
        """The time of a sample, /proc brought up to it first where the Target needs that."""
        when = self.clock()
        if self.before_read is not None:
            self.before_read(when)
        return when

    def _stats(self, pids: Sequence[int]) -> Dict[int, ProcStat]:
        stats = {}
        for pid in pids:
            stat = self.reader.stat(pid)
            if stat is not None:
                stats[pid] = stat
        return stats

    def read(self, chips: Sequence[ChipSample]) -> Dict[Key, ChipProcesses]:
        holders = {chip.key: sorted({p.pid for p in chip.processes}) for chip in chips}
        by_device = {chip.device_id: chip.key for chip in chips if chip.device_id is not None}
        listed = {pid for pids in holders.values() for pid in pids}
        when = self._moment()
        stats = self._stats(sorted(set(self.reader.pids()) | listed))
        # a process in D holds the chips npu-smi lists it on and the ones whose device file it has open
        in_d = self._in_d(stats, listed)
        stuck_on: Dict[int, Set[Key]] = {}
        for pid in in_d:
            keys = {key for key, pids in holders.items() if pid in pids}
            keys |= {by_device[device] for device in self.reader.devices(pid) if device in by_device}
            if keys:
                stuck_on[pid] = keys
        stats = {pid: stat for pid, stat in stats.items() if pid in listed or pid in stuck_on}
        new = [pid for pid, stat in stats.items() if (pid, stat.start_ticks) not in self._previous
               or (pid in stuck_on and (pid, stat.start_ticks) not in self._blocked_since)]
        later: Dict[int, ProcStat] = {}
        later_when = when
        if new:
            self.sleep(self.sample_seconds)
            later_when = self._moment()
            later = self._stats(new)
        rates = {pid: self._rate(stat, when, later.get(pid), later_when) for pid, stat in stats.items()}
        blocked = self._blocked(stats, stuck_on, when, later, self._in_d(later, listed), later_when)
        self._previous = {(pid, stat.start_ticks): (when, stat) for pid, stat in stats.items()}
        self._previous.update({(pid, stat.start_ticks): (later_when, stat) for pid, stat in later.items()
                               if pid in stats and stat.start_ticks == stats[pid].start_ticks})
        result = {}
        for key, pids in holders.items():
            known = [rates[pid] for pid in pids if rates.get(pid) is not None]
            result[key] = ChipProcesses(
                cpu_seconds_per_minute=60.0 * sum(known) if known else None,
                blocked=tuple(sorted((b for pid, b in blocked.items() if key in stuck_on[pid]),
                                     key=lambda b: (-b.seconds, b.pid))))
        return result

    def _in_d(self, stats: Dict[int, ProcStat], listed: Set[int]) -> Set[int]:
        """The processes in D: by their main thread, and for those npu-smi lists, by any of their threads."""
        return {pid for pid, stat in stats.items()
                if stat.state == "D" or (pid in listed and self.reader.thread_in_d(pid))}

    def _rate(self, stat: ProcStat, when: float, later: Optional[ProcStat], later_when: float) -> Optional[float]:
        """CPU seconds per second: since the previous poll where there was one, else over this poll's two samples."""
        previous = self._previous.get((stat.pid, stat.start_ticks))
        if previous is not None and when > previous[0]:
            then, before = previous
            return max(0, stat.cpu_ticks - before.cpu_ticks) / self.ticks / (when - then)
        if later is not None and later.start_ticks == stat.start_ticks and later_when > when:
            return max(0, later.cpu_ticks - stat.cpu_ticks) / self.ticks / (later_when - when)
        return None

    def _blocked(self, stats: Dict[int, ProcStat], stuck_on: Dict[int, Set[Key]], when: float,
                 later: Dict[int, ProcStat], later_in_d: Set[int], later_when: float) -> Dict[int, Blocked]:
        """The processes in D on two samples in a row (this poll's and the one before, or this poll's two)."""
        since: Dict[Identity, float] = {}
        blocked = {}
        for pid in stuck_on:
            stat = stats[pid]
            identity = (pid, stat.start_ticks)
            second = later.get(pid)
            if second is not None:
                if pid not in later_in_d or second.start_ticks != stat.start_ticks:
                    continue
                latest = later_when
            else:
                latest = when
            started = self._blocked_since.get(identity, when)
            since[identity] = started
            if latest > started:
                blocked[pid] = Blocked(pid, stat.comm, latest - started)
        self._blocked_since = since
        return blocked

    def contribute(self, parts: Parts, now: float) -> Parts:
        found = self.reading.value(now)
        if found is None:
            return parts
        chips = tuple(dataclasses.replace(chip, extra=dict(chip.extra, process_activity=found[chip.key].as_extra()))
                      if chip.key in found else chip for chip in parts.chips)
        return dataclasses.replace(parts, chips=chips)


def _ticks_per_second() -> float:
    try:
        return float(os.sysconf("SC_CLK_TCK"))
    except (AttributeError, ValueError, OSError):
        return 100.0  # USER_HZ on every Linux architecture the NPUs run on


def build(context: SourceContext) -> Optional[ProcessesSource]:
    config = context.config.processes
    if config.interval_seconds <= 0 or context.quick_pass:  # a quick check does not wait for a second sample
        return None
    target = context.target
    return ProcessesSource(ProcReader(os.path.join(target.root, "proc")), config, context.config.max_age_seconds,
                           context.clock, context.sleep, target.proc_before_read, _ticks_per_second(),
                           context.config.thresholds.get(HUNG_CPU_PARAM, HUNG_CPU_DEFAULT))


# -- rule facts --------------------------------------------------------------------------------


def chip_facts(chip: ChipSample, host: HostSample) -> Facts:
    found = chip.extra.get(EXTRA)
    if not found:
        return dict.fromkeys(("process_cpu_seconds_per_minute", "blocked_process_count", "blocked_seconds",
                              "blocked_process_text"))
    blocked = found["blocked"]
    text = ", ".join("pid {} ({}) for {:.0f} s".format(b["pid"], b["name"], b["seconds"]) for b in blocked[:MAX_NAMED])
    if len(blocked) > MAX_NAMED:
        text += " and {} more".format(len(blocked) - MAX_NAMED)
    return {
        "process_cpu_seconds_per_minute": found["cpu_seconds_per_minute"],
        "blocked_process_count": len(blocked),
        "blocked_seconds": max((b["seconds"] for b in blocked), default=None),
        "blocked_process_text": text or "none",
    }


# -- metrics -----------------------------------------------------------------------------------

# (the processes' CPU use is a rule fact and in check --json, not a family: a per-minute rate is no base unit)
METRICS = (
    MetricSpec("npumon_chip_blocked_processes", ("npu", "chip"),
               "Processes holding the chip that are in uninterruptible sleep (D state) on two samples in a row."),
)


def export(snapshot: Snapshot, out: Families) -> None:
    for chip in snapshot.chips:
        found = chip.extra.get(EXTRA)
        if found:
            out.add("npumon_chip_blocked_processes", len(found["blocked"]), (chip.npu, chip.chip))


SPEC = SourceSpec(NAME, build, section=Section("processes", ProcessesConfig,
                                               lambda section, config: processes_config_problems(section)),
                  chip_facts=chip_facts, metrics=METRICS, export=export)
