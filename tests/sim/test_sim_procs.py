"""The simulator's NPU processes in its fake /proc (sim/procs.py), and the scenarios made for chip-hung and
chip-dstate: each raises its finding on its chip, in one pass and over polls on a fake clock, and no other
scenario raises either."""

import os

import pytest

from clocked_host import ClockedHost
from simulated_pass import judged_pass
from npumon.settings import parse_config
from npumon.sim import procs
from npumon.sim.procs import write_processes
from npumon.sim.simulation import list_products, list_scenarios, prepare_simulation
from npumon.sim.state import read_state
from npumon.sources.procs.parse import parse_stat

NEW_RULES = {"chip-hung", "chip-dstate"}
MADE_FOR = {"hung-chip": ("chip-hung", "npu3/chip0"), "dstate-hang": ("chip-dstate", "npu5/chip0")}
# npu-smi never answers (hang) or takes its deadline (slow): nothing for the rules to judge, and a pass costs seconds
NO_PASS = ("hang", "slow")
FAST_SAMPLE = "probe: {enabled: false}\nprocesses: {cpu_sample_seconds: 0.2}\n"


def stat_of(root, pid):
    with open(os.path.join(root, "proc", str(pid), "stat"), encoding="utf-8") as handle:
        return parse_stat(handle.read())


def test_processes_appear_with_their_state_and_npus_and_their_cpu_time_runs_on_wall_time(tmp_path):
    sim = prepare_simulation(str(tmp_path), "dstate-hang", time_scale=0, latency_scale=0)
    start = read_state(str(tmp_path))["start_time"]
    write_processes(str(tmp_path), start)
    pids = sorted(int(name) for name in os.listdir(os.path.join(sim.root, "proc")) if name.isdigit())
    assert len(pids) == 8  # one training process per chip
    stats = {pid: stat_of(sim.root, pid) for pid in pids}
    stuck = [pid for pid, stat in stats.items() if stat.state == "D"]
    assert len(stuck) == 1 and stats[stuck[0]].comm == "python3"
    assert os.readlink(os.path.join(sim.root, "proc", str(stuck[0]), "fd", "5")) == "/dev/davinci5"
    write_processes(str(tmp_path), start + 60.0)  # a frozen scenario clock: its processes still run
    busy = next(pid for pid in pids if pid not in stuck)
    # 110 % of a CPU over 60 s; the stuck one gains nothing
    assert stat_of(sim.root, busy).cpu_ticks - stats[busy].cpu_ticks == pytest.approx(6600, abs=2)
    assert stat_of(sim.root, stuck[0]).cpu_ticks == stats[stuck[0]].cpu_ticks
    # the main thread's stat (what the thread-in-D check reads) follows every rewrite of the process's
    with open(os.path.join(sim.root, "proc", str(busy), "task", str(busy), "stat"), encoding="utf-8") as handle:
        assert parse_stat(handle.read()) == stat_of(sim.root, busy)


def test_processes_gone_from_the_scenario_leave_proc_and_a_new_simulation_starts_clean(tmp_path):
    sim = prepare_simulation(str(tmp_path), "hung-chip", time_scale=0, latency_scale=0)
    start = read_state(str(tmp_path))["start_time"]
    write_processes(str(tmp_path), start)
    assert len([name for name in os.listdir(os.path.join(sim.root, "proc")) if name.isdigit()]) == 8
    prepare_simulation(str(tmp_path), "unsupported", product="atlas-200i-a2", time_scale=0, latency_scale=0)
    assert [name for name in os.listdir(os.path.join(sim.root, "proc")) if name.isdigit()] == []
    assert not [path for path in procs._static_written if path.startswith(sim.root)]  # forgotten with them
    write_processes(str(tmp_path), start)
    assert [name for name in os.listdir(os.path.join(sim.root, "proc")) if name.isdigit()] == []


@pytest.mark.parametrize("scenario", sorted(MADE_FOR))
def test_one_pass_raises_the_finding_on_its_chip_with_a_repair_action(tmp_path, scenario):
    _, findings = judged_pass(tmp_path, scenario, FAST_SAMPLE)
    fired = [finding for finding in findings if finding.rule in NEW_RULES]
    assert [(finding.rule, finding.subject) for finding in fired] == [MADE_FOR[scenario]]
    assert fired[0].repair_action and fired[0].hint


@pytest.mark.slow  # a judged pass of every scenario and product: about 23 s of CPU
def test_no_other_scenario_and_healthy_on_no_product_raises_them(tmp_path):
    runs = [(name, None) for name in list_scenarios() if name not in NO_PASS and name not in MADE_FOR]
    runs += [("healthy", product) for product in list_products()]
    for index, (scenario, product) in enumerate(runs):
        _, findings = judged_pass(tmp_path / str(index), scenario, FAST_SAMPLE, product=product)
        assert not [(f.rule, f.subject) for f in findings if f.rule in NEW_RULES], (scenario, product)


@pytest.mark.parametrize("scenario", sorted(MADE_FOR))
def test_over_polls_it_fires_once_its_duration_has_passed_and_not_before(tmp_path, scenario):
    rule, subject = MADE_FOR[scenario]
    sim = prepare_simulation(str(tmp_path / "sim"), scenario)
    host = ClockedHost(parse_config("state_dir: {}\nprobe: {{enabled: false}}\n".format(tmp_path / "state")), sim)
    try:
        started = host.clock()
        duration = 300 if rule == "chip-hung" else 240
        while host.clock() - started < duration - 30:
            assert not [f for f in host.step() if f.rule in NEW_RULES], host.clock() - started
        while not any(f.rule == rule for f in host.step()):
            assert host.clock() - started < duration + 90, "{} not raised".format(rule)
        fired = [(f.rule, f.subject) for f in host.findings if f.rule in NEW_RULES]
        assert fired == [(rule, subject)]
        assert "cpu-bottleneck" not in {f.rule for f in host.findings}
    finally:
        host.close()
