"""Job-wide faults: the same fault on two or more chips of one job within 30 s is one job fault, on the job;
a fault on one chip alone, or on one chip of a multi-chip job, stays the chip's. The correlation is pure and
runs on line times given here (a fake clock); the source and the rules are run on a log file whose kmsg
records carry those times."""

import dataclasses

import pytest

from npumon.faults.patterns import load_patterns
from npumon.model import ChipSample, HostSample, ProcessSample, SourceStatus
from npumon.rules.engine import RuleEngine
from npumon.rules.loader import load_rules
from npumon.sources.base import Parts
from npumon.sources.kmsg.book import MAX_TIMES, FaultBook
from npumon.sources.kmsg.config import FaultsConfig
from npumon.sources.kmsg.jobs import JobFault, Occurrence, chip_jobs, correlate
from npumon.sources.kmsg.source import KmsgSource

TS = "ts_exception"


def occurrence(npu, *times, fault_class=TS, code="B4060007"):
    return Occurrence((npu, 0), fault_class, code, tuple(times))


def pid_jobs(*groups):
    """Chips 0-7, each with its own job unless a group puts several under one PID."""
    jobs = {(npu, 0): ("pid {}".format(1000 + npu),) for npu in range(8)}
    for number, group in enumerate(groups):
        for npu in group:
            jobs[(npu, 0)] = ("pid {}".format(31337 + number),)
    return jobs


def test_four_chips_of_one_job_within_seconds_are_one_job_fault():
    found = correlate([occurrence(npu, 100.0 + npu * 0.4) for npu in range(4)], pid_jobs([0, 1, 2, 3]))
    assert found == [JobFault("pid 31337", TS, "B4060007", ((0, 0), (1, 0), (2, 0), (3, 0)), 100.0, 101.2)]


@pytest.mark.parametrize("occurrences, jobs", [
    ([occurrence(0, 100.0)], pid_jobs()),  # one chip alone
    ([occurrence(0, 100.0, 101.0, 102.0)], pid_jobs([0, 1, 2, 3])),  # one chip of a four-chip job
    ([occurrence(0, 100.0), occurrence(1, 100.5)], pid_jobs()),  # the same fault on chips of two jobs
    ([occurrence(0, 100.0), occurrence(1, 130.001)], pid_jobs([0, 1])),  # more than 30 s apart
    ([occurrence(0, 100.0), occurrence(1, 100.5, fault_class="heartbeat_lost")], pid_jobs([0, 1])),  # other class
    ([occurrence(0, 100.0), occurrence(1, 100.5, code="B4060006")], pid_jobs([0, 1])),  # other code
], ids=["one-chip", "one-chip-of-a-job", "two-jobs", "31-s-apart", "other-class", "other-code"])
def test_what_stays_per_chip(occurrences, jobs):
    assert correlate(occurrences, jobs) == []


def test_thirty_seconds_apart_is_still_one_job():
    found = correlate([occurrence(0, 100.0), occurrence(1, 130.0)], pid_jobs([0, 1]))
    assert [fault.chips for fault in found] == [((0, 0), (1, 0))]


def test_the_window_is_anchored_on_the_first_line_and_an_early_lone_fault_stays_the_chips():
    # chip 0 failed alone at 0 s; chips 1 and 2 together at 100-110 s: only they are the job's
    found = correlate([occurrence(0, 0.0), occurrence(1, 100.0), occurrence(2, 110.0)], pid_jobs([0, 1, 2]))
    assert [(fault.chips, fault.first, fault.last) for fault in found] == [(((1, 0), (2, 0)), 100.0, 110.0)]


def test_a_pod_and_its_process_are_one_job_fault_named_by_the_pod():
    chips = [ChipSample(npu=npu, chip=0, processes=[ProcessSample(npu=npu, chip=0, pid=31337, name="python3",
                                                                   memory_bytes=0)],
                        extra={"pods": [{"namespace": "llm", "pod": "qwen-0", "container": "engine"}]})
             for npu in range(2)]
    jobs = chip_jobs(chips)
    assert jobs[(0, 0)] == ("pid 31337", "pod llm/qwen-0")
    found = correlate([occurrence(0, 5.0), occurrence(1, 6.0)], jobs)
    assert [(fault.job, fault.chips) for fault in found] == [("pod llm/qwen-0", ((0, 0), (1, 0)))]


