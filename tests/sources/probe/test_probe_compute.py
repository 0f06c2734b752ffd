"""The probe's compute step (npumon/sources/probe/compute.py) in-process: the known answer, finding a path (the ATC
build and its cache), running it through the simulated pyACL (acl.op) and through a stand-in for the C operator
API (aclop), and what a hung or broken AI Core turns into. The sim's sleeps are recorded, not slept."""

import ctypes.util
import json
import os
import stat
import struct
import sys
import types

import pytest

from npumon.sources.probe import aclcodes, compute, opmodel
from npumon.sources.probe.child import parse_arguments, probe
from npumon.sources.probe.config import ProbeConfig, probe_config_problems
from npumon.sources.probe.launch import OP_CACHE_DIR, compute_argv
from npumon.sources.probe.outcome import ProbeOutcome
from npumon.sources.probe.samples import probe_sample
from npumon.sources.probe.stages import StageFailed, Stages
from npumon.sim import pyacl
from npumon.sim.pyacl import SimulatedAcl
from operator_api import FakeAclnnApi, FakeOperatorApi

ADD_MODEL = {"npumon_simulated_op": "Add", "inputs": [[3, [8, 16]], [3, [8, 16]]], "outputs": [[3, [8, 16]]]}


@pytest.fixture
def slept(monkeypatch):
    """The simulated runtime's sleeps, recorded instead of slept."""
    record = []
    monkeypatch.setattr(pyacl.time, "sleep", record.append)
    return record


def simulated(plan=None, operators=True):
    """A simulated runtime and its `acl` module (a pyACL without get_version_str)."""
    runtime = SimulatedAcl(8, "Ascend910B3", lambda device: (1 << 30, 1 << 31), lambda device: dict(plan or {}),
                           operators=operators)
    acl = types.SimpleNamespace(init=runtime.init, finalize=runtime.finalize, get_soc_name=runtime.get_soc_name,
                                get_version=runtime.get_version, create_data_buffer=runtime.create_data_buffer,
                                destroy_data_buffer=runtime.destroy_data_buffer,
                                create_tensor_desc=runtime.create_tensor_desc,
                                destroy_tensor_desc=runtime.destroy_tensor_desc,
                                rt=runtime.rt, mdl=runtime.mdl, util=runtime.util, op=runtime.op)
    return runtime, acl


def runtime_on_device(plan=None, operators=True):
    """A simulated runtime with device 0 set and a stream: (runtime, acl module, stream)."""
    runtime, acl = simulated(plan, operators)
    assert acl.init() == 0 and acl.rt.set_device(0) == 0
    context, _ = acl.rt.create_context(0)
    stream, _ = acl.rt.create_stream()
    return runtime, acl, stream


def model_dir(tmp_path, spec=None):
    directory = tmp_path / "models"
    directory.mkdir(exist_ok=True)
    (directory / "0_Add_3_2_8_16_3_2_8_16_3_2_8_16.om").write_text(json.dumps(spec or ADD_MODEL))
    return str(directory)


def op_model_plan(tmp_path):
    return opmodel.Plan(compute.OP_MODEL, model_dir(tmp_path), None, "test model")


def leftovers(runtime):
    """What the step left behind: only the context, the stream and the device the test opened may remain."""
    return sorted(set(runtime.leaks()) - {"context", "stream", "device 0 not reset", "not finalized"})


# -- the known answer ------------------------------------------------------------------------------------------


def test_the_operands_have_an_exact_answer_with_negative_and_positive_elements():
    first, second, expected = compute.operands()
    a, b, y = (struct.unpack("<128i", data) for data in (first, second, expected))
    assert y == tuple(x1 + x2 for x1, x2 in zip(a, b))
    assert y[0] == -61 and y[127] == 320 and min(a) < 0 < max(a)
    assert len(set(y)) == 128  # an element landing at the wrong index does not match


def test_a_wrong_element_is_named_by_its_index_and_values():
    _, _, expected = compute.operands()
    wrong = bytearray(expected)
    wrong[4 * 37:4 * 38] = struct.pack("<i", 999)
    assert compute.result_mismatch(expected, bytes(wrong)) == \
        "Add computed 1 of 128 elements wrong; first [2, 5]: expected 50, got 999"
    assert compute.result_mismatch(expected, expected) is None
    assert compute.result_mismatch(expected, expected[:8]) == "Add returned 8 bytes, expected 512"


