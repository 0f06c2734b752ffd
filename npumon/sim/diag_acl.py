"""The simulated pyACL's device-side calls the diag child uses, and the time the device takes for them.

SimulatedDiagAcl extends the probe's SimulatedAcl (pyacl.py) with what `npumon diag` levels 2 and 3 call:
device events for timing, asynchronous copies, pointers with offsets into big regions, peer access and the
MatMul single operator. Each call that puts work on a stream advances that stream's device clock by what
the simulated hardware takes for it, and sleeps that long times the simulation's latency scale (0 in tests:
the figures are the same, nothing waits). The hardware model, per product chip (our own estimates, below
the published peaks as measured figures are; the expected figures are in npumon/diag/expected.py):

| chip | PCIe copies | HBM device-to-device | MatMul fp16 | HCCS peer copy |
|---|---|---|---|---|
| every PCIe chip | 82 % of the link's raw payload rate (the link as the host's sysfs shows it) | | | |
| 910B1-B3, Ascend910 (A3 die) | | 1.30 TB/s | 74 % of peak | 25 GB/s |
| 910B4 | | 0.65 TB/s | 74 % of peak | 25 GB/s |
| 910A | | 0.95 TB/s | 74 % of peak | 20 GB/s |
| 310P3 | | 0.16 TB/s | 74 % of peak | none |

What goes wrong comes from the scenario's per-chip `diag:` plan (values.py DIAG_KEYS):

    diag: {hbm_errors: 3}                 the device-to-device copy flips that many bytes of its destination
    diag: {matmul_wrong_element: [2, 5]}  the MatMul's result has that element (row, column) off by one
    diag: {aicore_hang: true}             a MatMul never completes: a synchronize waits out its timeout
    diag: {throttle_after_seconds: 20, throttle_clock_ratio: 0.6}   after 20 s of device time under load
                                          the AI Core clock, and so the MatMul rate, drops to 60 %
    diag: {p2p_fail: true}                copies to another chip fail with ACL_ERROR_RT_LINK_ERROR
    host: pcie_links: [{device: 3, current_speed: "8.0 GT/s PCIe", current_width: 8}]   a slow link

While MatMuls run, the device marks its chip as loaded (diag_load.py), so the simulated npu-smi shows it busy,
at its rated power and hotter, and a throttled one at its thermal limit with its clock lowered.
"""

import bisect
import collections
import os
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .diag_load import MARK_EVERY, mark_load
from .pyacl import (ACL_ERROR_INVALID_PARAM, ACL_ERROR_RT_PARAM_INVALID, ACL_ERROR_RT_STREAM_SYNC_TIMEOUT,
                    ACL_SUCCESS, MEMCPY_DIRECTIONS, SimulatedAcl)

ACL_ERROR_RT_LINK_ERROR = 507056
ACL_ERROR_OP_NOT_FOUND = 100024  # below 200000: the API refusing, not the device failing
ACL_FLOAT16 = 1
TB = 1e12
GB = 1e9
PCIE_EFFICIENCY = 0.82
MATMUL_EFFICIENCY = 0.74
LAUNCH_SECONDS = 10e-6  # what every enqueued task costs besides its work
# chip name -> (HBM device-to-device bytes/s, peak fp16 FLOP/s, HCCS peer copy bytes/s or None)
HARDWARE = {
    "910B1": (1.30 * TB, 414e12, 25 * GB), "910B2": (1.30 * TB, 376e12, 25 * GB),
    "910B3": (1.30 * TB, 313e12, 25 * GB), "910B4": (0.65 * TB, 280e12, 25 * GB),
    "Ascend910": (1.30 * TB, 376e12, 25 * GB), "910A": (0.95 * TB, 256e12, 20 * GB),
    "310P3": (0.16 * TB, 70e12, None), "310B4": (0.05 * TB, 8e12, None), "Ascend950PR": (1.30 * TB, 500e12, None),
}
KEPT_BYTES_BUFFERS = 8  # bytes_to_ptr pointers stay valid for the last few only, as long as a caller keeps the bytes


