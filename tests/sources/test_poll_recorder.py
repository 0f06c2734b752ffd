"""PollRecorder.execute, the one place that times a poll and makes its tier's status from what the poll
reports (an Outcome): success, failure, notes, unsupported, left out, waiting on another source, degraded, a
poll that could not tell, a tier with no status, and a bug that escapes a poll."""

import logging

from npumon.sources.base import NOT_POLLED_STATUS, Outcome, PollRecorder

ALLOWED = 60.0


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def recorder():
    clock = Clock()
    return PollRecorder("test", lambda tier: ALLOWED, clock), clock


def test_a_poll_that_reads_is_up_from_its_start_and_timed():
    book, clock = recorder()
    seen = []
    assert book.execute("t", lambda started: seen.append(started) or Outcome(retry=5.0)) == 5.0
    (status,) = book.statuses(clock.now).values()
    assert seen == [1000.0] and status.ok and status.last_success == 1000.0 and status.error is None
    assert status.duration_seconds is not None and 0 <= status.duration_seconds < 1


def test_a_failure_keeps_the_last_success_and_goes_stale_by_the_one_rule():
    book, clock = recorder()
    book.execute("t", lambda started: Outcome())
    clock.now += 10
    book.execute("t", lambda started: Outcome.failed("npu-smi timed out"))
    status = book.statuses(clock.now)["t"]
    assert (status.ok, status.error, status.last_success) == (False, "npu-smi timed out", 1000.0)
    book.execute("t", lambda started: Outcome(degraded=True, error="degraded: one row left out"))
    assert book.statuses(clock.now)["t"].degraded
    clock.now += ALLOWED + 1
    stale = book.statuses(clock.now)["t"]
    assert not stale.ok and stale.error.startswith("stale: ") and not stale.degraded  # stale: down, not degraded


def test_what_only_shows_on_one_side_of_up():
    book, clock = recorder()
    book.execute("waits", lambda started: Outcome.failed("no chips yet", waiting_on="npu-smi"))
    book.execute("ok", lambda started: Outcome(waiting_on="npu-smi"))
    book.execute("bad", lambda started: Outcome.failed("all rows unreadable", degraded=True))
    statuses = book.statuses(clock.now)
    assert statuses["waits"].waiting_on == "npu-smi" and statuses["ok"].waiting_on is None
    assert not statuses["bad"].degraded


def test_unsupported_is_not_news_and_never_stale():
    book, clock = recorder()
    book.execute("t", lambda started: Outcome(error="not supported on this product: -t usages", unsupported=True))
    clock.now += 10 * ALLOWED
    status = book.statuses(clock.now)["t"]
    assert status.ok and status.unsupported and status.error == "not supported on this product: -t usages"


def test_a_poll_that_made_no_call_keeps_the_verdict_and_reports_what_it_left_out():
    book, clock = recorder()
    book.execute("t", lambda started: Outcome.failed("3 of 8 calls failed"))
    book.execute("t", lambda started: Outcome(ok=None, read=False, left_out=8, error="8 of 8 calls left out"))
    status = book.statuses(clock.now)["t"]
    assert not status.ok and status.left_out == 8 and status.error == "8 of 8 calls left out"
    assert status.last_success is None


def test_a_tier_not_asked_has_no_status_and_an_unpolled_one_says_so():
    book, clock = recorder()
    book.execute("t", lambda started: Outcome())
    book.execute("t", lambda started: Outcome(shown=False))
    assert book.statuses(clock.now) == {}
    assert book.statuses(clock.now, unpolled=["u"]) == {"u": NOT_POLLED_STATUS}


def test_a_bug_in_a_poll_is_one_status_line_and_one_log_entry(caplog):
    book, clock = recorder()
    book.execute("t", lambda started: Outcome())

    def broken(started):
        raise KeyError("npu")

    with caplog.at_level(logging.ERROR, logger="npumon.sources.base"):
        assert book.execute("t", broken) is None
    status = book.statuses(clock.now)["t"]
    assert not status.ok and status.error == "internal error: 'npu'" and status.last_success == 1000.0
    assert [record.getMessage() for record in caplog.records] == ["source test failed: internal error: KeyError: 'npu'"]
    assert caplog.records[0].exc_info is None  # the traceback goes to debug
    with caplog.at_level(logging.ERROR, logger="npumon.sources.base"):
        book.execute("t", broken)  # the same bug again within the interval: counted, not logged
    assert len(caplog.records) == 1
