"""The daemon in-process against the simulator: health and the watchdog, reload, a bounded stop, /status
before the first poll, and the pure helpers; plus the systemd notify and journal plumbing."""

import datetime
import io
import logging
import os
import re
import socket
import sys
import threading
import time

import pytest
import requests

from npumon.sim.target import simulated_target
import npumon.daemon.daemon as daemon_module
import npumon.daemon.state as state_module
import npumon.sources.npusmi.source as npusmi_source
from daemon_harness import WatchdogListener, wait_until
from npumon.settings import parse_config
from npumon.daemon.daemon import Daemon
from npumon.daemon.state import (DaemonState, StartupError, collection_settings, judge_health, progress_deadline,
                                 status_line)
from npumon.model import ChipSample, Finding, HostSample, Snapshot, SourceStatus
from npumon.cli.common import setup_logging
from npumon.daemon.sdnotify import JournalFormatter, Notifier, stderr_is_journal
from npumon.sim import prepare_simulation, set_scenario

FAST = """\
state_dir: {state}
npu_smi_timeout_seconds: {timeout}
poll:
  table_seconds: 0.2
  usages_seconds: 0.5
  power_seconds: 0.5
  health_seconds: 0.5
  ecc_seconds: 1
  board_seconds: 1
  host_seconds: 0.5
"""


@pytest.fixture
def sim(tmp_path):
    def make(scenario="healthy"):
        simulation = prepare_simulation(str(tmp_path / "sim"), scenario)
        return simulated_target(simulation)
    return make


def fast_config(tmp_path, extra="", timeout=5.0, name="npumon.yaml"):
    """Short poll intervals; a generous npu-smi deadline, so a busy test machine does not time calls out."""
    path = tmp_path / name
    path.write_text(FAST.format(state=tmp_path / "state", timeout=timeout) + extra)
    return path


def load(path):
    return parse_config(path.read_text(), str(path))


# -- pure helpers ------------------------------------------------------------------------------------------

def test_judge_health():
    state = DaemonState(started=100.0)
    assert judge_health(state, 110.0, 30.0) == (True, "starting: the first poll has not finished yet")
    assert judge_health(state, 131.0, 30.0) == (False, "no poll has finished since the start 31s ago")
    state = DaemonState(started=100.0, last_progress=120.0)
    assert judge_health(state, 150.0, 30.0) == (True, "ok")
    assert judge_health(state, 151.0, 30.0) == (
        False, "poll loop stuck: the last poll finished 31s ago (limit 30s)")


def test_progress_deadline_covers_two_intervals_and_one_npu_smi_call():
    config = parse_config("npu_smi_timeout_seconds: 10\npoll: {table_seconds: 15}\n")
    assert progress_deadline(config) == 2 * 15 + 10 + state_module.PROGRESS_SLACK_SECONDS


def test_status_line():
    chip = ChipSample(npu=0, chip=0)
    ok = Snapshot(time=0.0, host=HostSample(), chips=[chip, chip], sources={"npu-smi": SourceStatus(ok=True)})
    finding = Finding(rule="r", severity="warning", subject="npu0/chip0", summary="s", hint="h", since=0.0)
    assert status_line(ok, [finding], "npu-smi") == "2 chips, status warning, 1 active finding"
    failing = Snapshot(time=0.0, host=HostSample(), chips=[],
                       sources={"npu-smi": SourceStatus(ok=False, error="timed out after 10.0s")})
    assert status_line(failing, [], "npu-smi") == "npu-smi failing: timed out after 10.0s"


def test_collection_settings_ignore_what_only_rules_log_and_http_read():
    base = parse_config("poll: {table_seconds: 15}\n")
    same = parse_config("poll: {table_seconds: 15}\nlog_level: debug\nthresholds: {temperature_critical_celsius: 90}\n"
                        "exporter: {listen: '127.0.0.1:1'}\n")
    other = parse_config("poll: {table_seconds: 10}\n")
    assert collection_settings(base) == collection_settings(same)
    assert collection_settings(base) != collection_settings(other)


# -- the daemon in-process ---------------------------------------------------------------------------------

def test_status_before_the_first_poll_keeps_the_schema(tmp_path, sim):
    daemon = Daemon(load(fast_config(tmp_path)), sim(), listen="127.0.0.1:0")
    document = daemon.status()
    assert document["schema"] == "npumon.check/v1" and document["status"] == "unknown"
    assert {"host", "time", "chips", "findings", "sources"} <= set(document)
    assert daemon.health() == (True, "starting: the first poll has not finished yet")


