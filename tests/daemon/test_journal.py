"""The operator log (npumon/daemon/journal.py): which lines a published Snapshot and the rule transitions
make, at which level, and how the rate limit bounds a flap storm -- on a fake clock, in a moment."""

import logging

import pytest

from clocked_host import ClockedHost
from npumon.settings import parse_config
from npumon.daemon.journal import Journal, Line, RateLimit, changes, is_down
from npumon.model import Finding, HostSample, Snapshot, SourceStatus
from npumon.rules.engine import FIRED, RESOLVED
from npumon.sim import prepare_simulation, set_scenario
from npumon.sim.state import STATE_ENV

T0 = 1767225600.0
UP = SourceStatus(ok=True, duration_seconds=0.1, last_success=T0)
NOT_POLLED = SourceStatus(ok=False, error="not polled yet")
TIMED_OUT = SourceStatus(ok=False, error="timed out after 10.0s (process group killed)", duration_seconds=10.0,
                         last_success=T0)


def snapshot(at=T0, **sources):
    return Snapshot(time=at, host=HostSample(), chips=[], sources={
        name.replace("_", "-"): status for name, status in sources.items()})


def finding(rule="temperature-critical", severity="critical", subject="npu0/chip0", shadow=False):
    return Finding(rule=rule, severity=severity, subject=subject, summary="{} on {}".format(rule, subject),
                   hint="look", since=T0, shadow=shadow)


def levels_and_messages(lines):
    return [(logging.getLevelName(line.level), line.message) for line in lines]


# -- which lines, at which level -----------------------------------------------------------------------

def test_down_means_failing_not_unsupported_and_not_waiting_for_the_first_poll():
    assert is_down(TIMED_OUT)
    assert is_down(SourceStatus(ok=False, error="stale: last success 90s ago (max age 60s)", last_success=T0))
    assert is_down(SourceStatus(ok=False, error="cannot run npu-smi: No such file or directory", duration_seconds=0.0))
    assert not is_down(UP) and not is_down(NOT_POLLED)
    assert not is_down(SourceStatus(ok=False, unsupported=True, error="unavailable: not on this product"))
    assert not is_down(SourceStatus(ok=True, error="some files unreadable", last_success=T0))  # a warning only


def test_a_query_tier_that_waits_for_the_table_is_not_news_of_its_own():
    waiting = SourceStatus(ok=False, error="skipped while the main table cannot be read", waiting_on="npu-smi")
    missing = SourceStatus(ok=False, error="cannot run npu-smi: No such file or directory", duration_seconds=0.0)
    assert not is_down(waiting)
    assert levels_and_messages(changes(None, snapshot(npu_smi=missing, npu_smi_usages=waiting), [])) == [
        ("WARNING", "source npu-smi is down: cannot run npu-smi: No such file or directory")]


def test_a_source_down_from_the_start_says_so_once_and_a_source_not_polled_yet_says_nothing():
    missing = SourceStatus(ok=False, error="cannot run npu-smi: No such file or directory", duration_seconds=0.0)
    first = snapshot(npu_smi=missing, power=NOT_POLLED, host=UP)
    assert levels_and_messages(changes(None, first, [])) == [
        ("WARNING", "source npu-smi is down: cannot run npu-smi: No such file or directory")]
    assert changes(first, snapshot(T0 + 15, npu_smi=missing, power=NOT_POLLED, host=UP), []) == []
    # power polls for the first time and fails: that is news too
    assert levels_and_messages(changes(first, snapshot(T0 + 15, npu_smi=missing, power=TIMED_OUT, host=UP), [])) == [
        ("WARNING", "source power is down: timed out after 10.0s (process group killed)")]


