"""The daemon on the DCMI backend while the library misbehaves (the simulated libdcmi.so hangs in a call, then
segfaults): /metrics keeps answering, the dcmi source is down with the reason, the worker is restarted, and
nothing is left running after the daemon stops."""

import time

import pytest

from daemon_harness import DaemonProcess, kill_leftovers, processes_of_simulation, sample, wait_until
from npumon.sim.dcmi import set_dcmi_faults

pytestmark = pytest.mark.integration


def _status(daemon):
    return daemon.get("/status").json()["sources"]


def test_a_hanging_then_crashing_library_leaves_the_daemon_serving(tmp_path, fake_dcmi_library):
    config = tmp_path / "npumon.yaml"
    config.write_text("collect: {backend: dcmi}\ndcmi: {timeout_seconds: 1}\n"
                      "poll: {table_seconds: 0.5, host_seconds: 0}\nstate_dir: %s\n" % (tmp_path / "state"))
    state = tmp_path / "sim"
    daemon = DaemonProcess(["--simulate", "--sim-state", str(state), "--listen", "127.0.0.1:0",
                            "--config", str(config)])
    try:
        daemon.wait_serving()
        wait_until(lambda: sample(daemon.get("/metrics").text, "npumon_source_up", source="dcmi") == 1,
                   timeout=20, what="DCMI up")
        assert _status(daemon)["npu-smi"]["backend"] == "dcmi"
        assert "npu-smi:usages" not in _status(daemon) or not _status(daemon)["npu-smi:usages"]["last_success"]

        set_dcmi_faults(str(state), hang=["dcmi_get_device_temperature"], hang_seconds=600)
        wait_until(lambda: "a DCMI call hangs" in (_status(daemon)["dcmi"]["error"] or ""), timeout=15,
                   what="the hang reported")
        started = time.monotonic()
        assert daemon.get("/metrics", timeout=2).status_code == 200
        assert time.monotonic() - started < 1.0
        assert sample(daemon.get("/metrics").text, "npumon_source_up", source="npu-smi") == 1

        set_dcmi_faults(str(state), segfault=["dcmi_get_device_health"])
        wait_until(lambda: "SIGSEGV" in (_status(daemon)["dcmi"]["error"] or ""), timeout=15,
                   what="the crash reported")
        assert daemon.get("/metrics", timeout=2).status_code == 200

        set_dcmi_faults(str(state))
        wait_until(lambda: _status(daemon)["dcmi"]["ok"], timeout=20, what="DCMI up again after a restart")
    finally:
        daemon.stop()
        daemon.close()
    try:
        wait_until(lambda: not processes_of_simulation(str(state)), timeout=5, what="no process left")
    finally:
        kill_leftovers(str(state))
