"""The thread budget (issue 28): sources that run many calls at once run them on their runner's pool, one thread
per call slot, whatever the number of chips and tiers; the pool itself stays bounded and never waits for
itself."""

import json
import random
import threading
import time

from daemon_harness import wait_until
from npumon.model import ChipSample
from npumon.settings import Config, parse_config
from npumon.sim.simulation import prepare_simulation
from npumon.sim.target import simulated_target
from npumon.sources.collection import SourceSet
from npumon.sources.pool import CallPool
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.source import ProbeSource
from npumon.sources.runner import CommandResult
from npumon.sources.target import Target

CALL_SECONDS = 0.03  # each simulated call: slow enough that the tiers' calls overlap


class PeakThreads:
    """Records the most threads alive while a call ran."""

    def __init__(self):
        self.peak = 0
        self._lock = threading.Lock()

    def sample(self):
        count = threading.active_count()
        with self._lock:
            self.peak = max(self.peak, count)


class SlowSpawn:
    """The in-process simulator, each call CALL_SECONDS slower, counting the threads alive at every call."""

    def __init__(self, spawn, peak):
        self.spawn, self.peak = spawn, peak
        self.handles = spawn.handles

    def __call__(self, argv, env, timeout_seconds):
        self.peak.sample()
        time.sleep(CALL_SECONDS)
        return self.spawn(argv, env, timeout_seconds)


