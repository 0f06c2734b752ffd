"""The outbox when its file fails: a corrupt file at start is moved aside, a disk I/O error while running
keeps notifications in memory (still sent, counted) until the file reopens by itself with backoff, and a
file deleted or a directory replaced while running is noticed and recreated with what it held. Real SQLite
files, a real HTTP receiver on 127.0.0.1, the controlled clock; each change of state logged once."""

import errno
import logging
import os
import shutil
import sqlite3
import subprocess

import pytest

from failing_disk import FailingDisk
from npumon.services.notify.outbox import OUTBOX_FILE, Outbox
from npumon.services.notify.receiver import Receiver
from npumon.services.notify.service import NotifyService
from recording_server import RecordingServer
from test_notify_delivery import T0, Harness, InlineExecutor, alerts_of, finding, harnesses, webhook

UP = ("npumon_notification_outbox_up", ())


class StateDirHarness(Harness):
    """Harness with the outbox in tmp_path/state, on the harness's clock (its reopen backoff too)."""

    def _start(self):
        self.state_dir = self.tmp_path / "state"
        receivers = {config.name: Receiver.from_config(config, index, "<test>")
                     for index, config in enumerate(self.notify.receivers)}
        outbox = Outbox(str(self.state_dir), self.notify.outbox_max_notifications, clock=self.clock)
        return NotifyService(self.notify, receivers, {}, outbox, self.rule_for, self.events, clock=self.clock,
                             executor=InlineExecutor())

    def file_rows(self):
        """What the outbox file on disk holds, read by a connection of its own."""
        with sqlite3.connect(str(self.state_dir / OUTBOX_FILE)) as db:
            return db.execute("SELECT receiver, status, state, json_extract(alert, '$.subject') FROM notifications "
                              "ORDER BY id").fetchall()


@pytest.fixture
def harness(tmp_path):
    yield from harnesses(tmp_path, StateDirHarness)


def problems(caplog):
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def storage_lines(caplog):
    return [(record.levelname, record.getMessage()) for record in caplog.records
            if record.getMessage().startswith("notification outbox") and record.levelno >= logging.INFO]


class Answers:
    """The receiver's answer, changed by the test."""

    def __init__(self, status=200):
        self.status = status

    def __call__(self, request):
        return self.status, {}, b"ok" if self.status == 200 else b"busy"


