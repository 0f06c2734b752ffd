"""ProbeSource: the liveness probe as a source (sources/base.py) with its own tier, `probe`.

Scheduling: the tier wakes every TICK_SECONDS (or every interval, if that is shorter) and probes the chips
that are due. Every chip is due at the first wake-up (in `npumon check`, that is the one pass); after a
probe, a chip is next due interval_seconds plus a random 0..jitter_seconds later, so the chips drift apart
instead of being probed in lockstep. A chip whose AI Core is above skip_busy_above_ratio is skipped and
stays due: it is probed at the first wake-up that finds it quieter.

A round's due chips are split into at most max_concurrent groups, and each group is probed by one child
process that probes its chips in turn (child.py): one Python start and one acl.init per group, not per chip.
Each chip still has its own deadline, timeout_seconds (the child's watchdog), and no chip starts whose
deadline would pass the round's (round_timeout_seconds). The chip a child was probing when it ended (its
watchdog, a crash, the kill at the round's deadline) fails with a timeout or crash in that stage; the chips
after it were not probed and stay due, for the next wake-up.

The probe opens a chip by its logical device id: ChipSample.device_id where the main table prints it
(310P, 310B), else the "Chip Logic ID" of `npu-smi info -m` (910B, A3), read once and re-read when a chip
is missing from it. An npu-smi without `info -m`, or one that prints no logical id for a chip, leaves the
probe "unavailable" for that chip (no guessing: a wrong id would probe another chip); a failing `info -m`
(timeout, error) is a problem of the source.

Results stay in the Snapshot for two intervals (one missed round is tolerated); `first_run` marks each
chip's first probe since the source started, and only warm successful probes feed the chip's baseline.
"""

import collections
import dataclasses
import logging
import os
import random
import threading
import time
from typing import Callable, Deque, Dict, List, Optional, Sequence, Tuple

from ...model import ChipSample, ProbeSample, Snapshot, SourceStatus
from ...outputs.families import Families, MetricSpec
from ..base import (AnyConfig, Facts, Outcome, Parts, PollRecorder, Section, SourceContext, SourceSpec, Tier,
                    is_fresh)
from .config import ProbeConfig, probe_config_problems
from ..npusmi import kv as npusmi_kv
from ..npusmi.common import NpuSmiParseError
from ..runner import CommandResult, CommandRunner
from .launch import child_command
from .outcome import ProbeLaunchError, ProbeOutcome, read_outcomes
from .protocol import CRASH, FAILED, OK, TIMEOUT, UNAVAILABLE
from . import runtime_view
from .samples import probe_sample
from ..target import Target

log = logging.getLogger(__name__)

SOURCE_NAME = "probe"
TICK_SECONDS = 15.0
SKIPPED = "skipped"
# How long past the round's deadline a child may run before it is killed: its own watchdog ends it first.
KILL_GRACE_SECONDS = 2.0

ChipKey = Tuple[int, int]
RunCommand = Callable[[Sequence[str], Optional[float]], CommandResult]


def busy_reason(chip: ChipSample, limit: Optional[float]) -> Optional[str]:
    """Why the chip is too busy to probe now, or None."""
    if limit is None or chip.aicore_ratio is None or chip.aicore_ratio <= limit:
        return None
    return "busy: AI Core {:.0%} is above probe.skip_busy_above_ratio {:.0%}".format(chip.aicore_ratio, limit)


class _ChipState:
    def __init__(self, baseline_runs: int):
        self.next_due = 0.0  # unix time; 0: due at once
        self.runs = 0  # probes that reached the device (ok or failed)
        self.baseline: Deque[float] = collections.deque(maxlen=baseline_runs)
        self.result: Optional[ProbeSample] = None  # the latest probe that ran
        self.skipped: Optional[ProbeSample] = None  # set while the latest attempt was skipped
        self.problem: Optional[str] = None  # why the probe could not run, when that is the probe's fault
        self.runtime: Optional[Dict] = None  # the runtime's own facts from the latest probe that had them