def test_the_atc_description_is_the_add_of_two_int32_nd_tensors():
    (op,) = json.loads(opmodel.op_json((compute.ADD,)))
    tensor = {"format": "ND", "shape": [8, 16], "type": "int32"}
    assert op == {"op": "Add", "input_desc": [tensor, tensor], "output_desc": [tensor]}


# -- running it through the simulated pyACL ---------------------------------------------------------------------


def test_the_op_model_path_computes_checks_and_releases_everything(tmp_path, slept):
    runtime, acl, stream = runtime_on_device()
    result = compute.execute(acl, stream, op_model_plan(tmp_path), 5000)
    assert result == compute.ComputeResult("op-model", "Add int32 [8,16] on the AI Core via test model")
    calls = runtime.calls[runtime.calls.index("rt.create_stream") + 1:]
    assert calls[:1] == ["rt.set_op_execute_time_out"]
    assert calls.index("op.set_model_dir") < calls.index("op.execute_v2") \
        < calls.index("rt.synchronize_stream_with_timeout")
    assert leftovers(runtime) == []
    assert pyacl.OP_KERNEL_SECONDS in slept  # the kernel's time shows at the sync


def test_a_wrong_element_from_the_ai_core_fails_with_wrong_result(tmp_path, slept):
    runtime, acl, stream = runtime_on_device({"corrupt": "op.execute_v2"})
    with pytest.raises(StageFailed) as failure:
        compute.execute(acl, stream, op_model_plan(tmp_path), 5000)
    assert failure.value.reason == "wrong_result" and failure.value.code is None
    assert str(failure.value) == "Add computed 1 of 128 elements wrong; first [2, 10]: expected 65, got 66"
    assert leftovers(runtime) == []


@pytest.mark.parametrize("sync_ms, code, waited", [(5000, 507014, 2), (1000, 507046, 1.0)])
def test_a_hung_ai_core_ends_at_the_op_timeout_or_the_sync_timeout(tmp_path, slept, sync_ms, code, waited):
    """execute_v2 is asynchronous: it accepts the kernel, and the sync after it reports the hang."""
    runtime, acl, stream = runtime_on_device({"aicore": "hang"})
    with pytest.raises(StageFailed) as failure:
        compute.execute(acl, stream, op_model_plan(tmp_path), sync_ms)
    assert failure.value.code == code
    assert str(failure.value) == "acl.rt.synchronize_stream_with_timeout (after Add) returned {}".format(code)
    assert slept[-1] == waited
    assert leftovers(runtime) == []


def test_an_ai_core_exception_shows_at_the_sync(tmp_path, slept):
    _, acl, stream = runtime_on_device({"aicore": "exception"})
    with pytest.raises(StageFailed) as failure:
        compute.execute(acl, stream, op_model_plan(tmp_path), 5000)
    assert failure.value.code == 507015


def test_no_operator_library_is_unavailable_not_a_failure(tmp_path, slept):
    runtime, acl, stream = runtime_on_device(operators=False)
    with pytest.raises(compute.ComputeUnavailable, match=r"^acl.op.execute_v2 returned 100024$"):
        compute.execute(acl, stream, op_model_plan(tmp_path), 5000)
    assert leftovers(runtime) == []


def test_a_model_for_another_operator_is_not_found_and_a_broken_one_does_not_load(tmp_path, slept):
    _, acl, stream = runtime_on_device()
    other = dict(ADD_MODEL, inputs=[[3, [4, 4]], [3, [4, 4]]])
    with pytest.raises(compute.ComputeUnavailable, match="100024"):
        compute.execute(acl, stream, opmodel.Plan("op-model", model_dir(tmp_path, other), None, ""), 5000)
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "x.om").write_text("not a model")
    with pytest.raises(compute.ComputeUnavailable, match="acl.op.set_model_dir returned 100025"):
        compute.execute(acl, stream, opmodel.Plan("op-model", str(broken), None, ""), 5000)


def test_a_device_error_in_the_step_is_a_failure_with_its_code(tmp_path, slept):
    _, acl, stream = runtime_on_device({"fail": "op.execute_v2", "error_code": 507899})
    with pytest.raises(StageFailed) as failure:
        compute.execute(acl, stream, op_model_plan(tmp_path), 5000)
    assert failure.value.code == 507899


# -- the aclop path, through a stand-in for libascendcl.so's C operator API ---------------------------------------


