"""Single operators on the AI Core without a user model: the one place that builds them with ATC, caches them,
finds the path the installed CANN offers and sets an operator up on device memory. The probe's compute step
(compute.py, its Add) and `npumon diag`'s compute and MatMul items (diag/workloads.py) both use it. Runs in their
child processes, so it imports nothing else of npumon and is written for Python 3.7+.

pyACL cannot compile an operator (shared/reference/interconnect-and-compute.md section 3.1), so the paths are, in
this order:

    op-model   single-operator .om files for this SoC and CANN version, built once with ATC where the toolkit
               has it and cached under npumon's state directory (one directory per set of operators); loaded
               with acl.op.set_model_dir and run with acl.op.execute_v2
    aclnn      the precompiled operators of newer CANN (the operator package's libopapi.so, with libnnopbase.so's
               aclCreateTensor) through ctypes: the two-phase aclnnAddGetWorkspaceSize + aclnnAdd; only for the
               operators in ACLNN_OPS (the probe's Add), and not compiled at all
    aclop      the runtime's C operator API through ctypes: aclopCompileAndExecute (static shape, ACL_ENGINE_SYS,
               ACL_COMPILE_SYS, opPath NULL), in the same process and so the same context and stream as pyACL

Where none works, prepare() raises ComputeUnavailable with every path's reason: that is not a failure of the
chip. aclnn says only at its first phase whether it runs the operator on this product, so an aclnn Plan carries
the aclop Plan as its `fallback`, for the caller to run by when the aclnn one turns out unavailable.

Interface:
    plan = prepare(acl, specs, soc_name, version, settings)  -> Plan, or raises ComputeUnavailable (may run ATC)
    operator = Operator(acl, plan, spec, device_pointers)     -> set up by the path; raises ComputeUnavailable
    ret = operator.launch(stream); failure = operator.release()
"""

import ctypes
import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import types
from typing import List, NamedTuple, Optional, Tuple

OP_MODEL = "op-model"
ACLNN = "aclnn"
ACLOP = "aclop"
# The operators run by the aclnn path, by type and input dtype: (self, other, alpha = 1 of that dtype, out), the
# signature of aclnnAdd (CANN ops-math math/add/docs/aclnnAdd&aclnnInplaceAdd.md)
ACLNN_OPS = {("Add", "int32"): "aclnnAdd"}
# CANN's values (acl_base.h, acl_op.h)
ACL_SUCCESS = 0
DTYPES = {"float16": 1, "int32": 3}  # aclDataType
DTYPE_BYTES = {"float16": 2, "int32": 4}
ACL_FORMAT_ND = 2
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_ENGINE_SYS = 0  # aclopEngineType
ACL_COMPILE_SYS = 0  # aclopCompileType: an operator registered with the graph engine
ACL_ERROR_GE_FAILURE = 500002  # the graph engine (the compiler) failed: this path cannot run here
# A build that failed is not tried again for this long: ATC takes many seconds, and the toolkit rarely changes.
FAILED_BUILD_RETRY_SECONDS = 3600.0
MAX_KEY = 160  # a cache directory's name stays well inside a file name's 255 bytes
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


class ComputeUnavailable(Exception):
    """No path can compute here (no toolkit, no operator library, ...): reported, not a failure of the chip."""


class ComputeSettings(NamedTuple):
    cache_dir: Optional[str]  # where built .om files are kept; None: no op-model path
    atc_argv: Optional[List[str]]  # how to run ATC; None: none installed
    library: Optional[str]  # libascendcl.so for the aclop path; None: not tried
    build_timeout_seconds: float = 15.0
    aclnn_libraries: Optional[List[str]] = None  # libnnopbase.so then libopapi.so; None: the aclnn path not tried


class Plan(NamedTuple):
    path: str  # OP_MODEL, ACLNN or ACLOP
    model_dir: Optional[str]  # OP_MODEL: the directory set_model_dir reads
    api: object  # ACLNN, ACLOP: the calls with their signatures set (load_aclnn_api, load_operator_api)
    how: str  # how the path was found, and why the paths before it could not be used, for the report
    fallback: object = None  # ACLNN: the Plan to run by where this CANN's aclnn refuses the operator, or None


