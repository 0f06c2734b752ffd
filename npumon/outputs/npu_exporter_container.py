"""npu-exporter's container labels and families, from the pods the Kubernetes source attached to each chip
(chip.extra "pods" and "process_containers", npumon/sources/k8s).

npu-exporter's rules (shared/reference/npu-exporter/COMPAT.md sections 2 and 5, ../k8s/PODRESOURCES.md
section 5): `namespace`, `pod_name`, `container_name` on every chip series are the one container's names, ""
with none, and all three `not_displayed_for_multi_pod` with more than one; `npu_container_info` and the
`container_npu_*` families exist only while exactly one container holds the chip; a process's
`container_name` is `<namespace>_<pod>_<container>`. npu-exporter reads what the runtime mounted, npumon what
the kubelet allocated: the two differ under Volcano full-NPU scheduling (docs/kubernetes.md).
"""

from typing import Any, Dict, List, Optional, Tuple

from ..model import MIB, ChipSample
from .families import Families, MetricSpec

MULTI_POD = "not_displayed_for_multi_pod"
CONTAINER_INFO_LABELS = ("npuID", "model_name", "vdie_id", "pcie_bus_info", "namespace", "pod_name",
                         "container_name", "containerID", "containerName")


def container_metrics(chip_labels: Tuple[str, ...]) -> Tuple[MetricSpec, ...]:
    """The container families (HELP texts verbatim from npu-exporter's code)."""
    return (
        MetricSpec("npu_container_info", CONTAINER_INFO_LABELS, "the container name and deviceID relationship"),
        MetricSpec("container_npu_total_memory", chip_labels, "npu total memory in container, unit is 'MB'"),
        MetricSpec("container_npu_used_memory", chip_labels, "the npu used memory in container, unit is 'MB'"),
        MetricSpec("container_npu_utilization", chip_labels, "npu ai core utilization in container, unit is '%'"),
    )


def _pods(chip: ChipSample) -> List[Dict[str, Any]]:
    return list(chip.extra.get("pods") or ())


def pod_labels(chip: ChipSample) -> Tuple[str, str, str]:
    """(namespace, pod_name, container_name) of a chip's series."""
    pods = _pods(chip)
    if not pods:
        return "", "", ""
    if len(pods) > 1:
        return MULTI_POD, MULTI_POD, MULTI_POD
    return pods[0]["namespace"], pods[0]["pod"], pods[0]["container"]


def joined_name(namespace: Optional[str], pod: Optional[str], container: Optional[str]) -> str:
    return "_".join((namespace, pod, container)) if namespace and pod and container else ""


def process_container(chip: ChipSample, pid: int) -> Tuple[str, str]:
    """(container_id, container_name) of npu_chip_info_process_info: empty for a host process."""
    for row in chip.extra.get("process_containers") or ():
        if row["pid"] == pid:
            return row["container_id"] or "", joined_name(row["namespace"], row["pod"], row["container"])
    return "", ""


def render_containers(out: Families, chip: ChipSample, labels: tuple, extra: tuple, hbm: bool,
                      utilization: Optional[float]) -> None:
    """The container families of one chip (labels: its L1, pod labels filled in; extra: the node label)."""
    pods = _pods(chip)
    if len(pods) != 1:
        return
    pod = pods[0]
    ids = [row["container_id"] for row in chip.extra.get("process_containers") or () if row["container_id"]]
    container_id = ids[0] if len(set(ids)) == 1 else ""
    out.add("npu_container_info", 1, labels + (container_id, joined_name(pod["namespace"], pod["pod"],
                                                                           pod["container"])) + extra)
    total, used = (chip.hbm_total_bytes, chip.hbm_used_bytes) if hbm else \
        (chip.memory_total_bytes, chip.memory_used_bytes)
    out.add("container_npu_total_memory", None if total is None else total / MIB, labels + extra)
    out.add("container_npu_used_memory", None if used is None else used / MIB, labels + extra)
    out.add("container_npu_utilization", utilization, labels + extra)
