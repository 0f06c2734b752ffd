"""The probe child as the daemon runs it: a real subprocess with a deadline, whose `import acl` finds a
stand-in pyACL on its PYTHONPATH (the simulator's, npumon/sim/pyacl.py: pyACL's function names, argument
orders and (value, ret) returns), driven by a scenario written for each test."""

import json
import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from npumon.model import ProbeSample
from npumon.sources.probe.config import ProbeConfig, ProbeModelConfig
from npumon.sources.probe.launch import child_command
from npumon.sources.probe.outcome import ProbeOutcome, read_outcomes
from npumon.sources.probe.samples import probe_sample
from npumon.sim import prepare_simulation
from npumon.sim.pyacl import ACL_HANG_PIDS_FILE, SIMULATED_ACL_DIR
from npumon.sim.target import ATC_ARGV
from npumon.sources.runner import CommandRunner
from paths import PROBE_STUBS, REPO

STUBS = Path(PROBE_STUBS)
STAGES = ["init", "set_device", "context", "device_status", "mem_info", "memcpy", "synchronize", "compute_prepare",
          "compute", "cleanup"]


def scenario_file(tmp_path, probe=None, device=3, acl_runtime=None):
    scenario = {"product": "atlas-800i-a2", "chips": {"default": {"memory_used_percent": 25}}}
    if probe is not None:
        scenario["chips"]["overrides"] = [{"devices": [device], "probe": probe}]
    if acl_runtime is not None:
        scenario["acl_runtime"] = acl_runtime
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    return str(path)


def run_child(tmp_path, probe=None, device=3, acl_runtime=None, settings=None, timeout=20.0, acl_dir=None,
              extra_env=None):
    """One probe of `device` through the real child; returns (CommandResult, ProbeOutcome)."""
    sim = prepare_simulation(str(tmp_path / "sim"), scenario_file(tmp_path, probe, device, acl_runtime))
    settings = settings or ProbeConfig()
    state_dir = str(tmp_path / "state")
    argv, env = child_command(settings, "/nonexistent/Ascend", os.environ, state_dir,
                              SIMULATED_ACL_DIR if acl_dir is None else None, ATC_ARGV)
    if acl_dir is not None:  # a real-host layout whose site-packages is `acl_dir`
        argv, env = child_command(ProbeConfig(**dict(vars(settings), acl_python_path=acl_dir)),
                                  "/nonexistent/Ascend", os.environ, state_dir)
    env.update(sim.env)
    env.update(extra_env or {})
    runner = CommandRunner(argv, timeout, 1, env=env)
    result = runner.run(["--device", str(device)], priority=True)
    return result, read_outcomes(result, [device], timeout)[device]


def sample_of(outcome: ProbeOutcome) -> ProbeSample:
    return probe_sample(outcome, time.time(), "acl", 3, first_run=True, baseline=[])


def test_success_times_every_stage_in_order_and_reads_device_memory(tmp_path):
    result, outcome = run_child(tmp_path)
    assert result.returncode == 0 and not result.timed_out
    assert outcome.state == "ok", outcome
    assert list(outcome.stage_seconds) == STAGES
    assert all(seconds >= 0 for seconds in outcome.stage_seconds.values())
    assert outcome.soc_name == "Ascend910B3"
    assert outcome.memory_total_bytes == 65536 * 1048576
    assert outcome.memory_free_bytes == 65536 * 1048576 * 3 // 4
    assert outcome.failed_stage is None and outcome.error_code is None


# (scenario, the stage that fails, the ACL code the probe reports)
STAGE_FAILURES = [
    ({"acl_runtime": {"init_error_code": 500004}}, "init", 500004),  # ACL_ERROR_DRV_FAILURE
    ({"probe": {"fail": "rt.set_device", "error_code": 507033}}, "set_device", 507033),  # DEV_SETUP_ERROR
    ({"probe": {"fail": "rt.create_context", "error_code": 507899}}, "context", 507899),  # DRV_INTERNAL_ERROR
    ({"probe": {"fail": "rt.create_stream", "error_code": 207001}}, "context", 207001),  # MEMORY_ALLOCATION
    ({"probe": {"fail": "rt.query_device_status", "error_code": 507901}}, "device_status", 507901),  # SOCKET_CLOSE
    ({"probe": {"fail": "rt.get_mem_info", "error_code": 507899}}, "mem_info", 507899),
    ({"probe": {"fail": "rt.malloc", "error_code": 207018}}, "memcpy", 207018),  # DEVIDE_OOM
    ({"probe": {"fail": "rt.memcpy", "error_code": 507053}}, "memcpy", 507053),  # DEVICE_MEM_ERROR
    ({"probe": {"fail": "rt.synchronize_stream_with_timeout", "error_code": 507046}}, "synchronize", 507046),
    ({"probe": {"fail": "rt.reset_device", "error_code": 507899}}, "cleanup", 507899),
]