class Tensor(NamedTuple):
    dtype: str  # a key of DTYPES
    shape: Tuple[int, ...]


class OpSpec(NamedTuple):
    """One static-shape operator: its type, tensors (ND) and boolean attributes."""
    op: str
    inputs: Tuple[Tensor, ...]
    outputs: Tuple[Tensor, ...]
    attrs: Tuple[Tuple[str, bool], ...] = ()


def tensor_bytes(tensor):
    count = 1
    for size in tensor.shape:
        count *= size
    return count * DTYPE_BYTES[tensor.dtype]


def spec_name(spec):
    """`Add-int32-8x16`: the operator and its first input, for cache keys and messages."""
    first = spec.inputs[0]
    return "{}-{}-{}".format(spec.op, first.dtype, "x".join(str(size) for size in first.shape))


def op_json(specs):
    """ATC's --singleop description of the operators (the layout of CANN's add_op.json and gemm.json samples)."""
    def tensors(group):
        return [{"format": "ND", "shape": list(tensor.shape), "type": tensor.dtype} for tensor in group]

    ops = []
    for spec in specs:
        op = {"op": spec.op, "input_desc": tensors(spec.inputs), "output_desc": tensors(spec.outputs)}
        if spec.attrs:
            op["attr"] = [{"name": name, "type": "bool", "value": value} for name, value in spec.attrs]
        ops.append(op)
    return json.dumps(ops)


def cache_key(soc_name, version, specs):
    key = "{}-{}-{}".format(_SAFE.sub("_", soc_name), _SAFE.sub("_", version or "unknown"),
                            "-".join(spec_name(spec) for spec in specs))
    return key[:MAX_KEY]


def runtime_version(acl):
    """The CANN runtime's version for the cache key: get_version_str (CANN 8.x+), else the ACL interface's."""
    if hasattr(acl, "get_version_str"):
        text, ret = acl.get_version_str("runtime")
        if ret == ACL_SUCCESS and text:
            return text
    if hasattr(acl, "get_version"):
        major, minor, patch, ret = acl.get_version()
        if ret == ACL_SUCCESS:
            return "acl{}.{}.{}".format(major, minor, patch)
    return None


def refused(ret):
    """Codes of the caller's class (1xxxxx: operator not found, model does not load, ...) and the graph engine's
    failure: this path cannot run here, which says nothing about the chip."""
    return ret != ACL_SUCCESS and (str(ret).startswith("1") or ret == ACL_ERROR_GE_FAILURE)


# -- the children's flags (the parent side: launch.builder_argv) ----------------------------------------------


def add_arguments(parser):
    """The builder's flags, the same in the probe child and the diag child."""
    parser.add_argument("--op-cache-dir", help="where single-op models built with ATC are kept")
    parser.add_argument("--atc-command", help="how to run ATC, as a JSON list of strings")
    parser.add_argument("--op-library", help="libascendcl.so, for the aclopCompileAndExecute path")
    parser.add_argument("--aclnn-library", action="append",
                        help="libnnopbase.so, then again libopapi.so, for the aclnn path")
    parser.add_argument("--compute-build-timeout", type=float, default=15.0,
                        help="seconds ATC may take to build the operator models")


def settings_from_arguments(parser, options):
    """ComputeSettings from the flags add_arguments declared; a bad --atc-command is a usage error."""
    atc = None
    if options.atc_command is not None:
        try:
            atc = json.loads(options.atc_command)
        except ValueError:
            atc = None
        if not (isinstance(atc, list) and atc and all(isinstance(word, str) for word in atc)):
            parser.error("--atc-command must be a JSON list of strings")
    return ComputeSettings(options.op_cache_dir, atc, options.op_library, options.compute_build_timeout,
                           options.aclnn_library)


# -- finding a path ------------------------------------------------------------------------------------------