def test_watchdog_pings_only_while_the_poll_loop_makes_progress(tmp_path, sim, monkeypatch, running):
    listener = WatchdogListener(tmp_path, monkeypatch)
    monkeypatch.setattr(state_module, "PROGRESS_SLACK_SECONDS", 0.0)  # stuck after 2 x 0.2 s + 0.5 s
    daemon = Daemon(load(fast_config(tmp_path, timeout=0.5)), sim(), listen="127.0.0.1:0")
    unblocked = threading.Event()
    unblocked.set()
    poll = daemon.collection.poll

    def table_may_hang(tier):
        if tier == "npu-smi":
            unblocked.wait()  # a hang no deadline catches: the case the watchdog exists for
        return poll(tier)

    monkeypatch.setattr(daemon.collection, "poll", table_may_hang)

    try:
        running(daemon)
        healthz = "http://127.0.0.1:{}/healthz".format(daemon.web.port)
        first = listener.received(0.6)
        assert first[0].startswith("READY=1\n") and first.count("WATCHDOG=1") >= 3

        unblocked.clear()
        wait_until(lambda: requests.get(healthz, timeout=2).status_code == 503, timeout=5, what="unhealthy")
        assert requests.get(healthz, timeout=2).text.startswith("poll loop stuck: the last poll finished")
        listener.received(0.15)  # a ping already on its way
        assert "WATCHDOG=1" not in listener.received(0.6)

        unblocked.set()
        assert "WATCHDOG=1" in listener.received(0.6)
        assert requests.get(healthz, timeout=2).status_code == 200
    finally:
        unblocked.set()
        listener.close()


def test_reload_keeps_rule_state_and_the_collector_when_only_thresholds_change(tmp_path, sim, running, caplog):
    path = fast_config(tmp_path)
    daemon = running(Daemon(load(path), sim("overheat"), listen="127.0.0.1:0", log_level="info"))

    def critical():
        return [f for f in daemon.state().findings if f.rule == "temperature-critical" and f.subject == "npu0/chip0"]

    before = wait_until(critical, what="the overheating chip's finding")[0]
    engine, collector = daemon.engine, daemon.collection

    fast_config(tmp_path, "thresholds: {temperature_warning_celsius: 70}\n")
    assert daemon.reload(lambda: load(path))
    assert daemon.engine is engine and daemon.collection is collector
    polls = daemon.state().polls
    wait_until(lambda: daemon.state().polls > polls + 2, what="polls after the reload")
    assert critical()[0].since == before.since  # the same occurrence, not a new one

    path.write_text(path.read_text().replace("table_seconds: 0.2", "table_seconds: 0.25"))
    assert daemon.reload(lambda: load(path))
    assert daemon.collection is not collector and daemon.config.poll.table_seconds == 0.25
    assert critical()[0].since == before.since
    # the new collector polls every tier at once, so no value stays missing for long
    wait_until(lambda: (lambda chips: chips and chips[0].power_watts is not None and chips[0].aicore_ratio
                        is not None)(daemon.state().snapshot.chips), timeout=15, what="query values back")

    path.write_text(path.read_text() + "max_age_seconds: -1\n")
    with caplog.at_level(logging.ERROR, logger="npumon.daemon.daemon"):
        assert not daemon.reload(lambda: load(path))
    assert daemon.config.poll.table_seconds == 0.25 and daemon.config.max_age_seconds == 120
    [refused] = [record.getMessage() for record in caplog.records if "reload refused" in record.getMessage()]
    assert "{}:".format(path) in refused and "max_age_seconds: must be greater than 0" in refused


def test_a_slow_tier_that_failed_tries_again_soon_rather_than_after_its_interval(tmp_path, monkeypatch, running):
    monkeypatch.setattr(npusmi_source, "RETRY_FAILED_TIER_SECONDS", 0.5)
    sim_state = str(tmp_path / "sim")
    simulation = prepare_simulation(sim_state, "healthy")
    target = simulated_target(simulation)
    path = fast_config(tmp_path, "", timeout=1)  # each hung board call ends at 1 s; answers take milliseconds
    path.write_text(path.read_text().replace("board_seconds: 1", "board_seconds: 3600"))
    daemon = running(Daemon(load(path), target, listen="127.0.0.1:0"))

    def board():
        snapshot = daemon.state().snapshot
        return snapshot.sources.get("npu-smi:board") if snapshot else None

    wait_until(lambda: daemon.collection.sources[0].table_read(), what="the first table")
    set_scenario(sim_state, "hang")  # the board tier's calls now time out
    daemon.scheduler.modify_job("npu-smi:board", next_run_time=datetime.datetime.now(datetime.timezone.utc))
    wait_until(lambda: board() and not board().ok, timeout=60, what="the board poll failing")
    set_scenario(sim_state, "healthy")
    wait_until(lambda: board() and board().ok, timeout=60, what="board polled again long before 3600 s")
    assert daemon.scheduler.get_job("npu-smi:board").next_run_time.timestamp() > time.time() + 3000  # back to hourly


