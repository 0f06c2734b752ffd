"""The scheduler's threads: as many as there are jobs to share the default pool, so none waits for a thread and
none is kept for a job that does not exist; the tiers that wait for npu-smi slots on one thread more than the
slots."""

import threading
import time

import pytest

from daemon_harness import wait_until
from npumon.daemon.jobs import Jobs


def test_the_shared_pool_has_a_thread_per_job_and_grows_with_a_reload_that_adds_jobs():
    jobs = Jobs()
    for n in range(5):
        jobs.add("tier-{}".format(n), 60, lambda: None)
    jobs.add("table", 60, lambda: None, executor="primary")  # has a thread of its own
    assert jobs.shared_threads == 5
    jobs.remove_all()
    for n in range(7):
        jobs.add("tier-{}".format(n), 60, lambda: None)
    assert jobs.shared_threads == 7


def test_every_job_runs_at_once_on_no_more_threads_than_there_are_jobs():
    jobs = Jobs()
    release, lock = threading.Event(), threading.Lock()
    running = set()

    def job(name):
        with lock:
            running.add(name)
        release.wait(10)

    before = threading.active_count()
    for n in range(6):
        jobs.add("tier-{}".format(n), 60, job, n, first=0.0)
    jobs.start()
    try:
        deadline = time.monotonic() + 10
        while len(running) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert running == set(range(6))  # none waited for a thread
        assert threading.active_count() <= before + 6 + 1  # the jobs' threads and the scheduler's own
    finally:
        release.set()
        jobs.shutdown()
        jobs.wait_for_running(time.monotonic() + 10)


def test_background_sweeps_run_one_at_a_time_beside_the_call_tiers():
    # on an A3 at real npu-smi speed three link sweeps at once held both slots and every call thread, and the
    # health and power tiers went stale behind them
    jobs = Jobs()
    jobs.fit_calls(2)
    lock = threading.Lock()
    running = {"background": 0, "calls": 0}
    most = {"background": 0, "calls": 0}
    ran = []

    def job(executor, name):
        with lock:
            running[executor] += 1
            most[executor] = max(most[executor], running[executor])
            overlapped = running["background"] > 0 and executor == "calls"
        time.sleep(0.3)
        with lock:
            running[executor] -= 1
            ran.append((name, overlapped))

    for n in range(3):
        jobs.add("npu-smi:sweep{}".format(n), 60, job, "background", n, executor="background", first=0.0)
    jobs.add("npu-smi:health", 60, job, "calls", "health", executor="calls", first=0.1)
    jobs.start()
    try:
        deadline = time.monotonic() + 10
        while len(ran) < 4 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(ran) == 4 and most["background"] == 1, (ran, most)
        assert ("health", True) in ran  # it ran while a sweep did, not after them
    finally:
        jobs.shutdown()
        jobs.wait_for_running(time.monotonic() + 10)


def test_a_tier_waiting_for_a_call_thread_goes_before_tiers_polled_less_often():
    # at start on a busy A3 the usages tier (every 30 s) waited in line behind tiers of every few minutes
    jobs = Jobs()
    jobs.fit_calls(0)  # one thread
    order, release, busy = [], threading.Event(), threading.Event()

    def job(name):
        if name == "running":
            busy.set()
            release.wait(5)
        order.append(name)

    jobs.add("npu-smi:running", 60, job, "running", executor="calls", first=0.0)
    jobs.start()
    try:
        busy.wait(5)
        for name, interval in (("hourly", 3600), ("every 5 min", 300), ("every 30 s", 30)):
            jobs.add("npu-smi:" + name, interval, job, name, executor="calls", first=0.0)
        wait_until(lambda: len(jobs._call_threads._waiting) == 3, 5, interval=0.005, what="the tiers in line")
        release.set()
        wait_until(lambda: len(order) == 4, 5, interval=0.005, what="the tiers run")
    finally:
        jobs.shutdown()
        jobs.wait_for_running(time.monotonic() + 10)
    assert order == ["running", "every 30 s", "every 5 min", "hourly"]


def test_the_tiers_that_wait_for_call_slots_run_one_more_at_a_time_than_there_are_slots():
    jobs = Jobs()
    jobs.fit_calls(2)
    lock = threading.Lock()
    running, ran, most = set(), set(), [0]

    def job(name):
        with lock:
            running.add(name)
            most[0] = max(most[0], len(running))
        time.sleep(0.3)
        with lock:
            running.discard(name)
            ran.add(name)

    for n in range(6):
        jobs.add("npu-smi:{}".format(n), 60, job, n, executor="calls", first=0.0)
    jobs.start()
    try:
        deadline = time.monotonic() + 10
        while len(ran) < 6 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ran == set(range(6))  # each ran, once a thread was free
        assert most[0] == 3
    finally:
        jobs.shutdown()
        jobs.wait_for_running(time.monotonic() + 10)


def test_the_daemon_runs_minute_tiers_on_the_call_threads_and_slower_ones_on_one_more(tmp_path):
    from npumon.settings import parse_config
    from npumon.daemon.daemon import Daemon
    from npumon.sim import prepare_simulation
    from npumon.sim.target import simulated_target

    simulation = prepare_simulation(str(tmp_path / "sim"), "healthy", product="atlas-a3")
    config = parse_config("state_dir: {}\nprobe: {{enabled: true}}\nnetwork: {{enabled: true}}\n".format(
        tmp_path / "state"))
    daemon = Daemon(config, simulated_target(simulation), listen="127.0.0.1:0")
    daemon.start()
    try:
        executors = {job.id: job.executor for job in daemon.scheduler.get_jobs()}
    finally:
        daemon.stop()
    assert executors["npu-smi"] == "primary"
    assert {executors[tier] for tier in ("npu-smi:usages", "npu-smi:health", "hccn", "hccn:stat")} == {"calls"}
    assert executors["probe"] == executors["host"] == "default"  # calls of their own, no npu-smi slot
    # the sweeps of what hardly changes, and every slower tier, queue on one thread of their own instead of
    # holding the threads the minute tiers need
    assert {executors[tier] for tier in ("npu-smi:identity", "npu-smi:hccs", "npu-smi:hccs_bw", "npu-smi:sio",
                                         "npu-smi:ecc", "hccn:optical", "hccn:bandwidth", "hccn:config")} \
        == {"background"}


def test_minute_tiers_start_within_10_s_and_slow_sweeps_over_their_start_window():
    """On a 16-chip A3 over npu-smi the first polls of every tier are minutes of call-slot time: the sweeps of
    what changes slowly start later, so that the minute tiers (usages, health) are not stuck behind them."""
    from npumon.daemon.daemon import START_WINDOW_SECONDS, first_run_delay
    for interval in (15, 30, 60):
        assert 0.1 * min(interval, 10) <= first_run_delay(interval, 0.0) < first_run_delay(interval, 0.999) <= 10
    assert first_run_delay(120, 0.999) == pytest.approx(60 * 0.9991)  # half the interval
    for interval in (300, 600, 3600):
        assert first_run_delay(interval, 0.0) == pytest.approx(0.1 * START_WINDOW_SECONDS)
        assert first_run_delay(interval, 0.999) <= START_WINDOW_SECONDS
