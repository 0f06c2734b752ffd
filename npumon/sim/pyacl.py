"""The simulated pyACL: what `import acl` gives a probe child under `npumon ... --simulate`.

One module on purpose (over 400 lines): it stands in for one library, `acl`, whose functions share the
simulated device state.

It behaves like the documented pyACL (shared/reference/acl-probe-fan-power.md section 1): the same
function names, argument orders and returns (`ret`, `(value, ret)`, `(free, total, ret)` or a bare value),
ACL error codes for misuse (a call before acl.init, a pointer it never handed out, a copy longer than its
destination or in the wrong direction), and memory that really holds bytes, so a pattern copied to the
device comes back. What goes wrong comes from the scenario:

    acl_runtime: {installed: false}           `import acl` fails, as on a host without CANN
    acl_runtime: {init_error_code: 500004}     acl.init returns that code
    chips: ... probe: {fail: rt.memcpy, error_code: 507053}       that call returns the code on that device
    chips: ... probe: {hang: rt.synchronize_stream_with_timeout}  that call never returns
    chips: ... probe: {crash: rt.memcpy}       that call kills the process (SIGSEGV), as a driver fault can
    chips: ... probe: {corrupt: rt.memcpy}     device-to-host copies come back with a flipped bit
    chips: ... probe: {corrupt: mdl.execute}   the model's output is off
    chips: ... probe: {device_status: abnormal}   query_device_status reports ABNORMAL
    chips: ... probe: {aicore: hang}           an operator's kernel never finishes: execute_v2 returns 0 (it is
                                               asynchronous), the next stream sync ends with 507014 at the op
                                               timeout (set_op_execute_time_out) or 507046 at its own timeout,
                                               whichever is first, while copies still work
    chips: ... probe: {aicore: exception}      the kernel traps: the next stream sync returns 507015
    chips: ... probe: {corrupt: op.execute_v2} one element of the operator's output is off by one
    acl_runtime: {operators: false}            no operator library: the simulated ATC cannot build an operator and
                                               execute_v2 finds none (100024)
    acl_runtime: {pyacl: older}                an older pyACL: no get_device_utilization_rate, get_device_info,
                                               get_version_str (the probe reports them "unsupported")
    acl_runtime: {device_count: 6}             the runtime sees that many devices (npu-smi still sees all)
    acl_runtime: {soc_name: Ascend910A}        get_soc_name answers that instead of the product's chip
    acl_runtime: {driver_version: 24.1.rc1}    get_version_str("driver") answers that (default: the host's)
    acl_runtime: {memory_held_mb: {3: 24576}}  another context holds that much memory on device 3: the
                                               runtime's free memory is lower than npu-smi's by it
    chips: ... probe: {slow: rt.synchronize_stream_with_timeout, delay_seconds: {steps: [[0, 0], [1800, 2]]}}
        that call takes that many more (wall-clock) seconds, the value at the scenario time the probe starts.
        A synchronize_stream_with_timeout slower than its timeout returns 507046 at the timeout, as the real
        one does; any other call slower than probe.timeout_seconds is killed by the daemon (a timeout failure).

A simulated .om model is a small JSON file with one float32 input and one output = input x factor:
    {"npumon_simulated_model": "scale", "factor": 2.0, "elements": 16}
A simulated single-op .om (what the simulated ATC, sim/atc.py, writes) names its operator, tensors and attributes:
    {"npumon_simulated_op": "Add", "soc_version": "Ascend910B3", "inputs": [[3, [8, 16]], [3, [8, 16]]],
     "outputs": [[3, [8, 16]]], "attrs": {}}
Here only Add is simulated (elementwise, int32 wrapping, float32 or float16 per the descriptors' type); the diag's
device (diag_acl.py) adds MatMul.
"""

import itertools
import json
import os
import signal
import struct
import time
from types import SimpleNamespace
from typing import Any, Callable, Dict, List, Optional, Tuple

SIMULATED_ACL_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "acl_runtime")
ACL_HANG_PIDS_FILE = "acl-hang-pids"  # in the state directory: "<pid> <child pid>" of each hanging call

ACL_SUCCESS = 0
ACL_ERROR_INVALID_PARAM = 100000
ACL_ERROR_UNINITIALIZE = 100001
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_ERROR_INVALID_MODEL_ID = 100011
ACL_ERROR_PARSE_MODEL = 100013
ACL_ERROR_READ_MODEL_FAILURE = 100014
ACL_ERROR_OP_NOT_FOUND = 100024
ACL_ERROR_OP_LOAD_FAILED = 100025
ACL_ERROR_RT_PARAM_INVALID = 107000
ACL_ERROR_RT_INVALID_DEVICEID = 107001
ACL_ERROR_RT_CONTEXT_NULL = 107002
ACL_ERROR_RT_AICORE_TIMEOUT = 507014
ACL_ERROR_RT_AICORE_EXCEPTION = 507015
ACL_ERROR_RT_STREAM_SYNC_TIMEOUT = 507046

