"""The journal fallback of the kmsg source: where /dev/kmsg cannot be opened for want of permission, the kernel
log comes from `journalctl -k -o json` (a fake journalctl on PATH that speaks journalctl's JSON output: one
entry a line, __CURSOR, __MONOTONIC_TIMESTAMP, PRIORITY, MESSAGE as a string or a list of bytes,
_KERNEL_DEVICE "+pci:<address>"), resumed by cursor across a restart without repeats."""

import errno
import json
import os
import stat
import sys
import tracemalloc

import pytest

from npumon.faults.patterns import load_patterns
from npumon.model import ChipSample, HostSample
from npumon.sources.base import Parts
from npumon.sources.kmsg.config import FaultsConfig
from npumon.sources.kmsg.journal import JournalReader, parse_journal_json
from npumon.sources.kmsg.reader import KmsgDevice
from npumon.sources.kmsg.source import KmsgSource
from npumon.sources.runner import CommandRunner

HEARTBEAT = ("[ascend] [ERROR] [drv_soft_fault] [hb_read_one_device_count 203] <kworker/3:1:1234,1234> Heartbeat "
             "lost! (device_id={}; old_count=1; current_count=1; lost_count=3; total_lost_count=3; "
             "miss_read_count=0; hb_read_fail_count=0).")
BOOT = "6c7c6013a8ee4b5a8d7f8b8d4d0e7c3a"
# journalctl itself: -n N keeps the newest N, --after-cursor=C those after C, -b this boot's (all here)
FAKE_JOURNALCTL = r'''#!{python} -S
import json, os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_JOURNAL_CALLS"], "a") as calls:
    calls.write(json.dumps(args) + "\n")
if os.environ.get("FAKE_JOURNAL_FAIL"):
    sys.stderr.write("No journal files were found.\n")
    sys.exit(1)
with open(os.environ["FAKE_JOURNAL"]) as journal:
    entries = [json.loads(line) for line in journal if line.strip()]
after = [a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")]
if after:
    cursors = [e["__CURSOR"] for e in entries]
    entries = entries[cursors.index(after[0]) + 1:]
if "-n" in args:
    entries = entries[-int(args[args.index("-n") + 1]):]
for entry in entries:
    sys.stdout.write(json.dumps(entry, separators=(",", ":")) + "\n")
'''


def entry(index, message, device=None):
    """A kernel entry as journalctl -o json prints it."""
    found = {"__CURSOR": "s=739ad463348b4ceca5a9e69c95a3c93f;i={:x};b={};m={:x};t=5c2d8b6a3e7c1;x=d3a1b7c0e6f8a9b2"
             .format(0x4ece7 + index, BOOT, 794532366 + index),
             "__REALTIME_TIMESTAMP": str(1624262400000001 + index), "__MONOTONIC_TIMESTAMP": str(794532366 + index),
             "_BOOT_ID": BOOT, "_TRANSPORT": "kernel", "SYSLOG_FACILITY": "0", "SYSLOG_IDENTIFIER": "kernel",
             "PRIORITY": "5", "_SOURCE_MONOTONIC_TIMESTAMP": str(794531012 + index), "_HOSTNAME": "atlas-01",
             "MESSAGE": message}
    if device:
        found.update({"_KERNEL_DEVICE": "+pci:" + device, "_KERNEL_SUBSYSTEM": "pci", "_UDEV_SYSNAME": device})
    return found


