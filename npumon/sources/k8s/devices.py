"""Ascend device-plugin ids, as the kubelet's pod-resources API lists them, mapped to npumon's chips. Pure.

Facts (shared/reference/k8s/PODRESOURCES.md section 2): the Ascend device plugin registers
`huawei.com/Ascend910`, `huawei.com/Ascend310P`, `huawei.com/Ascend310`, `huawei.com/npu` (Ascend 950),
310P mixed-insert names (`huawei.com/Ascend310P-V`, ...), one resource per static vNPU template
(`huawei.com/Ascend910-2c`, ...) and `huawei.com/npu-core` (dynamic vNPU core units). Its device ids:

    <Name>-<phy>                  whole chip          Ascend910-3, Ascend310P-V-2, npu-7
    davinci-mini-<phy>            310 with GetFdFlag
    <Name>-<vtype>-<vdev>-<phy>   static vNPU         Ascend910-2c-100-0 (vNPU 100 on physical chip 0)
    <Name>-<phy>-<index>          share mode          Ascend910-0-3 (one chip advertised several times)
    npu-core-<n>                  dynamic vNPU cores  a counter over all chips' AI cores: names no chip

The number is the chip's PHYSICAL id; on the Ascend 950 generation (`huawei.com/npu`) it is the NPU id.
"""

import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ...model import ChipSample

ASCEND_RESOURCE = re.compile(r"huawei\.com/(Ascend[0-9A-Za-z.-]*|npu|npu-core)\Z")
NPU_ID_RESOURCE = "huawei.com/npu"  # Ascend 950: the number is the NPU id, not the physical id

CORE_RESOURCE = "huawei.com/npu-core"

_CORE_UNIT = re.compile(r"npu-core-\d+\Z")
_CORE_CHIP = re.compile(r"(\d+)(?:-(vir[0-9a-z_]+))?\Z")
_DAVINCI_MINI = re.compile(r"davinci-mini-(\d+)\Z")
_VNPU = re.compile(r"(?P<name>.+?)-(?P<vtype>\d+c(?:\.[0-9a-z]+)*)-(?P<vdev>\d+)-(?P<number>\d+)\Z")
_SHARED = re.compile(r"(?P<name>.*?[A-Za-z].*?)-(?P<number>\d+)-(?P<index>\d+)\Z")
_WHOLE = re.compile(r"(?P<name>.*[A-Za-z].*?)-(?P<number>\d+)\Z")

ChipKey = Tuple[int, int]


@dataclass(frozen=True)
class DeviceRef:
    """What one device id names: a chip number (physical id; NPU id for huawei.com/npu), or nothing."""

    resource: str
    device_id: str
    number: Optional[int]  # None: a dynamic vNPU core unit (or an id of a form npumon does not know)
    vnpu: Optional[str] = None  # the static vNPU template, e.g. "2c"
    vdev: Optional[int] = None  # the vNPU's id

    @property
    def by_npu_id(self) -> bool:
        return self.resource == NPU_ID_RESOURCE


def is_ascend_resource(resource_name: str) -> bool:
    return bool(ASCEND_RESOURCE.match(resource_name))


def parse_device_id(resource: str, device_id: str) -> DeviceRef:
    """The chip a device-plugin id names (number None when it names none)."""
    if _CORE_UNIT.match(device_id):
        return DeviceRef(resource, device_id, None)
    core_chip = _CORE_CHIP.match(device_id) if resource == CORE_RESOURCE else None
    if core_chip:  # from the huawei.com/npu-core annotation (annotations.py): "<phy>" or "<phy>-<template>"
        return DeviceRef(resource, device_id, int(core_chip.group(1)), vnpu=core_chip.group(2))
    for pattern in (_DAVINCI_MINI, _VNPU, _SHARED, _WHOLE):
        match = pattern.match(device_id)
        if match is None:
            continue
        groups = match.groupdict()
        number = int(groups["number"] if "number" in groups else match.group(1))
        vdev = groups.get("vdev")
        return DeviceRef(resource, device_id, number, vnpu=groups.get("vtype"),
                         vdev=None if vdev is None else int(vdev))
    return DeviceRef(resource, device_id, None)


