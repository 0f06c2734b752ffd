"""`npumon run` as a real process against a misbehaving npu-smi (a real executable): a 50 MiB main table, a
table with one corrupt row, and `kill -9` of the daemon while npu-smi hangs."""

import os
import signal
import time

import psutil
import pytest

from daemon_harness import DaemonProcess, sample, wait_until
from npu_smi_fakes import FakeNpuSmi, peak_rss_bytes

MIB = 1024 * 1024


@pytest.fixture
def fake(tmp_path):
    npu_smi = FakeNpuSmi(str(tmp_path / "bin"))
    yield npu_smi
    npu_smi.kill_all()


@pytest.fixture
def daemon(tmp_path, fake):
    started = []

    def start(timeout=5.0):
        process = DaemonProcess(["--config", fake.config(str(tmp_path), timeout=timeout), "--listen", "127.0.0.1:0"])
        started.append(process)
        process.wait_serving()
        return process

    yield start
    for process in started:
        process.close()


def hung_calls(fake):
    """The fake's calls that hang: `info` and `info -m` (a `-t` query answers "not supported" at once, so one
    caught running is about to end by itself)."""
    calls = []
    for pid in fake.processes():
        try:
            if "-t" not in psutil.Process(pid).cmdline():
                calls.append(pid)
        except psutil.NoSuchProcess:
            pass
    return calls


def metric(process, name, **labels):
    return sample(process.get("/metrics").text, name, **labels)


@pytest.mark.integration
def test_a_50_mib_table_fails_fast_memory_stays_bounded_and_the_daemon_keeps_serving(daemon, fake):
    process = daemon()
    wait_until(lambda: metric(process, "npumon_source_up", source="npu-smi") == 1, 15, what="the first table")
    fake.behave("flood")
    wait_until(lambda: process.get("/status").json()["sources"]["npu-smi"]["error"] ==
               "output over 4194304 bytes: stopped reading, process group killed", 15, what="the capped call")
    calls = metric(process, "npumon_source_calls_total", source="npu-smi")
    wait_until(lambda: metric(process, "npumon_source_calls_total", source="npu-smi") >= calls + 5, 20,
               what="five more 50 MiB answers")
    assert metric(process, "npumon_chip_temperature_celsius", npu="7", chip="0") == 59  # the last good table
    peak = peak_rss_bytes(process.proc.pid)
    # The red-team daemon held 4.6 x 50 MiB and died under MemoryMax=256M; capped, it stays far below.
    assert peak < 128 * MIB, "peak RSS {:.0f} MiB".format(peak / MIB)
    fake.behave("answer")
    wait_until(lambda: process.get("/status").json()["sources"]["npu-smi"]["error"] is None, 15, what="recovery")
    recovered = time.time()
    assert process.proc.poll() is None and process.get("/healthz").status_code == 200
    # no flooding call is left behind; the daemon's calls since (one every 0.3 s, each a Python start that a
    # loaded machine may stretch past 0.3 s) may still be running
    assert fake.wait_gone(5, started_before=recovered) == []


@pytest.mark.integration
def test_a_corrupt_row_drops_one_chip_and_the_table_is_degraded(daemon, fake, tmp_path):
    info = tmp_path / "bin" / "info.txt"
    info.write_text(info.read_text().replace("| 3     910B3               | OK            | 108.7 ",
                                             "| 3     910B3               | OK            | 1#8.7 "))
    process = daemon()
    status = wait_until(lambda: (lambda doc: doc if doc["chips"] else None)(process.get("/status").json()), 15,
                        what="chips served")
    table = status["sources"]["npu-smi"]
    assert table["ok"] is True and table["degraded"] is True
    assert table["error"].startswith("degraded: 1 unreadable row(s) left out, 7 chips read; npu 3: ")
    assert sorted(chip["npu"] for chip in status["chips"]) == [0, 1, 2, 4, 5, 6, 7]
    assert metric(process, "npumon_source_up", source="npu-smi") == 1
    assert metric(process, "npumon_source_degraded", source="npu-smi") == 1
    assert metric(process, "npumon_chip_temperature_celsius", npu="3", chip="0") is None


@pytest.mark.integration
def test_the_next_start_kills_the_hung_npu_smi_a_kill_9_left(daemon, fake):
    fake.behave("hang")
    process = daemon(timeout=60)
    wait_until(lambda: hung_calls(fake), 15, what="a hanging npu-smi call")
    os.kill(process.proc.pid, signal.SIGKILL)  # the daemon alone; each npu-smi call has a session of its own
    process.proc.wait(5)
    left = hung_calls(fake)
    assert left  # nothing outside systemd ends them with the daemon: under systemd, KillMode=mixed does
    # (the fake stays in "hang": a call caught before it read its mode must not end by reading another)
    restarted = daemon(timeout=60)
    # logged at start, after the interpreter's imports: allow for a machine as busy as the suite's two workers
    restarted.wait_for_line(r"killed {} process\(es\) left running by the calls of an npumon that was killed"
                            .format(len(left)), timeout=30)
    wait_until(lambda: not set(left) & set(fake.processes()), 5, what="the calls the killed daemon left, gone")
