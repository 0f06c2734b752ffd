"""`npumon run` as a real process against the simulator: signals, systemd notify, startup errors, and
npu-smi hanging mid-run."""

import signal
import socket
import time

import pytest
import requests

from daemon_harness import (STOP_BOUND_SECONDS, hang_pids, kill_leftovers, live_hang_pids, one_error_line,
                            processes_of_simulation, sample, wait_until)
from npumon.sim import set_scenario

FAST = """\
state_dir: {state}
npu_smi_timeout_seconds: {timeout}
max_age_seconds: {max_age}
poll:
  table_seconds: 0.3
  usages_seconds: 0.5
  power_seconds: 0.5
  health_seconds: 0.5
  ecc_seconds: 1
  board_seconds: 1
  host_seconds: 0.5
"""


def write_config(tmp_path, extra="", max_age=30, timeout=5.0, name="npumon.yaml"):
    """Short poll intervals; a generous npu-smi deadline unless a test is about deadlines, so that a busy
    test machine does not time calls out."""
    path = tmp_path / name
    path.write_text(FAST.format(state=tmp_path / "state", max_age=max_age, timeout=timeout) + extra)
    return str(path)


# -- lifecycle -------------------------------------------------------------------------------------------

@pytest.mark.e2e
@pytest.mark.slow  # the 5 s promise itself, in wall time: a loaded machine cannot give it a 2x margin
def test_sigterm_stops_within_5s_with_npu_smi_hanging_and_leaves_no_process(tmp_path, daemons):
    sim_state = str(tmp_path / "sim")
    daemon = daemons("--simulate=hang", "--sim-state", sim_state, "--listen", "127.0.0.1:0",
                     "--config", write_config(tmp_path, timeout=30))
    try:
        daemon.wait_serving()
        # the table and some query calls are now hanging, each with a 1 s deadline it has not reached yet
        wait_until(lambda: len(hang_pids(sim_state)) >= 2, what="a hanging npu-smi call")
        elapsed = daemon.stop()
        assert elapsed < 5.0
        assert daemon.proc.returncode == 0
        assert any("npumon stopped" in line for line in daemon.lines)
        assert wait_until(lambda: not processes_of_simulation(sim_state), timeout=5,
                          what="every npu-smi process gone")
    finally:
        kill_leftovers(sim_state)


def test_sighup_applies_a_good_config_and_refuses_a_bad_one(tmp_path, daemons):
    config = write_config(tmp_path)
    daemon = daemons("--simulate", "--listen", "127.0.0.1:0", "--config", config)
    daemon.wait_serving()
    wait_until(lambda: daemon.get("/status").json()["status"] == "ok", what="first poll")

    # A good config: the healthy scenario's chips (about 50 C) are now above the critical threshold.
    with open(config, "a") as handle:
        handle.write("thresholds:\n  temperature_critical_celsius: 30\n")
    mark = len(daemon.lines)
    daemon.signal(signal.SIGHUP)
    daemon.wait_for_line("config reloaded from", start=mark)
    document = wait_until(lambda: (lambda doc: doc if doc["status"] == "critical" else None)(
        daemon.get("/status").json()), what="the new threshold in effect")
    assert {finding["rule"] for finding in document["findings"]} >= {"temperature-critical"}

    # A bad config: refused with one line naming file, line and key; the running config stays.
    with open(config) as handle:
        text = handle.read()
    with open(config, "w") as handle:
        handle.write(text.replace("table_seconds: 0.3", "table_seconds: -1"))
    mark = len(daemon.lines)
    daemon.signal(signal.SIGHUP)
    refused = daemon.wait_for_line("reload refused", start=mark).string
    assert refused.endswith("{}:5: poll.table_seconds: must be 0 (off) or more".format(config))

    def table_calls():
        return sample(daemon.get("/metrics").text, "npumon_source_calls_total", source="npu-smi")
    calls = table_calls()
    wait_until(lambda: table_calls() >= calls + 3, what="a few more polls with the old config")
    assert daemon.get("/healthz").status_code == 200
    assert daemon.get("/status").json()["status"] == "critical"
    assert not [line for line in daemon.lines[mark:] if "Traceback" in line]
    assert daemon.stop() < STOP_BOUND_SECONDS and daemon.proc.returncode == 0


