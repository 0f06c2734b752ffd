"""The pyACL probe, run in the probe child. The call sequence, argument orders, return conventions and
cleanup order are those of CANN's pyACL reference and samples (shared/reference/acl-probe-fan-power.md
sections 1 and 2):

    init         import acl, acl.init(); the runtime's device count, SoC name and versions (runtime_facts.py)
    set_device   acl.rt.set_device(logical id)
    context      acl.rt.create_context(id), acl.rt.create_stream()
    device_status  acl.rt.query_device_status(id)           (newer pyACL only; skipped when absent)
    mem_info     acl.rt.get_mem_info(ACL_HBM_MEM)            (maps to DDR on 310P / 310B); then the device's
                 utilisation and core counts where this pyACL has the calls (runtime_facts.py)
    memcpy       a known pattern host -> device -> host, compared byte for byte
    synchronize  acl.rt.synchronize_stream_with_timeout(stream, ms)
    model        (when configured) load a small .om, execute it on a given input, compare the output
    compute_prepare, compute
                 (unless turned off) a known-answer Add on the AI Core, by the path the installed CANN offers
                 (compute.py); where none works the report says "compute unavailable: <why>" and the probe goes on
    cleanup      datasets, model, descriptor, buffers, stream, context, reset_device, and finalize after the
                 last chip

One child may probe several chips in turn (child.py): acl.init runs once per process (reference section 1:
"only once in a process"), in the first chip's probe, and a Session carries the runtime to the chips after it;
their reports show that one init's time, or its failure. acl.finalize ends the last chip's cleanup.

Functions that act return `ret`; functions that produce a value return `(value, ret)`; 0 is success.
"""

from . import compute, opmodel, runtime_facts
from .compare import byte_mismatch, copy_pattern, value_mismatch
from .protocol import DEVICE_ABNORMAL, WRONG_DATA, WRONG_RESULT
from .stages import StageFailed, Unavailable

# pyACL exports none of these; the values are CANN's (reference section 1.1).
ACL_SUCCESS = 0
ACL_ERROR_REPEAT_INITIALIZE = 100002
ACL_MEM_MALLOC_HUGE_FIRST = 0
ACL_MEMCPY_HOST_TO_DEVICE = 1
ACL_MEMCPY_DEVICE_TO_HOST = 2
ACL_HBM_MEM = 1
ACL_RT_DEVICE_STATUS_NORMAL = 0


class Session:
    """The process's one ACL runtime, shared by the chips it probes in turn."""

    def __init__(self):
        self.acl = None  # the module, once acl.init succeeded
        self.open = False  # acl.init succeeded and acl.finalize has not run
        self.init_seconds = None
        self.failure = None  # the StageFailed or Unavailable the init ended with: every chip's answer
        self.runtime = {}  # the runtime-wide facts learnt at init (runtime_facts.runtime_facts)


def close(session):
    """Finalize a runtime the last chip's cleanup did not (the child stopped before its last chip)."""
    if session.open:
        session.open = False
        session.acl.finalize()


class _Held:
    """What the probe has acquired so far, so that cleanup releases exactly that."""

    def __init__(self):
        self.acl = None
        self.initialized = False  # the runtime is up: cleanup runs
        self.device = None
        self.context = None
        self.stream = None
        self.device_buffers = []
        self.host_buffers = []
        self.model_id = None
        self.desc = None
        self.datasets = []


def run(options, stages, runtime=None, session=None, last=True):
    """Probe device `options.device`; returns extra facts for the report. Raises StageFailed when the device
    fails a stage and Unavailable when the probe cannot run; cleanup runs either way. `runtime`: a dict that
    receives the runtime's own facts (runtime_facts.py) as they are learnt, also when a later stage fails;
    None asks none of them. `session`: the runtime an earlier chip of this process opened (None: a new one);
    `last`: this chip's cleanup also finalizes the runtime."""
    session = session if session is not None else Session()
    model_data = _read_model_files(options) if options.model else None
    held = _Held()
    succeeded, problem = False, None
    try:
        facts = _probe(options, stages, held, model_data, runtime, session)
        succeeded = True
    finally:
        if held.initialized:
            with stages.stage("cleanup"):
                problem = _release(held, session if last else None)
    # A failed cleanup only matters when nothing failed before it (the first failure is the news).
    if succeeded and problem is not None:
        call, code = problem
        raise StageFailed("{} returned {}".format(call, code), code=code)
    return facts


