"""The level-2 and level-3 workloads, run in the diag child against pyACL (`acl`, passed in).

Small interface on purpose, so that the probe's compute step and these can share code later: a Session opens
one device (context, stream, events) and every workload is `item(session, options) -> dict` that raises
ItemFailed (the device misbehaved) or ItemUnavailable (cannot run here). Device time is measured with device
events (acl.rt.event_elapsed_time), not the host clock, so a figure is the device's own.

The MatMul runs as a single operator through the operator builder the probe's compute step uses
(sources/probe/opmodel.py): the models in --op-model-dir when given, else the ones ATC builds once per SoC and
CANN version into the cache, else the runtime's aclopCompileAndExecute; where none works the compute and MatMul
items are "unavailable" with the reason, never failed. An ACL error below 200000 is the API refusing (no such
operator, no model): unavailable; a runtime or device error (5xxxxx) is a failure. Written for Python 3.7+,
like the probe child.
"""

import struct

from ..sources.probe import opmodel
from .protocol import COMPUTE, FAILED, MATMUL, MATMUL_SUSTAINED, OK, UNAVAILABLE

MEMCPY_H2H = 0
MEMCPY_H2D = 1
MEMCPY_D2H = 2
MEMCPY_D2D = 3
MALLOC_HUGE_FIRST = 0
ACL_FLOAT16 = 1
FORMAT_ND = 2
SMALL = 16  # the known-answer MatMul: 16x16 ones times 16x16 twos is 32.0 everywhere, exact in fp16
CHUNK = 16 * 1048576  # host buffers never exceed this: bigger device regions are copied in chunks


class ItemFailed(Exception):
    def __init__(self, message, code=None, **figures):
        Exception.__init__(self, message)
        self.code = code
        self.figures = figures


class ItemUnavailable(Exception):
    pass


def check(ret, what):
    """Raise for a non-zero ACL return: ItemUnavailable for the API refusing, ItemFailed for the device."""
    if ret:
        message = "{} returned {}".format(what, ret)
        if ret < 200000:
            raise ItemUnavailable(message)
        raise ItemFailed(message, code=ret)


def pair(result, what):
    value, ret = result
    check(ret, what)
    return value


class Session(object):
    """One device opened through pyACL: a context, a stream, two events; close() releases everything."""

    def __init__(self, acl, device, sync_timeout_ms, operators=None):
        self.acl = acl
        self.device = device
        self.sync_timeout_ms = sync_timeout_ms
        self.operators = operators  # Operators: where the MatMul comes from; None: no single operators
        self._allocated = []  # (free function, pointer)
        self._events = []
        self._opened = []  # what close() undoes, in order of opening
        self.context = self.stream = None
        check(acl.init(), "acl.init")
        self._opened.append("init")
        try:
            check(acl.rt.set_device(device), "acl.rt.set_device")
            self._opened.append("device")
            self.context = pair(acl.rt.create_context(device), "acl.rt.create_context")
            self.stream = pair(acl.rt.create_stream(), "acl.rt.create_stream")
            self.start = self.event()
            self.end = self.event()
        except (ItemFailed, ItemUnavailable):
            self.close()
            raise

    def event(self):
        event = pair(self.acl.rt.create_event(), "acl.rt.create_event")
        self._events.append(event)
        return event

    def device_memory(self, size):
        pointer = pair(self.acl.rt.malloc(size, MALLOC_HUGE_FIRST), "acl.rt.malloc")
        self._allocated.append((self.acl.rt.free, pointer))
        return pointer

    def host_memory(self, size):
        pointer = pair(self.acl.rt.malloc_host(size), "acl.rt.malloc_host")
        self._allocated.append((self.acl.rt.free_host, pointer))
        return pointer

    def release(self, pointer):
        for index, (free, held) in enumerate(self._allocated):
            if held == pointer:
                del self._allocated[index]
                free(pointer)
                return

    def sync(self, what):
        ret = self.acl.rt.synchronize_stream_with_timeout(self.stream, self.sync_timeout_ms)
        if ret:
            raise ItemFailed("{}: the stream did not complete within {} ms (error {})".format(
                what, self.sync_timeout_ms, ret), code=ret)

    def timed(self, what, launch):
        """Device seconds between two events around `launch()` (which enqueues work on the stream)."""
        check(self.acl.rt.record_event(self.start, self.stream), "acl.rt.record_event")
        launch()
        check(self.acl.rt.record_event(self.end, self.stream), "acl.rt.record_event")
        self.sync(what)
        return pair(self.acl.rt.event_elapsed_time(self.start, self.end), "acl.rt.event_elapsed_time") / 1000.0

    def close(self):
        """Release what was acquired, also after a failure half-way through opening."""
        acl = self.acl
        for free, pointer in reversed(self._allocated):
            free(pointer)
        for event in self._events:
            acl.rt.destroy_event(event)
        if self.stream is not None:
            acl.rt.destroy_stream(self.stream)
        if self.context is not None:
            acl.rt.destroy_context(self.context)
        if "device" in self._opened:
            acl.rt.reset_device(self.device)
        acl.finalize()

    def use(self, device):
        """Make `device` current for allocations (a peer), or back to this session's device and context."""
        check(self.acl.rt.set_device(device), "acl.rt.set_device")
        if device == self.device:
            check(self.acl.rt.set_context(self.context), "acl.rt.set_context")


