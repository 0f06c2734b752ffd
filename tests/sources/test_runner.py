"""The subprocess runner: deadlines, process-group kill, reaping, the concurrency bound; an injected spawn."""

import os
import sys
import threading
import time
import tracemalloc

import psutil

from daemon_harness import wait_until
from npumon.sources.runner import BINARY_OUTPUT, READ_CHUNK_BYTES, CommandResult, CommandRunner, Slots

PY = sys.executable


def _children_alive(marker: str):
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = proc.info["cmdline"] or []
        if any(marker in part for part in cmdline) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


def test_captures_stdout_stderr_and_status():
    runner = CommandRunner([PY, "-c"], timeout_seconds=10)
    result = runner.run(["import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"])
    assert result.stdout == "out\n"
    assert result.stderr == "err\n"
    assert result.returncode == 3
    assert not result.timed_out
    assert result.describe_failure() == "exit status 3: err"


def test_missing_executable_is_an_error_not_an_exception():
    runner = CommandRunner(["/nonexistent/npu-smi"], timeout_seconds=1)
    result = runner.run(["info"])
    assert result.returncode is None
    assert "cannot run /nonexistent/npu-smi" in result.error


def test_timeout_kills_the_whole_process_group_and_reaps_it():
    marker = "npumon-runner-test-{}".format(os.getpid())
    # The tool starts a grandchild and both hang: killing only the direct child would leave an orphan.
    script = ("import subprocess, sys, time; "
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{0}']); "
              "time.sleep(300)").format(marker)
    runner = CommandRunner([PY, "-c", script, marker], timeout_seconds=0.5)
    started = time.monotonic()
    result = runner.run([])
    elapsed = time.monotonic() - started
    assert result.timed_out
    assert result.returncode is None
    assert elapsed < 3.0
    assert "timed out" in result.describe_failure()
    deadline = time.monotonic() + 3
    while _children_alive(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _children_alive(marker) == []


def test_the_deadline_covers_the_call_not_the_wait_for_a_slot():
    runner = CommandRunner([PY, "-c", "import time; time.sleep(1.0)"], timeout_seconds=5, max_concurrent=1)
    results = []
    first = threading.Thread(target=lambda: results.append(runner.run([], label="a")))
    first.start()
    time.sleep(0.3)
    queued = runner.run([], timeout_seconds=2.0, label="b")  # waits ~0.7 s for the slot, then runs its full 1 s
    first.join()
    assert results[0].returncode == 0 and queued.returncode == 0 and not queued.timed_out
    assert 0.4 < queued.queue_seconds < 2.0 and queued.duration_seconds < 2.0
    stats = runner.stats.snapshot()
    assert (stats["b"].calls, stats["b"].failures, stats["b"].not_started) == (1, 0, 0)
    assert stats["b"].queue_seconds == queued.queue_seconds


def test_a_call_waits_for_a_slot_only_until_the_callers_budget_ends():
    runner = CommandRunner([PY, "-c", "import time; time.sleep(1.0)"], timeout_seconds=5, max_concurrent=1)
    first = threading.Thread(target=runner.run, args=([],))
    first.start()
    time.sleep(0.3)
    queued = runner.run([], not_after=time.monotonic() + 0.2, label="q")  # the only slot is busy ~0.7 s more
    first.join()
    assert not queued.started and not queued.timed_out and "no free npu-smi slot" in queued.error
    assert runner.stats.snapshot()["q"].not_started == 1


def test_a_caller_gets_its_slot_in_turn_not_after_a_stream_of_calls_that_began_before():
    order = []

    def spawn(argv, env, timeout_seconds):
        order.append(argv[-1])
        time.sleep(0.01)
        return CommandResult(list(argv), 0, "", "", 0.01)

    runner = CommandRunner(["npu-smi"], timeout_seconds=5, max_concurrent=1, spawn=spawn)
    streaming = threading.Event()

    def stream():  # one tier's calls, back to back, each taking the slot again as soon as it gave it back
        for index in range(30):
            runner.run([str(index)])
            streaming.set()

    streamer = threading.Thread(target=stream)
    streamer.start()
    streaming.wait(5)
    single = runner.run(["single"])
    streamer.join()
    assert single.started
    assert order.index("single") <= order.index("1") + 3, order  # a plain semaphore let the stream go first


def test_a_slot_waiter_whose_time_runs_out_lets_the_next_in_line_go():
    slots = Slots(1)
    assert slots.acquire(0)
    got = []
    impatient = threading.Thread(target=lambda: got.append(("impatient", slots.acquire(0.1))))
    impatient.start()
    time.sleep(0.02)  # first in line
    patient = threading.Thread(target=lambda: got.append(("patient", slots.acquire(5))))
    patient.start()
    impatient.join(5)
    assert got == [("impatient", False)]  # gave up; the slot is still taken
    slots.release()
    patient.join(5)
    assert got == [("impatient", False), ("patient", True)]


def test_slots_go_to_the_earliest_deadline_first_then_in_the_order_asked():
    # a sweep with minutes to spare held a slot for each of its calls while a minute tier's calls waited
    slots = Slots(1)
    assert slots.acquire(0)
    order = []

    def ask(name, deadline):
        assert slots.acquire(5, deadline=deadline)
        order.append(name)
        slots.release()

    waiters = []
    for name, deadline in (("no deadline", None), ("sweep", 500.0), ("minute tier", 30.0),
                           ("second sweep", 500.0)):
        waiter = threading.Thread(target=ask, args=(name, deadline))
        waiter.start()
        waiters.append(waiter)
        wait_until(lambda: len(slots._waiting) == len(waiters), 5, interval=0.005, what="the waiters in line")
    slots.release()
    for waiter in waiters:
        waiter.join(5)
    assert order == ["minute tier", "sweep", "second sweep", "no deadline"]


def test_a_call_that_closed_its_output_is_waited_for_until_it_exits_or_its_deadline():
    closes_then_exits = CommandRunner(["/bin/sh", "-c", "exec >&- 2>&-; sleep 0.3; exit 3"], timeout_seconds=5)
    result = closes_then_exits.run([])
    assert (result.returncode, result.timed_out) == (3, False)  # its own status, once it exited
    closes_then_hangs = CommandRunner(["/bin/sh", "-c", "exec >&- 2>&-; sleep 30"], timeout_seconds=0.5)
    started = time.monotonic()
    result = closes_then_hangs.run([])
    assert result.timed_out and time.monotonic() - started < 3


def test_a_budget_cuts_a_running_call_off():
    runner = CommandRunner([PY, "-c", "import time; time.sleep(5)"], timeout_seconds=10)
    started = time.monotonic()
    result = runner.run([], not_after=time.monotonic() + 0.5, label="slow")
    assert result.timed_out and time.monotonic() - started < 3
    stats = runner.stats.snapshot()["slow"]
    assert (stats.calls, stats.failures, stats.timeouts) == (1, 1, 1)


def test_a_stray_undecodable_byte_after_the_first_chunk_of_text_is_replaced():
    # os.read takes at most one chunk: the first is clean text, whatever the timing
    runner = CommandRunner([PY, "-c", "import sys; sys.stdout.buffer.write(b'x' * {} + b'\\xff ok')".format(
        READ_CHUNK_BYTES)], timeout_seconds=5)
    result = runner.run([])
    assert result.error is None and result.stdout.endswith("x\ufffd ok")


# -- output that is not text ------------------------------------------------------------------------------

def _writer(data_expression: str) -> CommandRunner:
    return CommandRunner([PY, "-c", "import os, sys; sys.stdout.buffer.write({})".format(data_expression)],
                         timeout_seconds=10)


def test_binary_output_is_refused_as_it_comes_with_one_line():
    started = time.monotonic()
    result = _writer("os.urandom(4 * 1024 * 1024 - 1)").run([])
    assert (result.error, result.stdout, result.stderr, result.returncode) == (BINARY_OUTPUT, "", "", None)
    assert "\n" not in result.describe_failure() and time.monotonic() - started < 5


def test_a_first_chunk_that_is_not_utf8_is_binary():
    assert _writer("b'\\xff\\xfe ok'").run([]).error == BINARY_OUTPUT


def test_a_nul_byte_after_the_first_chunk_is_binary_too():
    assert _writer("b'a' * {} + b'\\0 tail'".format(3 * READ_CHUNK_BYTES)).run([]).error == BINARY_OUTPUT


def test_utf8_cut_at_the_end_of_the_first_chunk_is_text():
    # a 3-byte character across the first chunk's end: not an undecodable byte
    result = _writer("b'a' * {} + '\u00e9\u4e2d'.encode() * 10".format(READ_CHUNK_BYTES - 4)).run([])
    assert result.error is None and result.stdout.endswith("\u00e9\u4e2d")


def test_a_spawned_answer_that_is_not_text_is_refused_alike():
    runner = CommandRunner(["npu-smi"], timeout_seconds=5,
                           spawn=lambda argv, env, timeout: CommandResult(argv, 0, "ok\x00\x01garbage", "", 0.01))
    result = runner.run(["info"])
    assert (result.error, result.stdout, result.returncode) == (BINARY_OUTPUT, "", None)


def test_a_text_answer_is_held_at_most_about_twice_its_size():
    size = 4 * 1024 * 1024 - 1
    runner = _writer("(b'link up count: 1234567890' + b'x' * 74 + b'\\n') * {} ".format(size // 100))
    tracemalloc.start()
    try:
        result = runner.run([])
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(result.stdout) == size // 100 * 100
    assert peak < 2.3 * size, "peak {:.1f} x the answer".format(peak / size)


def test_a_failure_names_the_first_line_bounded_without_its_blanks():
    result = CommandResult(["tool"], 2, "x" * 1000 + "\n" * 10, "\n  \n  first problem  \nsecond\n", 0.1)
    assert result.describe_failure() == "exit status 2: first problem"
    result = CommandResult(["tool"], 2, "y" * 1000 + "\nsecond", " \n", 0.1)
    assert result.describe_failure() == "exit status 2: " + "y" * 200


# -- an injected spawn in place of the subprocess ----------------------------------------------------------

def test_a_spawn_runs_each_call_with_the_child_environment_and_the_time_left(monkeypatch):
    monkeypatch.setenv("NOTIFY_SOCKET", "@npumon-test")
    calls = []

    def spawn(argv, env, timeout_seconds):
        calls.append((argv, env, timeout_seconds))
        return CommandResult(argv, 0, "answer\n", "", 0.25)

    runner = CommandRunner(["npu-smi"], timeout_seconds=7, env={"EXTRA": "1"}, spawn=spawn)
    result = runner.run(["info"])
    assert (result.stdout, result.returncode, result.timed_out) == ("answer\n", 0, False)
    assert 0.25 <= result.duration_seconds < 1.0  # the spawn's own time, plus the wait for a slot
    (argv, env, timeout_seconds), = calls
    assert argv == ["npu-smi", "info"] and env["EXTRA"] == "1" and "NOTIFY_SOCKET" not in env
    assert 6.0 < timeout_seconds <= 7
    runner.run(["info"], timeout_seconds=2)
    assert calls[-1][2] <= 2


def test_a_spawn_keeps_the_slots_and_the_shutdown_refusal():
    release = threading.Event()
    running = []

    def spawn(argv, env, timeout_seconds):
        running.append(argv)
        release.wait(5)
        return CommandResult(argv, 0, "", "", 0.0)

    runner = CommandRunner(["npu-smi"], timeout_seconds=5, max_concurrent=1, spawn=spawn)
    first = threading.Thread(target=runner.run, args=(["info"],))
    first.start()
    while not running:
        time.sleep(0.01)
    queued = runner.run(["info"], not_after=time.monotonic() + 0.2)  # the only slot is taken
    assert "no free npu-smi slot" in queued.error and not queued.started
    release.set()
    first.join(5)
    runner.terminate_all()
    refused = runner.run(["info"])
    assert not refused.started and "shutting down" in refused.error
    assert len(running) == 1


def test_calls_ended_by_npumon_s_own_stop_are_marked_stopped_and_not_counted_as_failures():
    runner = CommandRunner([PY, "-c"], timeout_seconds=30, max_concurrent=1)
    results = {}

    def run(name, code):
        results[name] = runner.run([code], label="tier")

    running = threading.Thread(target=run, args=("running", "import time; print('half', flush=True); time.sleep(30)"))
    running.start()
    while not runner._live:  # the call is under way
        time.sleep(0.01)
    queued = threading.Thread(target=run, args=("queued", "print('never')"))  # waits for the only slot
    queued.start()
    time.sleep(0.2)
    runner.terminate_all()
    running.join(10)
    queued.join(10)
    results["after"] = runner.run(["print('never')"], label="tier")
    killed = results["running"]
    assert killed.stopped and killed.started and killed.stdout == "" and not killed.timed_out
    assert killed.describe_failure() == "stopped by npumon's own stop or reload"
    for name in ("queued", "after"):
        assert results[name].stopped and not results[name].started, name
        assert results[name].describe_failure() == "not run: npumon is shutting down"
    stats = runner.stats.snapshot()["tier"]
    assert (stats.calls, stats.failures, stats.not_started) == (0, 0, 0)
    # a call that ended on its own before the stop is what it was
    plain = CommandRunner([PY, "-c"], timeout_seconds=5)
    assert not plain.run(["import sys; sys.exit(3)"]).stopped
