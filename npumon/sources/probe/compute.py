"""The compute step: a known-answer Add on the AI Core, without a user model. Runs in the probe child (Python 3.7+).

The path to run it by (a single-op model ATC builds once and caches, or the runtime's aclopCompileAndExecute) is
found by the operator builder shared with `npumon diag` (opmodel.py); where neither works the step raises
ComputeUnavailable with the reasons: that is not a failure of the chip.

Interface:
    plan = prepare(acl, soc_name, version, settings)      -> Plan, or raises ComputeUnavailable (may run ATC)
    result = execute(acl, stream, plan, sync_timeout_ms)  -> ComputeResult(path, detail), or raises
                                                             StageFailed (the chip misbehaved) / ComputeUnavailable
The operation: int32 ND [8, 16]; x1 = i - 64, x2 = 2i + 3, so y = 3i - 61 exactly, checked element by element.
"""

import struct
from typing import NamedTuple

from . import opmodel
from .opmodel import OP_MODEL, ComputeUnavailable, OpSpec, Tensor
from .protocol import WRONG_RESULT
from .stages import StageFailed

OP_TYPE = "Add"
SHAPE = (8, 16)
ELEMENTS = SHAPE[0] * SHAPE[1]
NBYTES = 4 * ELEMENTS
_TENSOR = Tensor("int32", SHAPE)
ADD = OpSpec(OP_TYPE, (_TENSOR, _TENSOR), (_TENSOR,))
# CANN's values (acl_base.h, reference section 1.1 of acl-probe-fan-power.md)
ACL_SUCCESS = 0
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2


class ComputeResult(NamedTuple):
    path: str
    detail: str


def operands():
    """(x1, x2, expected y) as little-endian int32 bytes."""
    first = [index - 64 for index in range(ELEMENTS)]
    second = [2 * index + 3 for index in range(ELEMENTS)]
    expected = [a + b for a, b in zip(first, second)]
    pack = struct.Struct("<{}i".format(ELEMENTS)).pack
    return pack(*first), pack(*second), pack(*expected)


