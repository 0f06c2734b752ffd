"""The probe's pure parts: data checks, ACL codes, reading the child's output, turning it into a sample, and
the pyACL call sequence itself (run in-process against the simulated pyACL, which records every call)."""

import json
import math
import signal
import struct
import sys
import types

import pytest

from npumon.sources.probe import aclcodes
from npumon.sources.probe.child import parse_arguments, probe
from npumon.sources.probe.compare import byte_mismatch, copy_pattern, value_mismatch
from npumon.sources.probe.outcome import ProbeLaunchError, read_outcomes
from npumon.sources.probe.samples import baseline_seconds, probe_sample
from npumon.sources.probe.stages import Stages
from npumon.sim.pyacl import SimulatedAcl
from npumon.sources.runner import CommandResult

# -- data checks -------------------------------------------------------------------------------------------


def test_copy_pattern_has_every_byte_value_and_no_repeating_block():
    pattern = copy_pattern(65536)
    assert len(pattern) == 65536 and set(pattern) == set(range(256))
    blocks = {pattern[start:start + 256] for start in range(0, 65536, 256)}
    assert len(blocks) == 256  # every block of one 64 KiB pattern differs
    assert copy_pattern(1000) == pattern[:1000]


def test_byte_mismatch_names_the_first_difference_and_the_count():
    sent = copy_pattern(512)
    assert byte_mismatch(sent, sent) is None
    got = bytearray(sent)
    got[300] ^= 1
    got[400] ^= 0xFF
    assert byte_mismatch(sent, bytes(got)) == (
        "copy-back differs from the pattern sent in 2 of 512 bytes; first at offset 300 (sent 0x{:02x}, got 0x{:02x})"
        .format(sent[300], got[300]))
    assert byte_mismatch(sent, sent[:10]) == "copy-back returned 10 bytes, 512 were sent"


def _floats(*values):
    return struct.pack("<{}f".format(len(values)), *values)


def test_value_mismatch_within_tolerance_and_worst_value():
    assert value_mismatch(_floats(1.0, 2.0), _floats(1.0005, 1.9995), "float32", 1e-3) is None
    assert value_mismatch(_floats(1.0, 2.0, 3.0), _floats(1.5, 2.0, 5.0), "float32", 0.1) == (
        "output differs from the expected output in 2 of 3 values; worst at index 2: expected 3.0, got 5.0 "
        "(tolerance 0.1)")
    assert value_mismatch(_floats(1.0), _floats(1.0, 2.0), "float32", 0.1) == \
        "output has 8 bytes, the expected output 4"


def test_value_mismatch_nan_and_infinity():
    assert "worst at index 0" in value_mismatch(_floats(1.0, 2.0), _floats(math.nan, 2.0), "float32", 1.0)
    assert value_mismatch(_floats(math.nan, math.inf), _floats(math.nan, math.inf), "float32", 0.0) is None


def test_value_mismatch_other_types():
    assert value_mismatch(struct.pack("<2e", 1.0, 2.0), struct.pack("<2e", 1.0, 2.001), "float16", 0.01) is None
    assert value_mismatch(bytes([1, 2]), bytes([1, 3]), "uint8", 0) is not None


# -- ACL codes ---------------------------------------------------------------------------------------------


def test_codes_that_matter_for_liveness_are_named():
    assert aclcodes.describe(507053).name == "ACL_ERROR_RT_DEVICE_MEM_ERROR"
    assert aclcodes.describe(107001).name == "ACL_ERROR_RT_INVALID_DEVICEID"
    assert aclcodes.describe(507899).name == "ACL_ERROR_RT_DRV_INTERNAL_ERROR"
    assert all(entry.name.startswith("ACL_ERROR_") and entry.meaning and entry.action
               for entry in aclcodes.ACL_CODES.values())


def test_unknown_codes_are_described_by_their_class():
    assert aclcodes.describe(507777) == aclcodes.AclCode(
        "ACL error 507777", "an internal software or hardware error", aclcodes.describe(507777).action)
    assert aclcodes.describe(145000).meaning == "a mistake of the caller or its environment"


def test_find_code_in_torch_npu_messages():
    assert aclcodes.find_code("call aclrtMemcpy failed, error code is 507053") == 507053
    assert aclcodes.find_code("EL9999 ... 12345678 ... 507899.") == 507899
    assert aclcodes.find_code("took 1234567 us, code 999999") is None
    assert aclcodes.find_code("") is None


# -- reading the child's output ----------------------------------------------------------------------------


def read_outcome(result, device=0):
    """The outcome of a child asked to probe `device` alone."""
    return read_outcomes(result, [device], 30.0)[device]


def result(stdout="", stderr="", returncode=0, timed_out=False, error=None, duration=0.5):
    return CommandResult(["python"], None if timed_out else returncode, stdout, stderr, duration,
                         timed_out=timed_out, error=error)


REPORT = {"schema": "npumon.probe/v1", "kind": "acl", "device": 0, "state": "ok", "stages": {"init": 0.25},
          "failed_stage": None, "error_code": None, "reason": None, "message": None, "soc_name": "Ascend910B3",
          "memory_free_bytes": 10, "memory_total_bytes": 20}
