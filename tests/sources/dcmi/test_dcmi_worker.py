"""The DCMI source against the simulated libdcmi.so (npumon.sim.dcmi, compiled with gcc at test time): a real
worker process, real hangs and segfaults inside the library. Each must leave the source down with the reason,
the worker killed and restarted, and no process behind."""

import os
import time

import pytest

from npumon.sim.dcmi import set_dcmi_faults
from npumon.sim.simulation import prepare_simulation
from npumon.sources.dcmi import backend
from npumon.sources.dcmi.source import DcmiSource

pytestmark = pytest.mark.integration


@pytest.fixture
def sim(tmp_path):
    return prepare_simulation(str(tmp_path / "sim"), product="atlas-800i-a2", time_scale=0)


def _source(sim, library, timeout=2.0) -> DcmiSource:
    decision = backend.Decision(backend.DCMI, library, "test", owner_uid=os.getuid(), sticky_dirs=True,
                                env=dict(sim.env))
    return DcmiSource(decision, interval=15.0, max_age=120.0, timeout_seconds=timeout, open_timeout_seconds=10.0)


def _alive(pid) -> bool:
    try:
        with open("/proc/{}/stat".format(pid)) as handle:
            return handle.read().split(")")[-1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait_out_backoff(source: DcmiSource) -> None:
    source.worker._not_before = 0.0  # the backoff itself is tested below; these tests need not sleep through it


def test_a_sweep_reads_every_chip(sim, library):
    source = _source(sim, library)
    try:
        source.poll("dcmi")
        status = source.statuses(time.time())["dcmi"]
        assert status.ok and status.error is None and status.backend == "dcmi"
        values = source.fresh_values(time.time())
        assert sorted(values) == [(npu, 0) for npu in range(8)]
        chip = values[(0, 0)]
        assert chip["name"] == "910B3" and chip["health"] == "OK" and chip["device_id"] == 0
        assert chip["hbm_total_bytes"] == 65536 * 1048576 and 0 < chip["power_watts"] < 1000
        assert chip["vdie_id"].count("-") == 4 and chip["bus_id"] == "0000:C1:00.0"
    finally:
        source.close()


def test_a_hanging_call_kills_the_worker_and_the_next_poll_restarts_it(sim, library):
    source = _source(sim, library, timeout=1.0)
    try:
        source.poll("dcmi")
        first = source.worker.pid
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], hang=["dcmi_get_device_temperature"], hang_seconds=600)
        started = time.monotonic()
        source.poll("dcmi")
        assert time.monotonic() - started < 5.0
        status = source.statuses(time.time())["dcmi"]
        assert not status.ok
        assert status.error == "worker: no answer within 1.0s (a DCMI call hangs): worker killed"
        assert not _alive(first) and source.worker.pid is None
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"])
        source.poll("dcmi")  # within the backoff: not started yet, and says so
        assert source.statuses(time.time())["dcmi"].error.startswith("worker: worker restarts in ")
        _wait_out_backoff(source)
        source.poll("dcmi")
        assert source.statuses(time.time())["dcmi"].ok
        assert source.worker.restarts == 1 and source.worker.pid != first
    finally:
        source.close()


def test_a_segfault_in_the_library_is_a_worker_restart_not_a_crash(sim, library):
    source = _source(sim, library)
    try:
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], segfault=["dcmi_get_device_health"])
        source.poll("dcmi")
        status = source.statuses(time.time())["dcmi"]
        assert not status.ok and status.error == "worker: worker died mid-request (killed by SIGSEGV)"
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"])
        _wait_out_backoff(source)
        source.poll("dcmi")
        assert source.statuses(time.time())["dcmi"].ok and source.worker.restarts == 1
    finally:
        source.close()


def test_close_leaves_no_process(sim, library):
    source = _source(sim, library, timeout=0.5)
    source.poll("dcmi")
    pid = source.worker.pid
    assert _alive(pid)
    source.close()
    assert not _alive(pid)