def test_a_process_holding_a_chip_beyond_its_pods_makes_that_chips_fault_its_jobs_too():
    # the campaign's job crash on chips 0, 4, 5 and 7 (one process) where a pod holds 4-7: chip 0's fault was
    # left to the chip (a sticky driver-fault-repeating, out of service) because the pod had claimed the others
    def chip(npu):
        pods = [{"namespace": "default", "pod": "llm-serving-1", "container": "engine"}] if npu >= 4 else []
        return ChipSample(npu=npu, chip=0, extra={"pods": pods}, processes=[
            ProcessSample(npu=npu, chip=0, pid=31337, name="python3", memory_bytes=0)])
    jobs = chip_jobs([chip(npu) for npu in (0, 4, 5, 7)])
    found = correlate([occurrence(npu, 5.0 + npu * 0.1) for npu in (0, 4, 5, 7)], jobs)
    assert [(fault.job, fault.chips) for fault in found] == [
        ("pod default/llm-serving-1", ((4, 0), (5, 0), (7, 0))), ("pid 31337", ((0, 0), (4, 0), (5, 0), (7, 0)))]


def test_the_book_keeps_the_last_line_times_only_and_forgets_them_at_a_reboot():
    from npumon.faults.patterns import match_line

    line = "[ascend] [ERROR] [drv_pcie] [devdrv_pci_error_detected 104] <k:1:1> Channel is blocked. (dev_id=3; x=1)"
    fault = match_line(line, load_patterns())
    book = FaultBook(rate_limit=1)
    for second in range(20):
        book.add(fault, line, 1000.0, line_time=float(second))
    entry, = book.active(1000.0)
    assert entry.times == [float(second) for second in range(20 - MAX_TIMES, 20)]
    restored = FaultBook()
    restored.restore(book.to_json())
    assert restored.active(1000.0)[0].times == entry.times
    restored.after_reboot()  # a hardware fault stays; the kernel's clock started again
    assert restored.active(1000.0)[0].times == []


# ------------------------------------------------------------------------------------ through the source and rules

def ts_record(seq, device, seconds):
    return ("5,{},{},-;[ascend] [ERROR] [tsdrv] [tsdrv_hb_cq_callback 332] <kworker/0:0:20353> receive ts "
            "exception msg, call excep_code=0xb4060007, time=1722249204.850014098s, devid={} tsid=0").format(
                seq, int(seconds * 1e6), device)


def chips_held(*groups):
    chips = []
    for npu in range(8):
        pid = next((31337 + number for number, group in enumerate(groups) if npu in group), 2290000 + npu)
        chips.append(ChipSample(npu=npu, chip=0, device_id=npu, health="OK",
                                processes=[ProcessSample(npu=npu, chip=0, pid=pid, name="python3", memory_bytes=0)]))
    return chips


def evaluate(tmp_path, records, chips, now=5000.0):
    log = tmp_path / "kern.log"
    log.write_text("\n".join(records) + "\n")
    source = KmsgSource(FaultsConfig(kmsg_path=str(log)), str(tmp_path), None, load_patterns(), clock=lambda: now)
    source.poll("kmsg", chips)
    parts = source.contribute(Parts(time=now, host=HostSample(hostname="h"), chips=tuple(chips)), now)
    snapshot = parts.snapshot({"kmsg": source.statuses(now)["kmsg"], "npu-smi": SourceStatus(ok=True)})
    rules, params = load_rules()
    findings = RuleEngine(rules, params, one_shot=True).evaluate(snapshot)
    return {(f.rule, f.subject): f for f in findings}, snapshot


def test_a_job_fault_is_one_finding_and_counts_toward_no_chip_repeat_or_level(tmp_path):
    records = [ts_record(4 * n + device + 1, device, 3600.0 + n * 0.5 + device * 0.1)
               for n in range(3) for device in range(4)]
    findings, snapshot = evaluate(tmp_path, records, chips_held([0, 1, 2, 3]))
    assert set(findings) == {("job-fault", "host")}
    finding = findings[("job-fault", "host")]
    assert "pid 31337" in finding.summary and "npu0/chip0, npu1/chip0, npu2/chip0, npu3/chip0" in finding.summary
    assert finding.repair_action == "restart_workload" and finding.level is None
    assert all(fault["job"] == "pid 31337" for chip in snapshot.chips[:4] for fault in chip.extra["driver_faults"])


