"""The kmsg source: resuming across restarts without repeats, lost records, rate limits and bounds,
users' patterns, the real /dev/kmsg of this machine, and `npumon check --json` over a file of real lines."""

import errno
import json
import os
import time
import tracemalloc
from pathlib import Path

import pytest

from npumon.faults.patterns import PatternError, load_patterns, match_line
from npumon.model import ChipSample, HostSample
from npumon.sources.base import Parts
from npumon.sources.kmsg.config import FaultsConfig
from npumon.sources.kmsg.facts import chip_facts
from npumon.sources.kmsg.reader import MAX_FILE_BYTES_PER_READ, KmsgDevice, LogFile
from npumon.sources.kmsg.source import KmsgSource
from npumon.sources.kmsg.state import CURSOR_FILE
from paths import FIXTURES

REAL = Path(FIXTURES) / "kmsg_ascend-driver-lines_real.txt"
CHIPS = [ChipSample(npu=n, chip=0, device_id=n) for n in range(8)]
HEARTBEAT = ("[ascend] [ERROR] [drv_soft_fault] [hb_read_one_device_count 203] <kworker/3:1:1234,1234> Heartbeat "
             "lost! (device_id={}; old_count=1; current_count=1; lost_count=3; total_lost_count=3; "
             "miss_read_count=0; hb_read_fail_count=0).")
HBM_EVENT = "[EVENT] TDT(4717,tsdaemon): [TsdEVENT] Event id=0x80E01801."  # a code of the HBM family


class FakeRing:
    """Stands in for the kernel's /dev/kmsg: one record a read, EAGAIN at the end, EPIPE after an overwrite."""

    def __init__(self):
        self.records = []  # (seq, text)
        self.position = 0  # index of the next record to hand out, per open
        self.overwritten_before = None  # the next read fails with EPIPE, then goes on from this index

    def add(self, seq, message, level=5):
        self.records.append((seq, "{},{},{},-;{}\n".format(level, seq, seq * 1000, message)))

    def open(self, path, flags):
        self.position = 0
        return 99

    def read(self, fd, size):
        if self.overwritten_before is not None:
            self.position, self.overwritten_before = self.overwritten_before, None
            raise BrokenPipeError(errno.EPIPE, "Broken pipe")
        if self.position >= len(self.records):
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        self.position += 1
        return self.records[self.position - 1][1].encode()


def boot_root(tmp_path, boot_id="boot-1"):
    path = tmp_path / "root" / "proc/sys/kernel/random"
    path.mkdir(parents=True, exist_ok=True)
    (path / "boot_id").write_text(boot_id + "\n")
    return str(tmp_path / "root")


def kmsg_source(tmp_path, ring, boot_id="boot-1", now=1000.0, **settings):
    config = FaultsConfig(kmsg=True, **settings)
    device = KmsgDevice("/dev/kmsg", open_fd=ring.open, read_fd=ring.read, close_fd=lambda fd: None)
    return KmsgSource(config, boot_root(tmp_path, boot_id), str(tmp_path / "state"), load_patterns(),
                      clock=lambda: now, device=device)


def faults_of(source, now=1000.0):
    parts = source.contribute(Parts(time=now, host=HostSample(), chips=tuple(CHIPS)), now)
    return {chip.subject: [(f["fault_class"], f["count"]) for f in chip.extra["driver_faults"]]
            for chip in parts.chips if chip.extra["driver_faults"]}


def test_a_restart_resumes_after_the_last_record_and_keeps_the_faults_it_had(tmp_path):
    ring = FakeRing()
    ring.add(1, "Booting")
    ring.add(2, HEARTBEAT.format(2))
    first = kmsg_source(tmp_path, ring)
    first.poll("kmsg", CHIPS)
    assert faults_of(first) == {"npu2/chip0": [("heartbeat_lost", 1)]}
    first.close()
    ring.add(3, HEARTBEAT.format(2))
    second = kmsg_source(tmp_path, ring, now=1010.0)  # a new daemon: reads the ring from its start again
    second.poll("kmsg", CHIPS)
    assert faults_of(second, 1010.0) == {"npu2/chip0": [("heartbeat_lost", 2)]}  # seq 2 not counted twice
    assert second.stats["records"] == 1
    saved = json.loads((tmp_path / "state" / CURSOR_FILE).read_text())
    assert saved["cursor"]["seq"] == 3 and saved["boot_id"] == "boot-1"


def test_a_reboot_clears_device_faults_and_keeps_hardware_ones(tmp_path):
    ring = FakeRing()
    ring.add(1, HEARTBEAT.format(2))
    ring.add(2, "[ascend] [ERROR] [drv_pcie] [f 1] <k:1:1> Channel is blocked. (dev_id=3; aer_critical_cnt=1)")
    kmsg_source(tmp_path, ring).poll("kmsg", CHIPS)
    after = FakeRing()  # the new boot's ring buffer starts again at seq 0
    after.add(0, "Booting")
    rebooted = kmsg_source(tmp_path, after, boot_id="boot-2", now=1100.0)
    rebooted.poll("kmsg", CHIPS)
    assert faults_of(rebooted, 1100.0) == {"npu3/chip0": [("pcie_aer_fatal", 1)]}
    assert rebooted.stats["reboots"] == 1 and rebooted.stats["records"] == 1