def prepare(acl, specs, soc_name, version, settings):
    """The path to run `specs` by on this host; raises ComputeUnavailable with every path's reason."""
    reasons = []
    if not soc_name:
        reasons.append("op-model: the runtime names no SoC (acl.get_soc_name), which ATC needs")
    elif settings.cache_dir is None:
        reasons.append("op-model: no cache directory")
    elif not hasattr(acl, "op") or not hasattr(acl.op, "execute_v2"):
        reasons.append("op-model: this pyACL has no acl.op.execute_v2")
    else:
        try:
            model_dir, how = built_models(specs, soc_name, version, settings)
            return Plan(OP_MODEL, model_dir, None, how)
        except ComputeUnavailable as exc:
            reasons.append("op-model: {}".format(exc))
    if all(aclnn_function(spec) for spec in specs):
        if settings.aclnn_libraries is None:
            reasons.append("aclnn: no aclnn libraries")
        else:
            try:
                functions = [aclnn_function(spec) for spec in specs]
                api = load_aclnn_api(settings.aclnn_libraries, functions)
                how = "{} in {}".format(", ".join(functions), settings.aclnn_libraries[-1])
                # aclnn only knows at its first phase whether it runs the operator on this product
                return Plan(ACLNN, None, api, how + _unavailable(reasons), _aclop_plan(settings, reasons)[0])
            except ComputeUnavailable as exc:
                reasons.append("aclnn: {}".format(exc))
    plan, reason = _aclop_plan(settings, reasons)
    if plan is not None:
        return plan
    reasons.append(reason)
    raise ComputeUnavailable("; ".join(reasons))


def _aclop_plan(settings, reasons):
    """(the aclop Plan, None), or (None, why not)."""
    if settings.library is None:
        return None, "aclop: no operator API library"
    try:
        api = load_operator_api(settings.library)
    except ComputeUnavailable as exc:
        return None, "aclop: {}".format(exc)
    how = "aclopCompileAndExecute in {}".format(settings.library)
    return Plan(ACLOP, None, api, how + _unavailable(reasons)), None


def aclnn_function(spec):
    """The aclnn operator that runs `spec`, or None."""
    return ACLNN_OPS.get((spec.op, spec.inputs[0].dtype))


def _unavailable(reasons):
    return "".join(" ({} unavailable)".format(reason) for reason in reasons)


def built_models(specs, soc_name, version, settings):
    """(the cached model directory, how it came to be there); builds it with ATC once. Children for other chips
    may ask at the same time: one builds under a lock, the others wait for it."""
    key = cache_key(soc_name, version, specs)
    model_dir = os.path.join(settings.cache_dir, key)
    if _has_model(model_dir):
        return model_dir, "cached single-op model {}".format(model_dir)
    if settings.atc_argv is None:
        raise ComputeUnavailable("no ATC (the CANN toolkit's compiler) installed")
    try:
        os.makedirs(settings.cache_dir, mode=0o750, exist_ok=True)
        lock = open(os.path.join(settings.cache_dir, key + ".lock"), "a")
    except OSError as exc:
        raise ComputeUnavailable("cannot use the cache directory {}: {}".format(
            settings.cache_dir, exc.strerror or exc)) from None
    with lock:
        _lock(lock, settings.build_timeout_seconds)
        if _has_model(model_dir):  # another child built it while this one waited
            return model_dir, "cached single-op model {}".format(model_dir)
        failed = os.path.join(settings.cache_dir, key + ".failed")
        earlier = _recent_failure(failed)
        if earlier:
            raise ComputeUnavailable(earlier)
        started = time.monotonic()
        try:
            _build(specs, soc_name, model_dir, settings)
        except ComputeUnavailable as exc:
            _write(failed, str(exc))
            raise
        return model_dir, "single-op model built by ATC in {:.1f} s, cached in {}".format(
            time.monotonic() - started, model_dir)


def _has_model(model_dir):
    try:
        return any(name.endswith(".om") for name in os.listdir(model_dir))
    except OSError:
        return False


def _lock(handle, timeout_seconds):
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise ComputeUnavailable("cannot lock the model cache: {}".format(exc.strerror)) from None
        if time.monotonic() >= deadline:
            raise ComputeUnavailable("another process is still building the operator model")
        time.sleep(0.05)


def _recent_failure(path):
    try:
        if time.time() - os.path.getmtime(path) < FAILED_BUILD_RETRY_SECONDS:
            with open(path, encoding="utf-8") as handle:
                return handle.read(500).strip() + " (an earlier build; retried an hour after it)"
        os.unlink(path)
    except OSError:
        pass
    return None