class SimulatedDiagAcl(SimulatedAcl):
    """SimulatedAcl plus events, async copies, offsets, peers and the MatMul operator, on a device clock.
    `link_bandwidth(device)` -> raw PCIe bytes/s of the device's current link (None: no PCIe);
    `diag_plan_of(device)` -> the scenario's diag plan; `scale` the latency scale; `sleep` for tests."""

    def __init__(self, *args: Any, chip_name: str, link_bandwidth: Callable[[int], Optional[float]],
                 diag_plan_of: Callable[[int], Dict[str, Any]], scale: float,
                 sleep: Callable[[float], None] = time.sleep,
                 mark_load: Callable[[int, float], None] = lambda device, clock_ratio: None, **kwargs: Any):
        self._chip = HARDWARE.get(chip_name, HARDWARE["910B3"])
        self._link_bandwidth = link_bandwidth
        self._diag_plan_of = diag_plan_of
        self._scale = scale
        self._sleep = sleep
        self._mark_load = mark_load  # tells the simulated npu-smi the chip is under load (diag_load.py)
        self._marked = 0.0
        self._bases: List[int] = []  # sorted region start addresses, for pointers with an offset
        self._region_device: Dict[int, Optional[int]] = {}
        self._next_address = 0x100000000000
        self._kept_bytes: "collections.deque[int]" = collections.deque()
        self._written: Dict[int, int] = {}  # region base -> how many times it was written
        self._last_copy: Dict[int, Any] = {}  # region base -> the last copy into it, and its write count after
        self._moved = False  # whether the last rt_memcpy wrote its bytes
        self._clock: Dict[int, float] = {}  # stream -> device seconds of work done on it
        self._busy: Dict[int, float] = {}  # device -> device seconds of MatMul (the load that heats it: throttling)
        self._events: Dict[int, Optional[float]] = {}  # event -> device time when recorded
        self._stream_hung: Dict[int, bool] = {}
        self._peers: Dict[int, set] = {}
        super().__init__(*args, **kwargs)
        self.op = self._namespace("op_")

    # -- memory with addresses ----------------------------------------------------------------------------

    def _allocate(self, kind: str, call: str, size: int, valid: bool) -> Tuple[int, int]:
        pointer, ret = super()._allocate(kind, call, size, valid)
        if ret:
            return pointer, ret
        region = self._regions.pop(pointer)
        address = self._next_address
        self._next_address += (size + 0xFFFF) & ~0xFFFF  # 64 KiB aligned, never overlapping
        self._regions[address] = region
        self._region_device[address] = self._device if kind == "device" else None
        bisect.insort(self._bases, address)
        return address, ACL_SUCCESS

    def _release(self, kind: str, call: str, pointer: int) -> int:
        ret = super()._release(kind, call, pointer)
        if not ret:
            self._bases.remove(pointer)
            self._region_device.pop(pointer, None)
        return ret

    def util_bytes_to_ptr(self, data: bytes) -> int:
        pointer = super().util_bytes_to_ptr(data)
        self._kept_bytes.append(pointer)
        if len(self._kept_bytes) > KEPT_BYTES_BUFFERS:
            self._regions.pop(self._kept_bytes.popleft(), None)
        return pointer

    def _locate(self, pointer: int) -> Tuple[Optional[int], int]:
        """(the region's base, offset) of a pointer into a region, (None, 0) for none."""
        if pointer in self._regions:
            return pointer, 0
        index = bisect.bisect_right(self._bases, pointer) - 1
        if index >= 0:
            base = self._bases[index]
            if pointer - base < len(self._regions[base].data):
                return base, pointer - base
        return None, 0

    def rt_memcpy(self, destination: int, destination_max: int, source: int, count: int, kind: int) -> int:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        (target_base, target_offset), (origin_base, origin_offset) = self._locate(destination), self._locate(source)
        if target_base is None or origin_base is None or kind not in MEMCPY_DIRECTIONS:
            return ACL_ERROR_RT_PARAM_INVALID
        target, origin = self._regions[target_base], self._regions[origin_base]
        to_side, from_side = MEMCPY_DIRECTIONS[kind]
        if (to_side == "host") != target.host_side or (from_side == "host") != origin.host_side \
                or target.kind == "bytes":
            return ACL_ERROR_RT_PARAM_INVALID
        if count > destination_max or target_offset + destination_max > len(target.data) \
                or origin_offset + count > len(origin.data):
            return ACL_ERROR_RT_PARAM_INVALID
        fault = self._fault("rt.memcpy")
        if fault:
            return fault
        peer = self._region_device.get(target_base)
        if kind == 3 and peer is not None and peer != self._region_device.get(origin_base):
            if self._diag_plan.get("p2p_fail"):
                return ACL_ERROR_RT_LINK_ERROR
        # A copy the same as the last one into this region, with neither side written since, would write the
        # same bytes: skip the move (a bandwidth loop copies terabytes of device time).
        key = (target_offset, origin_base, origin_offset, count, self._written.get(origin_base, 0))
        self._moved = self._last_copy.get(target_base) != (key, self._written.get(target_base, 0))
        if not self._moved:
            return ACL_SUCCESS
        target.data[target_offset:target_offset + count] = origin.data[origin_offset:origin_offset + count]
        if kind == 2 and self._plan.get("corrupt") == "rt.memcpy" and count:  # the probe's corrupt copy-back
            target.data[target_offset + count // 2] ^= 0x10
        self._wrote(target_base)
        self._last_copy[target_base] = (key, self._written[target_base])
        return ACL_SUCCESS

    def _wrote(self, base: int) -> None:
        self._written[base] = self._written.get(base, 0) + 1

    # -- streams, events, device time ---------------------------------------------------------------------

    @property
    def _diag_plan(self) -> Dict[str, Any]:
        return self._diag_plan_of(self._device) if self._device is not None else {}

    def rt_create_stream(self) -> Tuple[int, int]:
        stream, ret = super().rt_create_stream()
        if not ret:
            self._clock[stream] = 0.0
        return stream, ret

    def _work(self, stream: int, seconds: float, load: bool = False) -> None:
        """`seconds` of device work on `stream`, waited for in wall time times the latency scale."""
        seconds += LAUNCH_SECONDS
        self._clock[stream] = self._clock.get(stream, 0.0) + seconds
        if load and self._device is not None:
            self._busy[self._device] = self._busy.get(self._device, 0.0) + seconds
        if self._scale > 0:
            self._sleep(seconds * self._scale)

    def rt_create_event(self) -> Tuple[int, int]:
        not_ready = self._not_ready()
        if not_ready:
            return 0, not_ready
        event = next(self._handles)
        self._events[event] = None
        return event, ACL_SUCCESS

    def rt_destroy_event(self, event: int) -> int:
        return ACL_SUCCESS if self._events.pop(event, "gone") != "gone" else ACL_ERROR_RT_PARAM_INVALID

    def rt_record_event(self, event: int, stream: int) -> int:
        if event not in self._events or stream not in self._clock:
            return ACL_ERROR_RT_PARAM_INVALID
        self._events[event] = self._clock[stream]
        return ACL_SUCCESS

    def rt_event_elapsed_time(self, start: int, end: int) -> Tuple[float, int]:
        first, last = self._events.get(start), self._events.get(end)
        if first is None or last is None:
            return 0.0, ACL_ERROR_RT_PARAM_INVALID
        return (last - first) * 1000.0, ACL_SUCCESS

    def _synchronize(self, call: str, stream: int, timeout_seconds: Optional[float]) -> int:
        if self._stream_hung.pop(stream, False):  # a MatMul that never completes: wait out the timeout
            if timeout_seconds is None:
                self._on_hang()
            self._sleep(timeout_seconds * max(self._scale, 0.0))
            return ACL_ERROR_RT_STREAM_SYNC_TIMEOUT
        return super()._synchronize(call, stream, timeout_seconds)

    def rt_memcpy_async(self, destination: int, destination_max: int, source: int, count: int, kind: int,
                        stream: int) -> int:
        if stream not in self._clock:
            return ACL_ERROR_RT_PARAM_INVALID
        ret = self.rt_memcpy(destination, destination_max, source, count, kind)
        if ret:
            return ret
        target_base, target_offset = self._locate(destination)
        origin_base, _ = self._locate(source)
        if kind in (1, 2):
            bandwidth = self._link_bandwidth(self._device)
            seconds = count / (bandwidth * PCIE_EFFICIENCY) if bandwidth else count / self._chip[0]
        elif self._region_device.get(target_base) != self._region_device.get(origin_base):
            seconds = count / (self._chip[2] or self._chip[0])
        else:
            seconds = 2.0 * count / self._chip[0]  # read and write each byte
            errors = int(self._diag_plan.get("hbm_errors", 0))
            target = self._regions[target_base].data
            last = self._last_copy.get(target_base)
            if errors and self._moved:  # flipped once per copy that wrote the bytes
                for index in range(min(errors, count)):  # spread over the copy, one bit each
                    target[target_offset + (index * 7919 * 4096 + 4095) % count] ^= 0x04
                self._wrote(target_base)
                self._last_copy[target_base] = (last[0], self._written[target_base])
        self._work(stream, seconds)
        return ACL_SUCCESS

    # -- peers --------------------------------------------------------------------------------------------

    def rt_set_context(self, context: int) -> int:
        """Make a context current: its device becomes the one calls act on."""
        if context not in self._contexts:
            return ACL_ERROR_RT_PARAM_INVALID
        self._device = self._contexts[context]
        return ACL_SUCCESS

    def rt_device_can_access_peer(self, device: int, peer: int) -> Tuple[int, int]:
        if not (0 <= device < self._device_count and 0 <= peer < self._device_count) or device == peer:
            return 0, ACL_ERROR_RT_PARAM_INVALID
        return (1 if self._chip[2] else 0), ACL_SUCCESS

    def rt_device_enable_peer_access(self, peer: int, flags: int) -> int:
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        if flags != 0 or not self._chip[2]:
            return ACL_ERROR_RT_PARAM_INVALID
        self._peers.setdefault(self._device, set()).add(peer)
        return ACL_SUCCESS

    # -- tensors and the MatMul operator ------------------------------------------------------------------

    def op_set_attr_bool(self, attr: int, name: str, value: int) -> int:
        if attr not in self._attrs:
            return ACL_ERROR_INVALID_PARAM
        self._attrs[attr][name] = bool(value)
        return ACL_SUCCESS

    def op_execute_v2(self, op_type: str, in_descs: List[int], in_buffers: List[int], out_descs: List[int],
                      out_buffers: List[int], attr: int, stream: int) -> int:
        """MatMul of two fp16 [n, n] ND tensors without transposes, the diag's operator, found as the real runtime
        finds it: in a loaded single-op model of that type, tensors and attributes; any other is the probe
        runtime's (its Add)."""
        if op_type != "MatMul":
            return super().op_execute_v2(op_type, in_descs, in_buffers, out_descs, out_buffers, attr, stream)
        not_ready = self._not_ready()
        if not_ready:
            return not_ready
        shapes = [self._tensor_descs.get(desc) for desc in list(in_descs) + list(out_descs)]
        if len(shapes) != 3 or None in shapes or not self._has_matmul(shapes, self._attrs.get(attr, {})) \
                or any(shape[0] != ACL_FLOAT16 or len(shape[1]) != 2 or shape[1][0] != shape[1][1]
                       or shape[1] != shapes[0][1] for shape in shapes):
            return ACL_ERROR_OP_NOT_FOUND  # no single-op model matches: what the runtime answers
        if stream not in self._clock or len(in_buffers) != 2 or len(out_buffers) != 1:
            return ACL_ERROR_RT_PARAM_INVALID
        regions = [self._locate(self._buffers.get(buffer, (0, 0))[0]) for buffer in list(in_buffers) + out_buffers]
        if any(base is None for base, _ in regions):
            return ACL_ERROR_RT_PARAM_INVALID
        size = shapes[0][1][0]
        plan = self._diag_plan
        if plan.get("aicore_hang"):
            self._stream_hung[stream] = True
            return ACL_SUCCESS
        if size <= 64:  # small enough to compute in full (the known-answer check)
            self._multiply(size, regions, plan.get("matmul_wrong_element"))
        ratio = 1.0
        if self._busy.get(self._device, 0.0) >= plan.get("throttle_after_seconds", float("inf")):
            ratio = float(plan.get("throttle_clock_ratio", 1.0))
        self._work(stream, 2.0 * size ** 3 / (self._chip[1] * MATMUL_EFFICIENCY * ratio), load=True)
        now = time.time()
        if now - self._marked >= MARK_EVERY:
            self._marked = now
            self._mark_load(self._device, ratio)
        return ACL_SUCCESS

    def _has_matmul(self, shapes: List[Any], flags: Dict[str, bool]) -> bool:
        signature = [[dtype, list(dims)] for dtype, dims, _ in shapes]
        wanted = {name for name, value in flags.items() if value}
        return self._operators and any(
            model["op"] == "MatMul" and model["inputs"] + model["outputs"] == signature
            and {name for name, value in model["attrs"].items() if value} == wanted for model in self._op_models)

    def _multiply(self, size: int, regions: List[Tuple[int, int]], wrong: Optional[List[int]]) -> None:
        count = size * size
        (a_base, a_off), (b_base, b_off), (c_base, c_off) = regions
        fmt = "<{}e".format(count)
        a = struct.unpack(fmt, bytes(self._regions[a_base].data[a_off:a_off + 2 * count]))
        b = struct.unpack(fmt, bytes(self._regions[b_base].data[b_off:b_off + 2 * count]))
        c = [sum(a[row * size + k] * b[k * size + column] for k in range(size))
             for row in range(size) for column in range(size)]
        if wrong is not None:
            row, column = wrong
            c[(row % size) * size + column % size] += 1.0
        self._regions[c_base].data[c_off:c_off + 2 * count] = struct.pack(fmt, *c)
        self._wrote(c_base)


def load_for_child() -> SimulatedAcl:
    """The runtime a child importing the simulated `acl` gets (the probe's and the diag's): the probe's, with
    the diag device's calls and hardware model added (sim/acl_runtime/acl.py)."""
    from .hostspec import host_root_spec
    from .pyacl import load_for_probe_child
    from .state import STATE_ENV
    from .values import diag_plan_at, host_with_defaults

    def extend(state: Dict[str, Any], product: Any, t: float) -> Dict[str, Any]:
        scenario = state["scenario"]
        spec = host_root_spec(product, host_with_defaults(scenario.get("host", {})), [0.0])
        links = {link.bus_id: link for link in spec.links}
        bus_of = {slot.device_id: slot.bus_id for slot in product.slots()}

        def link_bandwidth(device: int) -> Optional[float]:
            link = links.get(bus_of.get(device))
            if link is None:
                return None
            speed = float(link.current_speed.split()[0])
            return speed * 1e9 * (0.8 if speed < 8 else 128.0 / 130.0) / 8.0 * link.current_width

        state_dir = os.environ[STATE_ENV]  # read_state succeeded with it
        return {"chip_name": product.chip_name, "link_bandwidth": link_bandwidth,
                "mark_load": lambda device, ratio: mark_load(state_dir, device, ratio, time.time()),
                "diag_plan_of": lambda device: diag_plan_at(scenario["chips"], device),
                "scale": state.get("latency_scale", 1.0) * scenario.get("latency_scale", 1.0)}

    return load_for_probe_child(extend, SimulatedDiagAcl)