def test_overwritten_records_are_counted_as_lost(tmp_path):
    ring = FakeRing()
    ring.add(1, "one")
    source = kmsg_source(tmp_path, ring)
    source.poll("kmsg", CHIPS)
    for seq in range(2, 12):
        ring.add(seq, "lost {}".format(seq))
    ring.add(12, HEARTBEAT.format(0))
    ring.overwritten_before = len(ring.records) - 1  # records 2..11 were overwritten: EPIPE, then seq 12
    source.poll("kmsg", CHIPS)
    assert source.stats["lost"] == 10
    assert faults_of(source) == {"npu0/chip0": [("heartbeat_lost", 1)]}
    status = source.statuses(1000.0)["kmsg"]
    assert status.ok and "10 kernel log records were overwritten" in status.error


def test_a_log_storm_is_counted_not_kept_and_each_poll_is_bounded(tmp_path):
    ring = FakeRing()
    for seq in range(1, 30001):
        ring.add(seq, HEARTBEAT.format(seq % 2) if seq % 3 else "[ascend] [ERROR] [devmm] [f {}] x".format(seq))
    source = kmsg_source(tmp_path, ring, max_records_per_poll=10000, rate_limit_per_minute=5, max_faults=4)
    started = time.monotonic()
    assert source.poll("kmsg", CHIPS) == 1.0  # more left: come back in a second
    assert source.stats["records"] == 10000
    while source.poll("kmsg", CHIPS) is not None:
        pass
    assert time.monotonic() - started < 20
    assert source.stats["records"] == 30000
    assert len(source.book.entries) == 3  # heartbeat on devices 0 and 1, driver_error on the host
    assert sum(entry.count for entry in source.book.entries.values()) == 30000
    assert source.stats["suppressed"] == 30000 - 3 * 5
    parts = source.contribute(Parts(time=1000.0, host=HostSample(), chips=tuple(CHIPS)), 1000.0)
    assert parts.host.extra["kmsg"]["suppressed"] == 30000 - 15
    facts = chip_facts(parts.chips[0], parts.host)
    assert "more lines not shown (rate limit)" in facts["driver_device_fault_text"]