def add_kernel(runtime, pointers):
    """The Add of two int32 [8, 16] tensors, as the operator computes it."""
    regions = [runtime._regions[pointer] for pointer in pointers]
    a, b = (struct.unpack("<128i", bytes(region.data[:512])) for region in regions[:2])
    regions[2].data[:512] = struct.pack("<128i", *(x + y for x, y in zip(a, b)))


def test_the_aclop_path_passes_the_documented_arguments_and_releases_everything(slept):
    runtime, acl, stream = runtime_on_device()
    api = FakeOperatorApi(runtime, add_kernel)
    result = compute.execute(acl, stream, opmodel.Plan("aclop", None, api, "aclop test"), 5000)
    assert result.path == "aclop"
    assert api.calls[:3] == [("desc", 3, [8, 16], 2)] * 3
    (execute,) = [call for call in api.calls if call[0] == "execute"]
    assert execute == ("execute", b"Add", 2, 1, 0, 0, None, stream)  # ACL_ENGINE_SYS, ACL_COMPILE_SYS, opPath NULL
    assert api.live == set() and leftovers(runtime) == []


def test_an_aclop_that_cannot_compile_here_is_unavailable(slept):
    runtime, acl, stream = runtime_on_device()
    api = FakeOperatorApi(runtime, add_kernel, ret=500002)  # ACL_ERROR_GE_FAILURE: the graph engine could not compile it
    with pytest.raises(compute.ComputeUnavailable, match="aclopCompileAndExecute returned 500002"):
        compute.execute(acl, stream, opmodel.Plan("aclop", None, api, ""), 5000)
    assert api.live == set() and leftovers(runtime) == []


def test_loading_the_operator_api_says_what_is_missing():
    with pytest.raises(compute.ComputeUnavailable, match="^cannot load /nonexistent/libascendcl.so"):
        opmodel.load_operator_api("/nonexistent/libascendcl.so")
    libc = ctypes.util.find_library("c")
    with pytest.raises(compute.ComputeUnavailable, match="has no aclCreateTensorDesc$"):
        opmodel.load_operator_api(libc)


# -- the aclnn path, through a stand-in for libnnopbase.so and libopapi.so ----------------------------------------


def test_the_aclnn_path_runs_the_two_phases_with_contiguous_tensors_and_releases_everything(slept):
    runtime, acl, stream = runtime_on_device()
    api = FakeAclnnApi(runtime, add_kernel)
    result = compute.execute(acl, stream, opmodel.Plan("aclnn", None, api, "aclnn test"), 5000)
    assert result == compute.ComputeResult("aclnn", "Add int32 [8,16] on the AI Core via aclnn test")
    assert api.calls[:3] == [("tensor", [8, 16], 3, [16, 1], 0, 2)] * 3  # ACL_INT32, row-major strides, ND
    assert api.calls[3:5] == [("scalar", 1, 3), ("workspace size", True)]  # alpha = int32 1
    (execute,) = [call for call in api.calls if call[0] == "execute"]
    assert execute[1] == 1024 and execute[3] == stream  # the workspace the first phase asked for, pyACL's stream
    assert api.tensors == {} and api.scalars == {} and leftovers(runtime) == []


def test_a_first_phase_that_refuses_the_arguments_is_unavailable(slept):
    runtime, acl, stream = runtime_on_device()
    api = FakeAclnnApi(runtime, add_kernel, first_phase_ret=161002)  # ACLNN_ERR_PARAM_INVALID
    with pytest.raises(compute.ComputeUnavailable, match="^aclnnAddGetWorkspaceSize returned 161002$"):
        compute.execute(acl, stream, opmodel.Plan("aclnn", None, api, ""), 5000)
    assert api.tensors == {} and api.scalars == {} and leftovers(runtime) == []


def test_where_aclnn_refuses_the_add_the_step_runs_it_by_aclop_and_says_why(slept):
    runtime, acl, stream = runtime_on_device()
    aclnn = FakeAclnnApi(runtime, add_kernel, first_phase_ret=161002)  # e.g. a product aclnnAdd does not support
    aclop = FakeOperatorApi(runtime, add_kernel)
    plan = opmodel.Plan("aclnn", None, aclnn, "aclnn test", opmodel.Plan("aclop", None, aclop, "aclop test"))
    result = compute.execute(acl, stream, plan, 5000)
    assert result == compute.ComputeResult("aclop", "Add int32 [8,16] on the AI Core via aclop test (aclnn: "
                                                    "aclnnAddGetWorkspaceSize returned 161002 unavailable)")
    assert aclnn.tensors == {} and aclop.live == set() and leftovers(runtime) == []


