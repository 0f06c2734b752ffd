"""Ascend device-plugin ids (shared/reference/k8s/PODRESOURCES.md section 2.2) to chips."""

import pytest

from npumon.model import ChipSample
from npumon.sources.k8s.devices import PodDevices, allocatable_chips, attach, describe_unmatched, \
    is_ascend_resource, parse_device_id


@pytest.mark.parametrize("resource, device_id, number, vnpu, vdev", [
    ("huawei.com/Ascend910", "Ascend910-3", 3, None, None),
    ("huawei.com/Ascend310P", "Ascend310P-12", 12, None, None),
    ("huawei.com/npu", "npu-7", 7, None, None),
    ("huawei.com/Ascend310P-V", "Ascend310P-V-2", 2, None, None),  # 310P mixed-insert name
    ("huawei.com/Ascend310", "davinci-mini-1", 1, None, None),
    ("huawei.com/Ascend910-2c", "Ascend910-2c-100-0", 0, "2c", 100),  # static vNPU 100 on chip 0
    ("huawei.com/Ascend910-12c.3cpu.32g", "Ascend910-12c.3cpu.32g-103-6", 6, "12c.3cpu.32g", 103),
    ("huawei.com/Ascend310P-4c.3cpu", "Ascend310P-4c.3cpu-101-1", 1, "4c.3cpu", 101),
    ("huawei.com/Ascend910", "Ascend910-0-3", 0, None, None),  # share mode: chip 0, index 3
    ("huawei.com/Ascend310P-V", "Ascend310P-V-2-1", 2, None, None),
    ("huawei.com/npu-core", "npu-core-17", None, None, None),  # dynamic vNPU core unit: no chip
    ("huawei.com/Ascend910", "garbage", None, None, None),
])
def test_device_ids_name_the_physical_chip(resource, device_id, number, vnpu, vdev):
    ref = parse_device_id(resource, device_id)
    assert (ref.number, ref.vnpu, ref.vdev) == (number, vnpu, vdev)


def test_ascend_resources_and_nothing_else():
    for name in ("huawei.com/Ascend910", "huawei.com/Ascend310P", "huawei.com/Ascend310", "huawei.com/npu",
                 "huawei.com/Ascend910-2c", "huawei.com/Ascend310P-IPro", "huawei.com/npu-core"):
        assert is_ascend_resource(name), name
    for name in ("nvidia.com/gpu", "huawei.com/npux", "example.com/Ascend910", "huawei.com/"):
        assert not is_ascend_resource(name), name


def chips():
    # A3: two dies per card, physical ids 0-3 printed; the logical id differs from it on purpose
    return [ChipSample(npu=n // 2, chip=n % 2, phy_id=n, device_id=3 - n) for n in range(4)]


def test_attach_by_physical_id_with_several_pods_per_chip_and_one_pod_on_several_chips():
    found, unmatched = attach(chips(), [
        PodDevices("ns", "a", "c", (("huawei.com/Ascend910", ("Ascend910-0", "Ascend910-3")),)),
        PodDevices("ns", "b", "c", (("huawei.com/Ascend910", ("Ascend910-3-0", "Ascend910-3-1")),)),
        PodDevices("ns", "d", "c", (("huawei.com/Ascend910", ("Ascend910-9",)),
                                    ("huawei.com/npu-core", ("npu-core-1",)))),
    ])
    assert [(a.pod, a.device_ids) for a in found[(0, 0)]] == [("a", ("Ascend910-0",))]
    assert [(a.pod, a.device_ids) for a in found[(1, 1)]] == [("a", ("Ascend910-3",)),
                                                              ("b", ("Ascend910-3-0", "Ascend910-3-1"))]
    assert (0, 1) not in found and (1, 0) not in found
    assert unmatched == ["Ascend910-9", "npu-core-1"]
    assert describe_unmatched(unmatched) == ("1 device id(s) match no chip: Ascend910-9; 1 dynamic vNPU core "
                                             "unit(s) (npu-core-N) name no chip, not attributed")


def test_without_a_physical_id_the_logical_id_then_the_position_stands_in_and_950_uses_the_npu_id():
    logical = [ChipSample(npu=5, chip=0, device_id=1), ChipSample(npu=6, chip=0)]
    found, _ = attach(logical, [PodDevices("ns", "p", "c", (("huawei.com/Ascend910", ("Ascend910-1",)),))])
    assert list(found) == [(5, 0)]  # chip 6 has no id yet: its position does not count
    npu950 = [ChipSample(npu=4, chip=0, phy_id=0), ChipSample(npu=7, chip=0, phy_id=1)]
    found, _ = attach(npu950, [PodDevices("ns", "p", "c", (("huawei.com/npu", ("npu-7",)),))])
    assert list(found) == [(7, 0)]


def test_allocatable_chips():
    assert allocatable_chips(chips(), [("huawei.com/Ascend910", ("Ascend910-1", "Ascend910-2c-100-2"))]) == {
        (0, 1), (1, 0)}
