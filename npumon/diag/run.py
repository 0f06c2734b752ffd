"""One `npumon diag` run: read the host once (level 1), then run the workloads on every idle chip (levels 2 and
3, cumulative like dcgmi diag's), sampling the chips through npu-smi while a level-3 load runs.
"""

import dataclasses
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from ..model import Finding, Snapshot
from ..sources.collection import SourceSet
from ..sources.probe.launch import builder_argv, child_environment
from .deploy import deployment_findings, hugepages_findings, process_environment_findings
from .expected import expected_for
from .judge import DEFAULT_THRESHOLDS, ChipRun, judge
from .launch import ChildPlan, child_argv, run_children
from .protocol import LEVEL_ITEMS, P2P

SAMPLE_SOURCES_SKIPPED = ("probe", "hccn", "kmsg", "serving-queue", "kubernetes", "ambient")
# Besides check's quick tiers: firmware and Compatibility per card (board-incompatible needs them) and the
# logical ids (`npu-smi info -m`) the children open the chips by.
ALSO_TIERS = ("npu-smi:board", "npu-smi:identity")
READ_RESERVE_SECONDS = 1.0  # of --timeout, kept after level 1's read for the rules and the output, as check does
RESERVE_SECONDS = 5.0  # of --timeout, kept for judging, the sampler's last pass and the output
PASS_SECONDS = 30.0  # the longest one sampling pass through npu-smi may take


@dataclass
class DiagOptions:
    level: int
    force: bool = False
    parallel: int = 8
    item_seconds: float = 5.0
    sustained_seconds: float = 60.0
    hbm_bytes: int = 256 * 1048576
    copy_bytes: int = 16 * 1048576
    matmul_size: int = 4096
    sync_timeout_ms: int = 30000
    op_model_dir: Optional[str] = None  # the user's MatMul models; None: the operator builder finds them
    build_timeout_seconds: float = 60.0  # ATC building the MatMul models, once per SoC, CANN version and size
    sample_interval: float = 10.0
    budget_seconds: Optional[float] = None  # the whole run's (--timeout): children are killed within it
    thresholds: Dict[str, float] = field(default_factory=lambda: dict(DEFAULT_THRESHOLDS))

    def child_options(self) -> Dict[str, Any]:
        return {"item_seconds": self.item_seconds, "sustained_seconds": self.sustained_seconds,
                "hbm_bytes": self.hbm_bytes, "copy_bytes": self.copy_bytes, "matmul_size": self.matmul_size,
                "sync_timeout_ms": self.sync_timeout_ms, "op_model_dir": self.op_model_dir}

    def child_deadline(self) -> float:
        """How long one chip's child may take: its measurements, plus every synchronize timing out once, plus
        start-up; past it the child is killed and the item it was on reported as never completing."""
        items = 5 if self.level == 2 else 6
        load = items * self.item_seconds * 2 + (2 * self.sustained_seconds * 1.5 if self.level == 3 else 0)
        return load + self.sync_timeout_ms / 1000.0 + self.build_timeout_seconds + 30.0


@dataclass
class DiagResult:
    level: int
    snapshot: Snapshot
    findings: List[Finding]
    runs: List[ChipRun]
    started: float
    seconds: float
    incomplete: Optional[str] = None  # why the host read is incomplete (calls left out at --timeout)


def run_diag(config: Any, target: Any, engine: Any, options: DiagOptions,
             on_item: Callable[[str, str], None] = lambda subject, item: None,
             clock: Callable[[], float] = time.time) -> DiagResult:
    """Run the level; never from the daemon on its own (only `npumon diag` calls this)."""
    started = clock()
    collection = SourceSet(config, target, skip=("probe",), quick_pass=True,
                           max_concurrent=config.check_max_concurrent, one_pass=True)
    try:
        within = None if options.budget_seconds is None else max(0.1, options.budget_seconds - READ_RESERVE_SECONDS)
        snapshot = collection.collect_once(full=False, also=ALSO_TIERS, within=within)
    finally:
        collection.close()
    findings = deployment_findings(engine.evaluate(snapshot, now=snapshot.time))
    findings += process_environment_findings(snapshot, target.root, snapshot.time)
    findings += hugepages_findings(snapshot, target.root, snapshot.time)
    runs: List[ChipRun] = []
    if options.level >= 2 and snapshot.chips:
        runs = _run_workloads(config, target, snapshot, options, on_item, started)
        findings += judge(runs, options.thresholds, clock())
    short = ["{} ({} calls)".format(name, status.left_out) for name, status in sorted(snapshot.sources.items())
             if status.left_out]
    incomplete = "--timeout reached before every call of {} was made".format(", ".join(short)) if short else None
    return DiagResult(options.level, snapshot, findings, runs, started, clock() - started, incomplete)


