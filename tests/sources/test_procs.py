"""The processes source (sources/procs/): /proc/<pid>/stat parsing, CPU use from samples on a fake clock, and
processes stuck in D state with an NPU open, against a fake /proc tree."""

import os

import pytest

from npumon.model import ChipSample, ProcessSample
from npumon.sources.procs.parse import ProcStatError, davinci_device, parse_stat
from npumon.sources.procs.source import (ChipProcesses, ProcReader, ProcessesConfig, ProcessesSource, chip_facts,
                                         processes_config_problems)

# A real line (kernel 5.10, aarch64), pid 2290156, 52 fields: utime 123456 and stime 7890 ticks, starttime 300123.
REAL_STAT = ("2290156 (VLLMEngineCore) S 2290101 2290101 2290101 0 -1 4194560 5813044 0 1203 0 123456 7890 0 0 "
             "20 0 318 0 300123 1151389696000 7291841 18446744073709551615 4194304 4199588 281474506519024 0 0 0 0 "
             "16781312 17150 0 0 0 17 61 0 0 0 0 0 4259840 4260532 848236544 281474506526527 281474506526584 "
             "281474506526584 281474506530788 0\n")


def test_parses_a_real_stat_line():
    stat = parse_stat(REAL_STAT)
    assert (stat.pid, stat.comm, stat.state, stat.cpu_ticks, stat.start_ticks) == (
        2290156, "VLLMEngineCore", "S", 123456 + 7890, 300123)


def test_a_command_name_with_spaces_and_parentheses():
    stat = parse_stat(REAL_STAT.replace("(VLLMEngineCore)", "(py (rank 3) x)").replace(" S ", " D ", 1))
    assert (stat.comm, stat.state, stat.cpu_ticks) == ("py (rank 3) x", "D", 131346)


@pytest.mark.parametrize("text", ["", "2290156 VLLMEngineCore S 1 2 3", "2290156 (x) S 1 2 3\n",
                                  REAL_STAT.replace(" 123456 ", " many "), REAL_STAT.replace(" S ", " SS ", 1),
                                  REAL_STAT.replace("2290156 (", "pid (")])
def test_a_damaged_stat_line_is_refused(text):
    with pytest.raises(ProcStatError):
        parse_stat(text)


def test_davinci_device_files():
    assert davinci_device("/dev/davinci5") == 5
    assert [davinci_device(link) for link in ("/dev/davinci_manager", "/dev/null", "socket:[123]",
                                              "/dev/davinci5x")] == [None] * 4


def test_config_problems():
    assert processes_config_problems(ProcessesConfig()) == []
    assert [key for key, _ in processes_config_problems(ProcessesConfig(interval_seconds=-1, cpu_sample_seconds=0))] \
        == ["processes.interval_seconds", "processes.cpu_sample_seconds"]


class FakeProc:
    """A /proc tree under tmp_path whose processes the test moves, and the fake clock they run on."""

    def __init__(self, root):
        self.root = str(root)
        self.now = 1000.0
        self.cpu = {}  # pid -> (CPU seconds, CPU seconds per second, state, devices, start)
        self.sleeps = []

    def add(self, pid, rate, state="S", devices=(), start=5000, worker="S"):
        self.cpu[pid] = [60.0, rate, state, devices, start, worker]

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.advance(seconds)

    def advance(self, seconds):
        self.now += seconds
        for entry in self.cpu.values():
            entry[0] += entry[1] * seconds

    def write(self, now):
        for pid, (cpu, _, state, devices, start, worker) in self.cpu.items():
            directory = os.path.join(self.root, str(pid))
            for tid, letter in ((pid, state), (pid + 1, worker)):  # the main thread and one worker
                os.makedirs(os.path.join(directory, "task", str(tid)), exist_ok=True)
                fields = [letter] + [0] * 10 + [int(cpu * 100), 0] + [0] * 6 + [start] + [0] * 30
                line = "{} (python3) {}\n".format(tid, " ".join(str(f) for f in fields))
                with open(os.path.join(directory, "task", str(tid), "stat"), "w") as handle:
                    handle.write(line)
                if tid == pid:
                    with open(os.path.join(directory, "stat"), "w") as handle:
                        handle.write(line)
            os.makedirs(os.path.join(directory, "fd"), exist_ok=True)
            for number, device in enumerate(devices):
                link = os.path.join(directory, "fd", str(number + 3))
                if not os.path.islink(link):
                    os.symlink("/dev/davinci{}".format(device), link)

    def source(self, sample_seconds=1.0):
        config = ProcessesConfig(interval_seconds=30.0, cpu_sample_seconds=sample_seconds)
        return ProcessesSource(ProcReader(self.root), config, 120.0, lambda: self.now, self.sleep,
                               before_read=self.write)


def chip(npu, pids):
    return ChipSample(npu=npu, chip=0, device_id=npu,
                      processes=[ProcessSample(npu=npu, chip=0, pid=pid, name="python3", memory_bytes=None)
                                 for pid in pids])


def poll(source, chips):
    source.poll(source.name, chips)
    assert source.statuses(source.clock())[source.name].ok
    return source.reading.value(source.clock())


