"""A failing disk under the state directory: the kernel-log source says it cannot save where it stopped once,
then once per 10 minutes with a count, and again at once after saving worked in between."""

import logging

from npumon.faults.patterns import load_patterns
from npumon.model import ChipSample
from npumon.sources.kmsg.config import FaultsConfig
from npumon.sources.kmsg.reader import KmsgDevice
from npumon.sources.kmsg.source import KmsgSource
from npumon.sources.kmsg.state import CURSOR_FILE

from test_kmsg_source import FakeRing, boot_root

CHIPS = [ChipSample(npu=0, chip=0, device_id=0)]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def messages(caplog):
    return [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]


def test_a_cursor_that_cannot_be_saved_is_one_line_per_interval_not_per_poll(tmp_path, caplog):
    ring, clock = FakeRing(), Clock()
    ring.add(1, "Booting")
    device = KmsgDevice("/dev/kmsg", open_fd=ring.open, read_fd=ring.read, close_fd=lambda fd: None)
    state = tmp_path / "state"
    source = KmsgSource(FaultsConfig(kmsg=True), boot_root(tmp_path), str(state), load_patterns(), clock=clock,
                        device=device)
    (state / CURSOR_FILE).mkdir(parents=True)  # the rename onto it fails on every poll, like a failing disk
    with caplog.at_level(logging.WARNING):
        for _ in range(60):  # a poll every 10 s for ten minutes
            source.poll("kmsg", CHIPS)
            clock.now += 10.0
        source.poll("kmsg", CHIPS)
    lines = messages(caplog)
    assert len(lines) == 2, lines
    assert lines[0].startswith("kmsg: cannot save where it stopped: ") and CURSOR_FILE in lines[0]
    assert lines[1].endswith("(repeated 59 times in the last 10 min)")
    caplog.clear()
    (state / CURSOR_FILE).rmdir()  # the disk works again
    with caplog.at_level(logging.WARNING):
        source.poll("kmsg", CHIPS)
        (state / CURSOR_FILE).unlink()
        (state / CURSOR_FILE).mkdir()  # and fails again: news, logged at once
        source.poll("kmsg", CHIPS)
    assert len(messages(caplog)) == 1 and "repeated" not in messages(caplog)[0]