def test_the_aclnn_path_comes_before_aclop_and_says_what_it_loads(tmp_path, monkeypatch):
    loaded = []
    monkeypatch.setattr(opmodel, "load_aclnn_api", lambda paths, functions: loaded.append((paths, functions)) or "api")
    monkeypatch.setattr(opmodel, "load_operator_api", lambda path: "api of " + path)
    settings = opmodel.ComputeSettings(str(tmp_path / "cache"), None, "/opt/lib64/libascendcl.so", 15.0,
                                       ["/opt/lib64/libnnopbase.so", "/opt/lib64/libopapi.so"])
    acl = types.SimpleNamespace(op=types.SimpleNamespace(execute_v2=None))
    plan = compute.prepare(acl, "Ascend910B3", "8.1.RC1", settings)
    assert (plan.path, plan.api) == ("aclnn", "api") and loaded == [(settings.aclnn_libraries, ["aclnnAdd"])]
    assert (plan.fallback.path, plan.fallback.api) == ("aclop", "api of /opt/lib64/libascendcl.so")
    assert plan.how == ("aclnnAdd in /opt/lib64/libopapi.so (op-model: no ATC (the CANN toolkit's compiler) "
                        "installed unavailable)")
    # a MatMul has no aclnn function here: not tried, not named
    tensor = opmodel.Tensor("float16", (16, 16))
    with pytest.raises(compute.ComputeUnavailable) as unavailable:
        opmodel.prepare(acl, (opmodel.OpSpec("MatMul", (tensor, tensor), (tensor,)),), "Ascend910B3", "8.1.RC1",
                        settings._replace(library=None))
    assert "aclnn" not in str(unavailable.value)


def test_loading_the_aclnn_libraries_says_what_is_missing():
    with pytest.raises(compute.ComputeUnavailable, match="^cannot load /nonexistent/libnnopbase.so"):
        opmodel.load_aclnn_api(["/nonexistent/libnnopbase.so", "/nonexistent/libopapi.so"], ["aclnnAdd"])
    libc = ctypes.util.find_library("c")
    with pytest.raises(compute.ComputeUnavailable, match="has no aclCreateTensor$"):
        opmodel.load_aclnn_api([libc, libc], ["aclnnAdd"])


# -- finding a path: ATC once, then the cache --------------------------------------------------------------------


def fake_atc(tmp_path, fail=None):
    """An executable that behaves like ATC's single-op build and counts its runs."""
    script = tmp_path / "atc"
    runs = tmp_path / "atc-runs"
    script.write_text("""#!{python} -S
import json, os, sys
args = dict(arg[2:].split("=", 1) for arg in sys.argv[1:])
with open({runs!r}, "a") as handle:
    handle.write(args["soc_version"] + "\\n")
if {fail!r}:
    print("ATC run failed, Please check the detail log")
    print({fail!r})
    sys.exit(1)
json.load(open(args["singleop"]))
os.makedirs(args["output"])
open(os.path.join(args["output"], "0_Add_3_2_8_16_3_2_8_16_3_2_8_16.om"), "w").write("model")
""".format(python=sys.executable, runs=str(runs), fail=fail))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return [str(script)], runs


def test_atc_builds_the_model_once_per_soc_and_version_and_later_probes_use_the_cache(tmp_path):
    atc, runs = fake_atc(tmp_path)
    settings = opmodel.ComputeSettings(str(tmp_path / "cache"), atc, None)
    acl = types.SimpleNamespace(op=types.SimpleNamespace(execute_v2=None))
    plan = compute.prepare(acl, "Ascend910B3", "8.1.RC1", settings)
    assert plan.path == "op-model" and plan.how.startswith("single-op model built by ATC in ")
    assert plan.model_dir == str(tmp_path / "cache" / "Ascend910B3-8.1.RC1-Add-int32-8x16")
    again = compute.prepare(acl, "Ascend910B3", "8.1.RC1", settings)
    assert again.how == "cached single-op model " + plan.model_dir
    compute.prepare(acl, "Ascend910B3", "8.2.RC1", settings)  # another CANN: another build
    assert runs.read_text().split() == ["Ascend910B3", "Ascend910B3"]
    assert sorted(name for name in os.listdir(tmp_path / "cache") if not name.endswith(".lock")) == [
        "Ascend910B3-8.1.RC1-Add-int32-8x16", "Ascend910B3-8.2.RC1-Add-int32-8x16"]  # no scratch left