def test_a_new_process_is_sampled_twice_within_the_poll_then_against_the_poll_before(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(101, rate=0.85)
    proc.add(102, rate=0.002)
    source = proc.source()
    found = poll(source, [chip(0, [101]), chip(1, [102]), chip(2, [])])
    assert proc.sleeps == [1.0]
    assert found[(0, 0)].cpu_seconds_per_minute == pytest.approx(51.0, abs=0.6)  # whole ticks over 1 s
    assert found[(1, 0)].cpu_seconds_per_minute == pytest.approx(0.0, abs=0.6)
    assert found[(2, 0)] == ChipProcesses(None)
    proc.advance(30.0)
    found = poll(source, [chip(0, [101]), chip(1, [102]), chip(2, [])])
    assert proc.sleeps == [1.0]  # both had a sample from the poll before
    assert found[(0, 0)].cpu_seconds_per_minute == pytest.approx(51.0, abs=0.1)
    assert found[(1, 0)].cpu_seconds_per_minute == pytest.approx(0.12, abs=0.05)


def test_a_reused_pid_is_another_process(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(101, rate=1.0)
    source = proc.source()
    poll(source, [chip(0, [101])])
    proc.advance(30.0)
    proc.add(101, rate=0.5, start=9000)  # its CPU time starts again from 60 s: no negative rate, a new sample
    found = poll(source, [chip(0, [101])])
    assert proc.sleeps == [1.0, 1.0]
    assert found[(0, 0)].cpu_seconds_per_minute == pytest.approx(30.0, abs=0.6)


def test_processes_gone_or_unreadable_give_no_figure(tmp_path):
    proc = FakeProc(tmp_path)
    (tmp_path / "77").mkdir()
    (tmp_path / "77" / "stat").write_text("77 (x) S garbage\n")
    source = proc.source()
    found = poll(source, [chip(0, [77, 4242])])
    assert found[(0, 0)] == ChipProcesses(None)


def test_a_process_in_d_state_with_an_npu_open_is_blocked_from_its_second_sample(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(101, rate=0.0, state="D", devices=[2])  # not in npu-smi's list: found through its open files
    proc.add(102, rate=0.0, state="D")  # in D but holding no NPU: not ours
    proc.add(103, rate=0.9, devices=[0])
    source = proc.source()
    chips = [chip(0, [103]), chip(1, []), chip(2, [])]
    found = poll(source, chips)
    assert found[(2, 0)].blocked[0].pid == 101 and found[(2, 0)].blocked[0].seconds == pytest.approx(1.0)
    assert found[(0, 0)].blocked == () and found[(1, 0)].blocked == ()
    proc.advance(30.0)
    found = poll(source, chips)
    assert found[(2, 0)].blocked[0].seconds == pytest.approx(31.0)
    facts = chip_facts(ChipSample(npu=2, chip=0, extra={"process_activity": found[(2, 0)].as_extra()}), None)
    assert facts["blocked_process_count"] == 1 and facts["blocked_seconds"] == pytest.approx(31.0)
    assert facts["blocked_process_text"] == "pid 101 (python3) for 31 s"
    proc.cpu[101][2] = "S"  # the driver call returned
    proc.advance(30.0)
    assert poll(source, chips)[(2, 0)].blocked == ()
    proc.cpu[101][2] = "D"
    proc.advance(30.0)
    assert poll(source, chips)[(2, 0)].blocked[0].seconds == pytest.approx(1.0)  # counted afresh


def test_a_listed_process_whose_worker_thread_is_in_d_state_is_blocked(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(101, rate=0.0, worker="D")  # the main thread waits (S) on the worker stuck in the driver
    proc.add(102, rate=0.0, worker="D", devices=[1])  # not listed: only its main thread's state is read
    source = proc.source()
    found = poll(source, [chip(0, [101]), chip(1, [])])
    assert [b.pid for b in found[(0, 0)].blocked] == [101] and found[(1, 0)].blocked == ()


def test_a_moment_in_d_state_is_not_blocked(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(101, rate=0.5, state="D")
    source = proc.source()

    def wake(seconds):
        proc.cpu[101][2] = "S"
        proc.sleep(seconds)
    source.sleep = wake
    assert poll(source, [chip(0, [101])])[(0, 0)].blocked == ()


def test_facts_without_the_source_are_null():
    facts = chip_facts(ChipSample(npu=0, chip=0), None)
    assert set(facts.values()) == {None}


def test_a_poll_is_news_to_the_rules_only_across_the_hang_level_or_when_the_blocked_change(tmp_path):
    proc = FakeProc(tmp_path)
    proc.add(101, rate=0.85)
    proc.add(103, rate=0.9, devices=[1])
    source = proc.source()
    chips = [chip(0, [101]), chip(1, [103])]

    def news():
        proc.advance(30.0)
        poll(source, chips)
        return source.recorder.take_news(source.name)[1]

    assert news()  # the first reading
    proc.cpu[101][1] = 0.6  # 51 s/min to 36: still well above the hang level
    assert not news()
    proc.cpu[101][1] = 0.05  # 3 s/min: below chip_hung_cpu_seconds_per_minute
    assert news()
    assert not news()
    proc.cpu[103][2] = "D"  # blocked from its second sample in D
    assert news()
    assert not news()


def test_the_hang_level_is_the_rules_and_follows_the_configs_thresholds(tmp_path):
    from npumon.rules.loader import load_rules
    from npumon.settings import parse_config
    from npumon.sources.base import SourceContext
    from npumon.sources.procs.source import HUNG_CPU_DEFAULT, HUNG_CPU_PARAM, build

    assert load_rules([])[1][HUNG_CPU_PARAM] == HUNG_CPU_DEFAULT

    class Target:
        root = str(tmp_path)
        proc_before_read = None

    config = parse_config("state_dir: {}\nthresholds: {{{}: 12}}\n".format(tmp_path, HUNG_CPU_PARAM), "c.yaml")
    assert build(SourceContext(config, Target(), None)).hung_cpu == 12