def test_every_tier_of_a_16_chip_host_at_once_runs_on_one_thread_per_call_slot(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", product="atlas-a3", time_scale=0, latency_scale=0)
    peak = PeakThreads()
    config = parse_config("probe: {enabled: false}\nnetwork: {enabled: true}\n")
    collection = SourceSet(config, simulated_target(sim, spawn=SlowSpawn(sim.spawn, peak)))
    try:
        collection.poll("npu-smi")
        tiers = [tier.name for tier in collection.tiers() if tier.interval > 0 and not tier.primary
                 and tier.name.startswith(("hccn", "npu-smi:")) and tier.name != "npu-smi:identity"]
        assert len([tier for tier in tiers if tier.startswith("hccn")]) == 5
        assert len(tiers) >= 9
        before = threading.active_count()
        # one thread per tier, as the scheduler runs them; all due at the same moment
        pollers = [threading.Thread(target=collection.poll, args=(tier,)) for tier in tiers]
        for poller in pollers:
            poller.start()
        for poller in pollers:
            poller.join(120)
        snapshot = collection.snapshot()
    finally:
        collection.close()
    slots = collection.npu_smi.max_concurrent
    assert peak.peak <= before + len(tiers) + slots, (peak.peak, before, len(tiers), slots)
    # and every chip was read by every tier: the budget cost no answers
    assert len(snapshot.chips) == 16
    for tier in tiers:
        status = snapshot.sources[tier]
        assert status.ok and not status.left_out, (tier, status)
    assert {chip.extra["network"]["link_status"] for chip in snapshot.chips} == {"UP"}
    assert all(chip.extra["network"]["counters"] for chip in snapshot.chips)


class SlowChild:
    def __init__(self, peak):
        self.peak = peak

    def __call__(self, args, timeout):
        self.peak.sample()
        time.sleep(CALL_SECONDS)
        devices = [int(args[index + 1]) for index, word in enumerate(args) if word == "--device"]
        reports = [{"schema": "npumon.probe/v1", "kind": "acl", "device": device, "state": "ok",
                    "stages": {"init": 0.01, "memcpy": 0.01}, "failed_stage": None, "error_code": None,
                    "reason": None, "message": None} for device in devices]  # one line per chip of the group
        return CommandResult(["child"] + list(args), 0, "".join(json.dumps(report) + "\n" for report in reports), "",
                             CALL_SECONDS)


def test_a_probe_round_of_16_chips_runs_on_the_probe_slots_and_keeps_them_between_rounds():
    peak = PeakThreads()
    config = Config(probe=ProbeConfig(interval_seconds=5, jitter_seconds=0, max_concurrent=2))
    now = [1000.0]
    source = ProbeSource(config, Target(["npu-smi"], None, "/"), clock=lambda: now[0], rng=random.Random(7),
                         run_child=SlowChild(peak), run_npu_smi=lambda args, timeout: None)
    chips = [ChipSample(npu=npu, chip=chip, device_id=2 * npu + chip, name="910B3") for npu in range(8)
             for chip in range(2)]
    before = threading.active_count()
    try:
        source.poll("probe", chips)
        after_first = threading.active_count()
        now[0] += 10
        source.poll("probe", chips)
        assert threading.active_count() == after_first  # the second round took the same threads
    finally:
        source.close()
    assert peak.peak <= before + 2, (peak.peak, before)
    assert {chip.key: source._chips[chip.key].runs for chip in chips} == {chip.key: 2 for chip in chips}


def test_the_pool_runs_each_item_once_in_order_on_at_most_its_workers():
    pool = CallPool(3)
    running, most, lock = [0], [0], threading.Lock()

    def work(item):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return item * 2

    before = threading.active_count()
    try:
        assert pool.map(work, range(20)) == [item * 2 for item in range(20)]
        assert most[0] == 3
        assert threading.active_count() <= before + 3
    finally:
        pool.close()


def test_work_handed_to_the_pool_from_its_own_thread_runs_there_instead_of_waiting_for_itself():
    pool = CallPool(1)
    results = []
    worker = threading.Thread(target=lambda: results.append(pool.map(lambda n: pool.map(abs, [-n, n]), [1, 2])))
    try:
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "the pool waited for itself"
        assert results == [[[1, 1], [2, 2]]]
    finally:
        pool.close()


def test_after_close_the_work_runs_in_the_callers_thread_and_an_error_comes_back_after_the_rest():
    pool = CallPool(2)
    pool.close()
    callers = []
    assert pool.map(lambda n: callers.append(threading.current_thread()) or n, [1, 2, 3]) == [1, 2, 3]
    assert set(callers) == {threading.current_thread()}
    pool = CallPool(2)
    done = []

    def work(n):
        if n == 0:
            raise ValueError("bad item")
        time.sleep(0.05)
        done.append(n)

    try:
        try:
            pool.map(work, [0, 1, 2])
        except ValueError as exc:
            assert str(exc) == "bad item"
        else:
            raise AssertionError("the error was lost")
        assert sorted(done) == [1, 2]  # the others ended before the error came back
    finally:
        pool.close()


def test_the_batches_take_turns_so_a_later_tier_is_not_left_waiting_for_a_whole_earlier_one():
    pool = CallPool(1)
    order, started = [], threading.Event()

    def work(item):
        started.set()
        order.append(item)
        time.sleep(0.02)

    first = threading.Thread(target=pool.map, args=(work, ["a{}".format(n) for n in range(6)]))
    try:
        first.start()
        started.wait(5)
        pool.map(work, ["b0", "b1"])
        first.join(10)
    finally:
        pool.close()
    assert order.index("b1") < order.index("a5"), order  # first come, first served would put b0, b1 last
    assert sorted(order) == ["a0", "a1", "a2", "a3", "a4", "a5", "b0", "b1"]


def test_the_batch_whose_poll_must_end_first_goes_first():
    pool = CallPool(1)
    order, started, release = [], threading.Event(), threading.Event()

    def work(item):
        if item == "running":
            started.set()
            release.wait(5)
        order.append(item)

    now = time.monotonic()
    callers = [threading.Thread(target=pool.map, args=(work, ["running", "x"]))]
    try:
        callers[0].start()
        started.wait(5)
        for items, deadline in ((["sweep0", "sweep1"], now + 300), (["minute0", "minute1"], now + 30)):
            callers.append(threading.Thread(target=pool.map, args=(work, items, deadline)))
            callers[-1].start()
            wait_until(lambda: len(pool._waiting) == len(callers), 5, interval=0.005, what="the batches in line")
        release.set()
        for caller in callers:
            caller.join(10)
    finally:
        pool.close()
    # the batch without a deadline comes after both; the minute tier's before the sweep that came first
    assert order == ["running", "minute0", "minute1", "sweep0", "sweep1", "x"], order


def test_when_no_thread_can_start_the_work_runs_in_the_callers_thread(monkeypatch):
    def refuse(self):
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(threading.Thread, "start", refuse)
    pool = CallPool(2)
    callers = []
    assert pool.map(lambda n: callers.append(threading.current_thread()) or n * 3, [1, 2, 3]) == [3, 6, 9]
    assert set(callers) == {threading.current_thread()}
