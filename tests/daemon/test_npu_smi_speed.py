"""The daemon at real npu-smi speed: a healthy host whose every npu-smi call takes a second raises nothing,
a hung one raises source-down within the rule's `for:`.

With the shipped poll intervals and rules. The fast tests walk a clocked host (tests/clocked_host.py: the
sources, the rules and the in-process npu-smi on one fake clock); the slow one runs the daemon for real.
"""

import os
import time

import pytest

from clocked_host import ClockedHost
from npumon.settings import parse_config
from npumon.daemon.daemon import Daemon
from npumon.sim.scenario import SCENARIO_DIR
from npumon.sim.simulation import prepare_simulation
from npumon.sim.target import simulated_target

SHIPPED = "state_dir: {state}\nprobe: {{enabled: false}}\n"  # everything else as shipped


def one_second_per_call(tmp_path):
    """`healthy` with every npu-smi call taking a second more than the latency model says."""
    path = tmp_path / "healthy-1s.yaml"
    with open(os.path.join(SCENARIO_DIR, "healthy.yaml"), encoding="utf-8") as handle:
        path.write_text(handle.read() + "\ndelay_seconds: 1\n")
    return str(path)


def test_healthy_at_one_second_per_call_raises_nothing_in_ten_minutes(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), one_second_per_call(tmp_path))
    host = ClockedHost(parse_config(SHIPPED.format(state=tmp_path / "state")), sim)
    try:
        started, seen = host.clock(), set()
        while host.clock() - started < 600:
            seen.update((finding.rule, finding.subject) for finding in host.step())
        assert seen == set()
        assert all(status.ok for status in host.snapshot.sources.values()), host.snapshot.sources
        assert host.snapshot.chips[0].ecc_double_bit_errors is not None  # every tier really read its values
    finally:
        host.close()


def test_a_hung_npu_smi_raises_source_down_within_its_for(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "hang")
    host = ClockedHost(parse_config(SHIPPED.format(state=tmp_path / "state")), sim)
    try:
        started = host.clock()
        while ("source-down", "host") not in {(f.rule, f.subject) for f in host.step()}:
            # the table's 10 s deadline, then the rule's `for: 1m`, polled every 15 s
            assert host.clock() - started < 10 + 60 + 2 * 15, "no source-down yet"
    finally:
        host.close()


@pytest.mark.slow
def test_a_real_daemon_at_one_second_per_call_raises_nothing(tmp_path, monkeypatch):
    """The daemon itself, real threads and slots, for 100 s: past the minute after which a query tier that
    waited for slots used to fire source-down."""
    monkeypatch.setenv("NPUMON_SIM_IN_PROCESS", "1")  # real sleeps, no fork per call
    sim = prepare_simulation(str(tmp_path / "sim"), one_second_per_call(tmp_path))
    target = simulated_target(sim)
    daemon = Daemon(parse_config(SHIPPED.format(state=tmp_path / "state")), target, listen="127.0.0.1:0")
    daemon.start()
    seen = set()
    try:
        started = time.monotonic()
        while time.monotonic() - started < 100:
            time.sleep(2)
            seen.update((finding.rule, finding.subject) for finding in daemon.state().findings)
        snapshot = daemon.state().snapshot
    finally:
        daemon.stop()
    assert seen == set()
    assert snapshot.sources["npu-smi"].ok and snapshot.sources["npu-smi:usages"].ok
