"""The event history when its file fails: a corrupt file at start is moved aside, a failed write closes
the file and reopens it with backoff (the `events` source says so meanwhile), a sticky finding that fired
while the disk was broken survives a restart, and a file deleted or a directory replaced while running is
noticed and recreated with what it held. Real SQLite files, on the service's injectable clock."""

import logging
import os
import textwrap

import pytest

from failing_disk import FailingDisk
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.services.events.service import EventService
from npumon.services.events.store import FILE_NAME, EventStore
from test_events_service import RULES, Host, chip, keys

LOGGER = "npumon.services.events"


class ClockedHost(Host):
    """Host whose event service runs on the poll's clock (its reopen backoff too)."""

    def __init__(self, tmp_path, rules_file):
        self.offset = 0.0
        super().__init__(tmp_path, rules_file)

    def start(self):
        self.engine = RuleEngine(*load_rules([str(self.rules_file)], include_builtin=False))
        self.service = EventService(self.path, 86400, lambda: self.engine, clock=lambda: self.t0 + self.offset)

    def poll(self, offset, chips, **kwargs):
        self.offset = offset
        return super().poll(offset, chips, **kwargs)

    def findings_in_file(self):
        store = EventStore(self.path, readonly=True)
        try:
            return [(row.state, row.finding.rule, row.finding.subject) for row in store.finding_rows()]
        finally:
            store.close()


@pytest.fixture
def host(tmp_path):
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(textwrap.dedent(RULES), encoding="utf-8")
    made = []

    def make():
        made.append(ClockedHost(tmp_path, rules_file))
        return made[-1]

    yield make
    for item in made:
        item.stop()


def changes(caplog):
    """The history's log lines about its file (not the start-up summary)."""
    return [(record.levelname, record.getMessage()) for record in caplog.records
            if record.name.startswith(LOGGER) and record.levelno >= logging.INFO
            and "findings taken over" not in record.getMessage()]


def test_a_corrupt_history_at_start_is_moved_aside_and_a_new_one_started(host, tmp_path, caplog):
    state = tmp_path / "state"
    state.mkdir()
    (state / FILE_NAME).write_bytes(b"garbage" * 1000)
    caplog.set_level(logging.INFO)
    h = host()
    (moved,) = [name for name in os.listdir(str(state)) if name.startswith(FILE_NAME + ".corrupt-")]
    assert (state / moved).read_bytes() == b"garbage" * 1000
    assert changes(caplog) == [("ERROR", "event history {} is corrupt (file is not a database): moved it to {} and "
                                         "started a new one".format(h.path, state / moved))]
    status = h.poll(0, [chip(0)]).sources["events"]
    assert status.ok and status.error is None
    assert h.events() == [("chip_appeared", "npu0/chip0")]


def test_a_failed_write_reopens_with_backoff_and_a_sticky_finding_fired_meanwhile_survives(
        host, tmp_path, monkeypatch, caplog):
    disk = FailingDisk(tmp_path / "state").install(monkeypatch)
    caplog.set_level(logging.INFO)
    h = host()
    assert h.poll(0, [chip(0)]).sources["events"].ok
    disk.broken = True
    opened = disk.opened
    h.poll(15, [chip(0, "Critical")])  # the sticky `dead` fires as the write fails
    status = h.service.status()  # (a poll publishes the status from before its own write)
    assert not status.ok
    assert status.error.startswith("{}: cannot write the event history: disk I/O error (running without event "
                                   "history; retrying with backoff up to 60s)".format(h.path)), status.error
    for second in range(16, 200):  # 184 evaluations on a broken disk
        assert not h.poll(second, [chip(0, "Critical")]).sources["events"].ok
    # Backoff: tried at 16, 18, 22, 30, 46 and 78 s, then at most 60 s apart: 138 and 198 s; not at each poll.
    assert disk.opened - opened == 8
    disk.broken = False
    for second in range(200, 300):
        h.poll(second, [chip(0, "Critical")])
        if h.service.status().ok:
            break
    assert second == 258  # 60 s (the cap) after the try at 198 s
    assert h.findings_in_file() == [("active", "dead", "npu0/chip0")]  # memory written back into the file
    assert h.service.dropped() > 0  # the events of the broken spell are counted, not stored
    assert [level for level, _ in changes(caplog)] == ["ERROR", "INFO"], changes(caplog)
    assert changes(caplog)[1][1].startswith("event history: {} works again after 243s".format(h.path))
    h.restart()
    h.poll(400, [chip(0)])  # healthy again, but sticky: it stays until acknowledged
    assert keys(h.engine.active()) == [("dead", "npu0/chip0")]


@pytest.mark.parametrize("how", ["files deleted", "directory replaced"])
def test_a_history_deleted_while_running_is_noticed_and_recreated_with_what_it_held(host, tmp_path, caplog, how):
    caplog.set_level(logging.INFO)
    h = host()
    h.poll(0, [chip(0)])
    state = tmp_path / "state"
    if how == "files deleted":
        for name in os.listdir(str(state)):
            os.unlink(str(state / name))
    else:
        os.rename(str(state), str(state) + ".old")
        state.mkdir()
    status = h.poll(15, [chip(0, "Alarm", codes=["A1"])]).sources["events"]
    assert status.ok and os.path.exists(h.path)
    assert h.events() == [("chip_appeared", "npu0/chip0"), ("health_changed", "npu0/chip0"),
                          ("error_code_new", "npu0/chip0"), ("finding_fired", "npu0/chip0")]
    assert h.service.dropped() == 0
    lines = changes(caplog)
    assert [level for level, _ in lines] == ["ERROR", "INFO"], lines
    assert lines[0][1] == ("event history: {}: the file was deleted or replaced while in use (its content is copied "
                           "to a new file)".format(h.path))