def _write(path, text):
    try:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text[:500] + "\n")
    except OSError:
        pass  # only means the next caller tries ATC again


def _build(specs, soc_name, model_dir, settings):
    """Run ATC into a scratch directory, then move its output into place in one rename."""
    scratch = tempfile.mkdtemp(prefix=".build-", dir=settings.cache_dir)
    ops = ", ".join(sorted(set(spec.op for spec in specs)))
    try:
        description = os.path.join(scratch, "ops.json")
        with open(description, "w", encoding="utf-8") as handle:
            handle.write(op_json(specs))
        output = os.path.join(scratch, "out")
        argv = list(settings.atc_argv) + ["--singleop=" + description, "--soc_version=" + soc_name,
                                          "--output=" + output]
        try:
            done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=scratch,
                                  timeout=settings.build_timeout_seconds, check=False)
        except subprocess.TimeoutExpired:
            raise ComputeUnavailable("ATC did not build the operator model within {:g} s".format(
                settings.build_timeout_seconds)) from None
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                raise ComputeUnavailable("no ATC (the CANN toolkit's compiler) at {}".format(argv[0])) from None
            raise ComputeUnavailable("cannot run ATC ({}): {}".format(argv[0], exc.strerror or exc)) from None
        if done.returncode != 0 or not _has_model(output):
            last = [line for line in done.stdout.decode("utf-8", "replace").splitlines() if line.strip()]
            raise ComputeUnavailable("ATC could not build {} for {} (exit {}){}".format(
                ops, soc_name, done.returncode, ": " + last[-1].strip()[:300] if last else ""))
        try:
            os.rename(output, model_dir)
        except OSError as exc:
            if not _has_model(model_dir):
                raise ComputeUnavailable("cannot store the operator model in {}: {}".format(
                    model_dir, exc.strerror or exc)) from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def load_operator_api(path):
    """libascendcl.so with the signatures of the calls the aclop path makes (acl_op.h, acl_base.h)."""
    try:
        lib = ctypes.CDLL(path)
    except OSError as exc:
        raise ComputeUnavailable("cannot load {}: {}".format(path, exc)) from None
    pointers = ctypes.POINTER(ctypes.c_void_p)
    signatures = (
        ("aclCreateTensorDesc", ctypes.c_void_p, [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_int64),
                                                  ctypes.c_int]),
        ("aclDestroyTensorDesc", None, [ctypes.c_void_p]),
        ("aclCreateDataBuffer", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t]),
        ("aclDestroyDataBuffer", ctypes.c_int, [ctypes.c_void_p]),
        ("aclopCreateAttr", ctypes.c_void_p, []),
        ("aclopDestroyAttr", None, [ctypes.c_void_p]),
        ("aclopSetAttrBool", ctypes.c_int, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint8]),
        ("aclopCompileAndExecute", ctypes.c_int, [ctypes.c_char_p, ctypes.c_int, pointers, pointers, ctypes.c_int,
                                                  pointers, pointers, ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                                  ctypes.c_char_p, ctypes.c_void_p]),
    )
    for name, restype, argtypes in signatures:
        function = getattr(lib, name, None)
        if function is None:
            raise ComputeUnavailable("{} has no {}".format(path, name))
        function.restype, function.argtypes = restype, argtypes
    return lib