PROGRESS = "npumon-probe: start init\nnpumon-probe: done init 0.250000\nnpumon-probe: start memcpy\n"


def test_the_report_is_the_last_json_line_after_runtime_noise():
    noise = "[INFO] ASCENDCL(1234): init\n{not json\n"
    outcome = read_outcome(result(noise + json.dumps(REPORT) + "\n"))
    assert (outcome.state, outcome.stage_seconds, outcome.soc_name, outcome.memory_total_bytes) == \
        ("ok", {"init": 0.25}, "Ascend910B3", 20)


def test_stage_lines_give_the_finished_stages_and_the_one_under_way():
    outcome = read_outcome(result(stderr=PROGRESS + "junk\nnpumon-probe: done memcpy x\n", returncode=1))
    assert (outcome.stage_seconds, outcome.failed_stage) == ({"init": 0.25}, "memcpy")


def test_a_timeout_names_the_stage_it_hung_in():
    outcome = read_outcome(result(stderr=PROGRESS, timed_out=True, duration=30.01))
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "memcpy", "timeout")
    assert outcome.stage_seconds == {"init": 0.25}
    assert outcome.message == "no answer within 30.0 s in stage memcpy: the probe's process group was killed"


def test_a_crash_mid_stage_is_a_failure_of_the_chip():
    outcome = read_outcome(result(stderr=PROGRESS, returncode=-signal.SIGSEGV))
    assert (outcome.state, outcome.failed_stage, outcome.reason) == ("failed", "memcpy", "crash")
    assert outcome.message == "the probe process was killed by SIGSEGV in stage memcpy without a report"


@pytest.mark.parametrize("bad", [
    result(error="cannot run /opt/python3.7: No such file or directory"),
    result(stderr="ModuleNotFoundError: No module named 'npumon'\n", returncode=1),
    result(timed_out=True),
    result(json.dumps(dict(REPORT, state="maybe")) + "\n"),
    result(json.dumps(dict(REPORT, stages={"init": "fast"})) + "\n"),
])
def test_a_child_that_never_reached_the_device_is_a_launch_error(bad):
    with pytest.raises(ProbeLaunchError):
        read_outcome(bad)


def test_launch_error_text_says_why():
    with pytest.raises(ProbeLaunchError, match="exited with status 1 before its first stage: ModuleNotFound"):
        read_outcome(result(stderr="Traceback\nModuleNotFoundError: No module named 'npumon'\n", returncode=1))


# -- samples -------------------------------------------------------------------------------------------------


def test_a_failure_is_described_with_the_code_name_and_meaning():
    outcome = read_outcome(result(json.dumps(dict(
        REPORT, state="failed", failed_stage="memcpy", error_code=507053, reason="acl_error",
        message="acl.rt.memcpy (host to device) returned 507053", stages={"init": 0.2, "memcpy": 0.1})) + "\n"))
    sample = probe_sample(outcome, 1000.0, "acl", 3, first_run=False, baseline=[0.1, 0.2, 0.3])
    assert sample.detail == ("acl.rt.memcpy (host to device) returned 507053 (ACL_ERROR_RT_DEVICE_MEM_ERROR: "
                             "uncorrectable error (UCE) in device memory)")
    assert (sample.error_name, sample.failed_stage, sample.first_run) == ("ACL_ERROR_RT_DEVICE_MEM_ERROR", "memcpy", False)
    assert sample.duration_seconds == pytest.approx(0.3) and sample.baseline_seconds == 0.2
    assert sample.action == aclcodes.describe(507053).action


def test_baseline_needs_three_runs_and_is_the_median():
    assert baseline_seconds([0.1, 0.2]) is None
    assert baseline_seconds([0.5, 0.1, 0.2, 9.0]) == pytest.approx(0.35)


def test_unavailable_has_no_first_run_and_no_action():
    outcome = read_outcome(result(json.dumps(dict(REPORT, state="unavailable", message="no acl")) + "\n"))
    sample = probe_sample(outcome, 1000.0, "acl", 0, first_run=True, baseline=[])
    assert (sample.state, sample.first_run, sample.action, sample.detail) == ("unavailable", None, None, "no acl")


# -- the pyACL call sequence, in-process -------------------------------------------------------------------


def simulated_acl(plan=None, device_count=8):
    runtime = SimulatedAcl(device_count, "Ascend910B3", lambda device: (1 << 30, 1 << 31),
                           lambda device: dict(plan or {}))
    module = types.SimpleNamespace(init=runtime.init, finalize=runtime.finalize, get_soc_name=runtime.get_soc_name,
                                   create_data_buffer=runtime.create_data_buffer,
                                   destroy_data_buffer=runtime.destroy_data_buffer,
                                   rt=runtime.rt, mdl=runtime.mdl, util=runtime.util)
    return runtime, module


class _Quiet:
    def write(self, text):
        pass

    def flush(self):
        pass