def test_without_the_job_the_same_lines_are_four_chips_with_a_repeating_fault(tmp_path):
    records = [ts_record(4 * n + device + 1, device, 3600.0 + n * 0.5 + device * 0.1)
               for n in range(3) for device in range(4)]
    findings, _ = evaluate(tmp_path, records, chips_held())
    assert {rule for rule, _ in findings} == {"driver-transient-fault", "driver-fault-repeating"}
    assert {subject for _, subject in findings} == {"npu0/chip0", "npu1/chip0", "npu2/chip0", "npu3/chip0"}
    assert findings[("driver-fault-repeating", "npu0/chip0")].level == "ManuallySeparateNPU"


def test_a_one_chip_fault_during_a_multi_chip_job_stays_the_chips(tmp_path):
    records = [ts_record(n + 1, 2, 3600.0 + n) for n in range(3)]
    findings, snapshot = evaluate(tmp_path, records, chips_held([0, 1, 2, 3]))
    assert set(findings) == {("driver-transient-fault", "npu2/chip0"), ("driver-fault-repeating", "npu2/chip0")}
    assert snapshot.host.extra["job_faults"] == []


def test_lines_a_minute_apart_on_two_chips_of_a_job_stay_each_chips(tmp_path):
    records = [ts_record(1, 0, 3600.0), ts_record(2, 1, 3660.0)]
    findings, _ = evaluate(tmp_path, records, chips_held([0, 1]))
    assert set(findings) == {("driver-transient-fault", "npu0/chip0"), ("driver-transient-fault", "npu1/chip0")}


def test_a_lines_own_time_decides_not_when_npumon_read_it(tmp_path):
    # both lines are read in one pass, but the kernel logged them an hour apart
    records = [ts_record(1, 0, 60.0), ts_record(2, 1, 3660.0)]
    _, snapshot = evaluate(tmp_path, records, chips_held([0, 1]))
    assert snapshot.host.extra["job_faults"] == []


def test_check_json_shows_no_line_times(tmp_path):
    _, snapshot = evaluate(tmp_path, [ts_record(1, 0, 60.0)], chips_held())
    fault, = snapshot.chip(0, 0).extra["driver_faults"]
    assert "times" not in fault and "recent" not in fault


def test_chips_without_processes_have_no_job(tmp_path):
    chips = [dataclasses.replace(chip, processes=[]) for chip in chips_held()]
    records = [ts_record(device + 1, device, 3600.0) for device in range(4)]
    findings, _ = evaluate(tmp_path, records, chips)
    assert ("job-fault", "host") not in findings


class Clock:
    def __init__(self, now):
        self.now = now

    def __call__(self):
        return self.now


def polling(tmp_path, chips):
    """The daemon's source (a state directory: it resumes and holds faults for the job window) on a fake clock,
    and a function that appends records, polls and evaluates."""
    log, clock = tmp_path / "kern.log", Clock(5000.0)
    log.write_text("")
    source = KmsgSource(FaultsConfig(kmsg_path=str(log)), str(tmp_path), str(tmp_path / "state"), load_patterns(),
                        clock=clock)
    rules, params = load_rules()
    engine = RuleEngine(rules, params)

    def step(at, *records):
        clock.now = at
        with open(str(log), "a") as handle:
            handle.write("".join(record + "\n" for record in records))
        source.poll("kmsg", chips)
        parts = source.contribute(Parts(time=at, host=HostSample(hostname="h"), chips=tuple(chips)), at)
        snapshot = parts.snapshot({"kmsg": source.statuses(at)["kmsg"], "npu-smi": SourceStatus(ok=True)})
        return {(f.rule, f.subject) for f in engine.evaluate(snapshot, now=at)}
    return step


def test_a_job_whose_chips_log_across_two_reads_raises_no_chip_finding_in_between(tmp_path):
    step = polling(tmp_path, chips_held([0, 1, 2, 3]))
    assert step(5000.0, ts_record(1, 0, 3600.0)) == set()  # chip 0 first: it waits for the job window
    assert step(5010.0, *[ts_record(1 + device, device, 3601.0) for device in (1, 2, 3)]) == {("job-fault", "host")}
    assert step(5100.0) == {("job-fault", "host")}  # after the window: still the job's


def test_a_job_fault_stays_the_jobs_after_the_job_has_exited(tmp_path):
    # Found by the fault campaign (docs/campaign.md): a crashed job's process exits, and its lines, still held,
    # were then judged chip by chip: four chips with a repeating fault, all out of service.
    chips = chips_held([0, 1, 2, 3])
    step = polling(tmp_path, chips)
    records = [ts_record(4 * n + device + 1, device, 3600.0 + n * 0.5 + device * 0.1)
               for n in range(3) for device in range(4)]
    assert step(5000.0, *records) == {("job-fault", "host")}
    chips[:] = chips_held()  # every chip has a process of its own again
    assert step(5010.0) == set()
    assert step(5100.0) == set()


