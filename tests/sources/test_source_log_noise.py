"""A source that fails the same unexpected way on every poll: one line for the operator (no traceback; that
goes to DEBUG), then one per 10 minutes with a count, from the source's own poll and from the net below it."""

import logging

from npumon.sources import collection
from npumon.sources.base import SingleTierSource


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class BrokenSource(SingleTierSource[int]):
    """A source with a bug: every read raises something that is not a SourceError."""

    name = "broken"

    def read(self, chips):
        raise KeyError("npu 3")


def test_a_bug_in_read_logs_one_line_per_interval_and_its_traceback_only_at_debug(caplog):
    clock = Clock()
    source = BrokenSource(interval=15.0, max_age=60.0, clock=clock)
    with caplog.at_level(logging.INFO):
        for _ in range(41):  # a poll every 15 s for ten minutes
            source.poll("broken", [])
            clock.now += 15.0
    lines = [(record.levelname, record.getMessage(), record.exc_info) for record in caplog.records]
    assert lines == [("ERROR", "source broken failed: internal error: KeyError: 'npu 3'", None),
                     ("ERROR", "source broken failed: internal error: KeyError: 'npu 3' (repeated 39 times in the "
                               "last 10 min)", None)]
    assert source.statuses(clock.now)["broken"].error == "internal error: 'npu 3'"  # every poll still says so
    caplog.clear()
    source.repeats.clear("KeyError")
    with caplog.at_level(logging.DEBUG, logger=__name__):
        source.poll("broken", [])
    assert [record.levelname for record in caplog.records] == ["ERROR", "DEBUG"]
    assert caplog.records[1].exc_info[0] is KeyError  # where it failed, for whoever turns debug on


def test_the_net_below_the_sources_logs_one_line_per_cause_without_a_traceback(caplog):
    def contribute():
        raise ValueError("bad part")

    with caplog.at_level(logging.INFO, logger=collection.log.name):
        for _ in range(5):
            assert collection._guarded("lost-source", contribute) is None
    lines = [(record.levelname, record.getMessage(), record.exc_info) for record in caplog.records]
    assert lines == [("ERROR", "source lost-source failed: ValueError: bad part", None)]