class ProbeSource:
    name = SOURCE_NAME

    def __init__(self, config: AnyConfig, target: Target, clock: Callable[[], float] = time.time,
                 rng: Optional[random.Random] = None, run_child: Optional[RunCommand] = None,
                 run_npu_smi: Optional[RunCommand] = None, npu_smi: Optional[CommandRunner] = None):
        """`run_child(args, timeout)` and `run_npu_smi(args, timeout)` run the probe child and npu-smi; tests
        pass their own. `npu_smi`: the daemon's one npu-smi runner (its own otherwise)."""
        settings = config.probe
        if target.acl_dir is not None:
            # The same child runs against the target's own pyACL (the simulator's): no real model, no torch.
            settings = dataclasses.replace(settings, kind="acl", model=None)
        self.settings = settings
        self._clock = clock
        self._rng = rng or random.Random()
        argv, env = child_command(settings, config.ascend_dir, os.environ, config.state_dir, target.acl_dir,
                                  target.atc_argv)
        env.update(target.env or {})  # the target's (a simulation's state directory)
        self._child_runner = CommandRunner(argv, settings.timeout_seconds, settings.max_concurrent, env=env)
        self._npu_smi_runner = npu_smi or CommandRunner(target.npu_smi_argv, config.npu_smi_timeout_seconds, 1,
                                                        env=target.env, spawn=target.spawn)
        # Probes are all alike: each may use any of the runner's slots (none is kept for priority calls).
        self._run_child = run_child or (lambda args, timeout: self._child_runner.run(args, timeout, priority=True))
        self._run_npu_smi = run_npu_smi or (lambda args, timeout: self._npu_smi_runner.run(args, timeout, label=SOURCE_NAME))
        self._lock = threading.RLock()
        self._chips: Dict[ChipKey, _ChipState] = {}
        self._logical_ids: Dict[ChipKey, int] = {}
        self._closing = threading.Event()
        self.fresh_seconds = max(config.max_age_seconds, 2 * (settings.interval_seconds + settings.jitter_seconds)
                                 + settings.round_timeout_seconds)
        self.recorder = PollRecorder(SOURCE_NAME, lambda tier: self.fresh_seconds, clock)

    # -- the source contract (sources/base.py) -----------------------------------------------------------

    def tiers(self) -> List[Tier]:
        # Not quick: a probe opens the ACL runtime on every chip, seconds of work (`check --probe` or --full).
        return [Tier(SOURCE_NAME, min(self.settings.interval_seconds, TICK_SECONDS), quick=False)]

    def poll(self, tier: str, chips: Sequence[ChipSample]) -> Optional[float]:
        self.probe_due(chips)
        return None

    def statuses(self, now: float) -> Dict[str, SourceStatus]:
        return {SOURCE_NAME: self.status(now)}

    def contribute(self, parts: Parts, now: float) -> Parts:
        with self._lock:
            states = {key: (state.result, state.skipped, state.runtime) for key, state in self._chips.items()}
        chips = []
        for chip in parts.chips:
            result, skipped, runtime = states.get(chip.key, (None, None, None))
            if result is not None and is_fresh(result.time, now, self.fresh_seconds):
                chip = dataclasses.replace(chip, probe=result)
            elif skipped is not None and is_fresh(skipped.time, now, self.fresh_seconds):
                chip = dataclasses.replace(chip, probe=skipped)
            if runtime is not None and is_fresh(runtime["time"], now, self.fresh_seconds):
                chip = dataclasses.replace(chip, extra=dict(chip.extra, **{runtime_view.EXTRA_KEY: runtime}))
            chips.append(chip)
        return dataclasses.replace(parts, chips=tuple(chips))

    def probe_due(self, chips: Sequence[ChipSample]) -> None:
        """One round, timed and recorded: probe the chips that are due."""
        self.recorder.execute(SOURCE_NAME, lambda started: self._round(chips, started))

    def _round(self, chips: Sequence[ChipSample], started: float) -> Outcome:
        deadline = time.monotonic() + self.settings.round_timeout_seconds
        with self._lock:
            due = [chip for chip in chips if self._state(chip.key).next_due <= started]
        idle: List[ChipSample] = []
        for chip in due:
            reason = busy_reason(chip, self.settings.skip_busy_above_ratio)
            if reason is None:
                idle.append(chip)
            else:  # stays due: probed at the first quieter wake-up
                self._skip(chip, started, reason)
        planned: List[Tuple[ChipSample, int]] = []
        for chip, (device_id, why_unknown, lasting) in zip(idle, self._logical_ids_of(idle)):
            if device_id is not None:
                planned.append((chip, device_id))
            elif lasting:  # this npu-smi cannot tell: the probe cannot run here, as without a runtime
                self._record(chip, ProbeSample(state=UNAVAILABLE, time=started, kind=self.settings.kind,
                                               detail=why_unknown), started)
            else:
                self._skip(chip, started, why_unknown, problem=True,
                           retry_at=started + self.settings.interval_seconds)
        # On the probe runner's threads, one per probe slot (max_concurrent), kept between rounds.
        self._child_runner.pool.map(lambda group: self._probe_group(group, deadline, started),
                                    groups_of(planned, self.settings.max_concurrent))
        return self._outcome()

    def status(self, now: float) -> SourceStatus:
        return self.recorder.statuses(now, unpolled=[SOURCE_NAME])[SOURCE_NAME]

    def close(self) -> None:
        self._closing.set()
        self._child_runner.terminate_all()

    # -- one group of chips, one child ------------------------------------------------------------------

    def _probe_group(self, group: List[Tuple[ChipSample, int]], deadline: float, round_started: float) -> None:
        """One child probes the group's chips in turn. A runtime missing for every chip alike costs that one
        process: the child finds it once and reports it for each chip."""
        timeout = self.settings.timeout_seconds
        started = self._clock()
        left = deadline - time.monotonic()
        if left < timeout:  # stays due: the next wake-up probes them
            for chip, _ in group:
                self._skip(chip, started, "not probed: the round's {:g} s deadline would pass".format(
                    self.settings.round_timeout_seconds))
            return
        devices = [device_id for _, device_id in group]
        args = [word for device_id in devices for word in ("--device", str(device_id))]
        # The child starts no chip whose own deadline would pass the round's; the kill is for a child whose
        # watchdog could not end it (a process stuck in the driver).
        args += ["--device-timeout", repr(timeout), "--not-after", repr(deadline)]
        result = self._run_child(args, left + KILL_GRACE_SECONDS)
        if self._closing.is_set():  # killed because npumon stops: not the chips' failure
            return
        try:
            outcomes = read_outcomes(result, devices, timeout)
        except ProbeLaunchError as exc:
            for chip, _ in group:
                self._skip(chip, started, "the probe did not run: {}".format(exc), problem=True,
                           retry_at=started + self.settings.interval_seconds)
            return
        ended = [device_id for device_id, outcome in outcomes.items() if outcome.reason in (TIMEOUT, CRASH)]
        for chip, device_id in group:
            outcome = outcomes.get(device_id)
            if outcome is not None:
                self._apply(chip, device_id, outcome, started, round_started)
            elif ended:  # stays due: the next wake-up's child probes it
                self._skip(chip, started, "not probed: the probe process ended in device {}'s probe".format(
                    ended[0]))
            else:
                self._skip(chip, started, "not probed: the round's {:g} s deadline would pass".format(
                    self.settings.round_timeout_seconds))

    def _apply(self, chip: ChipSample, device_id: int, outcome: ProbeOutcome, started: float,
               round_started: float) -> None:
        with self._lock:
            state = self._state(chip.key)
            sample = probe_sample(outcome, started, self.settings.kind, device_id, state.runs == 0,
                                  list(state.baseline))
            if outcome.state in (OK, FAILED):
                state.runs += 1
            if outcome.state == OK and not sample.first_run and sample.duration_seconds is not None:
                state.baseline.append(sample.duration_seconds)
            if outcome.runtime:
                state.runtime = runtime_view.runtime_record(started, device_id, outcome.runtime)
        if outcome.state == FAILED:
            log.info("probe of %s (device %d) failed in %s: %s", chip.subject, device_id, sample.failed_stage,
                        sample.detail)
        self._record(chip, sample, round_started)

    def _record(self, chip: ChipSample, sample: ProbeSample, round_started: float) -> None:
        with self._lock:
            state = self._state(chip.key)
            state.result, state.skipped, state.problem = sample, None, None
            # Counted from the round's wake-up: counted from the probe's own (slightly later) start, the chip
            # would just miss the wake-up one interval later and wait for the one after.
            state.next_due = round_started + self.settings.interval_seconds + self._rng.uniform(
                0.0, self.settings.jitter_seconds)

    def _skip(self, chip: ChipSample, when: float, reason: str, problem: bool = False,
              retry_at: Optional[float] = None) -> None:
        """Not probed this time. `problem`: a fault of the probe's setup, which the source's status reports;
        `retry_at`: when to try again (default: at once, the next wake-up)."""
        with self._lock:
            state = self._state(chip.key)
            state.skipped = ProbeSample(state=SKIPPED, time=when, kind=self.settings.kind, detail=reason)
            if problem:
                state.problem = reason
            if retry_at is not None:
                state.next_due = retry_at

    def _state(self, key: ChipKey) -> _ChipState:
        state = self._chips.get(key)
        if state is None:
            state = self._chips[key] = _ChipState(self.settings.baseline_runs)
        return state

    # -- logical ids ---------------------------------------------------------------------------------------

    def _logical_ids_of(self, chips: List[ChipSample]) -> List[Tuple[Optional[int], Optional[str], bool]]:
        """Per chip: (logical id, None, False), or (None, why it is not known, whether npu-smi can never tell
        it). Reads npu-smi info -m at most once."""
        problem, lasting = None, False
        if any(chip.device_id is None and chip.key not in self._logical_ids for chip in chips):
            problem, lasting = self._read_logical_ids()
        answers = []
        for chip in chips:
            device_id = chip.device_id if chip.device_id is not None else self._logical_ids.get(chip.key)
            if device_id is not None:
                answers.append((device_id, None, False))
            elif problem is not None:
                answers.append((None, "logical device id unknown: " + problem, lasting))
            else:
                answers.append((None, "logical device id unknown: npu-smi info -m lists no Chip Logic ID for it",
                                True))
        return answers

    def _read_logical_ids(self) -> Tuple[Optional[str], bool]:
        """Re-read the Chip Logic IDs; (what went wrong, whether it will stay so) or (None, False)."""
        result = self._run_npu_smi(["info", "-m"], None)
        if result.timed_out or result.error:
            return "npu-smi info -m " + result.describe_failure(), False
        refusal = npusmi_kv.classify_error(result.output)
        if refusal is not None and refusal.kind in ("unsupported", "unknown_command"):
            return "this npu-smi has no info -m ({})".format(refusal.message), True
        try:
            rows = npusmi_kv.parse_mapping(result.output)
        except NpuSmiParseError as exc:
            return str(exc), False
        self._logical_ids = {(row.npu, row.chip): row.logic_id for row in rows
                             if row.chip is not None and row.logic_id is not None and not row.is_mcu}
        return None, False

    # -- the source's own status -------------------------------------------------------------------------

    def _outcome(self) -> Outcome:
        """The source is down while some chip could not be probed for a reason of the probe's own (a launch
        failure, no logical id); "unsupported" while the runtime is unavailable; else up (an idle wake-up too:
        the chips' states are what they were, and the source still runs)."""
        with self._lock:
            problems = ["npu{}/chip{}: {}".format(npu, chip, state.problem)
                        for (npu, chip), state in sorted(self._chips.items()) if state.problem]
            unavailable = [state.result.detail for state in self._chips.values()
                           if state.result is not None and state.result.state == UNAVAILABLE]
        if problems:
            return Outcome.failed("; ".join(problems)[:1000])
        if unavailable:
            # Not a failure: this host cannot run the probe (no runtime), like a query a product lacks.
            return Outcome.failed("unavailable: {}".format(unavailable[0]), unsupported=True)
        return Outcome()


