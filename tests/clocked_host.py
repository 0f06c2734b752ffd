"""A simulated host polled on a fake clock: the collector, the rule engine and the in-process npu-smi read
one clock, so a test walks through scenario hours in a moment instead of waiting for a daemon.

It does what the daemon's jobs do, in order, for one moment at a time: every tier that is due polls (the
primary tier, the main table, first; a tier that asks to run again early does), then the rules judge the
snapshot. A hung npu-smi call moves the clock on by its deadline, as the real one would take that long.
"""

from typing import Dict, List, Optional

from prometheus_client import generate_latest

from npumon.settings import Config
from npumon.model import Finding, Snapshot
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.report import status_document
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sim.inprocess import InProcessNpuSmi
from npumon.sim.simulation import Simulation
from npumon.sim.state import STATE_ENV, read_state
from npumon.sim.target import simulated_target
from npumon.sources.collection import SourceSet


class FakeClock:
    """Wall time that moves only when told to."""

    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)


class ClockedHost:
    def __init__(self, config: Config, sim: Simulation):
        self.clock = FakeClock(read_state(sim.env[STATE_ENV])["start_time"])
        spawn = InProcessNpuSmi(clock=self.clock, sleep=self.clock.sleep)
        target = simulated_target(sim, spawn=spawn)
        self.collection = SourceSet(config, target, clock=self.clock, sleep=self.clock.sleep)
        rules, params = load_rules(config.rule_files, params=config.thresholds)  # as the daemon loads them
        self.engine = RuleEngine(rules, params)
        self.snapshot: Optional[Snapshot] = None
        self.findings: List[Finding] = []
        self._due: Dict[str, float] = {tier.name: self.clock() for tier in self.collection.tiers()
                                       if tier.interval > 0}
        self.polls = 0

    def close(self) -> None:
        self.collection.close()

    def step(self) -> List[Finding]:
        """Poll what is due now, judge the snapshot, then move the clock to the next primary poll."""
        now = self.clock()
        tiers = {tier.name: tier for tier in self.collection.tiers()}  # the primary first
        for name in [name for name in tiers if name in self._due]:
            if self._due[name] <= now:
                retry = self.collection.poll(name)
                self._due[name] = now + (tiers[name].interval if retry is None else retry)
        self.snapshot = self.collection.snapshot()
        self.findings = self.engine.evaluate(self.snapshot, self.snapshot.time)
        self.polls += 1
        self.clock.now = max(self.clock(), now + self.collection.primary().interval)
        return self.findings

    def run_for(self, seconds: float) -> None:
        """Step until `seconds` of clock time have passed."""
        until = self.clock() + seconds
        while self.clock() < until:
            self.step()

    def status(self) -> dict:
        """What the daemon's /status would show now."""
        return status_document(self.snapshot, self.findings)

    def metrics(self) -> str:
        """What the daemon's /metrics would show now."""
        view = ExporterView(snapshot=self.snapshot, findings=list(self.findings),
                            driver_version=self.snapshot.driver_version)
        return generate_latest(build_registry(lambda: view)).decode()
