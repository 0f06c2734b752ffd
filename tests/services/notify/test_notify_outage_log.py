"""A notification outage in the log: one WARNING when it starts, one INFO when it ends, the retries in
between at debug only -- so a receiver down for an hour does not fill the journal."""

import logging
import re

import pytest

from recording_server import RecordingServer
from test_notify_delivery import T0, finding, harnesses, webhook

LOGGER = "npumon.services.notify.service"


@pytest.fixture
def harness(tmp_path):
    yield from harnesses(tmp_path)


def logged(caplog):
    return [(record.levelname, record.getMessage()) for record in caplog.records if record.name == LOGGER]


def test_an_outage_logs_its_start_and_its_end_once_and_its_retries_at_debug(harness, caplog):
    answers = iter([503, 503, 503, 503, 200])
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    with RecordingServer(lambda request: (next(answers), {}, b"busy")) as server:
        h = harness(webhook(server), retry_initial_seconds=1, retry_max_seconds=2)
        h.evaluate(finding())
        for second in range(1, 30):
            h.tick(T0 + second)
        assert len(server.requests) == 5
    lines = logged(caplog)
    problems = [message for level, message in lines if level in ("WARNING", "ERROR")]
    assert len(problems) == 1
    assert re.fullmatch(r"cannot deliver 1 notification\(s\) to 'hook' \(http://127\.0\.0\.1:\d+\): "
                        r"HTTP 503: busy; retrying in \d\.\ds \(an outage begins: its retries are logged at debug, "
                        r"its end at info\)", problems[0]), problems[0]
    assert sum(level == "DEBUG" and "HTTP 503: busy; retrying in" in message for level, message in lines) == 3
    (end,) = [message for level, message in lines if level == "INFO"]
    assert end.startswith("receiver 'hook' (http://127.0.0.1:") and " works again after 4 failed attempts over " in end
    seconds = int(end.rsplit(" over ", 1)[1].rstrip("s"))
    assert 4 <= seconds <= 7  # four retries on whole-second ticks: at most 1 s, then at most 2 s apart


def test_a_refusal_after_failures_ends_the_outage_too(harness, caplog):
    answers = iter([503, 400])
    caplog.set_level(logging.INFO, logger=LOGGER)
    with RecordingServer(lambda request: (next(answers), {}, b"no")) as server:
        h = harness(webhook(server), retry_initial_seconds=1, retry_max_seconds=1)
        h.evaluate(finding())
        h.tick(T0 + 1.01)
        assert len(server.requests) == 2
    levels = [level for level, _ in logged(caplog)]
    assert levels == ["WARNING", "INFO", "ERROR"]
    assert " answers again after 1 failed attempts over 1s" in logged(caplog)[1][1]
    h.tick(T0 + 5)
    assert len(logged(caplog)) == 3  # the receiver is up: nothing more to say