def _probe(options, stages, held, model_data, runtime, session):
    device = options.device
    acl = _open(stages, session)
    held.acl, held.initialized = acl, True
    if runtime is not None:  # before set_device: a device the runtime cannot open still has these
        if not session.runtime:
            session.runtime = runtime_facts.runtime_facts(acl)
        runtime.update(session.runtime)
    facts = {"soc_name": acl.get_soc_name() if hasattr(acl, "get_soc_name") else None}
    with stages.stage("set_device"):
        _check(acl.rt.set_device(device), "acl.rt.set_device")
        held.device = device
    with stages.stage("context"):
        held.context = _value(acl.rt.create_context(device), "acl.rt.create_context")
        held.stream = _value(acl.rt.create_stream(), "acl.rt.create_stream")
    if hasattr(acl.rt, "query_device_status"):
        with stages.stage("device_status"):
            status = _value(acl.rt.query_device_status(device), "acl.rt.query_device_status")
            if status != ACL_RT_DEVICE_STATUS_NORMAL:
                raise StageFailed("the runtime reports device {} ABNORMAL (status {})".format(device, status),
                                  reason=DEVICE_ABNORMAL)
    with stages.stage("mem_info"):
        free, total, ret = acl.rt.get_mem_info(ACL_HBM_MEM)
        _check(ret, "acl.rt.get_mem_info")
        facts.update(memory_free_bytes=free, memory_total_bytes=total)
        if runtime is not None:
            runtime.update(runtime_facts.memory_facts(free, total))
            runtime.update(runtime_facts.device_facts(acl, device))
    with stages.stage("memcpy"):
        _copy_round_trip(acl, held, options.copy_bytes)
    with stages.stage("synchronize"):
        if hasattr(acl.rt, "synchronize_stream_with_timeout"):
            _check(acl.rt.synchronize_stream_with_timeout(held.stream, options.sync_timeout_ms),
                   "acl.rt.synchronize_stream_with_timeout")
        else:  # an older pyACL: only the daemon's deadline bounds this call
            _check(acl.rt.synchronize_stream(held.stream), "acl.rt.synchronize_stream")
    if model_data is not None:
        with stages.stage("model"):
            _run_model(acl, held, options, model_data)
    if options.compute:  # after the model: it sets the process's AI Core timeout for its own kernel
        facts.update(_compute(acl, held, options, stages, facts["soc_name"]))
    return facts


def _open(stages, session):
    """The runtime: acl.init in the "init" stage of the process's first chip; the chips after it show that
    stage's time, or fail as it did."""
    if session.failure is not None:
        stages.shared("init", session.init_seconds)
        failure = session.failure
        if isinstance(failure, StageFailed):
            raise StageFailed(str(failure), code=failure.code, reason=failure.reason)
        raise Unavailable(str(failure))
    if session.open:
        stages.shared("init", session.init_seconds)
        return session.acl
    try:
        with stages.stage("init"):
            acl = _import_acl()
            ret = acl.init()
            if ret not in (ACL_SUCCESS, ACL_ERROR_REPEAT_INITIALIZE):  # repeated init: the runtime is up anyway
                raise StageFailed("acl.init returned {}".format(ret), code=ret)
    except (StageFailed, Unavailable) as exc:
        session.failure = exc
        raise
    finally:
        session.init_seconds = stages.seconds.get("init")
    session.acl, session.open = acl, True
    return acl


def _compute(acl, held, options, stages, soc_name):
    """The compute step's report entries: the path it took and what it did, or why it could not run."""
    with stages.stage("compute_prepare"):
        try:
            plan = compute.prepare(acl, soc_name, opmodel.runtime_version(acl), options.op_settings)
        except compute.ComputeUnavailable as exc:
            return {"compute": None, "message": "compute unavailable: {}".format(exc)}
    with stages.stage("compute"):
        try:
            result = compute.execute(acl, held.stream, plan, options.sync_timeout_ms)
        except compute.ComputeUnavailable as exc:
            return {"compute": None, "message": "compute unavailable: {}".format(exc)}
    return {"compute": result.path, "message": "compute: {}".format(result.detail)}


def _import_acl():
    try:
        import acl
    except ImportError as exc:
        raise Unavailable("pyACL (module acl) cannot be imported: {}".format(exc)) from None
    if not hasattr(acl.util, "bytes_to_ptr"):
        raise Unavailable("this pyACL has no acl.util.bytes_to_ptr (a CANN older than the probe supports)")
    return acl


def _check(ret, call):
    if ret != ACL_SUCCESS:
        raise StageFailed("{} returned {}".format(call, ret), code=ret)


def _value(result, call):
    value, ret = result
    _check(ret, call)
    return value


def _device_buffer(acl, held, size):
    pointer = _value(acl.rt.malloc(size, ACL_MEM_MALLOC_HUGE_FIRST), "acl.rt.malloc")
    held.device_buffers.append(pointer)
    return pointer


def _host_buffer(acl, held, size):
    pointer = _value(acl.rt.malloc_host(size), "acl.rt.malloc_host")
    held.host_buffers.append(pointer)
    return pointer


def _to_device(acl, device_pointer, data, call):
    source = acl.util.bytes_to_ptr(data)  # points into `data`, which the caller keeps alive
    _check(acl.rt.memcpy(device_pointer, len(data), source, len(data), ACL_MEMCPY_HOST_TO_DEVICE), call)


