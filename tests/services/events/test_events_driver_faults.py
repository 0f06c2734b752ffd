"""Driver faults from the kernel log through the event history, on real SQLite files and a real log file:
raised once, no duplicates across a restart, sticky until `npumon ack`, and a reboot (a new boot id) clears
the device faults a reboot fixes but not the hardware ones."""

import time

import pytest

from daemon_harness import DaemonProcess, sample, wait_until
from npumon.cli.events import acknowledge
from npumon.faults.patterns import load_patterns
from npumon.model import ChipSample, HostSample, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.services.events.service import EventService
from npumon.services.events.store import EventStore, events_path
from npumon.sources.base import Parts
from npumon.sources.kmsg.config import FaultsConfig
from npumon.sources.kmsg.source import KmsgSource
from npumon.sources.kmsg.state import read_boot_id

LINES = (
    "[ascend] [ERROR] [drv_soft_fault] [hb_read_one_device_count 203] <kworker/3:1:1234,1234> Heartbeat lost! "
    "(device_id=2; old_count=880; current_count=880; lost_count=3; total_lost_count=3; miss_read_count=0; "
    "hb_read_fail_count=0).\n"
    "[ascend] [ERROR] [drv_pcie] [devdrv_pci_error_detected 104] <kworker/0:2:77:77> Channel is blocked. "
    "(dev_id=3; aer_critical_cnt=1)\n")
CHIPS = [ChipSample(npu=n, chip=0, device_id=n, health="OK") for n in range(4)]
DEVICE = ("driver-device-fault", "npu2/chip0")
HARDWARE = ("driver-hardware-fault", "npu3/chip0")


class Host:
    """A daemon's kmsg source, rule engine and event history, restartable (and rebootable) on its files."""

    def __init__(self, tmp_path):
        self.tmp_path = tmp_path
        self.state = tmp_path / "state"
        self.log = tmp_path / "kern.log"
        self.log.write_text(LINES)
        self.boot_id = "boot-1"
        self.t0 = time.time()
        self.service = None
        self.start()

    def root(self):
        path = self.tmp_path / "root" / "proc/sys/kernel/random"
        path.mkdir(parents=True, exist_ok=True)
        (path / "boot_id").write_text(self.boot_id + "\n")
        return str(self.tmp_path / "root")

    def start(self, offset=0.0):
        root = self.root()
        self.clock = [self.t0 + offset]
        self.source = KmsgSource(FaultsConfig(kmsg_path=str(self.log), hold_seconds=600), root, str(self.state),
                                 load_patterns(), clock=lambda: self.clock[0])
        self.engine = RuleEngine(*load_rules())
        self.service = EventService(events_path(str(self.state)), 86400, lambda: self.engine,
                                    boot_id=read_boot_id(root + "/proc/sys/kernel/random/boot_id"))

    def stop(self):
        if self.service is not None:
            self.service.close()
            self.service = None

    def poll(self, offset):
        self.clock[0] = now = self.t0 + offset
        self.source.poll("kmsg", CHIPS)
        parts = self.source.contribute(Parts(time=now, host=HostSample(hostname="h"), chips=tuple(CHIPS)), now)
        snapshot = parts.snapshot({"kmsg": self.source.statuses(now)["kmsg"],
                                   "npu-smi": SourceStatus(ok=True, last_success=now)})
        findings = self.engine.evaluate(snapshot)
        self.service.on_evaluation(snapshot, findings, self.engine.transitions())
        assert self.service.flush()
        return {(f.rule, f.subject): (f.repair_action, f.level) for f in findings if f.rule.startswith("driver-")}

    def events(self, kind):
        store = EventStore(events_path(str(self.state)), readonly=True)
        try:
            return [(e.details or {}).get("rule", e.subject) for e in store.query(kinds=[kind])]
        finally:
            store.close()

    def ack(self, key):
        store = EventStore(events_path(str(self.state)))
        try:
            return acknowledge(store, key, "card reseated", "alice")
        finally:
            store.close()


@pytest.fixture
def host(tmp_path):
    host = Host(tmp_path)
    yield host
    host.stop()