MEMCPY_DIRECTIONS = {0: ("host", "host"), 1: ("device", "host"), 2: ("host", "device"), 3: ("device", "device")}
RT_DEVICE_STATUS = {"normal": 0, "abnormal": 1}

# Calls a scenario may make fail, hang or slow, and the ones whose data it may corrupt.
FAULT_CALLS = ("rt.set_device", "rt.create_context", "rt.create_stream", "rt.query_device_status",
               "rt.get_mem_info", "rt.malloc", "rt.malloc_host", "rt.memcpy", "rt.synchronize_stream",
               "rt.synchronize_stream_with_timeout", "mdl.load_from_file", "mdl.execute", "rt.free",
               "rt.free_host", "rt.destroy_stream", "rt.destroy_context", "rt.reset_device", "finalize",
               "op.set_model_dir", "op.execute_v2")
CORRUPTIBLE_CALLS = ("rt.memcpy", "mdl.execute", "op.execute_v2")
AICORE_FAULTS = ("hang", "exception")  # what an operator's kernel does on the AI Core
DEFAULT_ACL_RUNTIME = {"installed": True, "init_error_code": 0, "operators": True}
# acl_runtime keys that change what the runtime reports (None: the simulated host's own value)
RUNTIME_VIEW_KEYS = ("pyacl", "device_count", "soc_name", "driver_version", "runtime_version", "memory_held_mb")
PYACL_KINDS = ("newer", "older")
# the calls only newer pyACL has (hicann/runtime python/pyACL/rt/pyrt_methods.cpp); an older one lacks them
NEWER_CALLS = ("rt.get_device_utilization_rate", "rt.get_device_info", "get_version_str")
ACL_INTERFACE_VERSION = (1, 0, 0)  # acl.get_version: the ACL interface's A.B.C, not a CANN version
# acl.rt.get_device_info attributes (aclrtDevAttr) and acl.get_device_capability infos (aclDeviceInfo)
DEV_ATTRS = {1: "aicpu", 101: "aicore", 201: "vector"}
DEVICE_CAPABILITIES = {0: "aicore", 1: "vector"}
SIMULATED_CORES = {"aicpu": 6, "aicore": 20, "vector": 40}
SIMULATED_MODEL_KEY = "npumon_simulated_model"
SIMULATED_OP_KEY = "npumon_simulated_op"
# struct letters of the tensor types the simulated Add handles (aclDataType: ACL_FLOAT 0, FLOAT16 1, INT32 3)
OP_DTYPES = {0: "f", 1: "e", 3: "i"}
OP_MODEL_LOAD_SECONDS = 0.004  # set_model_dir reading one small single-op .om
OP_KERNEL_SECONDS = 0.0002  # a tiny kernel's launch and run, seen at the next stream sync


class _Region:
    """A block of simulated memory: "device", "host" (malloc_host) or "bytes" (bytes_to_ptr, read-only)."""

    def __init__(self, kind: str, data):
        self.kind = kind
        self.data = data

    @property
    def host_side(self) -> bool:
        return self.kind in ("host", "bytes")