def result_mismatch(expected, got):
    """None when `got` equals `expected` element by element; else one line naming the first wrong element."""
    if got == expected:
        return None
    if len(got) != len(expected):
        return "{} returned {} bytes, expected {}".format(OP_TYPE, len(got), len(expected))
    unpack = struct.Struct("<{}i".format(ELEMENTS)).unpack
    wanted, values = unpack(expected), unpack(got)
    wrong = [index for index in range(ELEMENTS) if wanted[index] != values[index]]
    first = wrong[0]
    return "{} computed {} of {} elements wrong; first [{}, {}]: expected {}, got {}".format(
        OP_TYPE, len(wrong), ELEMENTS, first // SHAPE[1], first % SHAPE[1], wanted[first], values[first])


def prepare(acl, soc_name, version, settings):
    """The path to run the Add by on this host (opmodel.prepare); raises ComputeUnavailable with every reason."""
    return opmodel.prepare(acl, (ADD,), soc_name, version, settings)


# -- running it ----------------------------------------------------------------------------------------------


class _Held:
    def __init__(self):
        self.device = []
        self.host = []
        self.operator = None


def execute(acl, stream, plan, sync_timeout_ms):
    """Run the Add on the current device's AI Core on `stream` and check it, by the plan's fallback when the plan's
    path turns out unavailable (opmodel.Plan.fallback); releases what it acquired."""
    try:
        return _execute(acl, stream, plan, sync_timeout_ms)
    except ComputeUnavailable as exc:
        if plan.fallback is None:
            raise
        fallback = plan.fallback._replace(how="{} ({}: {} unavailable)".format(plan.fallback.how, plan.path, exc))
        return _execute(acl, stream, fallback, sync_timeout_ms)


def _execute(acl, stream, plan, sync_timeout_ms):
    first, second, expected = operands()
    held = _Held()
    succeeded = False
    if hasattr(acl.rt, "set_op_execute_time_out"):
        # A hung kernel then ends with the AI Core's own code (507014) before the sync's 507046. The setting is
        # the process's: callers run their other kernels before this step. A refusal leaves the default, which
        # the sync timeout still bounds.
        acl.rt.set_op_execute_time_out(op_timeout_seconds(sync_timeout_ms))
    try:
        inputs = [_to_device(acl, held, data) for data in (first, second)]
        output = _malloc(acl, held, NBYTES)
        if plan.path == OP_MODEL:
            _check_setup(acl.op.set_model_dir(plan.model_dir), "acl.op.set_model_dir")
        held.operator = opmodel.Operator(acl, plan, ADD, inputs + [output])
        _check_setup(held.operator.launch(stream), held.operator.call)
        if hasattr(acl.rt, "synchronize_stream_with_timeout"):
            _check(acl.rt.synchronize_stream_with_timeout(stream, sync_timeout_ms),
                   "acl.rt.synchronize_stream_with_timeout (after {})".format(OP_TYPE))
        else:  # an older pyACL: only the caller's deadline bounds this call
            _check(acl.rt.synchronize_stream(stream), "acl.rt.synchronize_stream (after {})".format(OP_TYPE))
        host = _value(acl.rt.malloc_host(NBYTES), "acl.rt.malloc_host")
        held.host.append(host)
        _check(acl.rt.memcpy(host, NBYTES, output, NBYTES, ACL_MEMCPY_DEVICE_TO_HOST),
               "acl.rt.memcpy ({} result to host)".format(OP_TYPE))
        problem = result_mismatch(expected, acl.util.ptr_to_bytes(host, NBYTES))
        if problem:
            raise StageFailed(problem, reason=WRONG_RESULT)
        succeeded = True
    finally:
        failure = _release(acl, held)
    if succeeded and failure is not None:
        raise StageFailed("{} returned {}".format(*failure), code=failure[1])
    return ComputeResult(plan.path, "{} int32 [{}] on the AI Core via {}".format(
        OP_TYPE, ",".join(str(size) for size in SHAPE), plan.how))


def op_timeout_seconds(sync_timeout_ms):
    """The AI Core timeout set for the step: half the sync timeout, in whole seconds, at least 1."""
    return max(1, sync_timeout_ms // 2000)


def _to_device(acl, held, data):
    pointer = _malloc(acl, held, len(data))
    _check(acl.rt.memcpy(pointer, len(data), acl.util.bytes_to_ptr(data), len(data), ACL_MEMCPY_HOST_TO_DEVICE),
           "acl.rt.memcpy ({} operand to device)".format(OP_TYPE))
    return pointer


def _malloc(acl, held, size):
    pointer = _value(acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST), "acl.rt.malloc")
    held.device.append(pointer)
    return pointer


def _check(ret, call):
    if ret != ACL_SUCCESS:
        raise StageFailed("{} returned {}".format(call, ret), code=ret)


def _check_setup(ret, call):
    """A call that loads or picks the operator: a refusal (opmodel.refused) means this path cannot run here, not
    that the chip failed."""
    if opmodel.refused(ret):
        raise ComputeUnavailable("{} returned {}".format(call, ret))
    _check(ret, call)


def _value(result, call):
    value, ret = result
    _check(ret, call)
    return value


def _release(acl, held):
    """Release in reverse order of acquisition; the first (call, code) that failed, or None."""
    failures = []
    if held.operator is not None:
        failure = held.operator.release()
        if failure is not None:
            failures.append(failure)
    for pointer in held.host:
        _record(failures, "acl.rt.free_host", acl.rt.free_host(pointer))
    for pointer in held.device:
        _record(failures, "acl.rt.free", acl.rt.free(pointer))
    return failures[0] if failures else None


def _record(failures, call, ret):
    if ret != ACL_SUCCESS:
        failures.append((call, ret))