@pytest.fixture
def journal(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "journalctl"
    script.write_text(FAKE_JOURNALCTL.replace("{python}", sys.executable))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", str(bin_dir) + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("FAKE_JOURNAL", str(tmp_path / "journal.jsonl"))
    monkeypatch.setenv("FAKE_JOURNAL_CALLS", str(tmp_path / "calls.jsonl"))

    class Journal:
        def add(self, *entries):
            with open(str(tmp_path / "journal.jsonl"), "a") as handle:
                for item in entries:
                    handle.write(json.dumps(item) + "\n")

        def calls(self):
            with open(str(tmp_path / "calls.jsonl")) as handle:
                return [json.loads(line) for line in handle]
    return Journal()


def denied(path, flags):
    raise PermissionError(errno.EACCES, "Permission denied")


def source(tmp_path, **settings):
    config = FaultsConfig(kmsg=True, **settings)
    device = KmsgDevice("/dev/kmsg", open_fd=denied)
    runner = CommandRunner(["journalctl"], 10.0, max_concurrent=1)
    (tmp_path / "root/proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
    (tmp_path / "root/proc/sys/kernel/random/boot_id").write_text(BOOT + "\n")
    return KmsgSource(config, str(tmp_path / "root"), str(tmp_path / "state"), load_patterns(), clock=lambda: 1000.0,
                      device=device, journal=JournalReader(runner))


def faults(source_):
    chips = tuple(ChipSample(npu=n, chip=0, device_id=n, bus_id="0000:{:02x}:00.0".format(0xc1 + n)) for n in range(8))
    parts = source_.contribute(Parts(time=1000.0, host=HostSample(), chips=chips), 1000.0)
    return {chip.subject: [(f["fault_class"], f["count"]) for f in chip.extra["driver_faults"]]
            for chip in parts.chips if chip.extra["driver_faults"]}


@pytest.mark.integration
def test_where_dev_kmsg_is_denied_the_journal_is_read_and_a_restart_goes_on_from_its_cursor(tmp_path, journal):
    journal.add(entry(1, "Booting Linux"), entry(2, HEARTBEAT.format(2)))
    first = source(tmp_path)
    first.poll("kmsg", [])
    assert first.statuses(1000.0)["kmsg"].ok
    assert faults(first) == {"npu2/chip0": [("heartbeat_lost", 1)]}
    journal.add(entry(3, HEARTBEAT.format(2)),
                entry(4, "pcieport 0000:00:02.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal)", "0000:c4:00.0"))
    restarted = source(tmp_path)
    restarted.poll("kmsg", [])
    assert faults(restarted) == {"npu2/chip0": [("heartbeat_lost", 2)],
                                 "npu3/chip0": [("pcie_bus_error_uncorrected", 1)]}  # by the entry's device
    calls = journal.calls()
    assert calls[0][:4] == ["-k", "-o", "json", "--no-pager"] and "-b" in calls[0]
    assert calls[1][-1] == "--after-cursor=" + entry(2, "")["__CURSOR"]


@pytest.mark.integration
def test_a_journal_that_cannot_be_read_is_a_one_line_source_error(tmp_path, journal, monkeypatch):
    monkeypatch.setenv("FAKE_JOURNAL_FAIL", "1")
    failing = source(tmp_path)
    failing.poll("kmsg", [])
    status = failing.statuses(1000.0)["kmsg"]
    assert not status.ok and status.error == "journalctl -k: No journal files were found."


def test_without_the_fallback_the_permission_error_stays_the_sources_error(tmp_path):
    off = source(tmp_path, journal_fallback=False)
    off.poll("kmsg", [])
    assert "Permission denied" in off.statuses(1000.0)["kmsg"].error


def test_journal_json_parses_text_and_byte_messages_and_skips_what_is_not_an_entry():
    lines = [json.dumps(entry(1, "plain")), json.dumps(entry(2, list(b"caf\xc3\xa9 \xff"))), "not json", "[1, 2]",
             json.dumps(entry(3, None))]
    records, cursor, bad = parse_journal_json("\n".join(lines))
    assert [record.message for record in records] == ["plain", "caf\u00e9 \ufffd"]
    assert records[0].level == 5 and records[0].usec == 794532367
    assert cursor == entry(3, "")["__CURSOR"] and bad == 2


def test_a_large_journal_answer_is_read_a_line_at_a_time():
    # 20,000 entries (max_records_per_poll) padded with fields as journald's are: the text, not a list of it
    fields = {"_SOURCE_MONOTONIC_TIMESTAMP": "0", "_BOOT_ID": "b" * 32, "_MACHINE_ID": "m" * 32, "_HOSTNAME": "h"}
    text = "\n".join(json.dumps(dict(entry(n, "npu {} link up".format(n)), **fields)) for n in range(20000))
    tracemalloc.start()
    try:
        records, _, bad = parse_journal_json(text)
        kept, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (len(records), bad) == (20000, 0)
    assert peak - kept < 0.2 * len(text), "{:.2f} x the answer beside the records".format((peak - kept) / len(text))
