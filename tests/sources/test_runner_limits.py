"""The runner's limits against real misbehaving tools: a 50 MiB answer (capped, memory bounded), helpers that
call setsid() to leave the process group, leftovers of a call that ended, and a runner killed with SIGKILL."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import psutil
import pytest

from npumon.config.errors import ConfigError
from npumon.settings import parse_config
from npumon.settings import Config
from npumon.sources.children import kill_orphaned_calls, set_call_owner
from npumon.sources.runner import MAX_OUTPUT_BYTES, CommandRunner

PY = sys.executable
MIB = 1024 * 1024
# Writes 50 MiB to stdout in 1 MiB pieces, as fast as the pipe takes them.
FLOOD = "import sys\nchunk = b'| 0 910B3 | OK | ' * (65536 // 16)\nfor _ in range(50 * 16):\n" \
        "    sys.stdout.buffer.write(chunk)\n"


def marked(marker: str):
    """Live processes with `marker` in their argv (zombies are dead: they hold no resources but a pid)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        if any(marker in part for part in proc.info["cmdline"] or []) and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(proc.pid)
    return found


def gone(marker: str, within: float = 5.0):
    """The processes with `marker` still alive after at most `within` seconds ([] once all are gone)."""
    deadline = time.monotonic() + within
    while marked(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    return marked(marker)


@pytest.fixture
def marker(request):
    name = "npumon-limits-{}-{}".format(os.getpid(), request.node.name)
    yield name
    for pid in marked(name):  # whatever a failing test left behind
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def test_the_default_cap_is_the_configs_and_a_tiny_one_is_refused():
    assert MAX_OUTPUT_BYTES == Config().npu_smi_max_output_bytes == 4 * MIB
    assert parse_config("npu_smi_max_output_bytes: 1048576\n").npu_smi_max_output_bytes == MIB
    with pytest.raises(ConfigError, match="npu_smi_max_output_bytes: must be at least 65536"):
        parse_config("npu_smi_max_output_bytes: 1000\n")


def test_an_answer_over_the_cap_fails_fast_with_the_reason(marker):
    runner = CommandRunner([PY, "-c", FLOOD, marker], timeout_seconds=30)
    started = time.monotonic()
    result = runner.run([], label="npu-smi")
    assert time.monotonic() - started < 5.0
    assert result.error == "output over 4194304 bytes: stopped reading, process group killed"
    assert result.describe_failure() == result.error
    assert (result.returncode, result.stdout, result.stderr, result.timed_out) == (None, "", "", False)
    assert gone(marker) == []
    stats = runner.stats.snapshot()["npu-smi"]
    assert (stats.calls, stats.failures, stats.timeouts) == (1, 1, 0)


def test_stdout_and_stderr_count_together_and_an_answer_within_the_cap_is_whole():
    half = "import sys; sys.stdout.write('o' * {0}); sys.stderr.write('e' * {0})"
    runner = CommandRunner([PY, "-c"], timeout_seconds=30, max_output_bytes=100000)
    assert runner.run([half.format(60000)]).error.startswith("output over 100000 bytes")
    result = runner.run([half.format(50000)])
    assert (result.error, result.returncode, len(result.stdout), len(result.stderr)) == (None, 0, 50000, 50000)


PEAK_RSS = textwrap.dedent("""\
    import resource, sys, threading
    from npumon.sources.runner import CommandRunner
    runner = CommandRunner([sys.executable, "-c", sys.argv[1], sys.argv[2]], timeout_seconds=60, max_concurrent=3)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    results = []
    calls = [threading.Thread(target=lambda: results.append(runner.run([]))) for _ in range(3)]
    for call in calls:
        call.start()
    for call in calls:
        call.join()
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(before, after, sorted(set(str(result.error) for result in results)))
    """)


def test_three_50_mib_answers_at_once_cost_a_bounded_amount_of_memory(marker):
    """Peak RSS of a process whose runner takes three 50 MiB answers at a time: without a cap it held them
    all (about 150 MiB of bytes alone, then their text)."""
    proc = subprocess.run([PY, "-c", PEAK_RSS, FLOOD, marker], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    before_kib, after_kib, errors = proc.stdout.split(" ", 2)
    grown_mib = (int(after_kib) - int(before_kib)) / 1024
    assert grown_mib < 3 * 4 * 2 + 16, grown_mib  # three capped buffers with room, not 150 MiB
    assert errors.strip() == "['output over 4194304 bytes: stopped reading, process group killed']"
    assert gone(marker) == []


# A tool that starts a helper which leaves its process group (setsid) and sleeps; the tool then hangs, or
# exits at once while the helper keeps the output pipes open.
SETSID_HELPER = textwrap.dedent("""\
    import os, sys, time
    if os.fork() == 0:
        os.setsid()
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", sys.argv[1] + "-helper"])
    if sys.argv[2] == "hang":
        time.sleep(120)
    """)


@pytest.mark.parametrize("tool", ["hang", "exit"])
def test_a_helper_that_left_the_process_group_is_killed_at_the_timeout(marker, tool):
    runner = CommandRunner([PY, "-c", SETSID_HELPER, marker, tool], timeout_seconds=1.0)
    started = time.monotonic()
    result = runner.run([])
    assert result.timed_out and time.monotonic() - started < 4.0
    assert gone(marker) == [], "left behind: {}".format(marked(marker))


DETACHED_HELPER = textwrap.dedent("""\
    import os, sys, time
    if os.fork() == 0:
        os.close(1); os.close(2)
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(120)", sys.argv[1] + "-helper"])
    print("answer")
    """)


def test_what_a_call_that_ended_left_in_its_process_group_is_killed(marker):
    runner = CommandRunner([PY, "-c", DETACHED_HELPER, marker], timeout_seconds=10)
    result = runner.run([])
    assert (result.returncode, result.stdout) == (0, "answer\n")
    assert gone(marker, within=2.0) == []


# A runner in a process of its own, killed with SIGKILL while its call hangs: the call runs on (nothing ends it
# with its runner outside systemd) until the next npumon kills what the dead one left.
KILLED_RUNNER = textwrap.dedent("""\
    import sys
    from npumon.sources.children import set_call_owner
    from npumon.sources.runner import CommandRunner
    set_call_owner(sys.argv[2])  # the instance keeping this state directory
    print("running", flush=True)
    CommandRunner([sys.executable, "-c", "import time; time.sleep(120)", sys.argv[1]], timeout_seconds=60).run([])
    """)


def test_the_calls_of_a_runner_killed_by_sigkill_are_killed_as_orphans(marker, tmp_path):
    state_dir = str(tmp_path / "state")
    set_call_owner(state_dir)  # this process plays the restarted instance of the same state directory
    parent = subprocess.Popen([PY, "-c", KILLED_RUNNER, marker, state_dir], stdout=subprocess.PIPE,
                              start_new_session=True)
    bystander = CommandRunner([PY, "-c", "import time; time.sleep(3)", marker + "-bystander"], timeout_seconds=10)
    running = threading.Thread(target=bystander.run, args=([],))  # a call of a live npumon: never an orphan
    try:
        assert parent.stdout.readline() == b"running\n"
        running.start()
        deadline = time.monotonic() + 10
        while len(marked(marker)) < 3 and time.monotonic() < deadline:  # the runner's process and both calls
            time.sleep(0.05)
        assert len(marked(marker)) == 3, "the calls never started"
        os.kill(parent.pid, signal.SIGKILL)  # the runner's process alone: its call has a session of its own
        parent.wait(5)
        orphans = [pid for pid in marked(marker) if pid not in marked(marker + "-bystander")]
        assert len(orphans) == 1
        set_call_owner(str(tmp_path / "another"))
        assert kill_orphaned_calls() == 0  # another instance (a second daemon, a test beside this one) leaves them
        set_call_owner(state_dir)
        assert kill_orphaned_calls() == 1
        deadline = time.monotonic() + 5
        while set(orphans) & set(marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not set(orphans) & set(marked(marker))
        assert marked(marker + "-bystander"), "the live runner's call was killed"
    finally:
        set_call_owner(None)
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)
        running.join(10)
        parent.stdout.close()