def groups_of(planned: List[Tuple[ChipSample, int]], count: int) -> List[List[Tuple[ChipSample, int]]]:
    """The planned probes in at most `count` groups of nearly equal size, in their order: one child each."""
    count = max(1, min(count, len(planned)))
    size, extra = divmod(len(planned), count)
    groups, start = [], 0
    for index in range(count):
        end = start + size + (1 if index < extra else 0)
        groups.append(planned[start:end])
        start = end
    return [group for group in groups if group]


def build(context: SourceContext) -> Optional[ProbeSource]:
    """The probe source when the config turns it on; its `info -m` calls go through the one npu-smi runner."""
    if not context.config.probe.enabled:
        return None
    return ProbeSource(context.config, context.target, clock=context.clock, npu_smi=context.npu_smi)


_PROBE_FACTS = ("state", "kind", "device_id", "first_run", "duration_seconds", "baseline_seconds", "failed_stage",
                "error_code", "error_name", "detail", "action")


def chip_facts(chip: ChipSample, host) -> Facts:
    """The latest liveness probe and the runtime's own view of the chip; all null while the chip has none."""
    probe = chip.probe
    facts = {"probe_" + name: None if probe is None else getattr(probe, name) for name in _PROBE_FACTS}
    facts.update(runtime_view.chip_facts(chip, host))
    return facts