def test_a_corrupt_outbox_at_start_is_moved_aside_and_notifications_are_delivered(harness, tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    (state / OUTBOX_FILE).write_bytes(b"not sqlite " * 500)
    with RecordingServer() as server:
        h = harness(webhook(server))
        (moved,) = [name for name in os.listdir(str(state)) if name.startswith(OUTBOX_FILE + ".corrupt-")]
        assert (state / moved).read_bytes() == b"not sqlite " * 500  # kept for a look, not deleted
        assert problems(caplog) == ["notification outbox {} is corrupt (file is not a database): moved it to {} and "
                                    "started a new one".format(state / OUTBOX_FILE, state / moved)]
        assert h.metrics()[UP] == 1
        h.evaluate(finding())
        assert [alerts_of(request) for request in server.requests] == [[("health-alarm", "npu0/chip0", "firing")]]
    assert h.metrics()[UP] == 1
    assert h.file_rows() == []  # delivered, through the new file
    assert len(problems(caplog)) == 1


@pytest.mark.parametrize("reads_fail", [True, False], ids=["reads-and-writes-fail", "writes-fail"])
def test_a_disk_error_keeps_notifications_in_memory_until_the_outbox_reopens_with_backoff(
        harness, tmp_path, monkeypatch, caplog, reads_fail):
    disk = FailingDisk(tmp_path / "state", reads_fail=reads_fail).install(monkeypatch)
    answers = Answers()
    caplog.set_level(logging.INFO)
    with RecordingServer(answers) as server:
        h = harness(webhook(server, group_interval_seconds=1), retry_initial_seconds=1, retry_max_seconds=2)
        h.evaluate(finding(subject="npu0/chip0"))  # delivered from the file
        assert len(server.requests) == 1 and h.metrics()[UP] == 1
        disk.broken = True
        opened = disk.opened
        # While the disk fails: npu0 resolves, npu1 fires; the receiver is up at first, then busy.
        h.evaluate(finding(subject="npu1/chip0"), at=T0 + 10)
        assert [sorted(alerts_of(request)) for request in server.requests[1:]] == [
            [("health-alarm", "npu0/chip0", "resolved"), ("health-alarm", "npu1/chip0", "firing")]]  # from memory
        answers.status = 503
        h.evaluate(finding(subject="npu1/chip0"), finding(subject="npu2/chip0"), at=T0 + 20)
        for second in range(21, 101):  # 80 evaluations and ticks on a broken disk
            h.evaluate(finding(subject="npu1/chip0"), finding(subject="npu2/chip0"), at=T0 + second)
            h.tick(T0 + second)
        metrics = h.metrics()
        assert metrics[UP] == 0
        assert metrics[("npumon_notifications_unpersisted_total", (("receiver", "hook"),))] == 3
        assert metrics[("npumon_notification_outbox_length", (("receiver", "hook"),))] == 1  # npu2, waiting
        assert len(server.requests) > 3  # npu2 was tried from memory, and is retried
        # Reopened with backoff, not at each of the 80 ticks: failed at 10 s, tried at 20 (the next call after
        # 1 s), 22, 26, 34, 50 and 82 s; the next try is 60 s (the cap) later.
        assert disk.opened - opened == 6
        disk.broken = False
        for second in range(101, 170):
            h.tick(T0 + second)
            if h.metrics()[UP] == 1:
                break
        assert h.metrics()[UP] == 1 and second == 142
        # Saved to the file as soon as it works again: a crash now would lose nothing.
        assert h.file_rows() == [("hook", "firing", "pending", "npu2/chip0")]
        answers.status = 200
        h.tick(T0 + 200)
        assert sorted(alerts_of(server.requests[-1])) == [("health-alarm", "npu2/chip0", "firing")]
        assert h.file_rows() == []
        h.evaluate(finding(subject="npu2/chip0"), at=T0 + 210)  # npu1, which fired while on memory, resolves
        assert alerts_of(server.requests[-1]) == [("health-alarm", "npu1/chip0", "resolved")]
    assert h.file_rows() == []
    assert h.metrics()[("npumon_notification_outbox_length", (("receiver", "hook"),))] == 0
    outbox_events = [event for event in h.events.recorded if event[1] == "outbox"]
    assert [event[:2] + event[3:4] for event in outbox_events] == [("notification_failed", "outbox", "warning")]
    assert outbox_events[0][2].startswith("the notification outbox cannot be written: ")
    assert "disk I/O error (notifications are kept in memory" in outbox_events[0][2]
    lines = storage_lines(caplog)
    assert [level for level, _ in lines] == ["ERROR", "INFO"], lines  # one line per change of state
    assert lines[0][1] == ("notification outbox: cannot write {}: disk I/O error (notifications are kept in memory "
                           "and still sent; retrying with backoff up to 60s)".format(h.state_dir / OUTBOX_FILE))
    assert lines[1][1].startswith("notification outbox: {} works again after ".format(h.state_dir / OUTBOX_FILE))
    assert lines[1][1].endswith("; saved the 1 notification(s) kept in memory to it")


@pytest.mark.parametrize("reads_fail", [True, False], ids=["reads-and-writes-fail", "writes-fail"])
def test_what_waited_in_the_file_is_neither_lost_nor_doubled_by_a_disk_error(harness, tmp_path, monkeypatch,
                                                                             reads_fail):
    disk = FailingDisk(tmp_path / "state", reads_fail=reads_fail).install(monkeypatch)
    answers = Answers(503)
    with RecordingServer(answers) as server:
        h = harness(webhook(server), retry_initial_seconds=1, retry_max_seconds=1)
        h.evaluate(finding(subject="npu0/chip0"))  # waits in the file: the receiver is busy
        disk.broken = True
        h.evaluate(finding(subject="npu0/chip0"), finding(subject="npu1/chip0"), at=T0 + 5)
        disk.broken = False
        h.tick(T0 + 70)
        assert h.metrics()[UP] == 1
        assert [row[3] for row in h.file_rows()] == ["npu0/chip0", "npu1/chip0"]
        answers.status = 200
        h.tick(T0 + 80)
        assert sorted(alerts_of(server.requests[-1])) == [("health-alarm", "npu0/chip0", "firing"),
                                                          ("health-alarm", "npu1/chip0", "firing")]
    assert h.file_rows() == []


@pytest.mark.parametrize("how", ["files deleted", "directory replaced"])
def test_an_outbox_deleted_while_running_is_noticed_and_recreated_with_what_it_held(harness, caplog, how):
    answers = Answers(503)
    caplog.set_level(logging.INFO)
    with RecordingServer(answers) as server:
        h = harness(webhook(server), retry_initial_seconds=1, retry_max_seconds=1)
        h.evaluate(finding())
        assert h.file_rows() == [("hook", "firing", "pending", "npu0/chip0")]
        path = h.state_dir / OUTBOX_FILE
        if how == "files deleted":
            for name in os.listdir(str(h.state_dir)):
                os.unlink(str(h.state_dir / name))
        else:
            os.rename(str(h.state_dir), str(h.state_dir) + ".old")
            h.state_dir.mkdir()
        h.tick(T0 + 5)
        assert path.exists() and h.file_rows() == [("hook", "firing", "pending", "npu0/chip0")]
        h.evaluate(finding(), finding(subject="npu1/chip0"), at=T0 + 6)  # written to the new file
        assert [row[3] for row in h.file_rows()] == ["npu0/chip0", "npu1/chip0"]
        assert h.metrics()[UP] == 1
        answers.status = 200
        h.tick(T0 + 10)
        assert sorted(alerts_of(server.requests[-1])) == [("health-alarm", "npu0/chip0", "firing"),
                                                          ("health-alarm", "npu1/chip0", "firing")]
    assert h.file_rows() == []
    lines = storage_lines(caplog)
    assert [level for level, _ in lines] == ["ERROR", "INFO"], lines
    assert lines[0][1].startswith("notification outbox: {} was deleted or replaced while in use".format(path))


@pytest.fixture
def small_filesystem(tmp_path):
    """tmp_path/state on a 1 MiB tmpfs of its own (root only; skipped where mounting is not allowed)."""
    state = tmp_path / "state"
    state.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(state)],
                             capture_output=True, timeout=10)
    if mounted.returncode != 0:
        pytest.skip("cannot mount a tmpfs here: {}".format(mounted.stderr.decode(errors="replace").strip()))
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], capture_output=True, timeout=10)