@dataclass(frozen=True)
class Attachment:
    """One container's hold on one chip: the resource and the device ids through which it holds it."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: Tuple[str, ...]

    def to_json(self) -> Dict[str, object]:
        return {"namespace": self.namespace, "pod": self.pod, "container": self.container,
                "resource": self.resource, "device_ids": list(self.device_ids)}


@dataclass(frozen=True)
class PodDevices:
    """One container's Ascend devices, as List returned them: (resource, device ids) pairs."""

    namespace: str
    pod: str
    container: str
    devices: Tuple[Tuple[str, Tuple[str, ...]], ...]


def chip_number(chip: ChipSample, position: int) -> int:
    """The physical id a device id would carry for this chip. npu-smi prints it on A3 only; elsewhere the
    logical id stands in (on every 910B and 310P capture the two agree), and until either is known the chip's
    position in npu-smi's list (logical-id order), as npu-exporter's `id` label does (outputs/npu_exporter.py)."""
    if chip.phy_id is not None:
        return chip.phy_id
    if chip.device_id is not None:
        return chip.device_id
    return position


def chip_lookup(chips: Sequence[ChipSample]) -> Tuple[Dict[int, List[ChipKey]], Dict[int, List[ChipKey]]]:
    """(physical id -> chips, NPU id -> chips)."""
    by_phy: Dict[int, List[ChipKey]] = {}
    by_npu: Dict[int, List[ChipKey]] = {}
    # positions stand in only while no chip has an id yet: mixed, they could name one number twice
    ids_known = any(chip.phy_id is not None or chip.device_id is not None for chip in chips)
    for position, chip in enumerate(chips):
        by_npu.setdefault(chip.npu, []).append(chip.key)
        if ids_known and chip.phy_id is None and chip.device_id is None:
            continue
        by_phy.setdefault(chip_number(chip, position), []).append(chip.key)
    return by_phy, by_npu


def attach(chips: Sequence[ChipSample], containers: Sequence[PodDevices]
           ) -> Tuple[Dict[ChipKey, List[Attachment]], List[str]]:
    """(chip -> its attachments, in List order; device ids that name no chip). A container holding one chip
    through several ids (share mode, several vNPUs) is one attachment listing them all."""
    by_phy, by_npu = chip_lookup(chips)
    found: Dict[ChipKey, Dict[Tuple[str, str, str, str], List[str]]] = {}
    unmatched: List[str] = []
    for entry in containers:
        for resource, device_ids in entry.devices:
            for device_id in device_ids:
                ref = parse_device_id(resource, device_id)
                keys = [] if ref.number is None else (by_npu if ref.by_npu_id else by_phy).get(ref.number, [])
                if not keys:
                    unmatched.append(device_id)
                for key in keys:
                    holder = (entry.namespace, entry.pod, entry.container, resource)
                    found.setdefault(key, {}).setdefault(holder, []).append(device_id)
    result = {key: [Attachment(ns, pod, container, resource, tuple(ids))
                    for (ns, pod, container, resource), ids in holders.items()]
              for key, holders in found.items()}
    return result, unmatched


def allocatable_chips(chips: Sequence[ChipSample], devices: Sequence[Tuple[str, Sequence[str]]]) -> set:
    """The chips that GetAllocatableResources lists (the kubelet's healthy devices) by any of their ids."""
    by_phy, by_npu = chip_lookup(chips)
    keys = set()
    for resource, device_ids in devices:
        for device_id in device_ids:
            ref = parse_device_id(resource, device_id)
            if ref.number is not None:
                keys.update((by_npu if ref.by_npu_id else by_phy).get(ref.number, []))
    return keys


def describe_unmatched(device_ids: Sequence[str], limit: int = 3) -> str:
    """One line for the ids that name no chip (dynamic vNPU core units name none by design)."""
    cores = [device for device in device_ids if _CORE_UNIT.match(device)]
    others = [device for device in device_ids if not _CORE_UNIT.match(device)]
    parts = []
    if others:
        shown = ", ".join(others[:limit]) + (" and {} more".format(len(others) - limit) if len(others) > limit else "")
        parts.append("{} device id(s) match no chip: {}".format(len(others), shown))
    if cores:
        parts.append("{} dynamic vNPU core unit(s) (npu-core-N) name no chip, not attributed".format(len(cores)))
    return "; ".join(parts)