def test_a_failed_build_is_unavailable_with_atcs_words_and_not_retried_within_the_hour(tmp_path):
    atc, runs = fake_atc(tmp_path, fail="E19999: op type Add is not supported")
    settings = opmodel.ComputeSettings(str(tmp_path / "cache"), atc, None)
    acl = types.SimpleNamespace(op=types.SimpleNamespace(execute_v2=None))
    with pytest.raises(compute.ComputeUnavailable) as first:
        compute.prepare(acl, "Ascend310P3", "8.0.0", settings)
    assert str(first.value) == ("op-model: ATC could not build Add for Ascend310P3 (exit 1): E19999: op type Add is "
                                "not supported; aclnn: no aclnn libraries; aclop: no operator API library")
    with pytest.raises(compute.ComputeUnavailable, match="an earlier build; retried an hour after it"):
        compute.prepare(acl, "Ascend310P3", "8.0.0", settings)
    assert runs.read_text().split() == ["Ascend310P3"]


def test_without_atc_or_library_every_reason_is_given(tmp_path):
    settings = opmodel.ComputeSettings(str(tmp_path / "cache"), ["/nonexistent/compiler/bin/atc"], None)
    acl = types.SimpleNamespace(op=types.SimpleNamespace(execute_v2=None))
    with pytest.raises(compute.ComputeUnavailable) as unavailable:
        compute.prepare(acl, "Ascend910B3", "8.1.RC1", settings)
    assert str(unavailable.value) == ("op-model: no ATC (the CANN toolkit's compiler) at /nonexistent/compiler/bin/atc;"
                                      " aclnn: no aclnn libraries; aclop: no operator API library")
    with pytest.raises(compute.ComputeUnavailable, match="^op-model: the runtime names no SoC"):
        compute.prepare(acl, None, "8.1.RC1", settings)


def test_the_aclop_path_is_next_when_there_is_no_atc(tmp_path, monkeypatch):
    monkeypatch.setattr(opmodel, "load_operator_api", lambda path: "api of " + path)
    settings = opmodel.ComputeSettings(str(tmp_path / "cache"), None, "/opt/lib64/libascendcl.so")
    acl = types.SimpleNamespace(op=types.SimpleNamespace(execute_v2=None))
    plan = compute.prepare(acl, "Ascend910B3", "8.1.RC1", settings)
    assert (plan.path, plan.api) == ("aclop", "api of /opt/lib64/libascendcl.so")
    assert plan.how == ("aclopCompileAndExecute in /opt/lib64/libascendcl.so (op-model: no ATC (the CANN toolkit's "
                        "compiler) installed unavailable) (aclnn: no aclnn libraries unavailable)")


# -- in the probe: stages, report, hint, settings ------------------------------------------------------------------


class _Quiet:
    def write(self, text):
        pass

    def flush(self):
        pass


def probe_in_process(monkeypatch, tmp_path, plan=None, operators=True):
    runtime, acl = simulated(plan, operators)
    monkeypatch.setitem(sys.modules, "acl", acl)
    atc, _ = fake_atc(tmp_path)
    sim_model = json.dumps(ADD_MODEL)
    # the fake ATC writes "model"; the simulated runtime loads what its own ATC writes
    (tmp_path / "atc").write_text((tmp_path / "atc").read_text().replace('.write("model")',
                                                                         '.write({!r})'.format(sim_model)))
    args = ["--device", "0", "--copy-bytes", "64", "--compute", "--op-cache-dir", str(tmp_path / "cache"),
            "--atc-command", json.dumps(atc)]
    return runtime, probe(parse_arguments(args), Stages(_Quiet()))


def test_the_probe_reports_the_compute_stage_and_the_path_it_took(monkeypatch, tmp_path, slept):
    runtime, report = probe_in_process(monkeypatch, tmp_path)
    assert report["state"] == "ok", report
    assert list(report["stages"])[-3:] == ["compute_prepare", "compute", "cleanup"]
    assert report["compute"] == "op-model"
    assert report["message"].startswith("compute: Add int32 [8,16] on the AI Core via single-op model built by ATC")
    assert "Ascend910B3-acl1.0.0-Add-int32-8x16" in report["message"]  # no get_version_str: the ACL version
    assert runtime.leaks() == []


def test_a_probe_without_operators_passes_and_says_compute_unavailable(monkeypatch, tmp_path, slept):
    _, report = probe_in_process(monkeypatch, tmp_path, operators=False)
    assert report["state"] == "ok", report
    assert report["compute"] is None
    assert report["message"] == "compute unavailable: acl.op.execute_v2 returned 100024"