@pytest.mark.parametrize("scenario, stage, code", STAGE_FAILURES, ids=[s for _, s, _ in STAGE_FAILURES])
def test_each_stage_failing_with_an_acl_error_code(tmp_path, scenario, stage, code):
    result, outcome = run_child(tmp_path, **scenario)
    assert outcome.state == "failed", outcome
    assert (outcome.failed_stage, outcome.error_code, outcome.reason) == (stage, code, "acl_error")
    assert str(code) in outcome.message
    if stage != "init":  # cleanup releases what was acquired, also after a failure
        assert "cleanup" in outcome.stage_seconds
    sample = sample_of(outcome)
    assert sample.error_name.startswith("ACL_ERROR_") and sample.error_name in sample.detail
    assert sample.action


def test_a_device_the_runtime_reports_abnormal_fails(tmp_path):
    _, outcome = run_child(tmp_path, probe={"device_status": "abnormal"})
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "device_status", "device_abnormal")
    assert "ABNORMAL" in outcome.message


def test_a_logical_id_the_runtime_does_not_know_fails_set_device(tmp_path):
    _, outcome = run_child(tmp_path, device=8)  # the 800I A2 has devices 0..7
    assert (outcome.state, outcome.failed_stage, outcome.error_code) == ("failed", "set_device", 107001)


def test_wrong_copy_back_data_fails_memcpy(tmp_path):
    _, outcome = run_child(tmp_path, probe={"corrupt": "rt.memcpy"}, settings=ProbeConfig(copy_bytes=4096))
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "memcpy", "wrong_data")
    assert outcome.error_code is None
    assert outcome.message.startswith("copy-back differs from the pattern sent in 1 of 4096 bytes; first at offset 2048")
    assert "corrupts data" in sample_of(outcome).action


def _hung_pids(sim_dir):
    path = sim_dir / ACL_HANG_PIDS_FILE
    return [int(pid) for pid in path.read_text().split()] if path.exists() else []


def test_a_hang_is_killed_at_the_deadline_and_leaves_no_process(tmp_path):
    started = time.monotonic()
    result, outcome = run_child(tmp_path, probe={"hang": "rt.synchronize_stream_with_timeout"}, timeout=2.0)
    assert result.timed_out and time.monotonic() - started < 2.0 + 3.0
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "synchronize", "timeout")
    assert "no answer within 2." in outcome.message
    # the stages before the hang were timed; the hung one was not finished
    assert list(outcome.stage_seconds) == STAGES[:STAGES.index("synchronize")]
    pids = _hung_pids(tmp_path / "sim")
    assert len(pids) == 2  # the hanging child and the sleeper it started
    time.sleep(0.2)
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, pid
    assert "hung" in sample_of(outcome).action


def _model_files(tmp_path, factor=2.0, expected_factor=2.0, elements=16):
    model = tmp_path / "scale.om"
    model.write_text(json.dumps({"npumon_simulated_model": "scale", "factor": factor, "elements": elements}))
    values = [0.5 * index - 3.0 for index in range(elements)]
    (tmp_path / "input.bin").write_bytes(struct.pack("<{}f".format(elements), *values))
    (tmp_path / "expected.bin").write_bytes(struct.pack("<{}f".format(elements), *[v * expected_factor for v in values]))
    return ProbeConfig(model=ProbeModelConfig(path=str(model), input_file=str(tmp_path / "input.bin"),
                                              expected_output_file=str(tmp_path / "expected.bin"),
                                              dtype="float32", tolerance=1e-4))


def test_model_runs_and_its_output_matches(tmp_path):
    _, outcome = run_child(tmp_path, settings=_model_files(tmp_path))
    assert outcome.state == "ok", outcome
    # the model before the compute step, which sets the process's AI Core timeout for its own kernel
    compute = STAGES.index("compute_prepare")
    assert list(outcome.stage_seconds) == STAGES[:compute] + ["model"] + STAGES[compute:]


def test_wrong_model_output_fails_the_model_stage(tmp_path):
    _, outcome = run_child(tmp_path, probe={"corrupt": "mdl.execute"}, settings=_model_files(tmp_path))
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "model", "wrong_result")
    assert outcome.message == ("model output differs from the expected output in 1 of 16 values; worst at "
                               "index 8: expected 2.0, got 3.0 (tolerance 0.0001)")
    assert "computed a wrong result" in sample_of(outcome).action


def test_model_execution_error_is_reported_with_its_code(tmp_path):
    _, outcome = run_child(tmp_path, probe={"fail": "mdl.execute", "error_code": 507011},
                           settings=_model_files(tmp_path))
    assert (outcome.state, outcome.failed_stage, outcome.error_code) == ("failed", "model", 507011)


def test_model_files_that_do_not_fit_the_model_make_the_probe_unavailable(tmp_path):
    settings = _model_files(tmp_path, elements=16)
    (tmp_path / "input.bin").write_bytes(b"\0" * 8)
    _, outcome = run_child(tmp_path, settings=settings)
    assert outcome.state == "unavailable"
    assert outcome.message == "the probe model's input file has 8 bytes, the model's input has 64"