def test_unsupported_results_are_not_asked_again_until_restart(sim, library):
    source = _source(sim, library)
    try:
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], codes={"dcmi_get_device_voltage": -8255})
        source.poll("dcmi")
        assert (0, 0, "voltage") in source.unsupported
        assert "voltage_volts" not in source.fresh_values(time.time())[(0, 0)]
        assert source.statuses(time.time())["dcmi"].ok  # not a failure: the chip has no such value
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"])
        source.poll("dcmi")
        assert "voltage_volts" not in source.fresh_values(time.time())[(0, 0)]
    finally:
        source.close()


def test_a_failing_call_is_named_by_its_code_and_keeps_the_last_value(sim, library):
    source = _source(sim, library)
    try:
        source.poll("dcmi")
        before = source.fresh_values(time.time())[(0, 0)]["temperature_celsius"]
        logic = 0
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], codes={"dcmi_get_device_temperature@{}".format(logic): -8006})
        source.poll("dcmi")
        status = source.statuses(time.time())["dcmi"]
        assert status.ok and status.degraded
        assert status.error == ("degraded: npu 0 chip 0: temperature: dcmi_get_device_temperature returned "
                                "-8006 DCMI_ERR_CODE_TIME_OUT")
        assert source.fresh_values(time.time())[(0, 0)]["temperature_celsius"] == before
    finally:
        source.close()


def test_a_failing_init_is_named(sim, library):
    set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], init=-8012)
    source = _source(sim, library)
    try:
        source.poll("dcmi")
        error = source.statuses(time.time())["dcmi"].error
        # the simulated library has V2 too, which a V1 product refuses (a library without it: -99998 FUNCTION_NOT_FOUND)
        assert error.endswith("init failed: dcmi_init: -8012 DCMI_ERR_CODE_NOT_REDAY; "
                              "dcmiv2_init: -8255 DCMI_ERR_CODE_NOT_SUPPORT")
    finally:
        source.close()


def test_ids_and_die_ids_are_read_at_the_identity_interval_not_every_poll(sim, library):
    source = _source(sim, library)
    try:
        source.poll("dcmi")
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], codes={"dcmi_get_device_die_v2": -8005})
        source.poll("dcmi")  # not asked again: no failure, and the die id stays
        status = source.statuses(time.time())["dcmi"]
        assert status.ok and not status.degraded
        assert source.fresh_values(time.time())[(0, 0)]["vdie_id"].count("-") == 4
        source._static_due = 0.0  # the identity interval has passed
        source.poll("dcmi")
        assert "dcmi_get_device_die_v2 returned -8005 DCMI_ERR_CODE_INNER_ERR" in source.statuses(
            time.time())["dcmi"].error
    finally:
        source.close()


def test_a_burst_of_init_type_errors_initialises_the_library_again(sim, library):
    source = _source(sim, library)
    try:
        source.poll("dcmi")
        assert source.reinitialisations == 0
        set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], codes={"dcmi_get_device_temperature": -8010})
        source.poll("dcmi")  # -8010 (message send failed) on all 8 chips: the worker calls dcmi_init again
        assert source.reinitialisations == 1
        assert "-8010 DCMI_ERR_CODE_SEND_MSG_FAIL" in source.statuses(time.time())["dcmi"].error
    finally:
        source.close()


def test_close_during_a_hanging_call_ends_it_at_once(sim, library):
    import threading

    source = _source(sim, library, timeout=30.0)
    source.poll("dcmi")
    pid = source.worker.pid
    set_dcmi_faults(sim.env["NPUMON_SIM_STATE"], hang=["*"], hang_seconds=600)
    polling = threading.Thread(target=source.poll, args=("dcmi",))
    polling.start()
    time.sleep(0.5)
    started = time.monotonic()
    source.close()
    polling.join(timeout=10)
    assert not polling.is_alive() and time.monotonic() - started < 3.0
    assert not _alive(pid) and "worker died mid-request" in source.statuses(time.time())["dcmi"].error
