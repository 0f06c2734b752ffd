"""What the running daemon tells its operator: source down/up and finding fired/resolved lines at their
levels, reload start and end, every npu-smi command at debug, /healthz on a host where npu-smi never
answers, and nothing above debug when npumon's own stop ends the calls in flight."""

import logging
import re
import shlex
import time

import pytest
import requests

from npumon.sim.target import simulated_target
import npumon.daemon.state as state_module
from daemon_harness import wait_until
from npumon.settings import parse_config
from npumon.daemon.daemon import Daemon
from npumon.daemon.state import DaemonState, judge_healthz
from npumon.model import HostSample, Snapshot, SourceStatus
from npumon.sim import prepare_simulation, set_scenario
from npumon.sources.runner import CommandRunner
from npumon.sources.target import Target

CONFIG = """\
state_dir: {state}
npu_smi_timeout_seconds: {timeout}
probe: {{enabled: false}}
poll: {{table_seconds: 0.2, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 0,
        board_seconds: 0, host_seconds: 0.5}}
"""


def write_config(tmp_path, extra="", timeout=5.0):
    path = tmp_path / "npumon.yaml"
    path.write_text(CONFIG.format(state=tmp_path / "state", timeout=timeout) + extra)
    return path


def load(path):
    return parse_config(path.read_text(), str(path))


def journal_lines(caplog):
    return [(record.levelname, record.getMessage()) for record in caplog.records
            if record.name == "npumon.daemon.journal"]


def test_the_daemon_logs_sources_going_down_and_up_findings_firing_and_resolving_and_reloads(tmp_path, running,
                                                                                            caplog):
    sim_state = str(tmp_path / "sim")
    simulation = prepare_simulation(sim_state, "healthy")  # chips at about 50 C
    target = simulated_target(simulation)
    path = write_config(tmp_path, "thresholds: {temperature_critical_celsius: 30}\n")
    caplog.set_level(logging.INFO, logger="npumon")
    caplog.set_level(logging.DEBUG, logger="npumon.sources.runner")
    daemon = running(Daemon(load(path), target, listen="127.0.0.1:0", log_level="info"))

    def logged(level, pattern):
        return [message for name, message in journal_lines(caplog) if name == level and re.search(pattern, message)]

    fired = wait_until(lambda: logged("WARNING", r"^finding fired: temperature-critical on npu0/chip0 \(critical\): "
                                                 r"temperature \d+ C, at or above the critical 30 C$"),
                       what="the finding's line")
    assert len(fired) == 1
    commands = [record.getMessage() for record in caplog.records if record.name == "npumon.sources.runner"]
    table_call = r"ran {} info: exit status 0 in \d+\.\d{{3}}s".format(re.escape(shlex.join(target.npu_smi_argv)))
    assert any(re.fullmatch(table_call, line) for line in commands), commands[:5]

    set_scenario(sim_state, "garbage")  # the main table comes back cut short: unreadable
    wait_until(lambda: logged("WARNING", r"^source npu-smi is down: unreadable npu-smi info output"),
               what="the source-down line")
    set_scenario(sim_state, "healthy")
    wait_until(lambda: logged("INFO", r"^source npu-smi is up again \(no answer for \d+s; last error: unreadable"),
               what="the recovery line")

    path.write_text(path.read_text().replace("temperature_critical_celsius: 30", "temperature_critical_celsius: 95"))
    assert daemon.reload(lambda: load(path))
    wait_until(lambda: logged("INFO", r"^finding resolved: temperature-critical on npu0/chip0 \(was: "),
               what="the resolution line")
    assert len(logged("WARNING", r"^source npu-smi is down")) == 1
    assert len(logged("INFO", r"^source npu-smi is up again")) == 1
    assert len(logged("WARNING", r"^finding fired: temperature-critical on npu0/chip0 ")) == 1
    # the reload's own lines (a verdict change, "verdict: host degraded -> healthy", may come between them)
    daemon_lines = [record.getMessage() for record in caplog.records
                    if record.name == "npumon.daemon.daemon" and "reload" in record.getMessage()]
    started = daemon_lines.index("reload started; the config from {} keeps running until the new one is "
                                 "checked".format(path))
    assert daemon_lines[started + 1] == "config reloaded from {}".format(path)