def test_a_hung_ai_core_fails_the_probe_in_stage_compute_with_the_ai_core_hint(monkeypatch, tmp_path, slept):
    _, report = probe_in_process(monkeypatch, tmp_path, {"aicore": "hang"})
    assert (report["state"], report["failed_stage"], report["error_code"]) == ("failed", "compute", 507014)
    outcome = ProbeOutcome("failed", report["stages"], failed_stage="compute", error_code=507014,
                           reason="acl_error", message=report["message"])
    sample = probe_sample(outcome, 0.0, "acl", 0, True, [])
    assert sample.error_name == "ACL_ERROR_RT_AICORE_TIMEOUT"
    assert "AI Cores did not complete" in sample.action and "80C9800A" in sample.action


@pytest.mark.parametrize("code, reason", [(507046, "acl_error"), (None, "timeout")])
def test_not_finishing_in_time_in_the_compute_step_points_at_the_ai_core(code, reason):
    outcome = ProbeOutcome("failed", {"memcpy": 0.01, "compute": 2.5}, failed_stage="compute", error_code=code,
                           reason=reason, message="x")
    assert probe_sample(outcome, 0.0, "acl", 0, False, []).action == aclcodes.AICORE_HANG_ACTION
    elsewhere = ProbeOutcome("failed", {}, failed_stage="synchronize", error_code=code, reason=reason, message="x")
    assert probe_sample(elsewhere, 0.0, "acl", 0, False, []).action != aclcodes.AICORE_HANG_ACTION


def test_the_new_acl_codes_have_names_meanings_and_hints():
    for code, name in ((507014, "ACL_ERROR_RT_AICORE_TIMEOUT"), (507015, "ACL_ERROR_RT_AICORE_EXCEPTION"),
                       (507016, "ACL_ERROR_RT_AICORE_TRAP_EXCEPTION"), (507034, "ACL_ERROR_RT_VECTOR_CORE_TIMEOUT"),
                       (507035, "ACL_ERROR_RT_VECTOR_CORE_EXCEPTION"), (100024, "ACL_ERROR_OP_NOT_FOUND"),
                       (100025, "ACL_ERROR_OP_LOAD_FAILED")):
        entry = aclcodes.describe(code)
        assert entry.name == name and entry.meaning and entry.action
    assert "reset" in aclcodes.describe(507034).action


def test_launch_gives_the_child_the_install_or_the_targets_own_tools():
    real = compute_argv(ProbeConfig(), "/usr/local/Ascend", "/var/lib/npumon")
    assert real == ["--compute", "--op-cache-dir", os.path.join("/var/lib/npumon", OP_CACHE_DIR),
                    "--compute-build-timeout", "15.0",
                    "--atc-command", json.dumps(["/usr/local/Ascend/ascend-toolkit/latest/compiler/bin/atc"]),
                    "--op-library", "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so",
                    "--aclnn-library", "/usr/local/Ascend/ascend-toolkit/latest/lib64/libnnopbase.so",
                    "--aclnn-library", "/usr/local/Ascend/ascend-toolkit/latest/lib64/libopapi.so"]
    simulated = compute_argv(ProbeConfig(), "/usr/local/Ascend", "/sim/state", "/sim/acl", ["python", "-m", "atc"])
    assert simulated[-2:] == ["--atc-command", json.dumps(["python", "-m", "atc"])]
    assert "--op-library" not in simulated and "--aclnn-library" not in simulated
    assert compute_argv(ProbeConfig(compute=False), "/usr/local/Ascend", "/s") == []
    assert compute_argv(ProbeConfig(kind="torch"), "/usr/local/Ascend", "/s") == []


def test_the_build_timeout_leaves_room_for_the_probe():
    short = compute_argv(ProbeConfig(timeout_seconds=10), "/usr/local/Ascend", "/s")
    assert short[short.index("--compute-build-timeout") + 1] == "5.0"  # capped at half the probe's deadline
    problems = probe_config_problems(ProbeConfig(compute_build_timeout_seconds=0))
    assert [key for key, _ in problems] == ["probe.compute_build_timeout_seconds"]


def test_a_bad_atc_command_is_a_one_line_usage_error(capsys):
    with pytest.raises(SystemExit):
        parse_arguments(["--device", "0", "--atc-command", "atc"])
    assert "--atc-command must be a JSON list of strings" in capsys.readouterr().err
