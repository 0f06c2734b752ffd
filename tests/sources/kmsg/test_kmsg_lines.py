"""Every driver log line of the fixtures maps to the expected chip, fault class and finding (with its
repair action and level), through the kmsg source, its facts and the built-in rules."""

import dataclasses
from pathlib import Path

import pytest

from npumon.faults.patterns import load_patterns
from npumon.model import ChipSample, HostSample, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sources.base import Parts
from npumon.sources.kmsg.config import FaultsConfig
from npumon.sources.kmsg.records import split_file_records
from npumon.sources.kmsg.source import KmsgSource
from paths import FIXTURES

REAL = Path(FIXTURES) / "kmsg_ascend-driver-lines_real.txt"
FORMATS = Path(FIXTURES) / "kmsg_ascend-driver-records_from-format-strings.txt"
BUS_IDS = ["0000:C1:00.0", "0000:C2:00.0", "0000:81:00.0", "0000:82:00.0", "0000:01:00.0", "0000:02:00.0",
           "0000:41:00.0", "0000:42:00.0"]
CHIPS = [ChipSample(npu=n, chip=0, device_id=n, bus_id=bus, health="OK") for n, bus in enumerate(BUS_IDS)]


def records_of(path):
    """The fixture's records (kmsg records keep their continuation lines), each as the text of a file."""
    body = path.read_text().split("# ---\n", 1)[1]
    texts, current = [], []
    for line in body.splitlines():
        if line.startswith(" ") and current:
            current.append(line)
        else:
            if current:
                texts.append("\n".join(current))
            current = [line]
    return texts + ["\n".join(current)]


def findings_for(tmp_path, text, chips=CHIPS, now=1000.0):
    log = tmp_path / "kern.log"
    log.write_text(text + "\n")
    source = KmsgSource(FaultsConfig(kmsg_path=str(log)), str(tmp_path), None, load_patterns(), clock=lambda: now)
    source.poll("kmsg", chips)
    parts = source.contribute(Parts(time=now, host=HostSample(hostname="h"), chips=tuple(chips)), now)
    snapshot = parts.snapshot({"kmsg": source.statuses(now)["kmsg"], "npu-smi": SourceStatus(ok=True)})
    rules, params = load_rules()
    return RuleEngine(rules, params, one_shot=True).evaluate(snapshot), snapshot


# (line number in the fixture's body, subject, fault class, rule, repair_action, level)
REAL_EXPECTED = [
    (1, "npu1/chip0", "heartbeat_lost", "driver-device-fault", "reset_npu", "RestartNPU"),
    (2, None, None, None, None, None),  # a ring-buffer INFO line: no fault
    (3, "npu0/chip0", "driver_error", "driver-transient-fault", "none", None),
    # no device in the line and no chip reporting its code: a note, not a missing card
    (4, "host", "driver_error", "driver-unattributed-fault", "none", None),
    (5, "host", "software_fault_event", "driver-unattributed-fault", "none", None),
]
FORMAT_EXPECTED = [
    (1, "npu2/chip0", "heartbeat_lost", "driver-device-fault", "reset_npu", "RestartNPU"),
    (2, "npu3/chip0", "pcie_aer_fatal", "driver-hardware-fault", "inspect_hardware", None),
    (3, "npu0/chip0", "pcie_aer", "driver-transient-fault", "none", None),
    (4, "npu1/chip0", "pcie_link", "driver-device-fault", "inspect_hardware", None),
    (5, "npu4/chip0", "device_boot_failed", "driver-device-fault", "reboot_host", None),
    (6, "npu0/chip0", "dma_fault", "driver-transient-fault", "restart_workload", None),
    (7, "npu1/chip0", "device_reset", "driver-transient-fault", "none", None),
    (8, "host", "device_not_ready", "driver-host-device-fault", "reboot_host", None),  # device 9: no such chip
    (9, "npu0/chip0", "pcie_bus_error_uncorrected", "driver-hardware-fault", "inspect_hardware", None),  # DEVICE=
]


@pytest.mark.parametrize("path, expected", [(REAL, row) for row in REAL_EXPECTED]
                         + [(FORMATS, row) for row in FORMAT_EXPECTED],
                         ids=["real-{}".format(r[0]) for r in REAL_EXPECTED]
                         + ["format-{}".format(r[0]) for r in FORMAT_EXPECTED])
def test_each_fixture_line_maps_to_its_chip_class_and_finding(tmp_path, path, expected):
    number, subject, fault_class, rule, action, level = expected
    findings, snapshot = findings_for(tmp_path, records_of(path)[number - 1])
    if subject is None:
        assert findings == []
        assert all(not chip.extra["driver_faults"] for chip in snapshot.chips)
        return
    finding, = findings
    assert (finding.subject, finding.rule, finding.repair_action, finding.level) == (subject, rule, action, level)
    holder = snapshot.host if subject == "host" else snapshot.chip(*[int(x) for x in subject[3:].split("/chip")])
    assert [fault["fault_class"] for fault in holder.extra["driver_faults"]] == [fault_class]
    assert fault_class in finding.summary


