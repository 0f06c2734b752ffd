"""Where the diag child's MatMul comes from (npumon/diag/workloads.py Operators, over the probe's operator builder
sources/probe/opmodel.py), in-process against the simulated device: the aclop path with its attributes, the reason
given once for every item, a refused launch, and what the simulated ATC builds for it."""

import json
import os
import struct
import subprocess
import sys
from types import SimpleNamespace

from npumon.diag.protocol import COMPUTE, H2D, MATMUL, MATMUL_SUSTAINED
from npumon.diag.workloads import Operators, Session, matmul_spec, operator_specs, run_item
from npumon.sim.diag_acl import SimulatedDiagAcl
from npumon.sim.state import STATE_ENV
from npumon.sources.probe import opmodel
from operator_api import FakeOperatorApi


def device(operators=True):
    return SimulatedDiagAcl(8, "Ascend910B3", lambda device: (1 << 30, 1 << 31), lambda device: {},
                            chip_name="910B3", link_bandwidth=lambda device: 63e9, diag_plan_of=lambda device: {},
                            scale=0.0, operators=operators)


def matmul_kernel(runtime, pointers):
    runtime._multiply(16, [runtime._locate(pointer) for pointer in pointers], None)


def aclop_session(monkeypatch, ret=0):
    runtime = device()
    api = FakeOperatorApi(runtime, matmul_kernel, ret)
    monkeypatch.setattr(opmodel, "load_operator_api", lambda path: api)
    operators = Operators(operator_specs((COMPUTE,), 4096), opmodel.ComputeSettings(None, None, "/opt/libascendcl.so"))
    return runtime, api, Session(runtime, 0, 5000, operators)


def test_the_items_ask_for_the_matmuls_they_run_and_each_size_once():
    assert operator_specs((COMPUTE, H2D, MATMUL), 4096) == (matmul_spec(16), matmul_spec(4096))
    assert operator_specs((MATMUL_SUSTAINED,), 16) == (matmul_spec(16),)
    assert operator_specs((COMPUTE, MATMUL), 16) == (matmul_spec(16),)
    assert operator_specs((H2D,), 4096) == ()
    (op,) = json.loads(opmodel.op_json((matmul_spec(16),)))
    assert op["attr"] == [{"name": "transpose_x1", "type": "bool", "value": False},
                          {"name": "transpose_x2", "type": "bool", "value": False}]


def test_the_aclop_path_runs_the_known_answer_matmul_with_its_attributes_and_releases_everything(monkeypatch):
    runtime, api, session = aclop_session(monkeypatch)
    try:
        result = run_item(COMPUTE, session, SimpleNamespace())
    finally:
        session.close()
    assert result["state"] == "ok", result
    assert result["message"] == ("MatMul fp16 [16,16] via aclopCompileAndExecute in /opt/libascendcl.so "
                                 "(op-model: no cache directory unavailable)")
    assert api.calls[:3] == [("desc", 1, [16, 16], 2)] * 3
    assert [call for call in api.calls if call[0] == "attr"] == [("attr", b"transpose_x1", 0),
                                                                 ("attr", b"transpose_x2", 0)]
    # ACL_ENGINE_SYS, ACL_COMPILE_SYS, opPath NULL, on the session's stream
    assert api.calls[-1] == ("execute", b"MatMul", 2, 1, 0, 0, None, session.stream)
    assert api.live == set() and runtime.leaks() == []


def test_an_operator_the_runtime_cannot_compile_is_unavailable_not_failed(monkeypatch):
    runtime, api, session = aclop_session(monkeypatch, ret=500002)  # ACL_ERROR_GE_FAILURE
    try:
        result = run_item(COMPUTE, session, SimpleNamespace())
    finally:
        session.close()
    assert result == {"state": "unavailable", "message": "aclopCompileAndExecute (MatMul) returned 500002"}
    assert api.live == set() and runtime.leaks() == []


def test_without_any_path_every_item_gets_the_same_reason_found_once(monkeypatch):
    found = []

    def prepare(*args):
        found.append(args)
        raise opmodel.ComputeUnavailable("op-model: no ATC; aclop: no operator API library")

    monkeypatch.setattr(opmodel, "prepare", prepare)
    runtime = device()
    session = Session(runtime, 0, 5000, Operators(operator_specs((COMPUTE, MATMUL), 64),
                                                  opmodel.ComputeSettings(None, None, None)))
    try:
        results = [run_item(item, session, SimpleNamespace(matmul_size=64, item_seconds=0.1))
                   for item in (COMPUTE, MATMUL)]
    finally:
        session.close()
    assert results == [{"state": "unavailable",
                        "message": "compute unavailable: op-model: no ATC; aclop: no operator API library"}] * 2
    assert len(found) == 1 and found[0][2] == "Ascend910B3" and runtime.leaks() == []


def test_the_simulated_atc_builds_the_matmuls_that_the_simulated_device_then_runs(tmp_path):
    from npumon.sim import prepare_simulation

    sim = tmp_path / "sim"
    prepare_simulation(str(sim), "healthy")
    specs = operator_specs((COMPUTE, MATMUL), 32)
    (tmp_path / "ops.json").write_text(opmodel.op_json(specs))
    env = dict(os.environ, **{STATE_ENV: str(sim)})
    done = subprocess.run([sys.executable, "-m", "npumon.sim.atc", "--singleop=" + str(tmp_path / "ops.json"),
                           "--soc_version=Ascend910B3", "--output=" + str(tmp_path / "out")], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    assert done.returncode == 0, done.stdout
    assert sorted(os.listdir(tmp_path / "out")) == ["0_MatMul_1_2_16_16_1_2_16_16_1_2_16_16.om",
                                                    "1_MatMul_1_2_32_32_1_2_32_32_1_2_32_32.om"]
    runtime = device()
    session = Session(runtime, 0, 5000, Operators(specs, None, str(tmp_path / "out")))
    try:
        assert run_item(COMPUTE, session, SimpleNamespace())["state"] == "ok"
    finally:
        session.close()
    # a MatMul with a transpose is another operator: no loaded model matches it
    runtime = device()
    assert runtime.init() == 0 and runtime.rt.set_device(0) == 0
    runtime.rt.create_context(0)
    stream, _ = runtime.rt.create_stream()
    assert runtime.op.set_model_dir(str(tmp_path / "out")) == 0
    pointers = [runtime.rt.malloc(512, 0)[0] for _ in range(3)]
    plan = opmodel.Plan(opmodel.OP_MODEL, str(tmp_path / "out"), None, "")
    transposed = matmul_spec(16)._replace(attrs=(("transpose_x1", True), ("transpose_x2", False)))
    operator = opmodel.Operator(runtime, plan, transposed, pointers)
    assert operator.launch(stream) == 100024  # ACL_ERROR_OP_NOT_FOUND
    assert opmodel.Operator(runtime, plan, matmul_spec(16), pointers).launch(stream) == 0
    assert struct.unpack("<256e", bytes(runtime._regions[pointers[2]].data[:512]))[0] == 0.0  # zeros x zeros
    assert operator.release() is None