class SimulatedAcl:
    """One process's simulated ACL runtime. `calls` lists every call made, for tests; `leaks()` what was
    acquired and never released."""

    def __init__(self, device_count: int, soc_name: str, memory_of: Callable[[int], Tuple[int, int]],
                 plan_of: Callable[[int], Dict[str, Any]], init_error_code: int = 0,
                 on_hang: Optional[Callable[[], None]] = None, older_pyacl: bool = False,
                 versions: Optional[Dict[str, str]] = None,
                 utilization_of: Optional[Callable[[int], Dict[str, int]]] = None, operators: bool = True):
        """`memory_of(device)` -> (free, total) bytes; `plan_of(device)` -> the scenario's probe plan for the
        device; `on_hang()` is what a hanging call does (default: sleep forever). `older_pyacl`: leave out
        NEWER_CALLS; `versions`: package -> what get_version_str answers; `utilization_of(device)` -> percent
        per engine ({"cube": 50, "vector": 35, "aicpu": 3, "memory": 88}); `operators`: False when no operator
        library is installed (execute_v2 finds no operator)."""
        self.calls: List[str] = []
        self._older = older_pyacl
        self._versions = dict(versions or {})
        self._utilization_of = utilization_of or (lambda device: {"cube": 0, "vector": 0, "aicpu": 0, "memory": 0})
        self._device_count = device_count
        self._soc_name = soc_name
        self._memory_of = memory_of
        self._plan_of = plan_of
        self._init_error_code = init_error_code
        self._on_hang = on_hang or _sleep_forever
        self._handles = itertools.count(0x7F0000001000, 0x1000)
        self._initialized = False
        self._device: Optional[int] = None
        self._plan: Dict[str, Any] = {}
        self._contexts: Dict[int, int] = {}  # handle -> device
        self._streams: Dict[int, int] = {}
        self._regions: Dict[int, _Region] = {}
        self._models: Dict[int, Dict[str, Any]] = {}
        self._descs: Dict[int, Optional[int]] = {}  # desc -> model id once get_desc filled it
        self._buffers: Dict[int, Tuple[int, int]] = {}  # data buffer -> (pointer, size)
        self._datasets: Dict[int, List[int]] = {}
        self._operators = operators
        self._tensor_descs: Dict[int, Tuple[int, Tuple[int, ...], int]] = {}  # desc -> (dtype, dims, format)
        self._attrs: Dict[int, Dict[str, bool]] = {}  # op attribute -> the flags set on it
        self._op_models: List[Dict[str, Any]] = []  # loaded by op.set_model_dir
        self._stream_faults: Dict[int, str] = {}  # stream -> what its queued kernel does (AICORE_FAULTS)
        self._stream_busy: set = set()  # streams with a kernel queued since their last sync
        self._op_timeout_seconds: Optional[int] = None  # set_op_execute_time_out; None: the default (minutes)
        self.rt = self._namespace("rt_")
        self.mdl = self._namespace("mdl_")
        self.util = self._namespace("util_")
        self.op = self._namespace("op_")

    def _namespace(self, prefix: str) -> SimpleNamespace:
        return SimpleNamespace(**{name[len(prefix):]: self._recorded(prefix[:-1] + "." + name[len(prefix):],
                                                                     getattr(self, name))
                                  for name in dir(self) if name.startswith(prefix)
                                  and self.has(prefix[:-1] + "." + name[len(prefix):])})

    def has(self, call: str) -> bool:
        """Whether this pyACL has `call` ("rt.get_device_info", "get_version_str", ...): an older one lacks
        NEWER_CALLS."""
        return not (self._older and call in NEWER_CALLS)

    def _recorded(self, name: str, function: Callable) -> Callable:
        def call(*args):
            self.calls.append(name)
            return function(*args)
        return call

    def leaks(self) -> List[str]:
        held = ["context"] * len(self._contexts) + ["stream"] * len(self._streams)
        held += [region.kind + " memory" for region in self._regions.values() if region.kind != "bytes"]
        held += ["model"] * len(self._models) + ["model desc"] * len(self._descs)
        held += ["data buffer"] * len(self._buffers) + ["dataset"] * len(self._datasets)
        held += ["tensor desc"] * len(self._tensor_descs) + ["op attr"] * len(self._attrs)
        if self._device is not None:
            held.append("device {} not reset".format(self._device))
        if self._initialized:
            held.append("not finalized")
        return held

    # -- faults ------------------------------------------------------------------------------------------

    def _fault(self, call: str, timeout_seconds: Optional[float] = None) -> Optional[int]:
        """The error code the scenario makes `call` return now (None: behave); hangs or takes longer if it
        says so. `timeout_seconds`: how long a call that has a timeout waits before it gives up."""
        if self._plan.get("hang") == call:
            self._on_hang()
        if self._plan.get("crash") == call:
            os.kill(os.getpid(), signal.SIGSEGV)
        if self._plan.get("slow") == call:
            delay = self._plan["delay_seconds"]
            if timeout_seconds is not None and delay > timeout_seconds:
                time.sleep(timeout_seconds)
                return ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
            time.sleep(delay)
        if self._plan.get("fail") == call:
            return self._plan["error_code"]
        return None

    def _not_ready(self) -> Optional[int]:
        if not self._initialized:
            return ACL_ERROR_UNINITIALIZE
        if self._device is None:
            return ACL_ERROR_RT_CONTEXT_NULL
        return None

    # -- acl ---------------------------------------------------------------------------------------------

    def init(self, config_path: Optional[str] = None) -> int:
        self.calls.append("init")
        if self._initialized:
            return ACL_ERROR_REPEAT_INITIALIZE
        if self._init_error_code:
            return self._init_error_code
        self._initialized = True
        return ACL_SUCCESS

    def finalize(self) -> int:
        self.calls.append("finalize")
        fault = self._fault("finalize")
        if fault:
            return fault
        if not self._initialized:
            return ACL_ERROR_UNINITIALIZE
        self._initialized = False
        return ACL_SUCCESS

    def get_soc_name(self) -> Optional[str]:
        self.calls.append("get_soc_name")
        return self._soc_name if self._initialized else None

    def get_version(self) -> Tuple[int, int, int, int]:
        self.calls.append("get_version")
        return ACL_INTERFACE_VERSION + (ACL_SUCCESS,)

    def get_version_str(self, package: str) -> Tuple[str, int]:
        """Newer pyACL only (CANN 8.x+): the `version` of that package's version.info."""
        self.calls.append("get_version_str")
        if package not in self._versions:
            return "", ACL_ERROR_INVALID_PARAM
        return self._versions[package], ACL_SUCCESS

    def get_device_capability(self, device_id: int, info: int) -> Tuple[int, int]:
        self.calls.append("get_device_capability")
        if not 0 <= device_id < self._device_count:
            return 0, ACL_ERROR_RT_INVALID_DEVICEID
        if info not in DEVICE_CAPABILITIES:
            return 0, ACL_ERROR_INVALID_PARAM
        return SIMULATED_CORES[DEVICE_CAPABILITIES[info]], ACL_SUCCESS

    def create_data_buffer(self, pointer: int, size: int) -> int:
        self.calls.append("create_data_buffer")
        handle = next(self._handles)
        self._buffers[handle] = (pointer, size)
        return handle

    def destroy_data_buffer(self, buffer: int) -> int:
        self.calls.append("destroy_data_buffer")
        if self._buffers.pop(buffer, None) is None:
            return ACL_ERROR_INVALID_PARAM
        return ACL_SUCCESS

    def create_tensor_desc(self, dtype: int, dims: List[int], fmt: int) -> int:
        self.calls.append("create_tensor_desc")
        handle = next(self._handles)
        self._tensor_descs[handle] = (dtype, tuple(dims), fmt)
        return handle

    def destroy_tensor_desc(self, desc: int) -> None:
        self.calls.append("destroy_tensor_desc")
        self._tensor_descs.pop(desc, None)

    def get_tensor_desc_size(self, desc: int) -> int:
        self.calls.append("get_tensor_desc_size")
        dtype, dims, _ = self._tensor_descs.get(desc, (3, (0,), 2))
        count = 1
        for size in dims:
            count *= size
        return count * struct.calcsize(OP_DTYPES.get(dtype, "i"))

    # -- acl.op ------------------------------------------------------------------------------------------

    def op_create_attr(self) -> int:
        handle = next(self._handles)
        self._attrs[handle] = {}
        return handle

    def op_destroy_attr(self, attr: int) -> None:
        self._attrs.pop(attr, None)

    def op_set_model_dir(self, model_dir: str) -> int:
        """Load every single-op model in the directory and up to three levels below it, as the real one."""
        if not self._initialized:
            return ACL_ERROR_UNINITIALIZE
        fault = self._fault("op.set_model_dir")
        if fault:
            return fault
        if not isinstance(model_dir, str) or not os.path.isdir(model_dir):
            return ACL_ERROR_INVALID_PARAM
        root_depth = model_dir.rstrip(os.sep).count(os.sep)
        for directory, subdirectories, files in os.walk(model_dir):
            if directory.count(os.sep) - root_depth >= 3:
                subdirectories[:] = []
            for name in sorted(files):
                if not name.endswith(".om"):
                    continue
                spec = _simulated_op(os.path.join(directory, name))
                if spec is None:
                    return ACL_ERROR_OP_LOAD_FAILED
                time.sleep(OP_MODEL_LOAD_SECONDS)
                self._op_models.append(spec)
        return ACL_SUCCESS

    def op_execute_v2(self, op_type: str, input_descs: List[int], inputs: List[int], output_descs: List[int],
                      outputs: List[int], attr: int, stream: int) -> int:
        """Asynchronous, as the real one: the kernel's outcome shows at the next stream sync."""
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        if stream not in self._streams or attr not in self._attrs:
            return ACL_ERROR_INVALID_PARAM
        descs = [self._tensor_descs.get(desc) for desc in list(input_descs) + list(output_descs)]
        if None in descs or len(input_descs) != len(inputs) or len(output_descs) != len(outputs):
            return ACL_ERROR_INVALID_PARAM
        fault = self._fault("op.execute_v2")
        if fault:
            return fault
        signature = [[dtype, list(dims)] for dtype, dims, _ in descs]
        if not self._operators or not any(model["op"] == op_type and model["inputs"] + model["outputs"] == signature
                                          for model in self._op_models):
            return ACL_ERROR_OP_NOT_FOUND
        if op_type != "Add" or len(inputs) != 2 or len(outputs) != 1:
            return ACL_ERROR_OP_NOT_FOUND
        dtype, dims, _ = descs[0]
        fmt = OP_DTYPES.get(dtype)
        count = 1
        for size in dims:
            count *= size
        if fmt is None or any(desc[:2] != (dtype, dims) for desc in descs):
            return ACL_ERROR_OP_NOT_FOUND
        size = count * struct.calcsize(fmt)
        regions = [self._regions.get(self._buffers.get(buffer, (None, 0))[0])
                   for buffer in list(inputs) + list(outputs)]
        if any(region is None or region.kind != "device" or len(region.data) < size for region in regions):
            return ACL_ERROR_INVALID_PARAM
        self._stream_busy.add(stream)
        kernel = self._plan.get("aicore")
        if kernel in AICORE_FAULTS:
            self._stream_faults[stream] = kernel
            return ACL_SUCCESS  # the kernel is queued; it never finishes or it traps
        layout = "<{}{}".format(count, fmt)
        first, second = (struct.unpack(layout, bytes(region.data[:size])) for region in regions[:2])
        if fmt == "i":  # int32 wraps
            values = [((a + b + 2 ** 31) % 2 ** 32) - 2 ** 31 for a, b in zip(first, second)]
        else:
            values = [a + b for a, b in zip(first, second)]
        if self._plan.get("corrupt") == "op.execute_v2":
            values[count // 3] += 1
        regions[2].data[:size] = struct.pack(layout, *values)
        return ACL_SUCCESS

    # -- acl.rt ------------------------------------------------------------------------------------------

    def rt_get_device_count(self) -> Tuple[int, int]:
        if not self._initialized:
            return 0, ACL_ERROR_UNINITIALIZE
        return self._device_count, ACL_SUCCESS

    def rt_get_device_utilization_rate(self, device_id: int) -> Tuple[Dict[str, int], int]:
        """Newer pyACL only: percent per engine, -1 where the device does not support the query."""
        blank = {"cube_utilization": 0, "vector_utilization": 0, "aicpu_utilization": 0, "memory_utilization": 0,
                 "utilization_extend": 0}
        if not self._initialized:
            return blank, ACL_ERROR_UNINITIALIZE
        if not 0 <= device_id < self._device_count:
            return blank, ACL_ERROR_RT_INVALID_DEVICEID
        percent = self._utilization_of(device_id)
        return dict(blank, **{engine + "_utilization": int(percent[engine])
                              for engine in ("cube", "vector", "aicpu", "memory")}), ACL_SUCCESS

    def rt_get_device_info(self, device_id: int, attribute: int) -> Tuple[int, int]:
        """Newer pyACL only: one aclrtDevAttr of the device."""
        if not self._initialized:
            return 0, ACL_ERROR_UNINITIALIZE
        if not 0 <= device_id < self._device_count:
            return 0, ACL_ERROR_RT_INVALID_DEVICEID
        if attribute not in DEV_ATTRS:
            return 0, ACL_ERROR_RT_PARAM_INVALID
        return SIMULATED_CORES[DEV_ATTRS[attribute]], ACL_SUCCESS

    def rt_set_device(self, device_id: int) -> int:
        if not self._initialized:
            return ACL_ERROR_UNINITIALIZE
        if not 0 <= device_id < self._device_count:
            return ACL_ERROR_RT_INVALID_DEVICEID
        self._plan = self._plan_of(device_id)
        fault = self._fault("rt.set_device")
        if fault:
            return fault
        self._device = device_id
        return ACL_SUCCESS

    def rt_reset_device(self, device_id: int) -> int:
        fault = self._fault("rt.reset_device")
        if fault:
            return fault
        if device_id != self._device:
            return ACL_ERROR_RT_INVALID_DEVICEID
        self._device = None
        return ACL_SUCCESS

    def rt_create_context(self, device_id: int) -> Tuple[int, int]:
        if not self._initialized:
            return 0, ACL_ERROR_UNINITIALIZE
        if device_id != self._device:
            return 0, ACL_ERROR_RT_INVALID_DEVICEID
        fault = self._fault("rt.create_context")
        if fault:
            return 0, fault
        handle = next(self._handles)
        self._contexts[handle] = device_id
        return handle, ACL_SUCCESS

    def rt_destroy_context(self, context: int) -> int:
        fault = self._fault("rt.destroy_context")
        if fault:
            return fault
        return ACL_SUCCESS if self._contexts.pop(context, None) is not None else ACL_ERROR_RT_PARAM_INVALID

    def rt_create_stream(self) -> Tuple[int, int]:
        not_ready = self._not_ready()
        if not_ready:
            return 0, not_ready
        fault = self._fault("rt.create_stream")
        if fault:
            return 0, fault
        handle = next(self._handles)
        self._streams[handle] = self._device
        return handle, ACL_SUCCESS

    def rt_destroy_stream(self, stream: int) -> int:
        fault = self._fault("rt.destroy_stream")
        if fault:
            return fault
        return ACL_SUCCESS if self._streams.pop(stream, None) is not None else ACL_ERROR_RT_PARAM_INVALID

    def rt_query_device_status(self, device_id: int) -> Tuple[int, int]:
        if not self._initialized:
            return 0, ACL_ERROR_UNINITIALIZE
        if not 0 <= device_id < self._device_count:
            return 0, ACL_ERROR_RT_INVALID_DEVICEID
        fault = self._fault("rt.query_device_status")
        if fault:
            return 0, fault
        return RT_DEVICE_STATUS[self._plan.get("device_status", "normal")], ACL_SUCCESS

    def rt_get_mem_info(self, attribute: int) -> Tuple[int, int, int]:
        not_ready = self._not_ready()
        if not_ready:
            return 0, 0, not_ready
        if not 0 <= attribute <= 9:
            return 0, 0, ACL_ERROR_RT_PARAM_INVALID
        fault = self._fault("rt.get_mem_info")
        if fault:
            return 0, 0, fault
        free, total = self._memory_of(self._device)
        return free, total, ACL_SUCCESS

    def rt_set_op_execute_time_out(self, seconds: int) -> int:
        """The AI Core timeout of this process's kernels; 0 = the maximum, as in newer CANN."""
        if not self._initialized:
            return ACL_ERROR_UNINITIALIZE
        if not isinstance(seconds, int) or seconds < 0:
            return ACL_ERROR_RT_PARAM_INVALID
        self._op_timeout_seconds = seconds or None
        return ACL_SUCCESS

    def rt_malloc(self, size: int, policy: int) -> Tuple[int, int]:
        return self._allocate("device", "rt.malloc", size, policy in (0, 1, 2))

    def rt_malloc_host(self, size: int) -> Tuple[int, int]:
        return self._allocate("host", "rt.malloc_host", size, True)

    def _allocate(self, kind: str, call: str, size: int, valid: bool) -> Tuple[int, int]:
        not_ready = self._not_ready()
        if not_ready:
            return 0, not_ready
        if not valid or not isinstance(size, int) or size <= 0:
            return 0, ACL_ERROR_RT_PARAM_INVALID
        fault = self._fault(call)
        if fault:
            return 0, fault
        pointer = next(self._handles)
        self._regions[pointer] = _Region(kind, bytearray(size))
        return pointer, ACL_SUCCESS

    def rt_free(self, pointer: int) -> int:
        return self._release("device", "rt.free", pointer)

    def rt_free_host(self, pointer: int) -> int:
        return self._release("host", "rt.free_host", pointer)

    def _release(self, kind: str, call: str, pointer: int) -> int:
        fault = self._fault(call)
        if fault:
            return fault
        region = self._regions.get(pointer)
        if region is None or region.kind != kind:
            return ACL_ERROR_RT_PARAM_INVALID
        del self._regions[pointer]
        return ACL_SUCCESS

    def rt_memcpy(self, destination: int, destination_max: int, source: int, count: int, kind: int) -> int:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        target, origin = self._regions.get(destination), self._regions.get(source)
        if target is None or origin is None or kind not in MEMCPY_DIRECTIONS:
            return ACL_ERROR_RT_PARAM_INVALID
        to_side, from_side = MEMCPY_DIRECTIONS[kind]
        if (to_side == "host") != target.host_side or (from_side == "host") != origin.host_side \
                or target.kind == "bytes":
            return ACL_ERROR_RT_PARAM_INVALID  # the pointers do not fit the direction, or the target is read-only
        if count > destination_max or destination_max > len(target.data) or count > len(origin.data):
            return ACL_ERROR_RT_PARAM_INVALID
        fault = self._fault("rt.memcpy")
        if fault:
            return fault
        data = bytearray(origin.data[:count])
        if kind == 2 and self._plan.get("corrupt") == "rt.memcpy" and data:
            data[len(data) // 2] ^= 0x10
        target.data[:count] = data
        return ACL_SUCCESS

    def rt_synchronize_stream(self, stream: int) -> int:
        return self._synchronize("rt.synchronize_stream", stream, None)

    def rt_synchronize_stream_with_timeout(self, stream: int, timeout_ms: int) -> int:
        if not isinstance(timeout_ms, int) or timeout_ms < -1 or timeout_ms == 0:
            return ACL_ERROR_RT_PARAM_INVALID
        timeout_seconds = None if timeout_ms == -1 else timeout_ms / 1000.0  # -1 waits for ever
        return self._synchronize("rt.synchronize_stream_with_timeout", stream, timeout_seconds)

    def _synchronize(self, call: str, stream: int, timeout_seconds: Optional[float]) -> int:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        if stream not in self._streams:
            return ACL_ERROR_RT_PARAM_INVALID
        kernel = self._stream_faults.pop(stream, None)
        if kernel == "hang":  # the kernel never finishes: the op timeout or the sync's, whichever is first
            if self._op_timeout_seconds is not None and (timeout_seconds is None
                                                         or self._op_timeout_seconds < timeout_seconds):
                time.sleep(self._op_timeout_seconds)
                return ACL_ERROR_RT_AICORE_TIMEOUT
            if timeout_seconds is None:
                self._on_hang()
            time.sleep(timeout_seconds)
            return ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
        if stream in self._stream_busy:
            self._stream_busy.discard(stream)
            time.sleep(OP_KERNEL_SECONDS)
        if kernel == "exception":
            return ACL_ERROR_RT_AICORE_EXCEPTION
        return self._fault(call, timeout_seconds) or ACL_SUCCESS

    # -- acl.util ----------------------------------------------------------------------------------------

    def util_bytes_to_ptr(self, data: bytes) -> int:
        if not isinstance(data, (bytes, bytearray)):
            raise TypeError("bytes_to_ptr takes bytes, got {}".format(type(data).__name__))
        pointer = next(self._handles)
        self._regions[pointer] = _Region("bytes", data)
        return pointer

    def util_ptr_to_bytes(self, pointer: int, size: int) -> bytes:
        region = self._regions.get(pointer)
        if region is None or not region.host_side or size > len(region.data):
            raise ValueError("ptr_to_bytes: {:#x} is not a host buffer of {} bytes".format(pointer, size))
        return bytes(region.data[:size])

    # -- acl.mdl -----------------------------------------------------------------------------------------

    def mdl_load_from_file(self, path: str) -> Tuple[int, int]:
        not_ready = self._not_ready()
        if not_ready:
            return 0, not_ready
        fault = self._fault("mdl.load_from_file")
        if fault:
            return 0, fault
        try:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
        except (OSError, UnicodeDecodeError):
            return 0, ACL_ERROR_READ_MODEL_FAILURE
        spec = _simulated_model(text)
        if spec is None:
            return 0, ACL_ERROR_PARSE_MODEL
        model_id = len(self._models) + 1
        self._models[model_id] = spec
        return model_id, ACL_SUCCESS

    def mdl_unload(self, model_id: int) -> int:
        return ACL_SUCCESS if self._models.pop(model_id, None) is not None else ACL_ERROR_INVALID_MODEL_ID

    def mdl_create_desc(self) -> int:
        handle = next(self._handles)
        self._descs[handle] = None
        return handle

    def mdl_get_desc(self, desc: int, model_id: int) -> int:
        if desc not in self._descs:
            return ACL_ERROR_INVALID_PARAM
        if model_id not in self._models:
            return ACL_ERROR_INVALID_MODEL_ID
        self._descs[desc] = model_id
        return ACL_SUCCESS

    def mdl_destroy_desc(self, desc: int) -> int:
        return ACL_SUCCESS if self._descs.pop(desc, -1) != -1 else ACL_ERROR_INVALID_PARAM

    def mdl_get_num_inputs(self, desc: int) -> int:
        return 1 if self._descs.get(desc) is not None else 0

    def mdl_get_num_outputs(self, desc: int) -> int:
        return 1 if self._descs.get(desc) is not None else 0

    def mdl_get_input_size_by_index(self, desc: int, index: int) -> int:
        return self._io_size(desc, index)

    def mdl_get_output_size_by_index(self, desc: int, index: int) -> int:
        return self._io_size(desc, index)

    def _io_size(self, desc: int, index: int) -> int:
        model_id = self._descs.get(desc)
        if model_id is None or index != 0:
            return 0
        return 4 * self._models[model_id]["elements"]

    def mdl_create_dataset(self) -> int:
        handle = next(self._handles)
        self._datasets[handle] = []
        return handle

    def mdl_add_dataset_buffer(self, dataset: int, buffer: int) -> Tuple[int, int]:
        if dataset not in self._datasets or buffer not in self._buffers:
            return dataset, ACL_ERROR_INVALID_PARAM
        self._datasets[dataset].append(buffer)
        return dataset, ACL_SUCCESS

    def mdl_get_dataset_num_buffers(self, dataset: int) -> int:
        return len(self._datasets.get(dataset, []))

    def mdl_get_dataset_buffer(self, dataset: int, index: int) -> int:
        return self._datasets[dataset][index]

    def mdl_destroy_dataset(self, dataset: int) -> int:
        return ACL_SUCCESS if self._datasets.pop(dataset, None) is not None else ACL_ERROR_INVALID_PARAM

    def mdl_execute(self, model_id: int, inputs: int, outputs: int) -> int:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        spec = self._models.get(model_id)
        if spec is None:
            return ACL_ERROR_INVALID_MODEL_ID
        regions = [self._dataset_region(dataset) for dataset in (inputs, outputs)]
        size = 4 * spec["elements"]
        if any(region is None or region.kind != "device" or len(region.data) < size for region in regions):
            return ACL_ERROR_INVALID_PARAM
        fault = self._fault("mdl.execute")
        if fault:
            return fault
        source, target = regions
        values = [value * spec["factor"] for value in struct.unpack("<{}f".format(spec["elements"]), source.data[:size])]
        if self._plan.get("corrupt") == "mdl.execute":
            values[len(values) // 2] += 1.0
        target.data[:size] = struct.pack("<{}f".format(spec["elements"]), *values)
        return ACL_SUCCESS

    def _dataset_region(self, dataset: int) -> Optional[_Region]:
        buffers = self._datasets.get(dataset)
        if not buffers:
            return None
        pointer, _ = self._buffers.get(buffers[0], (None, 0))
        return self._regions.get(pointer)


def _simulated_model(text: str) -> Optional[Dict[str, Any]]:
    try:
        spec = json.loads(text)
    except ValueError:
        return None
    if not isinstance(spec, dict) or spec.get(SIMULATED_MODEL_KEY) != "scale":
        return None
    elements, factor = spec.get("elements"), spec.get("factor", 1.0)
    if not isinstance(elements, int) or elements < 1 or not isinstance(factor, (int, float)):
        return None
    return {"elements": elements, "factor": float(factor)}


def _simulated_op(path: str) -> Optional[Dict[str, Any]]:
    """The single-op model in the file, or None when it is not one the simulated ATC wrote."""
    try:
        with open(path, encoding="utf-8") as handle:
            spec = json.loads(handle.read(65536))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(spec, dict) or not isinstance(spec.get(SIMULATED_OP_KEY), str):
        return None
    tensors = [spec.get("inputs"), spec.get("outputs")]
    if not all(isinstance(group, list) and all(isinstance(tensor, list) and len(tensor) == 2 for tensor in group)
               for group in tensors):
        return None
    attrs = spec.get("attrs", {})
    if not isinstance(attrs, dict):
        return None
    return {"op": spec[SIMULATED_OP_KEY], "inputs": spec["inputs"], "outputs": spec["outputs"], "attrs": attrs}


def _sleep_forever() -> None:
    while True:
        time.sleep(3600)


# -- the `acl` module of a probe child -----------------------------------------------------------------


def load_for_probe_child(extend: Optional[Callable[..., Dict[str, Any]]] = None,
                         factory: Callable[..., SimulatedAcl] = SimulatedAcl) -> SimulatedAcl:
    """The runtime for the probe child that imports the simulated `acl`: the simulation's state directory
    comes from the environment, as it does for the simulated npu-smi. Raises ImportError, as a real import
    would, when the simulation is missing or the scenario has no runtime installed. `factory` builds it with
    the keyword arguments `extend(state, product, t)` adds (the diag's device, sim/diag_acl.py)."""
    from .products import get_product
    from .state import STATE_ENV, SimStateError, read_state, scenario_time
    from .values import chip_values_at, host_with_defaults, probe_plan_at

    state_dir = os.environ.get(STATE_ENV)
    try:
        state = read_state(state_dir)
    except SimStateError as exc:
        raise ImportError("simulated pyACL: {}".format(exc)) from None
    scenario = state["scenario"]
    runtime = dict(DEFAULT_ACL_RUNTIME, **scenario.get("acl_runtime", {}))
    if not runtime["installed"]:
        raise ImportError("libascendcl.so: cannot open shared object file: No such file or directory "
                          "(simulated: the scenario sets acl_runtime.installed to false)")
    product = get_product(state["product"])
    slots = {slot.device_id: slot for slot in product.slots()}
    chips_spec = scenario["chips"]
    t = scenario_time(state, time.time())

    host = host_with_defaults(scenario.get("host", {}))
    held_mb = {int(device): int(mb) for device, mb in (runtime.get("memory_held_mb") or {}).items()}

    def values_of(device: int):
        return chip_values_at(chips_spec, device, t, slots[device].memory_total_mb, product.aicore_rated_mhz)

    def memory_of(device: int) -> Tuple[int, int]:
        total_mb = slots[device].memory_total_mb
        free_mb = max(0, total_mb - values_of(device).memory_used_mb - held_mb.get(device, 0))
        return free_mb * 1048576, total_mb * 1048576

    def utilization_of(device: int) -> Dict[str, int]:
        values = values_of(device)
        return {"cube": values.aicube_percent, "vector": values.aivector_percent, "aicpu": values.aicpu_percent,
                "memory": round(100 * values.memory_used_mb / max(1, slots[device].memory_total_mb))}

    versions = {"driver": runtime.get("driver_version") or host["driver_version"],
                "runtime": runtime.get("runtime_version") or host["cann_version"]}
    extra = extend(state, product, t) if extend is not None else {}
    return factory(runtime.get("device_count") or len(slots),
                        runtime.get("soc_name") or product.mapping_name.replace(" ", ""), memory_of,
                        lambda device: probe_plan_at(chips_spec, device, t), runtime["init_error_code"],
                        on_hang=lambda: _hang(state_dir), older_pyacl=runtime.get("pyacl") == "older",
                        versions=versions, utilization_of=utilization_of, operators=runtime["operators"], **extra)


def _hang(state_dir: str) -> None:
    """Never return. A child sleeps too, so that only killing the whole process group leaves nothing behind. It
    holds none of the probe's output pipes (a driver's helper would not): when the probe process itself ends (its
    watchdog), the daemon sees the end at once and kills the group."""
    child = os.fork()
    if child == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        _sleep_forever()
    with open(os.path.join(state_dir, ACL_HANG_PIDS_FILE), "a", encoding="utf-8") as handle:
        handle.write("{} {}\n".format(os.getpid(), child))
    _sleep_forever()
