"""A daemon job that fails the same way on every run: one line, not a traceback per interval."""

import logging

from npumon.daemon import jobs


def test_a_job_failing_every_run_logs_one_line_and_its_traceback_only_at_debug(caplog):
    def evaluate():
        raise ZeroDivisionError("division by zero in a rule")

    with caplog.at_level(logging.INFO, logger=jobs.log.name):
        for _ in range(20):  # twenty publishes within a few seconds
            assert jobs.guarded("rules-under-test", evaluate) is None
    assert [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records] == [
        ("ERROR", "rules-under-test job failed: ZeroDivisionError: division by zero in a rule", None)]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=jobs.log.name):
        jobs.guarded("another-job-under-test", evaluate)
    assert [r.levelname for r in caplog.records] == ["ERROR", "DEBUG"]
    assert caplog.records[1].exc_info[0] is ZeroDivisionError