def fill(directory):
    """Write a file until the filesystem is full (at most its 1 MiB); returns the file."""
    filler = directory / "filler"
    descriptor = os.open(str(filler), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for _ in range(2048):
            os.write(descriptor, b"\0" * 4096)
        raise AssertionError("the filesystem did not fill up")
    except OSError as exc:
        assert exc.errno == errno.ENOSPC
    finally:
        os.close(descriptor)
    return filler


@pytest.mark.integration
def test_a_full_filesystem_keeps_notifications_in_memory_until_there_is_room_again(small_filesystem, harness, caplog):
    answers = Answers(503)
    with RecordingServer(answers) as server:
        h = harness(webhook(server, group_interval_seconds=1), retry_initial_seconds=1, retry_max_seconds=1)
        h.evaluate(finding(subject="npu0/chip0"))
        assert h.file_rows() == [("hook", "firing", "pending", "npu0/chip0")]
        filler = fill(small_filesystem)
        h.evaluate(finding(subject="npu0/chip0"), finding(subject="npu1/chip0"), at=T0 + 5)
        metrics = h.metrics()
        assert metrics[UP] == 0
        assert metrics[("npumon_notifications_unpersisted_total", (("receiver", "hook"),))] == 1
        assert metrics[("npumon_notification_outbox_length", (("receiver", "hook"),))] == 2
        assert "database or disk is full" in problems(caplog)[-1]
        tried = len(server.requests)
        h.tick(T0 + 7)
        assert len(server.requests) > tried  # npu1 is tried from memory too
        filler.unlink()
        for second in range(8, 80):
            h.tick(T0 + second)
            if h.metrics()[UP] == 1:
                break
        assert h.metrics()[UP] == 1
        assert [row[3] for row in h.file_rows()] == ["npu0/chip0", "npu1/chip0"]
        answers.status = 200
        h.tick(T0 + 100)
        assert sorted(alerts_of(server.requests[-1])) == [("health-alarm", "npu0/chip0", "firing"),
                                                          ("health-alarm", "npu1/chip0", "firing")]
    assert h.file_rows() == []