def test_healthz_fails_while_npu_smi_has_never_answered_and_says_why(tmp_path, running, monkeypatch, caplog):
    """A host without npu-smi: the poll loop runs fine, but a daemon that has never seen an answer watches
    nothing -- /healthz is 503 once the first poll's grace is over. The watchdog still pings: a restart would
    not bring npu-smi back."""
    monkeypatch.setattr(state_module, "PROGRESS_SLACK_SECONDS", 0.0)  # grace: 2 x 0.2 s + 0.5 s
    missing = str(tmp_path / "no-such-npu-smi")
    target = Target([missing], None, str(tmp_path))
    caplog.set_level(logging.INFO, logger="npumon.daemon.journal")
    daemon = running(Daemon(load(write_config(tmp_path, timeout=0.5)), target, listen="127.0.0.1:0"))
    healthz = "http://127.0.0.1:{}/healthz".format(daemon.web.port)
    reason = wait_until(lambda: (lambda answer: answer.text if answer.status_code == 503 else None)(
        requests.get(healthz, timeout=2)), what="/healthz failing")
    assert re.fullmatch(r"npu-smi has not answered once since the start \d+s ago: cannot run {}: No such file or "
                        r"directory\n".format(re.escape(missing)), reason)
    assert daemon.loop_health() == (True, "ok")
    assert daemon.state().polls >= 2
    down = [message for level, message in journal_lines(caplog) if message.startswith("source npu-smi is down")]
    assert down == ["source npu-smi is down: cannot run {}: No such file or directory".format(missing)]


def test_judge_healthz_gives_the_primary_source_the_first_poll_s_grace_then_fails():
    failing = Snapshot(time=0.0, host=HostSample(), chips=[], sources={
        "npu-smi": SourceStatus(ok=False, error="cannot run npu-smi: No such file or directory")})
    state = DaemonState(snapshot=failing, started=100.0, last_progress=125.0)
    assert judge_healthz(state, "npu-smi", 110.0, 30.0) == (
        True, "starting: npu-smi has not answered yet: cannot run npu-smi: No such file or directory")
    assert judge_healthz(state, "npu-smi", 131.0, 30.0) == (
        False, "npu-smi has not answered once since the start 31s ago: cannot run npu-smi: No such file or directory")
    # once it has answered, a later failure is the source's matter (npumon_source_up), not the daemon's health
    answered = DaemonState(snapshot=failing, started=100.0, last_progress=125.0, primary_answered=True)
    assert judge_healthz(answered, "npu-smi", 131.0, 30.0) == (True, "ok")
    # the poll loop's own judgement comes first
    assert judge_healthz(DaemonState(started=100.0), "npu-smi", 110.0, 30.0) == (
        True, "starting: the first poll has not finished yet")
    assert judge_healthz(DaemonState(started=100.0, last_progress=120.0, primary_answered=True), "npu-smi",
                         151.0, 30.0) == (False, "poll loop stuck: the last poll finished 31s ago (limit 30s)")
    no_snapshot = DaemonState(started=100.0, last_progress=120.0)
    assert judge_healthz(no_snapshot, "npu-smi", 131.0, 30.0) == (
        False, "npu-smi has not answered once since the start 31s ago: no answer yet")


