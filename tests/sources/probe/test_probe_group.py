"""One probe child for a group of chips (issue 28/29): ProbeSource starts one child per max_concurrent group,
which probes its chips in turn; a hung or crashing chip costs its own deadline and takes only itself down.
The child is the real one, run as the daemon runs it, against the simulated pyACL of a 16-chip Atlas A3; the
source's clock is the test's."""

import json
import os
import random
import time

import sys
import types

import psutil
import pytest
import yaml

from npumon.model import ChipSample, HostSample
from npumon.settings import Config
from npumon.sim import prepare_simulation
from npumon.sim.pyacl import ACL_HANG_PIDS_FILE, SimulatedAcl
from npumon.sim.target import simulated_target
from npumon.sources.base import Parts
from npumon.sources.probe.child import main
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.outcome import ProbeLaunchError, read_outcomes
from npumon.sources.probe.source import ProbeSource
from npumon.sources.runner import CommandResult

T0 = 1_700_000_000.0
CHIPS = 16
TIMEOUT = 3.0


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


def a3_source(tmp_path, probe_plan=None, bad_device=5, **settings):
    """A ProbeSource on a simulated A3 whose chip `bad_device` does `probe_plan`; returns (source, clock, spawns,
    chips): `spawns` lists the --device ids of every child started, through the runner seam."""
    scenario = {"product": "atlas-a3", "chips": {"default": {"memory_used_percent": 25}}}
    if probe_plan is not None:
        scenario["chips"]["overrides"] = [{"devices": [bad_device], "probe": probe_plan}]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    sim = prepare_simulation(str(tmp_path / "sim"), str(path))
    options = dict(timeout_seconds=TIMEOUT, round_timeout_seconds=60.0, max_concurrent=1, compute=False,
                   interval_seconds=300.0, jitter_seconds=0.0)
    options.update(settings)
    config = Config(probe=ProbeConfig(**options), state_dir=str(tmp_path / "state"))
    clock = Clock()
    source = ProbeSource(config, simulated_target(sim), clock=clock, rng=random.Random(3))
    spawns = []
    run = source._run_child

    def counted(args, timeout):
        spawns.append([int(args[index + 1]) for index, word in enumerate(args) if word == "--device"])
        return run(args, timeout)

    source._run_child = counted
    chips = [ChipSample(npu=device // 2, chip=device % 2, device_id=device, aicore_ratio=0.0)
             for device in range(CHIPS)]
    return source, clock, spawns, chips


def probes(source, chips, now):
    parts = source.contribute(Parts(time=now, host=HostSample(), chips=tuple(chips)), now)
    return [chip.probe for chip in parts.chips]


def test_a_round_over_sixteen_chips_starts_one_child_and_probes_every_chip(tmp_path):
    source, clock, spawns, chips = a3_source(tmp_path)
    source.probe_due(chips)
    assert spawns == [list(range(CHIPS))]
    results = probes(source, chips, clock.now)
    assert [p.state for p in results] == ["ok"] * CHIPS, [p.detail for p in results]
    assert [p.device_id for p in results] == list(range(CHIPS))
    assert all(p.first_run for p in results)
    # the one acl.init is each chip's "init" stage; every chip has its own stages after it
    assert len({p.stage_seconds["init"] for p in results}) == 1
    assert all(list(p.stage_seconds)[-1] == "cleanup" for p in results)
    assert source.status(clock.now).ok
    clock.now += 300.0  # all due again: one child, warm runs
    source.probe_due(chips)
    assert len(spawns) == 2 and [p.first_run for p in probes(source, chips, clock.now)] == [False] * CHIPS


def _hung_pids(sim_dir):
    with open(os.path.join(str(sim_dir), ACL_HANG_PIDS_FILE), encoding="utf-8") as handle:
        return [int(pid) for line in handle for pid in line.split()]


def test_a_hung_chip_costs_its_own_deadline_and_the_chips_after_it_are_probed_at_the_next_wake_up(tmp_path):
    source, clock, spawns, chips = a3_source(tmp_path, {"hang": "rt.memcpy"}, bad_device=5)
    started = time.monotonic()
    source.probe_due(chips)
    took = time.monotonic() - started
    # the watchdog ended the child at chip 5's own deadline, long before the round's 60 s
    assert TIMEOUT <= took < TIMEOUT + 10.0
    results = probes(source, chips, clock.now)
    assert [p.state for p in results[:5]] == ["ok"] * 5
    hung = results[5]
    assert (hung.state, hung.failed_stage) == ("failed", "memcpy")
    assert "no answer within 3 s in stage memcpy: the probe's watchdog ended its process" in hung.detail
    assert "hung" in hung.action
    assert list(hung.stage_seconds)[-1] == "mem_info"  # the stages before the hang were timed
    assert [p.state for p in results[6:]] == ["skipped"] * 10
    assert all(p.detail == "not probed: the probe process ended in device 5's probe" for p in results[6:])
    assert source.status(clock.now).ok  # a chip's failure, not the probe's
    time.sleep(0.2)
    for pid in _hung_pids(tmp_path / "sim"):  # the group was killed once the child had ended: nothing is left
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    clock.now += 15.0  # the next wake-up: the chips not reached are still due, the hung one is not
    source.probe_due(chips)
    assert spawns == [list(range(CHIPS)), list(range(6, CHIPS))]
    results = probes(source, chips, clock.now)
    assert [p.state for p in results[6:]] == ["ok"] * 10 and all(p.first_run for p in results[6:])
    assert results[5].state == "failed"


def test_a_chip_that_crashes_the_child_fails_alone_and_the_chips_after_it_are_probed_next(tmp_path):
    source, clock, spawns, chips = a3_source(tmp_path, {"crash": "rt.memcpy"}, bad_device=9, max_concurrent=2)
    source.probe_due(chips)
    assert spawns == [list(range(8)), list(range(8, CHIPS))]
    results = probes(source, chips, clock.now)
    assert [p.state for p in results[:9]] == ["ok"] * 9
    crashed = results[9]
    assert (crashed.state, crashed.failed_stage) == ("failed", "memcpy")
    assert crashed.detail == "the probe process was killed by SIGSEGV in stage memcpy without a report"
    assert [p.state for p in results[10:]] == ["skipped"] * 6
    clock.now += 15.0
    source.probe_due(chips)
    assert spawns[2:] == [list(range(10, 13)), list(range(13, CHIPS))]
    assert [p.state for p in probes(source, chips, clock.now)[10:]] == ["ok"] * 6


def test_the_child_starts_no_chip_whose_deadline_would_pass_the_rounds(tmp_path):
    # chip 0 takes 3 s (set_device): a 6 s chip after it could not end within the round's 9 s
    source, clock, spawns, chips = a3_source(tmp_path, {"slow": "rt.set_device", "delay_seconds": 3.0},
                                             bad_device=0, timeout_seconds=6.0, round_timeout_seconds=9.0)
    started = time.monotonic()
    source.probe_due(chips)
    assert time.monotonic() - started < 9.0
    results = probes(source, chips, clock.now)
    assert results[0].state == "ok" and results[0].stage_seconds["set_device"] >= 3.0
    assert [p.state for p in results[1:]] == ["skipped"] * 15
    assert results[1].detail == "not probed: the round's 9 s deadline would pass"
    assert source.status(clock.now).ok
    clock.now += 15.0
    source.probe_due(chips)
    assert spawns[1] == list(range(1, CHIPS))
    assert [p.state for p in probes(source, chips, clock.now)] == ["ok"] * CHIPS


def test_a_missing_runtime_is_found_once_for_the_whole_group(tmp_path):
    scenario = {"product": "atlas-a3", "chips": {"default": {}}, "acl_runtime": {"installed": False}}
    (tmp_path / "scenario.yaml").write_text(yaml.safe_dump(scenario))
    sim = prepare_simulation(str(tmp_path / "sim"), str(tmp_path / "scenario.yaml"))
    source = ProbeSource(Config(probe=ProbeConfig(max_concurrent=1, compute=False),
                                state_dir=str(tmp_path / "state")), simulated_target(sim), clock=lambda: T0)
    chips = [ChipSample(npu=device, chip=0, device_id=device) for device in range(4)]
    source.probe_due(chips)
    results = probes(source, chips, T0)
    assert [p.state for p in results] == ["unavailable"] * 4
    assert all("libascendcl.so" in p.detail for p in results)
    assert source.status(T0).unsupported


# -- read_outcomes, pure ---------------------------------------------------------------------------------------


def _report(device, state="ok"):
    return json.dumps({"schema": "npumon.probe/v1", "kind": "acl", "device": device, "state": state,
                       "stages": {"init": 0.1, "set_device": 0.2}}) + "\n"


def _result(stdout, stderr, returncode=0, timed_out=False):
    return CommandResult(["child"], None if timed_out else returncode, stdout, stderr, 4.2, timed_out=timed_out)


STAGES_OF_1 = "npumon-probe: device 1\nnpumon-probe: start init\nnpumon-probe: done init 0.1\n" \
              "npumon-probe: start set_device\n"


def test_the_chips_with_a_report_keep_it_the_chip_under_way_fails_and_the_rest_have_none():
    stderr = "npumon-probe: device 0\nnpumon-probe: start init\n" + STAGES_OF_1
    watchdog = read_outcomes(_result(_report(0), stderr + "Timeout (0:00:03)!\nThread 0x1 (most recent call "
                                     "first):\n", returncode=1), [0, 1, 2], 3.0)
    assert set(watchdog) == {0, 1} and watchdog[0].state == "ok"
    assert (watchdog[1].state, watchdog[1].failed_stage, watchdog[1].reason) == ("failed", "set_device", "timeout")
    assert watchdog[1].stage_seconds == {"init": 0.1}
    assert watchdog[1].message == "no answer within 3 s in stage set_device: the probe's watchdog ended its process"
    killed = read_outcomes(_result(_report(0), stderr, timed_out=True), [0, 1, 2], 3.0)
    assert killed[1].reason == "timeout" and "process group was killed" in killed[1].message
    crashed = read_outcomes(_result(_report(0), stderr, returncode=-11), [0, 1, 2], 3.0)
    assert (crashed[1].reason, crashed[1].message) == (
        "crash", "the probe process was killed by SIGSEGV in stage set_device without a report")


def test_a_child_that_reached_no_chip_is_a_launch_problem_unless_it_had_no_time_for_one():
    with pytest.raises(ProbeLaunchError, match="exited with status 1 before its first stage: No module named"):
        read_outcomes(_result("", "No module named npumon\n", returncode=1), [0, 1], 3.0)
    with pytest.raises(ProbeLaunchError, match="started no stage within 4.2 s"):
        read_outcomes(_result("", "", timed_out=True), [0, 1], 3.0)
    assert read_outcomes(_result("", ""), [0, 1], 3.0) == {}  # --not-after left no room for a chip


def test_a_one_chip_child_without_device_lines_reads_as_before():
    stderr = "npumon-probe: start init\nnpumon-probe: done init 0.1\nnpumon-probe: start memcpy\n"
    outcomes = read_outcomes(_result("", stderr, timed_out=True), [7], 3.0)
    assert (outcomes[7].failed_stage, outcomes[7].reason) == ("memcpy", "timeout")
    assert read_outcomes(_result(_report(7) + _report(99), ""), [7], 3.0)[7].state == "ok"  # 99: not asked


# -- the child's loop, in-process against the simulated pyACL ---------------------------------------------------


def _in_process_acl(monkeypatch, plans, init_error_code=0):
    """A simulated runtime of 8 devices as `import acl`; `plans` maps a device to its probe plan."""
    runtime = SimulatedAcl(8, "Ascend910B3", lambda device: (1 << 30, 1 << 31),
                           lambda device: dict(plans.get(device, {})), init_error_code=init_error_code)
    module = types.SimpleNamespace(init=runtime.init, finalize=runtime.finalize, get_soc_name=runtime.get_soc_name,
                                   create_data_buffer=runtime.create_data_buffer,
                                   destroy_data_buffer=runtime.destroy_data_buffer,
                                   rt=runtime.rt, mdl=runtime.mdl, util=runtime.util)
    monkeypatch.setitem(sys.modules, "acl", module)
    return runtime


def _main(capfd, devices, *extra):
    argv = [word for device in devices for word in ("--device", str(device))] + ["--copy-bytes", "1024"]
    assert main(argv + list(extra)) == 0
    out, err = capfd.readouterr()
    return [json.loads(line) for line in out.splitlines()], err


def test_the_child_opens_the_runtime_once_and_a_failing_chip_does_not_stop_the_ones_after_it(monkeypatch, capfd):
    runtime = _in_process_acl(monkeypatch, {1: {"fail": "rt.memcpy", "error_code": 507053}})
    reports, err = _main(capfd, [0, 1, 2])
    assert [(r["device"], r["state"], r["failed_stage"]) for r in reports] == [
        (0, "ok", None), (1, "failed", "memcpy"), (2, "ok", None)]
    assert runtime.calls.count("init") == 1 and runtime.calls.count("finalize") == 1
    assert runtime.leaks() == []
    assert len({r["stages"]["init"] for r in reports}) == 1  # the one init, in every chip's stages
    # each chip's stage lines follow its device line; the init is announced once, under the first chip
    assert [line for line in err.splitlines()
            if line.startswith("npumon-probe: device") or line.endswith("start init")] == [
        "npumon-probe: device 0", "npumon-probe: start init", "npumon-probe: device 1", "npumon-probe: device 2"]


def test_a_failed_init_is_every_chips_answer_without_trying_again(monkeypatch, capfd):
    runtime = _in_process_acl(monkeypatch, {}, init_error_code=500004)
    reports, _ = _main(capfd, [3, 4])
    assert [(r["device"], r["state"], r["failed_stage"], r["error_code"]) for r in reports] == [
        (3, "failed", "init", 500004), (4, "failed", "init", 500004)]
    assert runtime.calls.count("init") == 1 and runtime.leaks() == []


def test_a_child_stopped_by_not_after_still_finalizes_the_runtime(monkeypatch, capfd):
    runtime = _in_process_acl(monkeypatch, {})
    reports, _ = _main(capfd, [0, 1], "--device-timeout", "5", "--not-after", repr(time.monotonic() + 1.0))
    assert reports == [] and runtime.calls.count("init") == 0  # no chip could end by then: none started
    runtime = _in_process_acl(monkeypatch, {0: {"slow": "rt.set_device", "delay_seconds": 0.3}})
    reports, _ = _main(capfd, [0, 1], "--device-timeout", "1", "--not-after", repr(time.monotonic() + 1.2))
    assert [r["device"] for r in reports] == [0]
    assert runtime.calls.count("finalize") == 1 and runtime.leaks() == []