def test_driver_faults_fire_once_survive_restart_wait_for_ack_and_a_reboot_clears_device_faults(host):
    assert host.poll(0) == {DEVICE: ("reset_npu", "RestartNPU"), HARDWARE: ("inspect_hardware", None)}
    assert host.poll(15) == {DEVICE: ("reset_npu", "RestartNPU"), HARDWARE: ("inspect_hardware", None)}
    assert sorted(host.events("finding_fired")) == ["driver-device-fault", "driver-hardware-fault"]

    host.stop()  # a restart: the log is not read again, the findings are taken over, nothing fires twice
    host.start(offset=30)
    assert set(host.poll(30)) == {DEVICE, HARDWARE}
    assert host.source.stats["records"] == 0
    assert len(host.events("finding_fired")) == 2

    assert set(host.poll(1000)) == {DEVICE, HARDWARE}  # past the hold time: sticky, still there

    host.stop()  # a reboot: a new boot id
    host.boot_id = "boot-2"
    host.start(offset=1100)
    assert set(host.poll(1100)) == {HARDWARE}
    assert host.events("host_rebooted") == ["host"]
    assert host.events("finding_resolved") == ["driver-device-fault"]

    assert host.ack(HARDWARE)  # `npumon ack` clears the hardware fault (the evaluation after it sees it)
    host.poll(1115)
    assert host.poll(1130) == {}
    assert sorted(host.events("finding_resolved")) == ["driver-device-fault", "driver-hardware-fault"]


def test_without_a_boot_id_no_reboot_is_assumed(host):
    host.poll(0)
    host.stop()
    (host.tmp_path / "root/proc/sys/kernel/random/boot_id").unlink()
    root = str(host.tmp_path / "root")
    host.engine = RuleEngine(*load_rules())
    host.source = KmsgSource(FaultsConfig(kmsg_path=str(host.log)), root, str(host.state), load_patterns(),
                             clock=lambda: host.clock[0])
    host.service = EventService(events_path(str(host.state)), 86400, lambda: host.engine, boot_id=None)
    assert set(host.poll(30)) == {DEVICE, HARDWARE}
    assert host.events("host_rebooted") == []


# --------------------------------------------------------------------------------------------- real daemons

DAEMON_CONFIG = """\
state_dir: {state}
poll: {{table_seconds: 0.5, health_seconds: 0, ecc_seconds: 0, host_seconds: 0.5, usages_seconds: 0,
        power_seconds: 0, board_seconds: 0}}
faults: {{kmsg_path: {log}, interval_seconds: 0.5}}
"""
TIMEOUT = 30.0


def test_a_real_daemon_raises_the_logs_faults_once_keeps_them_over_a_restart_and_ack_clears_them(tmp_path, cli):
    log = tmp_path / "kern.log"
    log.write_text(LINES)
    config = tmp_path / "npumon.yaml"
    config.write_text(DAEMON_CONFIG.format(state=tmp_path / "state", log=log))
    state = str(tmp_path / "state")

    def fired():
        store = EventStore(events_path(state), readonly=True)
        try:
            return [(e.details["rule"], e.subject) for e in store.query(kinds=["finding_fired"])
                    if e.details["rule"].startswith("driver-")]
        finally:
            store.close()

    def driver_findings(daemon):
        return {(f["rule"], f["subject"]): f.get("repair_action") for f in daemon.get("/status").json()["findings"]
                if f["rule"].startswith("driver-")}

    for run in range(2):
        daemon = DaemonProcess(["-c", str(config), "--simulate", "--listen", "127.0.0.1:0"])
        try:
            daemon.wait_serving(TIMEOUT)
            wait_until(lambda: len(driver_findings(daemon)) == 2, TIMEOUT, what="the two driver faults")
            assert driver_findings(daemon) == {("driver-device-fault", "npu2/chip0"): "reset_npu",
                                               ("driver-hardware-fault", "npu3/chip0"): "inspect_hardware"}
            metrics = daemon.get("/metrics").text
            assert sample(metrics, "npumon_finding_repair_info", rule="driver-device-fault", subject="npu2/chip0",
                          repair_action="reset_npu", level="RestartNPU") == 1
            assert sorted(fired()) == [DEVICE, HARDWARE]  # raised once, also after the restart
            if run == 1:
                acked = cli("ack", "-c", str(config), *HARDWARE)  # in this process; the daemon's is another
                assert acked.returncode == 0, acked.stderr
                wait_until(lambda: set(driver_findings(daemon)) == {DEVICE}, TIMEOUT, what="the ack to apply")
        finally:
            daemon.close()