def test_down_and_recovery_lines_carry_the_reason_and_how_long_there_was_no_answer():
    up = snapshot(T0, npu_smi=UP)
    down = snapshot(T0 + 30, npu_smi=TIMED_OUT)
    back = snapshot(T0 + 45, npu_smi=SourceStatus(ok=True, duration_seconds=0.2, last_success=T0 + 45))
    assert changes(None, up, []) == []
    assert levels_and_messages(changes(up, down, [])) == [
        ("WARNING", "source npu-smi is down: timed out after 10.0s (process group killed)")]
    assert changes(down, down, []) == []  # still down: nothing new
    assert levels_and_messages(changes(down, back, [])) == [
        ("INFO", "source npu-smi is up again (no answer for 45s; last error: timed out after 10.0s "
                 "(process group killed))")]
    never = snapshot(T0, npu_smi=SourceStatus(ok=False, error="exit status 1: no device", duration_seconds=0.1))
    assert levels_and_messages(changes(never, back, [])) == [
        ("INFO", "source npu-smi is up again (it had not answered since the start; last error: exit status 1: "
                 "no device)")]
    unsupported = snapshot(T0 + 45, npu_smi=SourceStatus(ok=False, unsupported=True, error="unavailable"))
    assert levels_and_messages(changes(down, unsupported, [])) == [
        ("INFO", "source npu-smi is unsupported on this host (last error: timed out after 10.0s "
                 "(process group killed))")]


def test_findings_fire_at_warning_when_they_are_problems_and_resolve_at_info():
    transitions = [
        (FIRED, finding()),
        (FIRED, finding("source-down", "warning", "host")),
        (FIRED, finding("driver-old", "info", "host")),
        (FIRED, finding("temperature-trial", "critical", shadow=True)),
        (RESOLVED, finding()),
    ]
    assert levels_and_messages(changes(None, snapshot(), transitions)) == [
        ("WARNING", "finding fired: temperature-critical on npu0/chip0 (critical): temperature-critical on npu0/chip0"),
        ("WARNING", "finding fired: source-down on host (warning): source-down on host"),
        ("INFO", "finding fired: driver-old on host (info): driver-old on host"),
        ("INFO", "finding fired: temperature-trial on npu0/chip0 (critical, shadow): temperature-trial on npu0/chip0"),
        ("INFO", "finding resolved: temperature-critical on npu0/chip0 (was: temperature-critical on npu0/chip0)"),
    ]


def test_an_acknowledged_finding_is_logged_as_acknowledged_not_resolved():
    acked = finding("health-critical", "critical")
    lines = changes(None, snapshot(), [(RESOLVED, acked), (RESOLVED, finding("source-down", "warning", "host"))],
                    acknowledged={("health-critical", "npu0/chip0")})
    assert levels_and_messages(lines) == [
        ("INFO", "finding acknowledged: health-critical on npu0/chip0, quiet until it clears (it still holds: "
                 "health-critical on npu0/chip0)"),
        ("INFO", "finding resolved: source-down on host (was: source-down on host)"),
    ]


def test_the_journal_logs_its_lines_at_their_levels(caplog):
    journal = Journal()
    with caplog.at_level(logging.INFO, logger="npumon.daemon.journal"):
        journal.publish(None, snapshot(npu_smi=UP), [])
        journal.publish(snapshot(npu_smi=UP), snapshot(T0 + 15, npu_smi=TIMED_OUT), [(FIRED, finding())])
    assert [(record.levelname, record.getMessage()) for record in caplog.records] == [
        ("WARNING", "source npu-smi is down: timed out after 10.0s (process group killed)"),
        ("WARNING", "finding fired: temperature-critical on npu0/chip0 (critical): temperature-critical on npu0/chip0"),
    ]


# -- the rate limit --------------------------------------------------------------------------------------