def test_no_runtime_installed_is_unavailable_not_a_failure(tmp_path):
    _, outcome = run_child(tmp_path, acl_runtime={"installed": False})
    assert outcome.state == "unavailable"
    assert outcome.message.startswith("pyACL (module acl) cannot be imported: libascendcl.so")
    assert sample_of(outcome).action is None


def test_on_a_host_without_cann_acl_is_not_found(tmp_path):
    empty = tmp_path / "site-packages"
    empty.mkdir()
    _, outcome = run_child(tmp_path, acl_dir=str(empty))
    assert outcome.state == "unavailable"
    assert outcome.message == "pyACL (module acl) cannot be imported: No module named 'acl'"


# -- the torch_npu variant, against the stand-ins in tests/probe_stubs ------------------------------------


def run_torch(tmp_path, fault=""):
    settings = ProbeConfig(kind="torch", matmul_size=8)
    return run_child(tmp_path, settings=settings, acl_dir=str(STUBS), extra_env={"FAKE_TORCH_NPU": fault})


def test_torch_matmul_matches_the_cpu(tmp_path):
    _, outcome = run_torch(tmp_path)
    assert outcome.state == "ok", outcome
    assert list(outcome.stage_seconds) == ["init", "set_device", "memcpy", "matmul"]


def test_torch_wrong_matmul_result(tmp_path):
    _, outcome = run_torch(tmp_path, "wrong_matmul")
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "matmul", "wrong_result")
    assert outcome.message.startswith("a 8x8 matmul on the NPU differs from the CPU's by up to 1")


def test_torch_wrong_copy(tmp_path):
    _, outcome = run_torch(tmp_path, "wrong_copy")
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "memcpy", "wrong_data")


def test_torch_npu_error_carries_the_acl_code_in_its_text(tmp_path):
    _, outcome = run_torch(tmp_path, "error")
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "memcpy", "npu_error")
    sample = sample_of(outcome)
    assert (sample.error_code, sample.error_name) == (507053, "ACL_ERROR_RT_DEVICE_MEM_ERROR")


def test_torch_missing_is_unavailable(tmp_path):
    empty = tmp_path / "nothing"
    empty.mkdir()
    _, outcome = run_child(tmp_path, settings=ProbeConfig(kind="torch"), acl_dir=str(empty))
    assert outcome.state == "unavailable"
    assert outcome.message == "torch_npu cannot be imported: No module named 'torch'"


@pytest.mark.skipif(shutil.which("vermin") is None, reason="vermin not installed (pip install -e '.[test]')")
def test_the_child_is_a_python_37_program():
    """pyACL may only exist for an older Python than npumon's: the child's modules must run on 3.7."""
    probe_dir = Path(REPO) / "npumon" / "sources" / "probe"
    child_modules = [str(probe_dir / name) for name in ("__init__.py", "protocol.py", "stages.py", "compare.py",
                                                        "child.py", "acl_probe.py", "torch_probe.py",
                                                        "runtime_facts.py")]
    result = subprocess.run(["vermin", "--target=3.7-", "--violations", "--no-tips", "--eval-annotations"]
                            + child_modules, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compute_step_builds_its_model_with_the_simulated_atc_and_checks_the_add(tmp_path):
    _, outcome = run_child(tmp_path)
    assert outcome.message.startswith("compute: Add int32 [8,16] on the AI Core via single-op model built by ATC")
    cached = tmp_path / "state" / "probe-ops" / "Ascend910B3-8.1.RC1-Add-int32-8x16"
    assert [path.name for path in cached.iterdir()] == ["0_Add_3_2_8_16_3_2_8_16_3_2_8_16.om"]
    _, again = run_child(tmp_path)  # the next probe loads the cached model: no build
    assert again.message == "compute: Add int32 [8,16] on the AI Core via cached single-op model {}".format(cached)
    assert again.stage_seconds["compute_prepare"] < outcome.stage_seconds["compute_prepare"]


def test_an_ai_core_that_hangs_while_copies_work_fails_the_compute_stage(tmp_path):
    _, outcome = run_child(tmp_path, probe={"aicore": "hang"}, settings=ProbeConfig(sync_timeout_ms=2000))
    assert (outcome.state, outcome.failed_stage, outcome.error_code) == ("failed", "compute", 507014)
    assert "memcpy" in outcome.stage_seconds and "synchronize" in outcome.stage_seconds  # those passed
    assert 1.0 <= outcome.stage_seconds["compute"] < 2.0  # the 1 s AI Core timeout the step set
    assert "AI Cores did not complete" in sample_of(outcome).action


def test_no_operator_library_leaves_compute_unavailable_and_the_probe_ok(tmp_path):
    _, outcome = run_child(tmp_path, acl_runtime={"operators": False})
    assert outcome.state == "ok" and "compute" not in outcome.stage_seconds
    assert outcome.message == ("compute unavailable: op-model: ATC could not build Add for Ascend910B3 (exit 1): ATC run "
                               "failed: op type Add is not found in the operator library for Ascend910B3 (simulated: "
                               "acl_runtime.operators is false); aclnn: no aclnn libraries; aclop: no operator API "
                               "library")