def test_every_command_logs_one_debug_line_with_argv_outcome_and_duration_and_no_environment(caplog):
    caplog.set_level(logging.DEBUG, logger="npumon.sources.runner")
    runner = CommandRunner(["sh", "-c"], 0.3, env={"NPUMON_TEST_TOKEN": "s3cret-value"})
    runner.run(["exit 0"])
    runner.run(["echo broken >&2; exit 3"])
    runner.run(["sleep 5"])
    hidden = CommandRunner([], 1.0, log_arguments=False)
    hidden.run(["sh", "-c", "exit 0", "password=hunter2"])
    lines = [record.getMessage() for record in caplog.records if record.name == "npumon.sources.runner"]
    assert len(lines) == 4 and all(record.levelname == "DEBUG" for record in caplog.records)
    assert re.fullmatch(r"ran sh -c 'exit 0': exit status 0 in \d+\.\d{3}s", lines[0])
    assert re.fullmatch(r"ran sh -c 'echo broken >&2; exit 3': exit status 3: broken in \d+\.\d{3}s", lines[1])
    assert re.fullmatch(r"ran sh -c 'sleep 5': timed out after 0\.\d+s \(process group killed\) in 0\.\d{3}s",
                        lines[2])
    assert re.fullmatch(r"ran sh \(arguments not logged\): exit status 0 in \d+\.\d{3}s", lines[3])
    assert "s3cret-value" not in caplog.text and "hunter2" not in caplog.text


STOP_CONFIG = """\
state_dir: {state}
npu_smi_timeout_seconds: 10
probe: {{enabled: false}}
poll: {{table_seconds: 0.5, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 60,
        board_seconds: 0, host_seconds: 5}}
"""


@pytest.mark.e2e
def test_a_stop_with_calls_in_flight_logs_no_problem(tmp_path, caplog):
    """npumon's own stop kills the calls running and refuses the ones queued: that is no failure of npu-smi,
    so nothing is logged above debug (no "source npu-smi is down: killed by SIGKILL", no "calls left out")."""
    sim_state = str(tmp_path / "sim")
    simulation = prepare_simulation(sim_state, "healthy", latency_scale=2)  # a table takes about 2 s, a query 1 s
    # the simulator as a process of its own, as real npu-smi is: a stop kills it mid-call
    target = simulated_target(simulation)
    path = tmp_path / "npumon.yaml"
    path.write_text(STOP_CONFIG.format(state=tmp_path / "state"))
    caplog.set_level(logging.DEBUG, logger="npumon")
    daemon = Daemon(load(path), target, listen="127.0.0.1:0", log_level="debug")
    daemon.start()
    try:
        wait_until(lambda: daemon.state().snapshot is not None and daemon.state().snapshot.chips, timeout=30,
                   what="the first table")
        # the table's next call and the ecc tier's calls (8 cards, 2 slots) are running or queued: the ecc tier's
        # first run may have ended before the first table was published, so ask for its next one now (the table
        # polls every 0.5 s, so the two overlap)
        daemon.jobs.run_soon("npu-smi:ecc", 0)
        wait_until(lambda: {"npu-smi", "npu-smi:ecc"} <= set(daemon.collection.polling()), timeout=30,
                   what="the table and the ecc tier polling at once")
        time.sleep(0.5)
    finally:
        before = len(caplog.records)
        daemon.stop()
    # no problem at all, and not even news from the sources or the journal ("npumon stopped" is the daemon's)
    quiet = ("npumon.sources", "npumon.daemon.journal")
    after_stop = caplog.records[before:]
    problems = [record.getMessage() for record in after_stop if record.levelno >= logging.WARNING]
    news = [record.getMessage() for record in after_stop
            if record.name.startswith(quiet) and record.levelno > logging.DEBUG]
    assert problems == [] and news == []
    assert any(re.search(r"stopped", record.getMessage()) for record in caplog.records
               if record.name.startswith("npumon.sources") and record.levelno == logging.DEBUG)
    # a poll that ends after the stop (its calls refused) publishes nothing: its sources saw npumon stopping
    published = daemon.state()
    daemon.run_tier("npu-smi")
    assert daemon.state() is published