def _run_workloads(config: Any, target: Any, snapshot: Snapshot, options: DiagOptions,
                   on_item: Callable[[str, str], None], started: float) -> List[ChipRun]:
    chips = sorted(snapshot.chips, key=lambda chip: (chip.npu, chip.chip))
    runs, plans = [], []
    devices = [chip.device_id if chip.device_id is not None else index for index, chip in enumerate(chips)]
    # The runtime the liveness probe uses: the config's probe.python (CANN's) and install paths, or the target's
    probe = config.probe
    python = sys.executable if target.acl_dir or not probe.python else probe.python
    # The probe's operator builder: MatMul models built with ATC once and cached with the probe's, or aclop
    builder = [] if options.op_model_dir else builder_argv(probe, config.ascend_dir, config.state_dir,
                                                            options.build_timeout_seconds, target.acl_dir,
                                                            target.atc_argv)
    tested = []
    for index, chip in enumerate(chips):
        run = ChipRun(chip.subject, devices[index], expected_for(chip.name), chip.pcie, None)
        if chip.processes and not options.force:
            runs.append(run._replace(skipped="held by {}".format(", ".join(
                "{} ({})".format(process.pid, process.name) for process in chip.processes))))
        else:
            tested.append(run)
    for index, run in enumerate(tested):
        peer, items = None, LEVEL_ITEMS[options.level]
        if options.level == 3 and run.expected is not None and run.expected.hccs and len(tested) > 1:
            peer = tested[(index + 1) % len(tested)].device  # a ring over the tested chips: each copies to the next
        elif options.level == 3:  # no HCCS between the chips (or one chip): nothing to copy over
            items = tuple(item for item in items if item != P2P)
        plans.append(ChildPlan(run, child_argv(python, run.device, options.level, options.child_options(), peer,
                                               items) + builder))
    env = dict(os.environ)
    env.update(child_environment(probe, config.ascend_dir, os.environ, python, target.acl_dir))
    env.update(target.env or {})
    sampler = _Sampler(config, target, options.sample_interval) if options.level == 3 else None
    try:
        deadline = capped = options.child_deadline()
        if options.budget_seconds is not None:  # end every child, and the run, inside --timeout
            capped = min(deadline, max(1.0, options.budget_seconds - RESERVE_SECONDS - (time.time() - started)))
        done = run_children(plans, env, capped, options.parallel, on_item)
        if capped < deadline:  # a child killed at the cap was cut short, not hung
            done = [run._replace(cut_short=True, error="--timeout came during {}".format(run.stuck_item), stuck_item=None)
                    if run.stuck_item else run for run in done]
    finally:
        samples = sampler.stop() if sampler else {}
    done = [run._replace(samples=samples.get(run.subject)) for run in done]
    return sorted(runs + done, key=lambda run: run.device)


class _Sampler:
    """Reads temperature, power and the AI Core clock of every chip through npu-smi while the load runs."""

    def __init__(self, config: Any, target: Any, interval: float):
        # The AI Core clock is in `npu-smi info -t common`, a query the config may leave off: ask it every pass.
        config = dataclasses.replace(config, poll=dataclasses.replace(config.poll, common_seconds=max(interval, 1.0)))
        self._collection = SourceSet(config, target, skip=SAMPLE_SOURCES_SKIPPED, one_pass=True,
                                     max_concurrent=config.check_max_concurrent)
        self._interval = interval
        self._stop = threading.Event()
        self._samples: Dict[str, Dict[str, Any]] = {}
        self._thread = threading.Thread(target=self._loop, name="diag-sampler", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            snapshot = self._collection.collect_once(full=True, within=max(self._interval, PASS_SECONDS))
            for chip in snapshot.chips:
                record = self._samples.setdefault(chip.subject, {})
                _extreme(record, "temperature_celsius_max", chip.temperature_celsius, max)
                _extreme(record, "power_watts_max", chip.power_watts, max)
                _extreme(record, "aicore_freq_mhz_min", chip.aicore_freq_mhz, min)
                _extreme(record, "aicore_freq_mhz_max", chip.aicore_freq_mhz, max)
                record["samples"] = record.get("samples", 0) + 1
            self._stop.wait(self._interval)

    def stop(self) -> Dict[str, Dict[str, Any]]:
        self._stop.set()
        self._collection.close()
        self._thread.join(timeout=self._interval + 30)
        return self._samples


def _extreme(record: Dict[str, Any], key: str, value: Optional[float], pick: Callable) -> None:
    if value is not None:
        record[key] = value if record.get(key) is None else pick(record[key], value)
