"""ProbeSource: which chips are probed when, logical ids, first runs and baselines, and what the Snapshot and
the source's status say. The child and npu-smi are replaced by functions; the clock is the test's."""

import json
import os
import random
import threading
import time

from npumon.sources.target import Target
from npumon.settings import Config
from npumon.model import ChipSample, HostSample
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.base import Parts, SourceContext
from npumon.sources.probe.source import ProbeSource, build
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sources.runner import CommandResult, CommandRunner

T0 = 1_700_000_000.0
MAPPING = """\
\tNPU ID     Chip ID    Chip Logic ID    Chip Name
\t0          0          0                Ascend 910B3
\t0          1          -                Mcu
\t1          0          1                Ascend 910B3
\t1          1          -                Mcu
"""


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


class FakeChild:
    """Answers like the probe child, one report line per `--device`; `states` maps a logical id to the state it
    reports. `calls`: the devices probed, in order; `spawns`: the devices of each child started."""

    def __init__(self, states=None, seconds=0.1, sleep=0.0):
        self.states = states or {}
        self.seconds = seconds
        self.sleep = sleep
        self.calls = []
        self.spawns = []
        self.arguments = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def __call__(self, args, timeout):
        devices = [int(args[index + 1]) for index, word in enumerate(args) if word == "--device"]
        with self._lock:
            self.calls.extend(devices)
            self.spawns.append(devices)
            self.arguments.append((list(args), timeout))
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        time.sleep(self.sleep)
        with self._lock:
            self.running -= 1
        lines = []
        for device in devices:
            state = self.states.get(device, "ok")
            lines.append(json.dumps({
                "schema": "npumon.probe/v1", "kind": "acl", "device": device, "state": state,
                "stages": {"init": self.seconds / 2, "memcpy": self.seconds / 2},
                "failed_stage": "memcpy" if state == "failed" else None,
                "error_code": 507053 if state == "failed" else None,
                "reason": "acl_error" if state == "failed" else None,
                "message": {"failed": "acl.rt.memcpy returned 507053",
                            "unavailable": "No module named 'acl'"}.get(state)}))
        stderr = "".join("npumon-probe: device {}\n".format(device) for device in devices)
        return CommandResult(["child"] + list(args), 0, "".join(line + "\n" for line in lines), stderr, self.sleep)


class FakeNpuSmi:
    def __init__(self, text=MAPPING, fail=False):
        self.text, self.fail, self.calls = text, fail, 0

    def __call__(self, args, timeout):
        assert list(args) == ["info", "-m"]
        self.calls += 1
        if self.fail:
            return CommandResult(["npu-smi", "info", "-m"], None, "", "", 10.0, timed_out=True)
        return CommandResult(["npu-smi", "info", "-m"], 0, self.text, "", 0.1)


def make_source(child=None, npu_smi=None, **settings):
    config = Config(probe=ProbeConfig(**settings))
    clock = Clock()
    source = ProbeSource(config, Target(["npu-smi"], None, "/"), clock=clock, rng=random.Random(7),
                         run_child=child or FakeChild(), run_npu_smi=npu_smi or FakeNpuSmi())
    return source, clock


def chips(count=2, aicore=0.5, with_ids=False):
    return [ChipSample(npu=index, chip=0, aicore_ratio=aicore, device_id=index if with_ids else None)
            for index in range(count)]


def probes(source, chip_list, now):
    return [chip.probe for chip in applied(source, chip_list, now).chips]


def applied(source, chip_list, now):
    """A Snapshot of `chip_list` at `now` with the probe source's part in."""
    parts = source.contribute(Parts(time=now, host=HostSample(), chips=tuple(chip_list)), now)
    return parts.snapshot({})