def pattern(size, seed):
    """Bytes that differ by address and seed, so a stuck or swapped address line shows."""
    block = bytes((index * 7 + seed) & 0xFF for index in range(256))
    return (block * (size // 256 + 1))[:size]


def byte_differences(got, want):
    """(how many bytes differ, the index of the first) between two byte strings of one length, at C speed: a
    chunk is 16 MiB, which a loop over its bytes in Python takes about a second of CPU to compare."""
    length = len(got)
    xor = (int.from_bytes(got, "little") ^ int.from_bytes(want, "little")).to_bytes(length, "little")
    differing = length - xor.count(0)
    return differing, (length - len(xor.lstrip(b"\0")) if differing else None)


# -- copies ---------------------------------------------------------------------------------------------


def copy_bandwidth(session, options, direction):
    """H2D or D2H bandwidth in bytes/s: the same buffer copied until `item_seconds` of device time."""
    size = min(options.copy_bytes, CHUNK)
    host = session.host_memory(size)
    device = session.device_memory(size)
    acl = session.acl
    destination, source, kind = (device, host, MEMCPY_H2D) if direction == "h2d" else (host, device, MEMCPY_D2H)
    total_bytes, seconds = measure(session, direction, lambda: check(
        acl.rt.memcpy_async(destination, size, source, size, kind, session.stream), "acl.rt.memcpy_async"),
        size, options.item_seconds)
    session.release(device)
    session.release(host)
    return {"bytes_per_second": total_bytes / seconds, "bytes": total_bytes, "seconds": seconds}


def measure(session, what, launch, work_per_launch, target_seconds):
    """(work, device seconds) of launching `launch` until `target_seconds` of device time. The launches between
    two events double until a window is a twentieth of the target, so event overhead stays out of the figure."""
    work, seconds, batch = 0.0, 0.0, 1
    while seconds < target_seconds:
        window = session.timed(what, lambda: [launch() for _ in range(batch)])
        seconds += window
        work += batch * work_per_launch
        if window < target_seconds / 20.0:
            batch *= 2
    return work, seconds


def hbm_pattern(session, options):
    """Write a pattern over `hbm_bytes` of device memory, copy it device to device, read both back and compare
    byte for byte; the device-to-device copy's time gives the HBM bandwidth (it reads and writes each byte)."""
    acl = session.acl
    size = options.hbm_bytes
    first = session.device_memory(size)
    second = session.device_memory(size)
    chunk = min(size, CHUNK)
    host = session.host_memory(chunk)
    for offset in range(0, size, chunk):
        length = min(chunk, size - offset)
        data = pattern(length, offset // chunk)
        check(acl.rt.memcpy(host, length, acl.util.bytes_to_ptr(data), length, MEMCPY_H2H), "acl.rt.memcpy")
        check(acl.rt.memcpy(first + offset, length, host, length, MEMCPY_H2D), "acl.rt.memcpy (host to device)")
    seconds = session.timed("hbm_pattern", lambda: check(
        acl.rt.memcpy_async(second, size, first, size, MEMCPY_D2D, session.stream), "acl.rt.memcpy_async"))
    wrong, first_wrong = 0, None
    for offset in range(0, size, chunk):
        length = min(chunk, size - offset)
        want = pattern(length, offset // chunk)
        # the offset counts over both regions, the second after the first
        for region, region_start in ((first, 0), (second, size)):
            check(acl.rt.memcpy(host, length, region + offset, length, MEMCPY_D2H), "acl.rt.memcpy (device to host)")
            got = acl.util.ptr_to_bytes(host, length)
            if got != want:
                count, first_index = byte_differences(got, want)
                wrong += count
                at = region_start + offset + first_index
                first_wrong = at if first_wrong is None else min(first_wrong, at)
    for pointer in (host, second, first):
        session.release(pointer)
    figures = {"bytes": size, "bytes_per_second": 2.0 * size / seconds, "wrong_bytes": wrong}
    if wrong:
        raise ItemFailed("{} of {} bytes came back different (first at offset {})".format(
            wrong, 2 * size, first_wrong), **dict(figures, first_wrong_offset=first_wrong))
    return figures


def hbm_sustained(session, options):
    """Device-to-device copies for `sustained_seconds`: the HBM bandwidth per window of `item_seconds`."""
    acl = session.acl
    size = options.hbm_bytes
    first, second = session.device_memory(size), session.device_memory(size)
    windows = _windows(session, options, lambda: check(acl.rt.memcpy_async(
        second, size, first, size, MEMCPY_D2D, session.stream), "acl.rt.memcpy_async"), 2.0 * size, "hbm_sustained")
    session.release(second)
    session.release(first)
    return _window_figures(windows, "bytes_per_second")


def peer_copy(session, options):
    """Copy `copy_bytes` to the peer chip (--peer) and back, compare, and time the way out."""
    acl = session.acl
    if options.peer is None:
        raise ItemUnavailable("no peer chip given")
    can = pair(acl.rt.device_can_access_peer(session.device, options.peer), "acl.rt.device_can_access_peer")
    if not can:
        raise ItemUnavailable("device {} cannot reach device {} directly".format(session.device, options.peer))
    check(acl.rt.device_enable_peer_access(options.peer, 0), "acl.rt.device_enable_peer_access")
    size = min(options.copy_bytes, CHUNK)
    data = pattern(size, 0x5A)
    local = session.device_memory(size)
    back = session.device_memory(size)
    session.use(options.peer)
    peer = pair(acl.rt.malloc(size, MALLOC_HUGE_FIRST), "acl.rt.malloc (peer)")
    session.use(session.device)
    try:
        check(acl.rt.memcpy(local, size, acl.util.bytes_to_ptr(data), size, MEMCPY_H2D), "acl.rt.memcpy (host to device)")
        seconds = session.timed("p2p", lambda: check(acl.rt.memcpy_async(
            peer, size, local, size, MEMCPY_D2D, session.stream), "acl.rt.memcpy_async (to the peer)"))
        check(acl.rt.memcpy(back, size, peer, size, MEMCPY_D2D), "acl.rt.memcpy (from the peer)")
        host = session.host_memory(size)
        check(acl.rt.memcpy(host, size, back, size, MEMCPY_D2H), "acl.rt.memcpy (device to host)")
        if acl.util.ptr_to_bytes(host, size) != data:
            raise ItemFailed("the copy to device {} and back came back different".format(options.peer))
    finally:
        acl.rt.free(peer)
    return {"peer": options.peer, "bytes_per_second": size / seconds, "bytes": size}


# -- MatMul ---------------------------------------------------------------------------------------------


MATMUL_ATTRS = (("transpose_x1", False), ("transpose_x2", False))


def matmul_spec(size):
    """fp16 ND [size, size] x [size, size], no transposes: what ATC builds and execute_v2 must match."""
    tensor = opmodel.Tensor("float16", (size, size))
    return opmodel.OpSpec("MatMul", (tensor, tensor), (tensor,), MATMUL_ATTRS)


def operator_specs(items, matmul_size):
    """The MatMul operators the items need: the known-answer size for `compute`, the measured one for the rest."""
    sizes = [SMALL] if COMPUTE in items else []
    if (MATMUL in items or MATMUL_SUSTAINED in items) and matmul_size not in sizes:
        sizes.append(matmul_size)
    return tuple(matmul_spec(size) for size in sizes)


class Operators(object):
    """Where this child's MatMul operators come from, found once, on first use: the directory the user gave
    (`model_dir`), else the operator builder's path (opmodel.prepare with `settings`: ATC's cached models, or
    aclopCompileAndExecute). plan(acl) returns the Plan, or raises ItemUnavailable with the same reason for
    every item."""

    def __init__(self, specs, settings, model_dir=None):
        self.specs = specs
        self.settings = settings
        self.model_dir = model_dir
        self._plan = None
        self._unavailable = None

    def plan(self, acl):
        if self._unavailable is None and self._plan is None:
            try:
                self._plan = self._find(acl)
            except (ItemUnavailable, opmodel.ComputeUnavailable) as exc:
                self._unavailable = "compute unavailable: {}".format(exc)
        if self._unavailable is not None:
            raise ItemUnavailable(self._unavailable)
        return self._plan

    def _find(self, acl):
        if not hasattr(acl, "op"):
            raise ItemUnavailable("this pyACL has no acl.op (single-operator execution)")
        if self.model_dir:
            plan = opmodel.Plan(opmodel.OP_MODEL, self.model_dir, None, "the single-op models in " + self.model_dir)
        else:
            plan = opmodel.prepare(acl, self.specs, acl.get_soc_name(), opmodel.runtime_version(acl), self.settings)
        if plan.path == opmodel.OP_MODEL:  # once per process: the models of every item are in the one directory
            check(acl.op.set_model_dir(plan.model_dir), "acl.op.set_model_dir")
        return plan


class MatMul(object):
    """C = A x B in fp16 through the MatMul single operator, A all ones and B all twos."""

    def __init__(self, session, size):
        acl = session.acl
        if session.operators is None:
            raise ItemUnavailable("no single-operator models and no operator API for this child")
        self.plan = session.operators.plan(acl)
        self.session, self.size = session, size
        count = size * size
        self.a, self.b, self.c = (session.device_memory(2 * count) for _ in range(3))
        for pointer, value in ((self.a, 1.0), (self.b, 2.0)):
            data = struct.pack("<e", value) * count
            check(acl.rt.memcpy(pointer, 2 * count, acl.util.bytes_to_ptr(data), 2 * count, MEMCPY_H2D),
                  "acl.rt.memcpy (host to device)")
        try:
            self.operator = opmodel.Operator(acl, self.plan, matmul_spec(size), [self.a, self.b, self.c])
        except opmodel.ComputeUnavailable as exc:
            raise ItemUnavailable(str(exc)) from None
        self.flops = 2.0 * size ** 3

    def launch(self):
        ret = self.operator.launch(self.session.stream)
        call = "{} (MatMul)".format(self.operator.call)
        if opmodel.refused(ret):
            raise ItemUnavailable("{} returned {}".format(call, ret))
        check(ret, call)

    def result(self):
        acl, count = self.session.acl, self.size * self.size
        host = self.session.host_memory(2 * count)
        check(acl.rt.memcpy(host, 2 * count, self.c, 2 * count, MEMCPY_D2H), "acl.rt.memcpy (device to host)")
        values = struct.unpack("<{}e".format(count), acl.util.ptr_to_bytes(host, 2 * count))
        self.session.release(host)
        return values

    def close(self):
        self.operator.release()
        for pointer in (self.c, self.b, self.a):
            self.session.release(pointer)


def compute(session, options):
    """The known-answer check: every element of ones(16x16) x twos(16x16) must be exactly 32."""
    matmul = MatMul(session, SMALL)
    try:
        seconds = session.timed("compute", matmul.launch)
        values = matmul.result()
    finally:
        matmul.close()
    expected = 2.0 * SMALL
    wrong = [index for index, value in enumerate(values) if value != expected]
    if wrong:
        index = wrong[0]
        raise ItemFailed("MatMul: {} of {} elements wrong; element [{}][{}] is {:g}, expected {:g}".format(
            len(wrong), len(values), index // SMALL, index % SMALL, values[index], expected),
            wrong_elements=len(wrong), first_wrong_row=index // SMALL, first_wrong_column=index % SMALL,
            first_wrong_value=values[index], seconds=seconds)
    return {"seconds": seconds, "elements": len(values),
            "message": "MatMul fp16 [{0},{0}] via {1}".format(SMALL, matmul.plan.how)}


def matmul(session, options):
    """MatMul throughput in FLOP/s over `item_seconds` of device time."""
    work = MatMul(session, options.matmul_size)
    try:
        flops, seconds = measure(session, "matmul", work.launch, work.flops, options.item_seconds)
    finally:
        work.close()
    return {"flops_per_second": flops / seconds, "size": options.matmul_size, "seconds": seconds}


def matmul_sustained(session, options):
    """MatMul for `sustained_seconds`: FLOP/s per window of `item_seconds` (a falling figure is throttling)."""
    work = MatMul(session, options.matmul_size)
    try:
        windows = _windows(session, options, work.launch, work.flops, "matmul_sustained")
    finally:
        work.close()
    return _window_figures(windows, "flops_per_second")


def _windows(session, options, launch, work_per_launch, what):
    """Run `launch` until `sustained_seconds` of device time; the rate in each `item_seconds` window."""
    windows, total = [], 0.0
    while total < options.sustained_seconds:
        work, seconds = measure(session, what, launch, work_per_launch, options.item_seconds)
        windows.append(work / seconds)
        total += seconds
    return windows


def _window_figures(windows, name):
    return {name: sum(windows) / len(windows), "first_window": windows[0], "last_window": windows[-1],
            "windows": [round(value, 1) for value in windows]}


ITEMS = {
    "compute": compute,
    "h2d": lambda session, options: copy_bandwidth(session, options, "h2d"),
    "d2h": lambda session, options: copy_bandwidth(session, options, "d2h"),
    "hbm_pattern": hbm_pattern,
    "matmul": matmul,
    "hbm_sustained": hbm_sustained,
    "matmul_sustained": matmul_sustained,
    "p2p": peer_copy,
}


def run_item(name, session, options):
    """One item's result: {"state": ok|failed|unavailable, "message", "error_code", figures...}."""
    try:
        figures = ITEMS[name](session, options)
        return dict(figures, state=OK)
    except ItemFailed as exc:
        return dict(exc.figures, state=FAILED, message=str(exc), error_code=exc.code)
    except ItemUnavailable as exc:
        return {"state": UNAVAILABLE, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - a pyACL that differs from the documented one: cannot judge the chip
        return {"state": UNAVAILABLE, "message": "{}: {}: {}".format(name, type(exc).__name__, exc)}