def load_aclnn_api(paths, functions):
    """libnnopbase.so (tensors, scalars) and libopapi.so (the aclnn operators `functions`, each with its
    ...GetWorkspaceSize) with the signatures of the calls the aclnn path makes (aclnn/acl_meta.h, aclnn_add.h)."""
    if len(paths) != 2:
        raise ComputeUnavailable("the aclnn path needs libnnopbase.so and libopapi.so, got {}".format(paths))
    libraries = []
    for path in paths:
        try:
            libraries.append(ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL))  # libopapi.so resolves against the other
        except OSError as exc:
            raise ComputeUnavailable("cannot load {}: {}".format(path, exc)) from None
    int64s = ctypes.POINTER(ctypes.c_int64)
    signatures = [
        (0, "aclCreateTensor", ctypes.c_void_p, [int64s, ctypes.c_uint64, ctypes.c_int, int64s, ctypes.c_int64,
                                                 ctypes.c_int, int64s, ctypes.c_uint64, ctypes.c_void_p]),
        (0, "aclDestroyTensor", ctypes.c_int, [ctypes.c_void_p]),
        (0, "aclCreateScalar", ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_int]),
        (0, "aclDestroyScalar", ctypes.c_int, [ctypes.c_void_p]),
    ]
    for name in functions:  # (self, other, alpha, out, &workspaceSize, &executor), then (workspace, size, executor, stream)
        signatures.append((1, name + "GetWorkspaceSize", ctypes.c_int, [ctypes.c_void_p] * 4 + [
            ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_void_p)]))
        signatures.append((1, name, ctypes.c_int, [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p,
                                                   ctypes.c_void_p]))
    api = {}
    for index, name, restype, argtypes in signatures:
        function = getattr(libraries[index], name, None)
        if function is None:
            raise ComputeUnavailable("{} has no {}".format(paths[index], name))
        function.restype, function.argtypes = restype, argtypes
        api[name] = function
    return types.SimpleNamespace(**api)


# -- setting one up and launching it -------------------------------------------------------------------------