def _from_device(acl, held, device_pointer, size, call):
    host = _host_buffer(acl, held, size)
    _check(acl.rt.memcpy(host, size, device_pointer, size, ACL_MEMCPY_DEVICE_TO_HOST), call)
    return acl.util.ptr_to_bytes(host, size)


def _copy_round_trip(acl, held, size):
    pattern = copy_pattern(size)
    device_copy = _device_buffer(acl, held, size)
    _to_device(acl, device_copy, pattern, "acl.rt.memcpy (host to device)")
    back = _from_device(acl, held, device_copy, size, "acl.rt.memcpy (device to host)")
    problem = byte_mismatch(pattern, back)
    if problem:
        raise StageFailed(problem, reason=WRONG_DATA)


def _read_model_files(options):
    data = {}
    for name, path in (("input", options.model_input), ("expected", options.model_expected)):
        try:
            with open(path, "rb") as handle:
                data[name] = handle.read()
        except OSError as exc:
            raise Unavailable("cannot read the probe model's {} file {}: {}".format(
                name, path, exc.strerror or exc)) from None
    return data


def _run_model(acl, held, options, data):
    held.model_id = _value(acl.mdl.load_from_file(options.model), "acl.mdl.load_from_file")
    held.desc = acl.mdl.create_desc()
    _check(acl.mdl.get_desc(held.desc, held.model_id), "acl.mdl.get_desc")
    inputs, outputs = acl.mdl.get_num_inputs(held.desc), acl.mdl.get_num_outputs(held.desc)
    if inputs != 1 or outputs != 1:
        raise Unavailable("the probe model must have one input and one output; {} has {} and {}".format(
            options.model, inputs, outputs))
    input_size = acl.mdl.get_input_size_by_index(held.desc, 0)
    output_size = acl.mdl.get_output_size_by_index(held.desc, 0)
    for name, size in (("input", input_size), ("expected", output_size)):
        if len(data[name]) != size:
            raise Unavailable("the probe model's {} file has {} bytes, the model's {} has {}".format(
                name, len(data[name]), "input" if name == "input" else "output", size))
    device_input = _device_buffer(acl, held, input_size)
    _to_device(acl, device_input, data["input"], "acl.rt.memcpy (model input)")
    device_output = _device_buffer(acl, held, output_size)
    input_dataset = _dataset(acl, held, device_input, input_size)
    output_dataset = _dataset(acl, held, device_output, output_size)
    _check(acl.mdl.execute(held.model_id, input_dataset, output_dataset), "acl.mdl.execute")
    got = _from_device(acl, held, device_output, output_size, "acl.rt.memcpy (model output)")
    problem = value_mismatch(data["expected"], got, options.model_dtype, options.model_tolerance)
    if problem:
        raise StageFailed("model " + problem, reason=WRONG_RESULT)


def _dataset(acl, held, pointer, size):
    dataset = acl.mdl.create_dataset()
    held.datasets.append(dataset)
    buffer = acl.create_data_buffer(pointer, size)
    _, ret = acl.mdl.add_dataset_buffer(dataset, buffer)
    if ret != ACL_SUCCESS:
        acl.destroy_data_buffer(buffer)  # not in the dataset, so the dataset's cleanup would miss it
        raise StageFailed("acl.mdl.add_dataset_buffer returned {}".format(ret), code=ret)
    return dataset


def _release(held, session):
    """Release what `held` lists in the documented order, and with `session` finalize the runtime; returns the
    first (call, code) that failed."""
    acl = held.acl
    failures = []

    def call(name, function, *args):
        ret = function(*args)
        if ret != ACL_SUCCESS:
            failures.append((name, ret))

    for dataset in held.datasets:
        for index in range(acl.mdl.get_dataset_num_buffers(dataset)):
            call("acl.destroy_data_buffer", acl.destroy_data_buffer, acl.mdl.get_dataset_buffer(dataset, index))
        call("acl.mdl.destroy_dataset", acl.mdl.destroy_dataset, dataset)
    if held.model_id is not None:
        call("acl.mdl.unload", acl.mdl.unload, held.model_id)
    if held.desc is not None:
        call("acl.mdl.destroy_desc", acl.mdl.destroy_desc, held.desc)
    for pointer in held.device_buffers:
        call("acl.rt.free", acl.rt.free, pointer)
    for pointer in held.host_buffers:
        call("acl.rt.free_host", acl.rt.free_host, pointer)
    if held.stream is not None:
        call("acl.rt.destroy_stream", acl.rt.destroy_stream, held.stream)
    if held.context is not None:
        call("acl.rt.destroy_context", acl.rt.destroy_context, held.context)
    if held.device is not None:
        call("acl.rt.reset_device", acl.rt.reset_device, held.device)
    if session is not None and session.open:
        session.open = False
        call("acl.finalize", acl.finalize)
    return failures[0] if failures else None