def test_a_query_tier_that_ran_before_the_first_table_runs_again_within_a_second(tmp_path, running):
    sim_state = str(tmp_path / "sim")
    simulation = prepare_simulation(sim_state, "hang")  # npu-smi's first answers never come
    target = simulated_target(simulation)
    path = fast_config(tmp_path, "", timeout=1)  # the hung table call ends at 1 s; answers take milliseconds
    # usages every 30 s (below the failed-tier retry's 60 s interval limit), the other query tiers off
    path.write_text(re.sub(r"(power|health|ecc|board)_seconds: [0-9.]+", r"\1_seconds: 0",
                           path.read_text().replace("usages_seconds: 0.5", "usages_seconds: 30")))
    daemon = running(Daemon(load(path), target, listen="127.0.0.1:0"))

    def usages():
        snapshot = daemon.state().snapshot
        return snapshot.sources.get("npu-smi:usages") if snapshot else None

    # its first run now rather than at its spread-out start (up to 10 s in): the table is still hanging
    daemon.scheduler.modify_job("npu-smi:usages", next_run_time=datetime.datetime.now(datetime.timezone.utc))
    wait_until(lambda: usages() and "main table" in (usages().error or ""), timeout=30,
               what="usages skipped without a table")
    set_scenario(sim_state, "healthy")
    wait_until(lambda: daemon.collection.sources[0].table_read(), timeout=30, what="the first table")
    wait_until(lambda: usages() and usages().ok, timeout=15, what="usages polled long before its 30 s interval")
    assert daemon.state().snapshot.chips[0].aivector_ratio is not None
    # back to its 30 s interval, not the second-by-second retry (10 s of margin: a loaded machine reaches this line late)
    assert daemon.scheduler.get_job("npu-smi:usages").next_run_time.timestamp() > time.time() + 10


def test_stop_is_bounded_even_when_a_service_will_not_close(tmp_path, sim, monkeypatch):
    class StuckService:
        name = "stuck"

        def jobs(self):
            return []

        def on_evaluation(self, snapshot, findings, transitions):
            pass

        def collectors(self):
            return []

        def statuses(self):
            return {}

        def close(self):
            time.sleep(30)

    monkeypatch.setattr(daemon_module, "build_services", lambda context: [StuckService()])
    monkeypatch.setattr(daemon_module, "STOP_GRACE_SECONDS", 0.5)
    daemon = Daemon(load(fast_config(tmp_path)), sim(), listen="127.0.0.1:0")
    daemon.start()
    wait_until(lambda: daemon.state().polls, what="a poll")
    started = time.monotonic()
    still_running = daemon.stop()
    assert time.monotonic() - started < daemon_module.STOP_GRACE_SECONDS + 1
    assert still_running == ["closing services"]


def test_what_services_show_is_published_on_a_copy_of_the_snapshot(tmp_path, sim, monkeypatch, running):
    handed = []

    class ShowingService:
        name = "showing"

        def jobs(self):
            return []

        def on_evaluation(self, snapshot, findings, transitions):
            handed.append((snapshot, dict(snapshot.sources)))

        def collectors(self):
            return []

        def statuses(self):
            return {"showing": SourceStatus(ok=False, error="shown")}

        def close(self):
            pass

    monkeypatch.setattr(daemon_module, "build_services", lambda context: [ShowingService()])
    daemon = running(Daemon(load(fast_config(tmp_path)), sim(), listen="127.0.0.1:0"))
    wait_until(lambda: daemon.state().polls, what="a poll")
    published = daemon.state().snapshot
    assert published.sources["showing"] == SourceStatus(ok=False, error="shown")
    assert daemon.status()["sources"]["showing"]["error"] == "shown"
    assert "npu-smi" in published.sources
    snapshot, sources_then = next((s, seen) for s, seen in handed if s.time == published.time)
    assert snapshot is not published and "showing" not in snapshot.sources and snapshot.sources == sources_then


def test_start_refuses_a_port_in_use_and_leaves_nothing_running(tmp_path, sim):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        listen = "127.0.0.1:{}".format(taken.getsockname()[1])
        daemon = Daemon(load(fast_config(tmp_path)), sim(), listen=listen)
        with pytest.raises(StartupError, match="^--listen: cannot listen on .*in use"):
            daemon.start()
    assert not daemon.scheduler.running and list(daemon.services) == []


# -- systemd plumbing --------------------------------------------------------------------------------------

def test_notifier_reaches_an_abstract_socket_and_is_silent_without_one():
    name = "npumon-test-{}".format(os.getpid())
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind("\0" + name)
        listener.settimeout(2)
        assert Notifier("@" + name).ready("polling")
        assert listener.recv(4096) == b"READY=1\nSTATUS=polling"
    assert not Notifier("").watchdog()


