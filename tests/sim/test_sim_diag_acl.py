"""The simulated device behind `npumon diag` (npumon/sim/diag_acl.py): device time on events, pointers with
offsets, copies that move bytes only when they change something, and the faults a scenario injects."""

from npumon.sim.diag_acl import ACL_ERROR_RT_LINK_ERROR, PCIE_EFFICIENCY, SimulatedDiagAcl

GB = 1e9


def device(plan=None, link=63.0 * GB, slept=None):
    runtime = SimulatedDiagAcl(8, "Ascend910B3", lambda device: (1 << 30, 1 << 31), lambda device: {},
                               chip_name="910B3", link_bandwidth=lambda device: link,
                               diag_plan_of=lambda device: dict(plan or {}), scale=2.0,
                               sleep=(slept.append if slept is not None else lambda seconds: None))
    assert runtime.init() == 0 and runtime.rt.set_device(0) == 0
    context, _ = runtime.rt.create_context(0)
    stream, _ = runtime.rt.create_stream()
    return runtime, stream


def test_events_time_a_copy_by_the_link_and_sleep_it_times_the_scale():
    slept = []
    runtime, stream = device(slept=slept)
    size = 1 << 24
    host, _ = runtime.rt.malloc_host(size)
    target, _ = runtime.rt.malloc(size, 0)
    start, _ = runtime.rt.create_event()
    end, _ = runtime.rt.create_event()
    runtime.rt.record_event(start, stream)
    assert runtime.rt.memcpy_async(target, size, host, size, 1, stream) == 0
    runtime.rt.record_event(end, stream)
    milliseconds, ret = runtime.rt.event_elapsed_time(start, end)
    expected = size / (63.0 * GB * PCIE_EFFICIENCY) + 10e-6
    assert ret == 0 and abs(milliseconds / 1000.0 - expected) < 1e-9
    assert slept == [expected * 2.0]


def test_a_pointer_into_a_region_copies_at_its_offset_and_a_bad_one_is_refused():
    runtime, stream = device()
    region, _ = runtime.rt.malloc(4096, 0)
    data = bytes(range(256)) * 4
    assert runtime.rt.memcpy(region + 2048, 1024, runtime.util.bytes_to_ptr(data), 1024, 1) == 0
    host, _ = runtime.rt.malloc_host(1024)
    assert runtime.rt.memcpy(host, 1024, region + 2048, 1024, 2) == 0
    assert runtime.util.ptr_to_bytes(host, 1024) == data
    assert runtime.rt.memcpy(host, 1024, region + 3584, 1024, 2) != 0  # runs past the region's end


def test_hbm_errors_flip_bytes_once_per_copy_and_a_peer_copy_fails_when_the_link_does():
    runtime, stream = device(plan={"hbm_errors": 3, "p2p_fail": True})
    size = 1 << 20
    first, _ = runtime.rt.malloc(size, 0)
    second, _ = runtime.rt.malloc(size, 0)
    for _ in range(2):  # the second, identical copy writes nothing new: still exactly 3 bytes differ
        assert runtime.rt.memcpy_async(second, size, first, size, 3, stream) == 0
    host, _ = runtime.rt.malloc_host(size)
    runtime.rt.memcpy(host, size, second, size, 2)
    assert sum(1 for byte in runtime.util.ptr_to_bytes(host, size) if byte) == 3
    assert runtime.rt.set_device(1) == 0
    peer, _ = runtime.rt.malloc(size, 0)
    assert runtime.rt.set_device(0) == 0
    assert runtime.rt.memcpy_async(peer, size, first, size, 3, stream) == ACL_ERROR_RT_LINK_ERROR
