"""The simulated host is a Target (npumon/sim/target.py): its stand-ins reach the sources through the Target alone,
npumon's own state goes where the config the Target runs with says, and a real host's Target has none of them."""

import argparse
import json
import os
import time
import urllib.request

from npumon.cli.common import open_target
from npumon.settings import Config, parse_config
from npumon.sim import prepare_simulation
from npumon.sim.kmsg import KMSG_FILE
from npumon.sim.own_cpu import IN_PROCESS_CPU, IN_PROCESS_FILE, InProcessCpu
from npumon.sim.pyacl import SIMULATED_ACL_DIR
from npumon.sim.target import HCCN_TOOL_ARGV, simulated_target, simulation_config
from npumon.sources.base import SourceContext
from npumon.sources.dcmi import backend
from npumon.sources.hccn.source import build as build_hccn
from npumon.sources.kmsg.source import build as build_kmsg
from npumon.sources.probe.config import ProbeConfig
from npumon.sources.probe.source import build as build_probe
from npumon.sources.runner import CommandRunner
from npumon.sources.target import Target


def _context(config, target):
    return SourceContext(config, target, CommandRunner(target.npu_smi_argv, 1.0))


def test_the_sources_built_for_a_simulated_target_use_its_stand_ins(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0, latency_scale=0)
    target = simulated_target(sim)
    config = simulation_config(parse_config(""), str(tmp_path / "sim"))
    context = _context(config, target)
    hccn = build_hccn(context)
    assert (hccn.program, hccn.check_program) == (HCCN_TOOL_ARGV, False)
    kmsg = build_kmsg(context)  # on in every simulation, reading the scenario's kernel log
    assert kmsg is not None and kmsg.file.path == os.path.join(sim.env["NPUMON_SIM_STATE"], KMSG_FILE)
    assert kmsg.state_dir == os.path.join(str(tmp_path / "sim"), "npumon-state")  # from the config, not the target
    probe = build_probe(context)
    assert (probe.settings.kind, probe.settings.model) == ("acl", None)
    assert probe._child_runner._extra_env["PYTHONPATH"].split(os.pathsep)[0] == SIMULATED_ACL_DIR
    decision = backend.decide(config, target)  # auto keeps npu-smi on a simulated host
    assert (decision.backend, decision.reason) == ("npu-smi", "auto: a simulated host uses npu-smi unless "
                                                              "collect.backend is dcmi or dcmi.library names a library")


def test_a_configured_hccn_tool_wins_over_the_targets_own(tmp_path):
    sim = prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0, latency_scale=0)
    hccn = build_hccn(_context(parse_config("network: {hccn_tool: /opt/hccn_tool}\n"), simulated_target(sim)))
    assert (hccn.program, hccn.check_program) == (["/opt/hccn_tool"], True)


def test_a_real_hosts_target_has_no_stand_ins_and_its_sources_stay_as_configured(tmp_path):
    config = Config(root=str(tmp_path), probe=ProbeConfig(kind="torch"))
    target = Target.real(config)
    assert (target.hccn_tool_argv, target.dcmi_library, target.kernel_log, target.acl_dir) == (None,) * 4
    context = _context(config, target)
    assert build_kmsg(context) is None  # off until faults.kmsg or faults.kmsg_path turns it on
    assert build_hccn(context).program == [config.network.hccn_tool]
    assert build_probe(context).settings.kind == "torch"  # the configured kind: no pyACL of the target's own
    assert target.describe() == "npu-smi"


def test_a_reloaded_config_rebuilds_a_real_target_and_keeps_any_other(tmp_path):
    real = Target.real(Config())
    assert real.reconfigured(Config(npu_smi="/opt/npu-smi", root=str(tmp_path))) == \
        Target(["/opt/npu-smi"], None, str(tmp_path), from_config=Target.real)
    sim = simulated_target(prepare_simulation(str(tmp_path / "sim"), "healthy", time_scale=0, latency_scale=0))
    assert sim.reconfigured(Config(npu_smi="/opt/npu-smi")) is sim
    assert sim.describe() == "a simulated host"


def test_a_simulations_config_keeps_npumon_state_with_it_unless_the_user_chose_a_place(tmp_path):
    assert simulation_config(Config(), "/tmp/sim").state_dir == "/tmp/sim/npumon-state"
    chosen = Config(state_dir=str(tmp_path / "mine"))
    assert simulation_config(chosen, "/tmp/sim") is chosen


def test_a_command_with_a_kept_simulation_writes_what_the_simulator_spent_in_its_process(tmp_path):
    # benchmarks/bench_cost.py tells npumon's own CPU from the simulator's work in npumon's process with it
    args = argparse.Namespace(simulate="healthy", sim_product="atlas-a3", sim_state=str(tmp_path / "sim"))
    before = IN_PROCESS_CPU.totals()
    with open_target(args, parse_config("{}\n")) as host:
        for _ in range(3):
            host.target.proc_before_read(time.time())  # the processes source's reads
        with urllib.request.urlopen(host.target.serving_url, timeout=10) as answer:  # the serving source's
            assert b"vllm:" in answer.read()
    saved = json.loads((tmp_path / "sim" / IN_PROCESS_FILE).read_text(encoding="utf-8"))
    assert set(saved) >= {"setup", "/proc entries", "serving endpoint"}, saved
    for part in ("setup", "/proc entries", "serving endpoint"):
        assert saved[part] > before.get(part, 0.0), (part, saved, before)  # timed, with the thread's CPU
    args.sim_state = None
    with open_target(args, parse_config("{}\n")):
        pass  # a simulation of its own, removed at the end: nothing written anywhere
    assert saved == json.loads((tmp_path / "sim" / IN_PROCESS_FILE).read_text(encoding="utf-8"))


def test_in_process_cpu_adds_each_timed_call_to_its_part(tmp_path):
    cpu = InProcessCpu()

    def spin(n):
        return sum(range(n))

    timed = cpu.timed("spin", spin)
    assert timed(200000) == sum(range(200000)) and timed.__name__ == "spin"
    first = cpu.totals()["spin"]
    timed(200000)
    assert cpu.totals()["spin"] > first > 0
    cpu.add("other", 0.25)
    cpu.save(str(tmp_path))
    assert json.loads((tmp_path / IN_PROCESS_FILE).read_text(encoding="utf-8")) == cpu.totals()