def test_watchdog_interval_is_half_of_watchdog_usec_and_honours_watchdog_pid(monkeypatch):
    monkeypatch.setenv("WATCHDOG_USEC", "90000000")
    monkeypatch.delenv("WATCHDOG_PID", raising=False)
    assert Notifier("/run/x").watchdog_interval() == 45.0
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid() + 1))
    assert Notifier("/run/x").watchdog_interval() is None
    monkeypatch.setenv("WATCHDOG_PID", str(os.getpid()))
    assert Notifier("/run/x").watchdog_interval() == 45.0
    assert Notifier("").watchdog_interval() is None


def test_journal_formatter_tags_every_line_with_its_priority():
    formatter = JournalFormatter("%(levelname)s %(message)s")
    record = logging.LogRecord("npumon", logging.ERROR, __file__, 1, "first\nsecond", None, None)
    assert formatter.format(record) == "<3>ERROR first\n<3>second"
    record = logging.LogRecord("npumon", logging.DEBUG, __file__, 1, "detail", None, None)
    assert formatter.format(record) == "<7>DEBUG detail"


def test_logs_carry_priorities_only_when_stderr_is_the_journal(monkeypatch):
    # In this process rather than two interpreter starts: stderr_is_journal() reads fd 2, whatever it is
    # (pytest's capture file here), and setup_logging() writes to sys.stderr, which the test reads.
    fd2 = os.fstat(2)
    root, scheduler = logging.getLogger(), logging.getLogger("apscheduler")
    handlers, levels = list(root.handlers), (root.level, scheduler.level)
    lines = []
    try:
        for stream in ("{}:{}".format(fd2.st_dev, fd2.st_ino), "1:2"):
            monkeypatch.setenv("JOURNAL_STREAM", stream)
            monkeypatch.setattr(sys, "stderr", io.StringIO())
            setup_logging("info")
            logging.getLogger("npumon.test").warning("disk full")
            lines += sys.stderr.getvalue().splitlines()
    finally:
        root.handlers[:] = handlers
        root.setLevel(levels[0])
        scheduler.setLevel(levels[1])
    journal_line, plain_line = lines
    assert journal_line == "<4>WARNING npumon.test: disk full"
    assert plain_line.endswith(" WARNING npumon.test: disk full") and plain_line[:4].isdigit()
    monkeypatch.delenv("JOURNAL_STREAM", raising=False)
    assert not stderr_is_journal()


def test_a_judged_tier_is_judged_at_once_not_at_the_next_table_pass(tmp_path, running):
    # the main table (which judges) every 20 s; the kernel log, a judged tier, every 0.3 s: its driver faults
    # become findings within a second or two of being read, not a table interval later
    simulation = prepare_simulation(str(tmp_path / "sim"), "heartbeat-lost")
    config = fast_config(tmp_path, "faults: {interval_seconds: 0.3}\nprobe: {enabled: false}\n")
    config.write_text(config.read_text().replace("table_seconds: 0.2", "table_seconds: 20"))
    daemon = Daemon(load(config), simulated_target(simulation), listen="127.0.0.1:0")
    assert daemon.collection.judged("kmsg") and not daemon.collection.judged("host")
    running(daemon)

    def driver_fault():
        rules = {(finding.rule, finding.subject) for finding in daemon.state().findings}
        return ("driver-device-fault", "npu2/chip0") in rules
    wait_until(driver_fault, timeout=10, interval=0.1, what="driver-device-fault from the kernel log")
    state = daemon.state()
    assert state.polls == 1  # the one table pass at the start: the finding came from the kernel log's pass


def test_a_finding_fires_when_its_for_runs_out_not_at_the_next_table_pass(tmp_path, sim, running, monkeypatch):
    # the main table (which judges) every 20 s; a rule true from the first pass with `for: 1s` fires a second
    # later, in a pass of its own, not 20 s later
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules:\n  - {id: warm, subject: chip, expr: 'temperature_celsius > 0', for: 1s,"
                     " severity: info, summary: warm, hint: warm}\n")
    config = fast_config(tmp_path, "rule_files: [{}]\nprobe: {{enabled: false}}\n".format(rules))
    config.write_text(config.read_text().replace("table_seconds: 0.2", "table_seconds: 20"))
    daemon = Daemon(load(config), sim(), listen="127.0.0.1:0")
    monkeypatch.setattr(daemon.collection, "judged", lambda tier: False)  # no judged tier's pass in between
    running(daemon)
    started = time.monotonic()

    def warm():
        return any(finding.rule == "warm" for finding in daemon.state().findings)
    wait_until(warm, timeout=10, interval=0.05, what="the warm finding")
    assert time.monotonic() - started < 10 and daemon.state().polls == 1