def test_transient_faults_go_after_the_hold_time(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("[ascend] [ERROR] [devmm] [f 1] x (devid=0)\n")
    now = [100.0]
    source = KmsgSource(FaultsConfig(kmsg_path=str(log), hold_seconds=60), str(tmp_path), str(tmp_path / "s"),
                        load_patterns(), clock=lambda: now[0])
    source.poll("kmsg", CHIPS)
    assert faults_of(source, 100.0) == {"npu0/chip0": [("driver_error", 1)]}
    assert faults_of(source, 161.0) == {}


def test_a_file_is_read_on_from_where_it_stopped_and_from_the_start_when_replaced(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(HEARTBEAT.format(1) + "\n")
    state = str(tmp_path / "s")
    source = KmsgSource(FaultsConfig(kmsg_path=str(log)), str(tmp_path), state, load_patterns(), clock=lambda: 1.0)
    source.poll("kmsg", CHIPS)
    with open(log, "a") as handle:
        handle.write(HEARTBEAT.format(1) + "\n")
    again = KmsgSource(FaultsConfig(kmsg_path=str(log)), str(tmp_path), state, load_patterns(), clock=lambda: 2.0)
    again.poll("kmsg", CHIPS)
    assert again.stats["records"] == 1 and faults_of(again, 2.0) == {"npu1/chip0": [("heartbeat_lost", 2)]}
    log.rename(tmp_path / "kern.log.1")
    log.write_text((HEARTBEAT.format(1) + "\n") * 3)
    again.poll("kmsg", CHIPS)  # rotated: another file, read from its start
    assert again.stats["records"] == 4
    log.write_text(HEARTBEAT.format(1) + "\n")
    again.poll("kmsg", CHIPS)  # truncated (copytruncate): shorter than where it stopped
    assert again.stats["records"] == 5


def test_users_patterns_come_first_and_replace_a_builtin_class(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("patterns:\n"
                    "  - {class: heartbeat_lost, match: 'Heartbeat lost!.*device(?:_id)?=(?P<device>\\d+)',"
                    " kind: hardware, repair_action: replace_hardware}\n"
                    "  - {class: site_fan, match: 'FAN FAIL dev=(?P<device>\\d+)', ascend: false, kind: device,"
                    " repair_action: inspect_hardware}\n")
    patterns = load_patterns([str(mine)])
    assert [p.fault_class for p in patterns].count("heartbeat_lost") == 1
    assert match_line(HEARTBEAT.format(4), patterns).kind == "hardware"
    fan = match_line("board: FAN FAIL dev=2", patterns)
    assert (fan.fault_class, fan.device, fan.repair_action) == ("site_fan", 2, "inspect_hardware")


@pytest.mark.parametrize("text, problem", [
    ("patterns: [{class: x, match: '(', kind: device}]", "match is not a regular expression"),
    ("patterns: [{class: x, match: 'a', kind: sometimes}]", "kind must be one of"),
    ("patterns: [{class: x, match: 'a', kind: device, repair_action: pray}]", "repair_action must be one of"),
    ("patterns: [{class: x, match: 'a'}]", "kind is required"),
    ("patterns: [{class: X-1, match: 'a', kind: device}]", "class must be a lower-case name"),
    ("patterns: {}", "expected a mapping with a list under 'patterns'"),
    ("patterns: [", "not valid YAML"),
])
def test_a_bad_pattern_file_is_a_one_line_error(tmp_path, text, problem):
    mine = tmp_path / "mine.yaml"
    mine.write_text(text)
    with pytest.raises(PatternError) as raised:
        load_patterns([str(mine)])
    assert problem in str(raised.value) and str(mine) in str(raised.value) and "\n" not in str(raised.value)


def run_check(cli, tmp_path, *config_lines):
    config = tmp_path / "npumon.yaml"
    config.write_text("state_dir: {}\n".format(tmp_path / "state") + "\n".join(config_lines) + "\n")
    return cli("check", "--simulate", "--json", "--config", str(config))  # main() in-process


def test_check_json_lists_the_real_lines_findings_with_repair_action_and_level(cli, tmp_path):
    proc = run_check(cli, tmp_path, "faults:", "  kmsg_path: {}".format(REAL))
    document = json.loads(proc.stdout)
    found = {(f["rule"], f["subject"]): (f.get("repair_action"), f.get("level")) for f in document["findings"]}
    assert found == {
        ("driver-device-fault", "npu1/chip0"): ("reset_npu", "RestartNPU"),
        ("driver-transient-fault", "npu0/chip0"): ("none", None),
        ("driver-unattributed-fault", "host"): ("none", None),  # lines 4-5 name no device, no chip has the code
    }
    assert proc.returncode == 2 and document["sources"]["kmsg"]["ok"]
    assert not (tmp_path / "state" / CURSOR_FILE).exists()  # check saves nothing


def test_check_with_a_bad_pattern_file_is_unknown_with_a_one_line_reason(cli, tmp_path):
    proc = run_check(cli, tmp_path, "faults:", "  kmsg_path: {}".format(REAL), "  pattern_files: [{}]".format(
        tmp_path / "missing.yaml"))
    assert proc.returncode == 3 and "Traceback" not in proc.stderr + proc.stdout
    assert "missing.yaml" in proc.stdout + proc.stderr


@pytest.mark.integration
@pytest.mark.skipif(not os.access("/dev/kmsg", os.R_OK), reason="/dev/kmsg is not readable here")
def test_the_real_dev_kmsg_is_read_and_a_restart_does_not_read_it_again(tmp_path):
    root = boot_root(tmp_path, Path("/proc/sys/kernel/random/boot_id").read_text().strip())
    os.symlink("/dev", os.path.join(root, "dev"))
    config = FaultsConfig(kmsg=True)
    first = KmsgSource(config, root, str(tmp_path / "state"), load_patterns())
    first.poll("kmsg", CHIPS)
    first.close()
    assert first.statuses(time.time())["kmsg"].ok and first.stats["records"] > 0
    second = KmsgSource(config, root, str(tmp_path / "state"), load_patterns())
    second.poll("kmsg", CHIPS)
    second.close()
    assert second.stats["records"] < first.stats["records"]  # only what the kernel logged in between


def test_a_full_read_of_a_log_file_holds_its_text_once_beside_the_records_it_keeps(tmp_path):
    line = b"Dec  1 23:00:00 host kernel: [12345.678901] hisi_pcie 0000:01:00.0: link up, lane 4, speed 16GT/s\n"
    path = tmp_path / "kern.log"
    path.write_bytes(line * (MAX_FILE_BYTES_PER_READ // len(line)))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        records, _, offset, more = LogFile(str(path)).read(None, 0, 10 ** 6)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (len(records), offset, more) == (size // len(line), size, False)
    assert peak - kept < 1.5 * size, "{:.1f} x the file beside the records".format((peak - kept) / size)


def test_a_poll_is_news_for_the_rules_only_when_it_read_a_driver_fault(tmp_path):
    """The daemon judges the rules soon after a kernel-log poll only when it matched a fault line: most lines
    of a kernel log are not the driver's, and judging on them would say nothing new (Outcome.changed)."""
    ring = FakeRing()
    source = kmsg_source(tmp_path, ring)
    source.poll("kmsg", CHIPS)
    assert source.recorder.take_news("kmsg") == (True, True)  # its first poll: up, and a first reading
    ring.add(1, "e1000e 0000:00:1f.6 eno1: NIC Link is Up 1000 Mbps Full Duplex")
    source.poll("kmsg", CHIPS)
    assert source.recorder.take_news("kmsg") == (False, False)
    ring.add(2, HEARTBEAT.format(2))
    source.poll("kmsg", CHIPS)
    assert source.recorder.take_news("kmsg") == (False, True)
    source.poll("kmsg", CHIPS)
    assert source.recorder.take_news("kmsg") == (False, False)  # nothing since
