"""`npumon run --simulate=<scenario>` for the driver-fault scenarios: in a real daemon the simulated kernel
log is read (the kmsg source is on in simulation), and every new rule fires on the scenario made for it."""

import pytest

from daemon_harness import DaemonProcess, kill_leftovers, wait_until

CONFIG = """\
state_dir: {state}
poll: {{table_seconds: 1, host_seconds: 1}}
network: {{link_seconds: 1}}
faults: {{interval_seconds: 1}}
probe: {{enabled: false}}
"""
SCENARIOS = [
    ("heartbeat-lost", {("driver-device-fault", "npu2/chip0"), ("driver-fault-repeating", "npu2/chip0")}),
    ("hbm-ecc-fault", {("driver-fault-repeating", "npu3/chip0"), ("health-alarm", "npu3/chip0")}),
    ("card-drop", {("chips-missing", "host"), ("driver-host-device-fault", "host"),
                   ("driver-host-fault-repeating", "host")}),
    ("link-down-escalation", {("network-link-down-long", "npu5/chip0")}),
    ("kmsg-storm", {("driver-transient-fault", "npu0/chip0")}),
    ("job-software-fault", {("job-fault", "host")}),
]
TIMEOUT = 60.0  # only a failure waits this long


@pytest.mark.slow
@pytest.mark.integration
@pytest.mark.parametrize("scenario,wanted", SCENARIOS, ids=[s[0] for s in SCENARIOS])
def test_the_daemon_raises_the_fault_scenarios_findings(tmp_path, scenario, wanted):
    config = tmp_path / "npumon.yaml"
    config.write_text(CONFIG.format(state=tmp_path / "state"), encoding="utf-8")
    daemon = DaemonProcess(["--config", str(config), "--simulate=" + scenario, "--sim-state", str(tmp_path / "sim"),
                            "--listen", "127.0.0.1:0"], env={"NPUMON_SIM_LATENCY_SCALE": "0"})
    try:
        daemon.wait_serving(30)

        def raised():
            findings = {(f["rule"], f["subject"]): f for f in daemon.get("/status").json()["findings"]}
            return findings if wanted <= set(findings) else None

        findings = wait_until(raised, TIMEOUT, interval=0.5, what="the findings of " + scenario)
        assert all(findings[key]["repair_action"] == "inspect_hardware" for key in wanted
                   if key[0] in ("driver-fault-repeating", "driver-host-fault-repeating", "chips-missing",
                                 "network-link-down-long"))
        # The findings may come from the pass judged just after the kernel log's first poll (Tier.judged), before
        # the chip count's first poll has learned the 8 chips: the series follow within a poll.
        wait_until(lambda: all(series in daemon.get("/metrics").text
                               for series in ("npumon_kmsg_records_read", "npumon_chips_expected 8.0")),
                   TIMEOUT, interval=0.5, what="the kernel log's and the chip count's series")
    finally:
        daemon.close()
        kill_leftovers(str(tmp_path / "sim"))