CHIP = ("npu", "chip")
METRICS = (
    MetricSpec("npumon_probe_success", CHIP,
               "1 if the chip's latest liveness probe passed, 0 if it failed; absent while the probe cannot run."),
    MetricSpec("npumon_probe_duration_seconds", CHIP + ("stage",),
               "Latency of each stage of the chip's latest liveness probe."),
    MetricSpec("npumon_probe_baseline_seconds", CHIP,
               "Median duration of the chip's recent warm successful liveness probes."),
    MetricSpec("npumon_probe_last_run_timestamp_seconds", CHIP, "Unix time the chip's latest liveness probe started."),
    MetricSpec("npumon_probe_failure_info", CHIP + ("stage", "code"),
               "1 while the chip's latest liveness probe failed: the stage, and the ACL error code if any."),
) + runtime_view.METRICS


def export(snapshot: Snapshot, out: Families) -> None:
    """Only probes that ran: "unavailable" and "skipped" say nothing about the chip."""
    for chip in snapshot.chips:
        probe = chip.probe
        if probe is None or probe.state not in (OK, FAILED):
            continue
        ids = (chip.npu, chip.chip)
        out.add("npumon_probe_success", 1 if probe.state == OK else 0, ids)
        for stage, seconds in probe.stage_seconds.items():
            out.add("npumon_probe_duration_seconds", seconds, ids + (stage,))
        out.add("npumon_probe_baseline_seconds", probe.baseline_seconds, ids)
        out.add("npumon_probe_last_run_timestamp_seconds", probe.time, ids)
        if probe.state == FAILED:
            code = "" if probe.error_code is None else str(probe.error_code)
            out.add("npumon_probe_failure_info", 1, ids + (probe.failed_stage, code))
    runtime_view.export(snapshot, out)


SPEC = SourceSpec(SOURCE_NAME, build, section=Section("probe", ProbeConfig,
                                                      lambda section, config: probe_config_problems(section)),
                  chip_facts=chip_facts, host_facts=runtime_view.host_facts, metrics=METRICS, export=export)