def test_every_chip_at_the_first_poll_then_each_after_its_interval_plus_jitter():
    child = FakeChild()
    source, clock = make_source(child, interval_seconds=300, jitter_seconds=30)
    assert source.tiers()[0].interval == 15.0  # the tier wakes up often and starts what is due
    source.probe_due(chips(2))
    assert sorted(child.calls) == [0, 1]
    clock.now += 299
    source.probe_due(chips(2))
    assert len(child.calls) == 2
    clock.now += 32
    source.probe_due(chips(2))
    assert sorted(child.calls) == [0, 0, 1, 1]


class TickingClock(Clock):
    """Time passes while a round runs: every reading is 10 ms after the one before."""

    def __call__(self):
        now = self.now
        self.now += 0.01
        return now


def test_a_chip_is_due_again_at_the_wake_up_one_interval_later():
    child = FakeChild()
    clock = TickingClock()
    source = ProbeSource(Config(probe=ProbeConfig(interval_seconds=5, jitter_seconds=0)),
                         Target(["npu-smi"], None, "/"), clock=clock, rng=random.Random(7), run_child=child,
                         run_npu_smi=FakeNpuSmi())
    assert source.tiers()[0].interval == 5
    for wake_up in range(4):  # the tier wakes every 5 s; the probe itself starts a little after each wake-up
        clock.now = T0 + 5 * wake_up
        source.probe_due(chips(1, with_ids=True))
    assert len(child.calls) == 4


def test_a_probe_killed_because_npumon_stops_is_not_recorded_as_a_failure(caplog):
    source = None

    def child_killed_by_the_stop(args, timeout):
        source.close()  # npumon stops while this probe runs: its child dies of SIGKILL
        return CommandResult(["child"] + list(args), -9, "", "", 0.2)

    source, _ = make_source(child_killed_by_the_stop)
    with caplog.at_level("INFO"):
        source.probe_due(chips(1, with_ids=True))
    assert probes(source, chips(1), T0)[0] is None
    assert "failed" not in caplog.text


def test_jitter_spreads_the_chips_apart():
    child = FakeChild()
    source, clock = make_source(child, interval_seconds=60, jitter_seconds=30)
    fleet = chips(8, with_ids=True)
    source.probe_due(fleet)
    first_due = []
    for second in range(1, 91):
        clock.now = T0 + second
        before = len(child.calls)
        source.probe_due(fleet)
        first_due += [second] * (len(child.calls) - before)
    assert len(first_due) == 8 and all(60 <= second <= 90 for second in first_due)
    assert len(set(first_due)) > 3  # not all at once


def test_a_busy_chip_is_skipped_and_probed_once_it_is_quieter():
    child = FakeChild()
    source, clock = make_source(child, skip_busy_above_ratio=0.8)
    busy = chips(1, aicore=0.95)
    source.probe_due(busy)
    assert child.calls == []
    (probe,) = probes(source, busy, clock.now)
    assert probe.state == "skipped" and probe.detail == "busy: AI Core 95% is above probe.skip_busy_above_ratio 80%"
    clock.now += 15
    source.probe_due(chips(1, aicore=0.3))
    assert child.calls == [0]
    assert probes(source, busy, clock.now)[0].state == "ok"


def test_busy_chips_are_probed_when_told_so():
    child = FakeChild()
    source, _ = make_source(child, skip_busy_above_ratio=None)
    source.probe_due(chips(1, aicore=1.0))
    assert child.calls == [0]


def test_logical_ids_come_from_the_table_or_else_once_from_npu_smi_info_m():
    child, npu_smi = FakeChild(), FakeNpuSmi(MAPPING.replace("1                Ascend", "5                Ascend"))
    source, clock = make_source(child, npu_smi)
    source.probe_due(chips(2))
    assert sorted(child.calls) == [0, 5] and npu_smi.calls == 1
    clock.now += 400
    source.probe_due(chips(2))
    assert npu_smi.calls == 1  # read once, kept
    table_ids = [ChipSample(npu=0, chip=0, device_id=3)]
    clock.now += 400
    source.probe_due(table_ids)
    assert child.calls[-1] == 3 and npu_smi.calls == 1
    assert [p.device_id for p in probes(source, table_ids, clock.now)] == [3]


