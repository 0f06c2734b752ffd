"""One line per problem, not per poll: Repeats on a fake clock."""

import logging

from npumon.logrepeat import Repeats

log = logging.getLogger("npumon.test.logrepeat")


class Clock:
    def __init__(self):
        self.now = 500.0

    def __call__(self):
        return self.now


def lines(caplog):
    return [(record.levelno, record.getMessage()) for record in caplog.records]


def test_a_repeated_cause_is_logged_once_then_once_per_interval_with_its_count(caplog):
    clock = Clock()
    repeats = Repeats(log, interval=600.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger=log.name):
        for _ in range(58):  # a poll every 10 s for 9 min 40 s
            repeats.log(logging.WARNING, "save", "kmsg: cannot save: %s", "disk I/O error")
            clock.now += 10.0
        assert lines(caplog) == [(logging.WARNING, "kmsg: cannot save: disk I/O error")]
        repeats.log(logging.WARNING, "save", "kmsg: cannot save: %s", "disk I/O error")  # at +580 s: still counted
        clock.now += 20.0
        repeats.log(logging.WARNING, "save", "kmsg: cannot save: %s", "disk full")  # +600 s: the interval is over
    assert lines(caplog) == [(logging.WARNING, "kmsg: cannot save: disk I/O error"),
                             (logging.WARNING, "kmsg: cannot save: disk full (repeated 58 times in the last 10 min)")]


def test_causes_are_counted_apart_and_a_cleared_cause_is_news_again(caplog):
    clock = Clock()
    repeats = Repeats(log, clock=clock)
    with caplog.at_level(logging.INFO, logger=log.name):
        assert repeats.log(logging.WARNING, "a", "a failed")
        assert repeats.log(logging.ERROR, "b", "b failed")
        assert not repeats.log(logging.WARNING, "a", "a failed")
        assert repeats.clear("a") == 1
        assert repeats.clear("a") == 0
        assert repeats.log(logging.WARNING, "a", "a failed")  # after it worked again: logged at once
    assert [message for _, message in lines(caplog)] == ["a failed", "b failed", "a failed"]


def test_a_traceback_goes_to_debug_only(caplog):
    repeats = Repeats(log, clock=Clock())
    try:
        raise ValueError("bad answer")
    except ValueError as exc:
        error = exc
    with caplog.at_level(logging.INFO, logger=log.name):
        repeats.log(logging.ERROR, "x", "source k8s failed: %s", error, exc=error)
    assert [(r.levelno, r.exc_info) for r in caplog.records] == [(logging.ERROR, None)]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=log.name):
        repeats.clear("x")
        repeats.log(logging.ERROR, "x", "source k8s failed: %s", error, exc=error)
    assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.DEBUG]
    assert caplog.records[1].exc_info[1] is error and "bad answer" in caplog.text


def test_memory_is_bounded_by_max_causes():
    clock = Clock()
    repeats = Repeats(log, max_causes=3, clock=clock)
    for i in range(10):
        repeats.log(logging.DEBUG, "cause {}".format(i), "x")
    assert len(repeats) == 3
    assert not repeats.log(logging.DEBUG, "cause 9", "x")  # the most recent are kept
    assert repeats.log(logging.DEBUG, "cause 0", "x")  # the oldest was forgotten


def test_a_clock_set_back_ends_the_interval(caplog):
    clock = Clock()  # a source's wall clock, which an operator or NTP may set back
    repeats = Repeats(log, clock=clock)
    with caplog.at_level(logging.WARNING, logger=log.name):
        repeats.log(logging.WARNING, "a", "a failed")
        repeats.log(logging.WARNING, "a", "a failed")
        clock.now -= 3600.0
        repeats.log(logging.WARNING, "a", "a failed")  # not silent for the hour until the clock is back
    assert len(caplog.records) == 2