def test_a_lone_fault_on_a_chip_of_a_job_is_the_chips_once_the_window_passed(tmp_path):
    step = polling(tmp_path, chips_held([0, 1, 2, 3]))
    assert step(5000.0, ts_record(1, 2, 3600.0)) == set()
    assert step(5029.0) == set()
    assert step(5031.0) == {("driver-transient-fault", "npu2/chip0")}


def test_a_chip_without_a_shared_job_is_not_held(tmp_path):
    step = polling(tmp_path, chips_held([0, 1, 2, 3]))
    assert step(5000.0, ts_record(1, 6, 3600.0)) == {("driver-transient-fault", "npu6/chip0")}


def ring_line(stamp, device):
    """The driver ring buffer's form (host_kernel.log): its own date, no kernel time."""
    return ("[{}] [ascend] [ERROR] [tsdrv] [tsdrv_hb_cq_callback 332] <kworker/0:0:20353> receive ts exception msg, "
            "call excep_code=0xb4060007, time=1722249204.850014098s, devid={} tsid=0").format(stamp, device)


@pytest.mark.parametrize("stamps, job", [
    (("2025-04-16-03:08:13.704312", "2025-04-16-03:08:14.100000"), True),
    (("2025-04-16-03:08:13.704312", "2025-04-16-05:08:13.704312"), False),  # two hours apart
    (("2025-04-16-03:08:13.704312", "2025-13-16-03:08:13.000000"), False),  # no such month: no time, no job
], ids=["a-second-apart", "hours-apart", "impossible-date"])
def test_ring_buffer_lines_are_judged_by_their_own_date(tmp_path, stamps, job):
    _, snapshot = evaluate(tmp_path, [ring_line(stamps[0], 0), ring_line(stamps[1], 1)], chips_held([0, 1]))
    assert bool(snapshot.host.extra["job_faults"]) is job


def test_lines_without_a_time_of_their_own_are_no_job_fault_in_one_pass(tmp_path):
    lines = ["[ascend] [ERROR] [tsdrv] [tsdrv_hb_cq_callback 332] <k:1:1> receive ts exception msg, call "
             "excep_code=0xb4060007, time=1.0s, devid={} tsid=0".format(device) for device in (0, 1)]
    findings, snapshot = evaluate(tmp_path, lines, chips_held([0, 1]))
    assert snapshot.host.extra["job_faults"] == []
    assert set(findings) == {("driver-transient-fault", "npu0/chip0"), ("driver-transient-fault", "npu1/chip0")}


@pytest.mark.parametrize("stat, group", [
    ("4242 (python3) S 4000 4000 4000 0 -1 4194560 1 0 0 0", 4000),
    ("4243 (pt_main thread) (x) R 4000 3999 4000 0", 3999),  # comm with a space and parentheses
    ("4244 (python3", None),
    ("", None),
], ids=["plain", "odd-comm", "cut", "empty"])
def test_process_group_from_proc_stat(stat, group):
    from npumon.sources.kmsg.jobs import process_group

    assert process_group(stat) == group


def test_one_process_per_chip_in_one_process_group_is_one_job(tmp_path):
    # torchrun: a worker process per chip, all in the launcher's process group 4000; npu4 runs something else
    chips = chips_held()
    for chip in chips:
        pid = chip.processes[0].pid
        group = 4000 if chip.npu < 4 else pid
        (tmp_path / "proc" / str(pid)).mkdir(parents=True)
        (tmp_path / "proc" / str(pid) / "stat").write_text("{} (python3) S 1 {} {} 0 -1\n".format(pid, group, group))
    records = [ts_record(device + 1, device, 3600.0 + device * 0.2) for device in range(5)]
    findings, snapshot = evaluate(tmp_path, records, chips)
    job_fault, = snapshot.host.extra["job_faults"]
    assert (job_fault["job"], job_fault["chips"]) == (
        "process group 4000", ["npu0/chip0", "npu1/chip0", "npu2/chip0", "npu3/chip0"])
    assert set(findings) == {("job-fault", "host"), ("driver-transient-fault", "npu4/chip0")}