def test_a_flapping_subject_logs_a_few_lines_then_one_summary_with_where_it_stands():
    limit = RateLimit(per_window=4, window=60.0)
    logged = []
    for second in range(60):
        state = "down" if second % 2 == 0 else "up"
        logged += limit.admit(Line("source x", logging.WARNING if state == "down" else logging.INFO,
                                   "source x is " + state), T0 + second)
    assert [line.message for line in logged] == ["source x is down", "source x is up"] * 2
    assert limit.expired(T0 + 59.9) == []
    (summary,) = limit.expired(T0 + 60)
    assert summary.level == logging.WARNING  # some of what it sums up were problems
    assert summary.message == "source x: 56 more lines suppressed within 60s (flapping); the last: source x is up"
    assert len(limit) == 0  # the window is gone once it ended: nothing kept for a quiet subject
    assert limit.expired(T0 + 200) == []


def test_subjects_are_limited_apart_and_memory_is_bounded():
    limit = RateLimit(per_window=1, window=60.0, max_subjects=3)
    first = [limit.admit(Line("s{}".format(n), logging.INFO, "line"), T0) for n in range(3)]
    assert all(len(lines) == 1 for lines in first)  # one subject's storm does not silence the others
    assert limit.admit(Line("s0", logging.WARNING, "again"), T0 + 1) == []
    # a fourth subject pushes the oldest window out, and its suppressed line is summed up on the way
    out = limit.admit(Line("s3", logging.INFO, "new"), T0 + 2)
    assert [line.message for line in out] == ["s0: 1 more line suppressed within 60s (flapping); the last: again",
                                              "new"]
    assert len(limit) == 3
    for n in range(1000):
        limit.admit(Line("subject {}".format(n), logging.INFO, "line"), T0 + 3)
    assert len(limit) == 3


def test_a_wall_clock_that_goes_back_ends_the_window_rather_than_silencing_the_subject():
    limit = RateLimit(per_window=1, window=60.0)
    assert len(limit.admit(Line("s", logging.INFO, "one"), T0)) == 1
    assert limit.admit(Line("s", logging.INFO, "two"), T0 + 1) == []
    assert [line.message for line in limit.admit(Line("s", logging.INFO, "three"), T0 - 3600)] == [
        "s: 1 more line suppressed within 60s (flapping); the last: two", "three"]


@pytest.fixture
def flapping_host(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy")
    config = parse_config("state_dir: {}\nprobe: {{enabled: false}}\npoll: {{table_seconds: 1}}\n".format(
        tmp_path / "state"))
    host = ClockedHost(config, sim)
    yield host, sim.env[STATE_ENV]
    host.close()


def test_a_60_second_flap_storm_of_the_main_table_makes_a_bounded_number_of_lines(flapping_host, caplog):
    """npu-smi's main table fails and answers on alternate polls, every second for a minute of the fake clock:
    a handful of lines and one summary, not 60 lines."""
    host, sim_state = flapping_host
    journal = Journal()
    previous = None
    started = host.clock()
    with caplog.at_level(logging.INFO, logger="npumon.daemon.journal"):
        while host.clock() - started < 120:
            flapping = host.clock() - started < 60
            set_scenario(sim_state, "garbage" if flapping and host.polls % 2 else "healthy")
            host.step()
            journal.publish(previous, host.snapshot, host.engine.transitions())
            previous = host.snapshot
    assert host.polls >= 120
    messages = [record.getMessage() for record in caplog.records]
    down = [message for message in messages if message.startswith("source npu-smi is down: unreadable npu-smi")]
    up = [message for message in messages if message.startswith("source npu-smi is up again")]
    summaries = [message for message in messages if "suppressed within 60s (flapping)" in message]
    assert len(down) == 2 and len(up) == 2, messages
    # 60 changes within the first window: 4 logged, 56 summed up
    assert len(summaries) == 1 and summaries[0].startswith("source npu-smi: 56 more lines") and \
        summaries[0].endswith("the last: " + up[-1]), messages  # it answers again at the end of the storm
    assert len(messages) <= 6, messages  # no finding: source-down waits a minute of failing, and this one flapped
    assert len(journal.limit) == 0