def test_the_fixtures_hold_the_lines_the_tests_expect():
    assert len(records_of(REAL)) == len(REAL_EXPECTED)
    assert len(records_of(FORMATS)) == len(FORMAT_EXPECTED)
    assert [r.seq for r in split_file_records(FORMATS.read_text())] == list(range(2001, 2010))


def test_without_logical_ids_the_chips_order_stands_in_for_the_device_id(tmp_path):
    chips = [dataclasses.replace(chip, device_id=None) for chip in CHIPS]
    findings, _ = findings_for(tmp_path, records_of(REAL)[0], chips=chips)
    assert [(f.subject, f.rule) for f in findings] == [("npu1/chip0", "driver-device-fault")]


def test_a_card_that_dropped_out_of_the_table_has_its_fault_on_the_host_naming_the_chip(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(records_of(REAL)[0] + "\n")
    source = KmsgSource(FaultsConfig(kmsg_path=str(log)), str(tmp_path), None, load_patterns(), clock=lambda: 5.0)
    source.poll("kmsg", CHIPS)  # device 1 is npu1/chip0 in this poll's table
    without = tuple(chip for chip in CHIPS if chip.npu != 1)
    parts = source.contribute(Parts(time=5.0, host=HostSample(), chips=without), 5.0)
    fault, = parts.host.extra["driver_faults"]
    assert fault["place"].startswith("npu1/chip0 (device 1, not in npu-smi's table now)")


def test_repeats_of_a_fault_count_within_the_window_only_and_old_state_restores():
    from npumon.sources.kmsg.book import REPEAT_BUCKETS, FaultBook

    from npumon.faults.patterns import match_line

    line = ("[ascend] [ERROR] [drv_soft_fault] [hb_read_one_device_count 203] <kworker/3:1:1234,1234> Heartbeat "
            "lost! (device_id=2; old_count=1; current_count=1; lost_count=3; total_lost_count=3; "
            "miss_read_count=0; hb_read_fail_count=0).")
    fault = match_line(line, load_patterns())
    book = FaultBook(rate_limit=1, hold_seconds=10 ** 6, repeat_window=3600.0)
    for at in (0.0, 10.0, 20.0):  # the rate limit keeps one line a minute; repeats count all three
        book.add(fault, line, at)
    entry = book.active(20.0)[0]
    assert entry.repeats(20.0, 3600.0) == 3 and entry.suppressed == 2
    book.add(fault, line, 5000.0)  # more than an hour later: the first three are out of the window
    assert entry.repeats(5000.0, 3600.0) == 1
    for minute in range(1000):  # a fault that never stops keeps REPEAT_BUCKETS buckets, not one per line
        book.add(fault, line, 6000.0 + 60.0 * minute)
    assert len(entry.recent) <= REPEAT_BUCKETS + 1
    saved = [dict(item) for item in book.to_json()]
    del saved[0]["recent"]  # a state file written before the repeat counts
    restored = FaultBook()
    restored.restore(saved)
    assert [e.count for e in restored.active(6000.0 + 60.0 * 999)] == [1004]


EVENT_80E01801 = ("[EVENT] TDT(4717,tsdaemon):2023-10-31-16:41:39.406.087 [tsdaemon.cpp:1811] [RunSpecialProcess]"
                  "[tid:4717] [TsdEVENT] Event id=0x80E01801.")


def test_a_line_without_a_device_is_the_chip_that_reports_its_code(tmp_path):
    chips = [dataclasses.replace(chip, error_codes=["80E01801"]) if chip.npu == 3 else chip for chip in CHIPS]
    findings, snapshot = findings_for(tmp_path, "\n".join([EVENT_80E01801] * 3), chips=chips)
    assert {(f.rule, f.subject) for f in findings} == {("driver-transient-fault", "npu3/chip0"),
                                                        ("driver-fault-repeating", "npu3/chip0")}
    assert snapshot.host.extra["driver_faults"] == []
    assert [f["attribution"] for f in snapshot.chip(3, 0).extra["driver_faults"]] == ["code"]


def test_a_code_no_chip_reports_stays_a_note_and_never_suggests_a_missing_card_or_a_separation(tmp_path):
    findings, snapshot = findings_for(tmp_path, "\n".join([EVENT_80E01801] * 3))
    finding, = findings
    assert (finding.rule, finding.severity, finding.repair_action, finding.level) == (
        "driver-unattributed-fault", "info", "none", None)
    assert "missing" not in finding.hint and "lspci" not in finding.hint


def test_a_code_several_chips_report_names_them_and_picks_none(tmp_path):
    chips = [dataclasses.replace(chip, error_codes=["80E01801"]) if chip.npu in (2, 3) else chip for chip in CHIPS]
    findings, snapshot = findings_for(tmp_path, EVENT_80E01801, chips=chips)
    assert [(f.rule, f.subject) for f in findings] == [("driver-unattributed-fault", "host")]
    fault, = snapshot.host.extra["driver_faults"]
    assert fault["place"] == "one of npu2/chip0, npu3/chip0 (they report 80E01801)"


def test_a_pci_address_that_is_no_npu_is_a_note_not_a_missing_card(tmp_path):
    line = "pcieport 0000:00:1c.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)"
    findings, _ = findings_for(tmp_path, line)
    assert [(f.rule, f.subject, f.severity) for f in findings] == [("driver-unattributed-fault", "host", "info")]
