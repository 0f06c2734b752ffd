"""The Ascend device plugin's pod annotations, which name the chips a pod really got where the kubelet's ids do
not (shared/reference/k8s/PODRESOURCES.md section 3). Pure: parsing and applying; apiserver.py reads them.

* `huawei.com/AscendReal` (e.g. `Ascend910-1,Ascend910-0`): the chips mounted. Under Volcano full-NPU
  scheduling the kubelet's own ids (`huawei.com/kltDev`, what pod-resources lists) are random ones of the same
  count. The two lists are sorted each on its own, so they say which chips, not which kubelet id became which:
  a pod's ids are replaced only where one container holds that resource.
* `huawei.com/npu-core` (dynamic vNPU): `<phy>-<template>` (e.g. `0-vir02`) or a comma list of physical ids for
  whole chips, where pod-resources lists only synthetic `npu-core-<n>` core units.
Not written for static vNPUs, whose kubelet ids are already right.
"""

import re
from dataclasses import dataclass, replace
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .devices import PodDevices

REAL_ANNOTATION = "huawei.com/AscendReal"
CORE_ANNOTATION = "huawei.com/npu-core"
CORE_RESOURCE = "huawei.com/npu-core"
WHOLE_CHIP_RESOURCES = ("huawei.com/Ascend910", "huawei.com/npu", "huawei.com/Ascend310P", "huawei.com/Ascend310")
_CORE_ENTRY = re.compile(r"(\d+)(?:-(vir[0-9a-z_]+))?\Z")

PodKey = Tuple[str, str]  # (namespace, pod)


@dataclass(frozen=True)
class PodAnnotations:
    real: Tuple[str, ...] = ()  # huawei.com/AscendReal ids
    core_chips: Tuple[str, ...] = ()  # huawei.com/npu-core as device ids: "<phy>" or "<phy>-<template>"


def parse_annotations(annotations: Mapping[str, str]) -> Optional[PodAnnotations]:
    """The Ascend annotations of one pod; None when it has none that npumon uses."""
    real = tuple(item.strip() for item in str(annotations.get(REAL_ANNOTATION, "")).split(",") if item.strip())
    cores = tuple(item.strip() for item in str(annotations.get(CORE_ANNOTATION, "")).split(",")
                  if _CORE_ENTRY.match(item.strip()))
    if not real and not cores:
        return None
    return PodAnnotations(real, cores)


def apply_annotations(containers: Sequence[PodDevices], pods: Mapping[PodKey, PodAnnotations]
                      ) -> Tuple[Tuple[PodDevices, ...], int, List[str]]:
    """(containers with the annotated ids in place of the kubelet's, how many pods were corrected, problems)."""
    holders: Dict[Tuple[PodKey, str], int] = {}
    for entry in containers:
        for resource, _ in entry.devices:
            key = ((entry.namespace, entry.pod), _kind(resource))
            holders[key] = holders.get(key, 0) + 1
    corrected, problems, result = set(), [], []
    for entry in containers:
        pod_key = (entry.namespace, entry.pod)
        found = pods.get(pod_key)
        if found is None:
            result.append(entry)
            continue
        devices = []
        for resource, ids in entry.devices:
            kind = _kind(resource)
            better = found.real if kind == "whole" else found.core_chips if kind == "core" else ()
            if better and holders[(pod_key, kind)] > 1:
                problems.append("{}/{}: {} containers hold {}; the annotation cannot say whose chip is whose".format(
                    entry.namespace, entry.pod, holders[(pod_key, kind)], resource))
                better = ()
            if better and tuple(ids) != better:
                corrected.add(pod_key)
                devices.append((resource, better))
            else:
                devices.append((resource, tuple(ids)))
        result.append(replace(entry, devices=tuple(devices)))
    return tuple(result), len(corrected), problems


def _kind(resource: str) -> str:
    if resource in WHOLE_CHIP_RESOURCES or resource.startswith("huawei.com/Ascend310P-V") or \
            resource == "huawei.com/Ascend310P-IPro":
        return "whole"
    return "core" if resource == CORE_RESOURCE else "other"


def pods_from_list(document: object) -> Dict[PodKey, PodAnnotations]:
    """The Ascend annotations of every pod in a PodList (the API server's JSON); raises ValueError if it is not one."""
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        raise ValueError("not a PodList (no items)")
    found = {}
    for item in document["items"]:
        metadata = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(metadata, dict):
            continue
        annotations = metadata.get("annotations")
        parsed = parse_annotations(annotations) if isinstance(annotations, dict) else None
        if parsed is not None:
            found[(str(metadata.get("namespace", "")), str(metadata.get("name", "")))] = parsed
    return found
