"""An outage end to end: the receiver is down while findings fire and resolve, and the daemon is killed
with SIGKILL in between. Once the receiver is back, every notification arrives -- each alert's firing and
resolved state exactly once, in order -- and the outbox is empty. Real processes, a real HTTP receiver."""

import collections
import os
import signal
import sqlite3
import subprocess
import sys
import time

from daemon_harness import free_port, wait_until
from npumon.services.notify.outbox import OUTBOX_FILE
from recording_server import RecordingServer

CONFIG = """\
state_dir: {state}
poll: {{table_seconds: 0.3, usages_seconds: 0, power_seconds: 0, health_seconds: 0, ecc_seconds: 0,
        board_seconds: 0}}
notify:
  retry_initial_seconds: 0.2
  retry_max_seconds: 0.5
  restart_grace_seconds: 0
  receivers:
    - name: hook
      type: webhook
      url: http://127.0.0.1:{port}/hook
      group_interval_seconds: 0
      repeat_seconds: 3600
"""


def start_daemon(tmp_path, scenario):
    log = open(str(tmp_path / "daemon-{}.log".format(scenario)), "w")
    env = dict(os.environ, TMPDIR=str(tmp_path))  # the simulation's directory, left behind by the SIGKILL
    process = subprocess.Popen([sys.executable, "-m", "npumon.cli.main", "run", "--simulate=" + scenario,
                                "--config", str(tmp_path / "npumon.yaml"), "--listen", "127.0.0.1:0"],
                               stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return process, log


def outbox_rows(tmp_path):
    path = tmp_path / "state" / OUTBOX_FILE
    if not path.exists():
        return []
    with sqlite3.connect(str(path)) as db:
        try:
            return db.execute("SELECT status, attempts, state FROM notifications ORDER BY id").fetchall()
        except sqlite3.OperationalError:  # the daemon is still creating the tables
            return []


def test_nothing_is_lost_across_an_outage_and_a_kill_9(tmp_path):
    port = free_port()
    (tmp_path / "npumon.yaml").write_text(CONFIG.format(state=tmp_path / "state", port=port))

    # Receiver down; health-alarm fires (npu0 Alarm, npu1 Warning) and delivery keeps failing.
    first, first_log = start_daemon(tmp_path, "health-alarm")
    try:
        wait_until(lambda: [row for row in outbox_rows(tmp_path) if row[1] >= 2] == outbox_rows(tmp_path)
                   and len(outbox_rows(tmp_path)) == 2, 20, what="two firing notifications, tried and failed twice")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the daemon and its simulated npu-smi, no goodbye
        first.wait()
        first_log.close()
    assert [row[0] for row in outbox_rows(tmp_path)] == ["firing", "firing"]

    # Restarted on a healthy host, receiver still down: the findings resolve while nobody listens.
    second, second_log = start_daemon(tmp_path, "healthy")
    try:
        wait_until(lambda: [row[0] for row in outbox_rows(tmp_path)] == ["firing", "firing", "resolved", "resolved"],
                   20, what="the resolved notifications to be queued")
        with RecordingServer(port=port) as receiver:  # the receiver comes back
            wait_until(lambda: outbox_rows(tmp_path) == [], 20, what="the outbox to drain")
            time.sleep(2 * 0.5)  # anything sent twice would arrive now: twice retry_max_seconds
            requests = list(receiver.requests)
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(15) == 0
        second_log.close()

    delivered = [(alert["fingerprint"], alert["status"], alert["startsAt"], alert["labels"]["alertname"])
                 for request in requests for alert in request.json()["alerts"]]
    counts = collections.Counter((fingerprint, status) for fingerprint, status, _, _ in delivered)
    assert sorted(counts.values()) == [1, 1, 1, 1], delivered  # each state change exactly once
    assert {name for _, _, _, name in delivered} == {"health-alarm", "health-warning"}
    for fingerprint in {item[0] for item in delivered}:
        states = [(status, starts) for key, status, starts, _ in delivered if key == fingerprint]
        assert [status for status, _ in states] == ["firing", "resolved"]  # in order
        assert states[0][1] == states[1][1]  # the resolved one names the same start
