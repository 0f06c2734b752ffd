"""The daemon's HTTP server and its health: /healthz and the systemd watchdog say so when the server cannot
serve, the poll loop goes on meanwhile, and npumon_http_* show the server's limits at work."""

import os
import socket
import threading
import time

import pytest
import requests

from npumon.sim.target import simulated_target
import npumon.daemon.daemon as daemon_module
from daemon_harness import DaemonProcess, WatchdogListener, sample, wait_until
from npumon.daemon.daemon import Daemon
from npumon.sim import prepare_simulation
from test_daemon import fast_config, load

@pytest.fixture
def sim(tmp_path):
    def make(scenario="healthy"):
        simulation = prepare_simulation(str(tmp_path / "sim"), scenario)
        return simulated_target(simulation)
    return make


ONE_WORKER = """\
exporter:
  http_workers: 1
  max_connections: 8
  request_timeout_seconds: 0.5
"""


def get_into(results, key, url):
    """results[key]: the response, or the exception the request ended with."""
    try:
        results[key] = requests.get(url, timeout=5)
    except requests.exceptions.RequestException as exc:
        results[key] = exc


def test_healthz_and_the_watchdog_say_so_while_no_worker_can_serve(tmp_path, sim, monkeypatch, running):
    listener = WatchdogListener(tmp_path, monkeypatch)
    released = threading.Event()
    status_document = daemon_module.status_document

    def wedged_status(*args, **kwargs):  # a reader stuck on something: the one worker is taken
        released.wait(10)
        return status_document(*args, **kwargs)

    monkeypatch.setattr(daemon_module, "status_document", wedged_status)
    daemon = Daemon(load(fast_config(tmp_path, ONE_WORKER)), sim(), listen="127.0.0.1:0")

    results = {}
    try:
        running(daemon)
        url = "http://127.0.0.1:{}/healthz".format(daemon.web.port)
        wait_until(lambda: daemon.state().polls >= 1, timeout=10, what="first poll")
        assert requests.get(url, timeout=2).status_code == 200
        assert "WATCHDOG=1" in listener.received(0.3)

        stuck = threading.Thread(target=get_into, args=(results, "status", url.replace("/healthz", "/status")),
                                 daemon=True)
        stuck.start()
        wait_until(lambda: daemon.web.stats.snapshot()["busy"] == 1, timeout=3, what="the worker taken")
        queued = threading.Thread(target=get_into, args=(results, "healthz", url), daemon=True)
        queued.start()
        healthy, reason = wait_until(lambda: (lambda h: None if h[0] else h)(daemon.health()), timeout=3,
                                     what="unhealthy")
        assert "http server has no free worker: a request waited" in reason and "(1 of 1 busy)" in reason
        listener.received(0.15)  # a ping already on its way
        assert "WATCHDOG=1" not in listener.received(0.5)
        polls = daemon.state().polls
        wait_until(lambda: daemon.state().polls > polls, timeout=5, what="a poll while the server is wedged")

        released.set()
        queued.join(5)
        assert results["healthz"].status_code == 503  # it waited longer than a request may for a worker
        assert "no free worker" in results["healthz"].text
        wait_until(lambda: daemon.health()[0], timeout=3, what="healthy again")
        assert "WATCHDOG=1" in listener.received(0.6)
        assert requests.get(url, timeout=2).status_code == 200
        stuck.join(5)
        # its answer came after its deadline: the connection was closed instead
        assert isinstance(results["status"], requests.exceptions.ConnectionError)
    finally:
        released.set()
        listener.close()