def run_in_process(monkeypatch, plan=None, args=()):
    runtime, module = simulated_acl(plan)
    monkeypatch.setitem(sys.modules, "acl", module)
    return runtime, probe(parse_arguments(["--device", "2", "--copy-bytes", "1024"] + list(args)), Stages(_Quiet()))


SEQUENCE = ["init", "get_soc_name", "rt.set_device", "rt.create_context", "rt.create_stream",
            "rt.query_device_status", "rt.get_mem_info", "rt.malloc", "util.bytes_to_ptr", "rt.memcpy",
            "rt.malloc_host", "rt.memcpy", "util.ptr_to_bytes", "rt.synchronize_stream_with_timeout"]
CLEANUP = ["rt.free", "rt.free_host", "rt.destroy_stream", "rt.destroy_context", "rt.reset_device", "finalize"]


def test_the_documented_sequence_and_cleanup_order_leave_nothing_behind(monkeypatch):
    runtime, report = run_in_process(monkeypatch)
    assert report["state"] == "ok", report
    assert runtime.calls == SEQUENCE + CLEANUP
    assert runtime.leaks() == []


def test_a_failure_midway_still_releases_what_was_acquired(monkeypatch):
    runtime, report = run_in_process(monkeypatch, {"fail": "rt.memcpy", "error_code": 507053})
    assert (report["state"], report["failed_stage"], report["error_code"]) == ("failed", "memcpy", 507053)
    # the copy to the device failed before any host buffer was taken: only the device buffer is freed
    assert runtime.calls[runtime.calls.index("rt.memcpy") + 1:] == [
        "rt.free", "rt.destroy_stream", "rt.destroy_context", "rt.reset_device", "finalize"]
    assert runtime.leaks() == []
    assert list(report["stages"])[-1] == "cleanup"


def test_model_sequence_and_cleanup(monkeypatch, tmp_path):
    model = tmp_path / "m.om"
    model.write_text(json.dumps({"npumon_simulated_model": "scale", "factor": 3.0, "elements": 2}))
    (tmp_path / "in").write_bytes(_floats(1.0, 2.0))
    (tmp_path / "out").write_bytes(_floats(3.0, 6.0))
    runtime, report = run_in_process(monkeypatch, args=["--model", str(model), "--model-input", str(tmp_path / "in"),
                                                        "--model-expected", str(tmp_path / "out")])
    assert report["state"] == "ok", report
    assert runtime.calls[len(SEQUENCE):len(SEQUENCE) + 3] == ["mdl.load_from_file", "mdl.create_desc", "mdl.get_desc"]
    assert "mdl.execute" in runtime.calls
    tail = runtime.calls[runtime.calls.index("mdl.execute"):]
    # datasets (buffers first), then the model, its descriptor, device and host memory, stream, context, device
    assert [call for call in tail if call.startswith(("mdl.destroy", "mdl.unload", "destroy_data_buffer"))] == [
        "destroy_data_buffer", "mdl.destroy_dataset", "destroy_data_buffer", "mdl.destroy_dataset", "mdl.unload",
        "mdl.destroy_desc"]
    assert tail[-6:] == ["rt.free_host", "rt.free_host", "rt.destroy_stream", "rt.destroy_context", "rt.reset_device",
                         "finalize"]
    assert runtime.leaks() == []


def test_a_runtime_that_breaks_its_own_contract_makes_the_probe_unavailable(monkeypatch):
    runtime, module = simulated_acl()
    module.rt.get_mem_info = lambda attribute: (0, 0)  # two values where pyACL documents three
    monkeypatch.setitem(sys.modules, "acl", module)
    report = probe(parse_arguments(["--device", "0"]), Stages(_Quiet()))
    assert report["state"] == "unavailable"
    assert report["message"].startswith("probe error in stage mem_info: ValueError")
    assert runtime.leaks() == []


def test_the_simulated_runtime_rejects_misuse():
    runtime, acl = simulated_acl()
    assert acl.rt.set_device(0) == 100001  # before acl.init
    assert acl.init() == 0 and acl.init() == 100002
    assert acl.rt.malloc(16, 0) == (0, 107002)  # no device set
    assert acl.rt.set_device(9) == 107001
    assert acl.rt.set_device(1) == 0
    device, _ = acl.rt.malloc(16, 0)
    host, _ = acl.rt.malloc_host(16)
    source = acl.util.bytes_to_ptr(b"x" * 16)
    assert acl.rt.memcpy(device, 16, source, 32, 1) == 107000  # count above the source
    assert acl.rt.memcpy(device, 8, source, 16, 1) == 107000  # count above dest_max
    assert acl.rt.memcpy(host, 16, source, 16, 1) == 107000  # host-to-device into host memory
    assert acl.rt.memcpy(source, 16, device, 16, 2) == 107000  # into read-only bytes
    assert acl.rt.memcpy(device, 16, source, 16, 1) == 0
    assert acl.rt.memcpy(host, 16, device, 16, 2) == 0 and acl.util.ptr_to_bytes(host, 16) == b"x" * 16
    assert acl.rt.free(host) == 107000  # host memory is freed with free_host