class Operator(object):
    """One operator of a plan, set up on device memory (`pointers`: its inputs, then its outputs) by the plan's
    path: tensor descriptions, data buffers and attributes (op-model, aclop), or tensors, the scalar alpha, the
    executor and its workspace (aclnn). launch(stream) enqueues it (asynchronous) and returns ACL's code; release()
    destroys what it holds and returns the first (call, code) that failed, or None. For the op-model path the
    caller has loaded plan.model_dir with acl.op.set_model_dir (once per process)."""

    def __init__(self, acl, plan, spec, pointers):
        self.acl, self.plan, self.spec = acl, plan, spec
        self.call = {OP_MODEL: "acl.op.execute_v2", ACLNN: aclnn_function(spec),
                     ACLOP: "aclopCompileAndExecute"}[plan.path]
        self._held = []  # (name, destroy, handle) in order of acquisition
        self._tensors, self._buffers, self._attr = [], [], None
        tensors = list(spec.inputs) + list(spec.outputs)
        try:
            if plan.path == OP_MODEL:
                self._set_up_op_model(acl, tensors, pointers)
            elif plan.path == ACLNN:
                self._set_up_aclnn(acl, plan.api, tensors, pointers)
            else:
                self._set_up_aclop(plan.api, tensors, pointers)
        except BaseException:
            self.release()
            raise

    def _hold(self, name, destroy, handle):
        self._held.append((name, destroy, handle))
        return handle

    def _set_up_op_model(self, acl, tensors, pointers):
        for tensor in tensors:
            self._tensors.append(self._hold("destroy tensor desc", acl.destroy_tensor_desc, acl.create_tensor_desc(
                DTYPES[tensor.dtype], list(tensor.shape), ACL_FORMAT_ND)))
        for pointer, tensor in zip(pointers, tensors):
            self._buffers.append(self._hold("destroy data buffer", acl.destroy_data_buffer,
                                            acl.create_data_buffer(pointer, tensor_bytes(tensor))))
        self._attr = self._hold("destroy attr", acl.op.destroy_attr, acl.op.create_attr())
        for name, value in self.spec.attrs:
            ret = acl.op.set_attr_bool(self._attr, name, 1 if value else 0)
            if ret != ACL_SUCCESS:
                raise ComputeUnavailable("acl.op.set_attr_bool ({}) returned {}".format(name, ret))

    def _set_up_aclop(self, api, tensors, pointers):
        for tensor in tensors:
            dims = (ctypes.c_int64 * len(tensor.shape))(*tensor.shape)
            desc = api.aclCreateTensorDesc(DTYPES[tensor.dtype], len(tensor.shape), dims, ACL_FORMAT_ND)
            if not desc:
                raise ComputeUnavailable("aclCreateTensorDesc returned NULL")
            self._tensors.append(self._hold("aclDestroyTensorDesc", api.aclDestroyTensorDesc, desc))
        for pointer, tensor in zip(pointers, tensors):
            buffer = api.aclCreateDataBuffer(pointer, tensor_bytes(tensor))
            if not buffer:
                raise ComputeUnavailable("aclCreateDataBuffer returned NULL")
            self._buffers.append(self._hold("aclDestroyDataBuffer", api.aclDestroyDataBuffer, buffer))
        self._attr = self._hold("aclopDestroyAttr", api.aclopDestroyAttr, api.aclopCreateAttr())
        for name, value in self.spec.attrs:
            ret = api.aclopSetAttrBool(self._attr, name.encode(), 1 if value else 0)
            if ret != ACL_SUCCESS:
                raise ComputeUnavailable("aclopSetAttrBool ({}) returned {}".format(name, ret))

    def _set_up_aclnn(self, acl, api, tensors, pointers):
        for pointer, tensor in zip(pointers, tensors):
            rank = len(tensor.shape)
            dims = (ctypes.c_int64 * rank)(*tensor.shape)
            strides = (ctypes.c_int64 * rank)(*contiguous_strides(tensor.shape))
            handle = api.aclCreateTensor(dims, rank, DTYPES[tensor.dtype], strides, 0, ACL_FORMAT_ND, dims, rank,
                                         pointer)
            if not handle:
                raise ComputeUnavailable("aclCreateTensor returned NULL")
            self._tensors.append(self._hold("aclDestroyTensor", api.aclDestroyTensor, handle))
        self._alpha = ctypes.c_int32(1)  # alpha = 1, of the inputs' type (ACLNN_OPS has int32 operators only)
        alpha = api.aclCreateScalar(ctypes.addressof(self._alpha), DTYPES["int32"])
        if not alpha:
            raise ComputeUnavailable("aclCreateScalar returned NULL")
        self._attr = self._hold("aclDestroyScalar", api.aclDestroyScalar, alpha)
        size, executor = ctypes.c_uint64(0), ctypes.c_void_p()
        first, second, out = self._tensors
        ret = getattr(api, self.call + "GetWorkspaceSize")(first, second, alpha, out, ctypes.byref(size),
                                                           ctypes.byref(executor))
        if ret != ACL_SUCCESS:  # the first phase checks the arguments: this operator does not run here so
            raise ComputeUnavailable("{}GetWorkspaceSize returned {}".format(self.call, ret))
        self._executor, self._workspace_size, self._workspace = executor.value, size.value, None
        if size.value:
            workspace, ret = acl.rt.malloc(size.value, ACL_MEM_MALLOC_HUGE_FIRST)
            if ret != ACL_SUCCESS:
                raise ComputeUnavailable("acl.rt.malloc ({} workspace) returned {}".format(self.call, ret))
            self._workspace = self._hold("acl.rt.free", acl.rt.free, workspace)

    def launch(self, stream):
        if self.plan.path == ACLNN:
            return getattr(self.plan.api, self.call)(self._workspace, self._workspace_size, self._executor, stream)
        count = len(self.spec.inputs)
        descs, buffers = self._tensors, self._buffers
        if self.plan.path == OP_MODEL:
            return self.acl.op.execute_v2(self.spec.op, descs[:count], buffers[:count], descs[count:],
                                          buffers[count:], self._attr, stream)

        def array(handles):
            return (ctypes.c_void_p * len(handles))(*handles)

        return self.plan.api.aclopCompileAndExecute(
            self.spec.op.encode(), count, array(descs[:count]), array(buffers[:count]), len(descs) - count,
            array(descs[count:]), array(buffers[count:]), self._attr, ACL_ENGINE_SYS, ACL_COMPILE_SYS, None, stream)

    def release(self):
        """Destroy in reverse order of acquisition."""
        failures = []
        while self._held:
            name, destroy, handle = self._held.pop()
            ret = destroy(handle)
            if ret is not None and ret != ACL_SUCCESS:  # the destroy calls of descs and attrs return nothing
                failures.append((name, ret))
        return failures[0] if failures else None


def contiguous_strides(shape):
    """Row-major strides in elements: [8, 16] -> [16, 1]."""
    strides = [1] * len(shape)
    for index in range(len(shape) - 2, -1, -1):
        strides[index] = strides[index + 1] * shape[index + 1]
    return strides