def test_the_daemon_exports_its_http_servers_limits_and_refusals(tmp_path, sim, running):
    limits = ONE_WORKER.replace("request_timeout_seconds: 0.5", "request_timeout_seconds: 5")  # no eviction
    daemon = running(Daemon(load(fast_config(tmp_path, limits)), sim(), listen="127.0.0.1:0"))
    metrics = "http://127.0.0.1:{}/metrics".format(daemon.web.port)
    idle = [socket.create_connection(("127.0.0.1", daemon.web.port), timeout=5) for _ in range(8)]
    try:
        wait_until(lambda: daemon.web.stats.snapshot()["open"] == 8, timeout=3, what="8 connections open")
        refused = socket.create_connection(("127.0.0.1", daemon.web.port), timeout=5)
        assert refused.recv(4096).startswith(b"HTTP/1.0 503")
        refused.close()
    finally:
        for sock in idle:
            sock.close()
    wait_until(lambda: daemon.web.stats.snapshot()["open"] == 0, timeout=3, what="the idle connections closed")
    text = requests.get(metrics, timeout=2).text
    assert sample(text, "npumon_http_connections_refused_total") == 1.0
    assert sample(text, "npumon_http_connections_max") == 8.0
    assert sample(text, "npumon_http_workers") == 1.0
    assert sample(text, "npumon_http_workers_busy") == 1.0  # this scrape's
    assert sample(text, "npumon_http_connections_total") >= 10.0


PIDS_CGROUP = "/sys/fs/cgroup/pids"  # cgroup v1's pids controller: what systemd's TasksMax sets


@pytest.fixture
def task_limit(tmp_path):
    """limit(pid, tasks): move a process (all its threads) into a fresh pids cgroup with that many tasks."""
    made = []

    def limit(pid, tasks):
        path = os.path.join(PIDS_CGROUP, "npumon-test-{}-{}".format(os.getpid(), len(made)))
        try:
            os.mkdir(path)
        except OSError as exc:
            pytest.skip("cannot make a pids cgroup under {}: {}".format(PIDS_CGROUP, exc.strerror))
        made.append(path)
        with open(os.path.join(path, "pids.max"), "w") as handle:
            handle.write(str(tasks))
        with open(os.path.join(path, "cgroup.procs"), "w") as handle:
            handle.write(str(pid))

    yield limit
    for path in made:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                os.rmdir(path)
                break
            except OSError:  # busy until the process has gone
                time.sleep(0.1)


def test_slow_clients_under_a_task_limit_leave_scrapes_and_polling_alone(tmp_path, task_limit):
    """The issue's TasksMax case, scaled down: 100 clients trickling their head at a daemon allowed 48 tasks
    (it runs about 30). A thread per connection ran out; now scrapes answer and the polls go on."""
    daemon = DaemonProcess(["--simulate", "--sim-state", str(tmp_path / "sim"), "--listen", "127.0.0.1:0",
                            "--config", str(fast_config(tmp_path))])
    slow = []
    try:
        task_limit(daemon.proc.pid, 48)
        port = daemon.wait_serving()
        polled = wait_until(lambda: sample(daemon.get("/metrics").text,
                                           "npumon_source_last_success_timestamp_seconds", source="npu-smi"),
                            timeout=10, what="a first poll")
        for index in range(100):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(b"GET /metrics HTTP/1.0\r\nX-Slow: %d\r\n" % index)
            slow.append(sock)
        answered, durations = 0, []
        for _ in range(15):
            for sock in slow:
                try:
                    sock.sendall(b"X-More: 1\r\n")
                except OSError:
                    pass
            started = time.monotonic()
            try:
                answered += daemon.get("/metrics", timeout=2).status_code == 200
            except requests.exceptions.RequestException:
                pass
            durations.append(time.monotonic() - started)
            time.sleep(0.2)
        assert answered == 15 and max(durations) < 1.0, (answered, durations)
        text = daemon.get("/metrics", timeout=2).text
        assert sample(text, "npumon_source_last_success_timestamp_seconds", source="npu-smi") > polled
        assert sample(text, "npumon_http_connections_open") >= 100
    finally:
        for sock in slow:
            sock.close()
        daemon.close()
    assert not [line for line in daemon.lines if "can't start new thread" in line]