def test_without_a_logical_id_the_chip_is_skipped_and_the_source_says_why():
    child, npu_smi = FakeChild(), FakeNpuSmi(fail=True)
    source, clock = make_source(child, npu_smi)
    source.probe_due(chips(2))
    assert child.calls == [] and npu_smi.calls == 1  # one read per round, not one per chip
    status = source.status(clock.now)
    assert not status.ok and "logical device id unknown: npu-smi info -m timed out" in status.error
    assert probes(source, chips(2), clock.now)[0].state == "skipped"


def test_first_run_then_warm_runs_build_the_baseline_and_the_slow_rule_fires():
    child = FakeChild(seconds=0.2)
    source, clock = make_source(child, interval_seconds=60, jitter_seconds=0)
    chip = chips(1)
    seen = []
    for _ in range(5):
        source.probe_due(chip)
        seen.append(probes(source, chip, clock.now)[0])
        clock.now += 60
    assert [p.first_run for p in seen] == [True, False, False, False, False]
    assert [p.baseline_seconds for p in seen] == [None, None, None, None, 0.2]  # after three warm runs
    child.seconds = 1.5
    source.probe_due(chip)
    slow = chips(1)
    snapshot = applied(source, slow, clock.now)
    rules, params = load_rules()
    findings = RuleEngine(rules, params).evaluate(snapshot, snapshot.time)
    assert [f.rule for f in findings] == ["probe-slow"]
    assert findings[0].summary == "liveness probe took 1.50 s, over 3 times its usual 0.20 s"


def test_a_failed_probe_is_critical_and_clears_when_the_next_passes():
    child = FakeChild({0: "failed"})
    source, clock = make_source(child, interval_seconds=60, jitter_seconds=0)
    rules, params = load_rules()
    engine = RuleEngine(rules, params)

    def judge():
        snapshot = applied(source, chips(1), clock.now)
        return engine.evaluate(snapshot, snapshot.time)

    source.probe_due(chips(1))
    (finding,) = judge()
    assert (finding.rule, finding.severity, finding.subject) == ("probe-failed", "critical", "npu0/chip0")
    assert "507053 (ACL_ERROR_RT_DEVICE_MEM_ERROR" in finding.summary
    child.states = {}
    clock.now += 60
    source.probe_due(chips(1))
    assert judge() == []


def test_unavailable_runtime_stops_the_round_and_is_not_a_failure():
    child = FakeChild({0: "unavailable", 1: "unavailable", 2: "unavailable"})
    source, clock = make_source(child, max_concurrent=1)
    fleet = chips(3, with_ids=True)
    source.probe_due(fleet)
    assert child.spawns == [[0, 1, 2]]  # one process finds the runtime missing, for every chip alike
    assert [p.state for p in probes(source, fleet, clock.now)] == ["unavailable"] * 3
    status = source.status(clock.now)
    assert (status.ok, status.unsupported, status.error) == (False, True, "unavailable: No module named 'acl'")
    clock.now += 15
    source.probe_due(fleet)  # nothing due: the status stays what the last round found
    assert source.status(clock.now).unsupported


def test_a_probe_that_cannot_start_is_a_source_problem_not_a_chip_failure():
    def broken(args, timeout):
        return CommandResult(["/opt/py37/bin/python"], None, "", "", 0.0, error="cannot run /opt/py37/bin/python")

    source, clock = make_source(broken)
    fleet = chips(1, with_ids=True)
    source.probe_due(fleet)
    status = source.status(clock.now)
    assert not status.ok and status.error == "npu0/chip0: the probe did not run: cannot run /opt/py37/bin/python"
    assert probes(source, fleet, clock.now)[0].state == "skipped"