def test_the_idle_main_thread_sleeps_until_a_signal(tmp_path, daemons):
    config = write_config(tmp_path)
    daemon = daemons("--simulate", "--listen", "127.0.0.1:0", "--config", config)
    daemon.wait_serving()
    wait_until(lambda: daemon.get("/status").json()["status"] == "ok", what="first poll")

    def main_thread_wakes():  # the main thread's task has the process's id
        with open("/proc/{0}/task/{0}/status".format(daemon.proc.pid)) as handle:
            return int(next(line for line in handle if line.startswith("voluntary_ctxt_switches:")).split()[1])

    # Of up to three 2-second windows, one at least with at most 2 wakes: the end of the start-up (a lazy import
    # waiting for the GIL on a busy machine) may fall into the first. It looked every 0.2 s before: 10 a window.
    wakes = []
    for _ in range(3):
        before = main_thread_wakes()
        time.sleep(2.0)
        wakes.append(main_thread_wakes() - before)
        if wakes[-1] <= 2:
            break
    assert min(wakes) <= 2, wakes
    assert daemon.stop() < 5.0 and daemon.proc.returncode == 0


@pytest.mark.e2e  # npu-smi as a child process: it must not inherit NOTIFY_SOCKET
def test_systemd_notify_ready_status_watchdog_stopping(tmp_path, daemons):
    address = str(tmp_path / "notify.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(address)
        listener.settimeout(0.2)
        daemon = daemons("--simulate", "--listen", "127.0.0.1:0", "--config", write_config(tmp_path),
                         env={"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "400000"})  # ping every 0.2 s
        messages = []

        def receive_until(predicate, timeout=10.0):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    messages.append(listener.recv(4096).decode())
                except socket.timeout:
                    continue
                if predicate(messages[-1]):
                    return
            raise AssertionError("no matching notification; got {!r}".format(messages))

        receive_until(lambda message: "READY=1" in message)
        receive_until(lambda message: message.startswith("STATUS=") and "chips" in message)
        watchdogs_before = sum(message == "WATCHDOG=1" for message in messages)
        receive_until(lambda message: message == "WATCHDOG=1")
        daemon.signal(signal.SIGHUP)
        receive_until(lambda message: "RELOADING=1" in message)
        receive_until(lambda message: "READY=1" in message)
        daemon.proc.send_signal(signal.SIGTERM)
        receive_until(lambda message: "STOPPING=1" in message)
        daemon.proc.wait(5)
    assert messages[0].split("\n")[0] == "READY=1"
    assert sum(message == "WATCHDOG=1" for message in messages) > watchdogs_before
    # npu-smi runs without NOTIFY_SOCKET: nothing but npumon itself talks to systemd
    assert all(message.split("=")[0] in ("READY", "STATUS", "WATCHDOG", "RELOADING", "STOPPING")
               for text in messages for message in text.split("\n"))


# -- startup errors: one line, exit 2 ------------------------------------------------------------------

def test_port_in_use_is_one_line_exit_2(tmp_path, daemons):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        daemon = daemons("--simulate", "--listen", "127.0.0.1:{}".format(port), "--config", write_config(tmp_path))
        line = one_error_line(daemon)
    assert line.startswith("npumon: --listen: cannot listen on 127.0.0.1:{}".format(port))
    assert "in use" in line


@pytest.mark.parametrize("listen, problem", [
    ("localhost", "has no port (expected host:port)"),
    ("127.0.0.1:99999", "port must be 0..65535"),
    ("::1:9842", "brackets"),
])
def test_bad_listen_is_one_line_exit_2(tmp_path, daemons, listen, problem):
    line = one_error_line(daemons("--simulate", "--listen", listen, "--config", write_config(tmp_path)))
    assert line.startswith("npumon: --listen") and problem in line


def test_unwritable_state_dir_is_one_line_exit_2(tmp_path, daemons):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(blocker / "state"))
    line = one_error_line(daemons("--simulate", "--listen", "127.0.0.1:0", "--config", str(config)))
    assert line == "npumon: {}: state_dir: {} is not a writable directory: Not a directory".format(
        config, blocker / "state")


def test_bad_config_and_missing_tls_files_are_one_line_exit_2(tmp_path, daemons):
    config = write_config(tmp_path, "exporter:\n  tls_cert_file: {0}/no.pem\n  tls_key_file: {0}/no.pem\n".format(
        tmp_path))
    line = one_error_line(daemons("--simulate", "--listen", "127.0.0.1:0", "--config", config))
    assert line.startswith("npumon: {}: exporter.tls_cert_file: cannot load TLS certificate".format(config))
    assert "No such file" in line
    bad = tmp_path / "bad.yaml"
    bad.write_text("poll:\n  table_seconds: fast\n")
    line = one_error_line(daemons("--simulate", "--config", str(bad)))
    assert line.startswith("npumon: {}:2: poll.table_seconds:".format(bad))


def test_tls_from_the_config(tmp_path, daemons, certificate):
    cert, key = certificate
    config = write_config(tmp_path, "exporter:\n  tls_cert_file: {}\n  tls_key_file: {}\n".format(cert, key))
    daemon = daemons("--simulate", "--listen", "127.0.0.1:0", "--config", config)
    port = daemon.wait_serving()
    assert requests.get("https://127.0.0.1:{}/healthz".format(port), verify=cert, timeout=5).status_code == 200
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get("http://127.0.0.1:{}/healthz".format(port), timeout=5)


# -- npu-smi hangs mid-run ------------------------------------------------------------------------------

@pytest.mark.e2e
def test_npu_smi_hanging_mid_run(tmp_path, daemons):
    """/metrics keeps answering fast, npu-smi's source goes down and its values go away once stale, the
    daemon stays healthy, recovers when npu-smi answers again, and leaves no npu-smi process behind."""
    sim_state = str(tmp_path / "sim")
    daemon = daemons("--simulate", "--sim-state", sim_state, "--listen", "127.0.0.1:0",
                     "--config", write_config(tmp_path, max_age=4, timeout=2))
    try:
        daemon.wait_serving()

        def metric(name, **labels):
            return sample(daemon.get("/metrics").text, name, **labels)

        wait_until(lambda: metric("npumon_chip_power_watts", npu="0", chip="0") is not None, what="first values")
        assert metric("npumon_source_up", source="npu-smi") == 1

        set_scenario(sim_state, "hang")
        slowest = 0.0
        hung_at = time.monotonic()
        while metric("npumon_source_up", source="npu-smi") != 0:
            assert time.monotonic() - hung_at < 10, "npu-smi's source never went down"
            started = time.monotonic()
            daemon.get("/metrics")
            slowest = max(slowest, time.monotonic() - started)
        # The values stay while fresh, then go: max_age_seconds is 4.
        wait_until(lambda: metric("npumon_chip_temperature_celsius", npu="0", chip="0") is None, timeout=10,
                   what="stale values dropped")
        text = daemon.get("/metrics").text
        assert sample(text, "npumon_chip_power_watts", npu="0", chip="0") is None
        assert sample(text, "npumon_source_last_success_timestamp_seconds", source="npu-smi") < time.time() - 4
        status = daemon.get("/status").json()
        assert status["status"] == "unknown" and status["chips"] == []
        assert "timed out" in status["sources"]["npu-smi"]["error"]
        # The poll loop itself is fine: each hung call is killed at its deadline.
        assert daemon.get("/healthz").status_code == 200
        for _ in range(20):
            started = time.monotonic()
            assert daemon.get("/metrics").status_code == 200
            slowest = max(slowest, time.monotonic() - started)
        assert slowest < 1.0  # well under the 2 s npu-smi deadline: a scrape never waits for npu-smi
        # At most npu_smi_max_concurrent (2) query calls and the table's at a time, each killed with its
        # process group (the simulator's hang leaves a forked child in the group).
        assert len(processes_of_simulation(sim_state)) <= (2 + 1) * 2

        set_scenario(sim_state, "healthy")
        wait_until(lambda: metric("npumon_source_up", source="npu-smi") == 1, timeout=10, what="recovery")
        wait_until(lambda: metric("npumon_chip_temperature_celsius", npu="0", chip="0") is not None, timeout=10,
                   what="values back")
        wait_until(lambda: daemon.get("/status").json()["status"] == "ok", timeout=10, what="status ok again")
        started = hang_pids(sim_state)
        assert started, "the hang scenario never ran"
        # (healthy calls come and go all the time now; the hung ones must be gone)
        wait_until(lambda: not live_hang_pids(sim_state), timeout=10, what="every hung call reaped")
        assert daemon.stop() < STOP_BOUND_SECONDS
    finally:
        kill_leftovers(sim_state)


def test_sim_state_needs_simulate(tmp_path, daemons):
    line = one_error_line(daemons("--sim-state", str(tmp_path), "--config", write_config(tmp_path)))
    assert line == "npumon: --sim-state needs --simulate"