def test_the_due_chips_are_split_into_one_child_per_slot_each_bounded_by_the_round():
    child = FakeChild(sleep=0.3)
    source, _ = make_source(child, max_concurrent=2, timeout_seconds=0.5, round_timeout_seconds=1.0)
    fleet = chips(6, with_ids=True)
    started = time.monotonic()
    source.probe_due(fleet)
    ended = time.monotonic()
    assert ended - started < 1.5
    assert child.spawns == [[0, 1, 2], [3, 4, 5]] and child.most_running == 2
    for args, timeout in child.arguments:
        assert args[args.index("--device-timeout") + 1] == "0.5"  # each chip's own deadline: the child's watchdog
        not_after = float(args[args.index("--not-after") + 1])  # the round's deadline, as time.monotonic()
        assert started + 1.0 <= not_after <= ended + 1.0
        assert timeout <= 1.0 + 2.0  # killed past the round's deadline only if the watchdog could not end it
    assert [p.state for p in probes(source, fleet, T0)] == ["ok"] * 6


def test_a_round_over_sixteen_chips_starts_one_child_per_slot():
    child = FakeChild()
    source, _ = make_source(child, max_concurrent=1)
    source.probe_due(chips(16, with_ids=True))
    assert child.spawns == [list(range(16))]
    child = FakeChild()
    source, _ = make_source(child, max_concurrent=3)
    source.probe_due(chips(16, with_ids=True))
    assert [len(devices) for devices in child.spawns] == [6, 5, 5] and sorted(child.calls) == list(range(16))


def test_results_go_stale_after_two_intervals():
    source, clock = make_source(FakeChild(), interval_seconds=60, jitter_seconds=0, round_timeout_seconds=60)
    fleet = chips(1, with_ids=True)
    source.probe_due(fleet)
    assert source.fresh_seconds == 180
    assert probes(source, chips(1, with_ids=True), clock.now + 180)[0].state == "ok"
    assert probes(source, chips(1, with_ids=True), clock.now + 181) == [None]
    status = source.status(clock.now + 181)
    assert not status.ok and status.error.startswith("stale")


def test_the_probe_is_built_when_enabled_with_the_one_npu_smi_runner():
    target = Target(["npu-smi"], None, "/")
    runner = CommandRunner(["npu-smi"], 1.0)
    assert build(SourceContext(Config(probe=ProbeConfig(enabled=False)), target, runner)) is None
    source = build(SourceContext(Config(), target, runner))
    assert source.name == "probe" and source.settings.kind == "acl" and source._npu_smi_runner is runner


def test_a_target_with_its_own_pyacl_runs_it_and_no_model(tmp_path):
    from npumon.sources.probe.config import ProbeModelConfig

    config = Config(probe=ProbeConfig(kind="torch", model=ProbeModelConfig(path="/x.om")))
    source = ProbeSource(config, Target(["npu-smi"], {"NPUMON_SIM_STATE": "/tmp/x"}, "/", acl_dir=str(tmp_path)))
    assert (source.settings.kind, source.settings.model) == ("acl", None)
    assert source._child_runner._extra_env["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)
    assert source._child_runner._extra_env["NPUMON_SIM_STATE"] == "/tmp/x"  # the target's env goes along


def test_an_npu_smi_without_info_m_makes_the_probe_unavailable_not_down():
    child, npu_smi = FakeChild(), FakeNpuSmi("Command or option is not found.\n")
    source, clock = make_source(child, npu_smi)
    source.probe_due(chips(2))
    assert child.calls == [] and npu_smi.calls == 1
    assert [p.state for p in probes(source, chips(2), clock.now)] == ["unavailable", "unavailable"]
    status = source.status(clock.now)
    assert (status.ok, status.unsupported) == (False, True)
    assert status.error == ("unavailable: logical device id unknown: this npu-smi has no info -m "
                            "(Command or option is not found.)")
