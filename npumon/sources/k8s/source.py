"""The Kubernetes source: which pod and container hold each chip, polled on its own tier (`kubernetes`).

Each poll asks the kubelet's pod-resources API (client.py) under one deadline, with `annotations` also the API
server for the device plugin's pod annotations (apiserver.py, annotations.py: the chips Volcano really
mounted), and, for the processes npu-smi lists, reads which container each runs in (cgroup.py). Nothing of it runs on the scrape path: /metrics and
`check --json` show the last good answer while it is fresh (the freshness rule of sources/base.py). A hung,
refused or absent socket only takes this source down, with a one-line reason; every other source goes on.

What it adds to each chip (`check --json` keys, and the metric families below):
* `pods`: one entry per container holding the chip ({namespace, pod, container, resource, device_ids}); []
  when none does. Several pods on one chip (share mode, vNPUs) are several entries.
* `kubelet_allocatable`: whether GetAllocatableResources lists the chip (the kubelet's healthy devices);
  null where the kubelet does not serve it.
* `process_containers`: npu-smi's processes that run in a container: pid, container_id (from the cgroup),
  pod_uid, and namespace/pod/container where exactly one container holds the chip (else null).

Off by default unless the socket exists when npumon starts (`kubernetes.enabled` unset); `enabled: true` keeps
it on (and down, saying why, while the socket is missing), `enabled: false` turns it off.
"""

import dataclasses
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ...model import ChipSample, Snapshot
from ...outputs.families import Families, MetricSpec
from ..base import Parts, Section, SingleTierSource, SourceContext, SourceError, SourceSpec, Tier
import requests

from .annotations import apply_annotations
from .apiserver import ApiServerError, node_pod_annotations
from .cgroup import read_container
from .client import KubeletAnswer, PodResourcesError, ask_kubelet
from .config import KubernetesConfig, kubernetes_config_problems
from .devices import Attachment, PodDevices, allocatable_chips, attach, describe_unmatched

NAME = "kubernetes"
ONE_PASS_TIMEOUT_SECONDS = 2.0  # `npumon check` must fit NRPE's 10 s; a healthy kubelet answers in milliseconds

ChipKey = Tuple[int, int]


@dataclasses.dataclass(frozen=True)
class PodMap:
    """One good poll: the kubelet's answer and the containers of the processes npu-smi listed."""

    answer: KubeletAnswer
    containers: Tuple[PodDevices, ...]  # the answer's, with the device plugin's annotations applied (if read)
    kubelet_ids: Dict[Tuple[str, str, str, str], Tuple[str, ...]]  # (ns, pod, container, resource) -> the
    # kubelet's ids where an annotation replaced them
    process_containers: Dict[int, Tuple[str, Optional[str]]]  # pid -> (container id, pod uid)
    warning: Optional[str]


class KubernetesSource(SingleTierSource[PodMap]):
    name = NAME

    def __init__(self, config: KubernetesConfig, proc_root: str, max_age: float,
                 clock: Callable[[], float] = time.time, timeout_seconds: Optional[float] = None,
                 ask: Callable[[str, float, int], KubeletAnswer] = ask_kubelet):
        super().__init__(config.interval_seconds, max_age, clock)
        self.config = config
        self.proc_root = proc_root
        self.timeout_seconds = config.timeout_seconds if timeout_seconds is None else timeout_seconds
        self._ask = ask
        self._session = requests.Session()
        self._session.trust_env = False  # no proxy for the API server; the token is the only credential

    def tiers(self) -> Sequence[Tier]:
        return [Tier(self.name, self.interval, first_run=0.0)]

    def read(self, chips: Sequence[ChipSample]) -> PodMap:
        began = time.monotonic()
        try:
            answer = self._ask(self.config.socket, self.timeout_seconds, self.config.max_message_bytes)
        except PodResourcesError as exc:
            raise SourceError(str(exc)) from None
        problems = []
        containers, kubelet_ids = answer.containers, {}
        if self.config.annotations and containers:
            left = self.timeout_seconds - (time.monotonic() - began)
            containers, kubelet_ids, problem = self._annotated(containers, left)
            problems.extend(problem)
        pids: Dict[int, Tuple[str, Optional[str]]] = {}
        if self.config.process_containers:
            for chip in chips:
                for process in chip.processes:
                    found = read_container(self.proc_root, process.pid)
                    if found is not None:
                        pids[process.pid] = (found.container_id, found.pod_uid)
        if chips:
            _, unmatched = attach(chips, containers)
            if unmatched:
                problems.append(describe_unmatched(unmatched))
        if answer.allocatable_problem:
            problems.append(answer.allocatable_problem)
        return PodMap(answer, containers, kubelet_ids, pids, "; ".join(problems) or None)

    def _annotated(self, containers: Tuple[PodDevices, ...], left: float):
        """The containers with the device plugin's annotations applied; on failure the kubelet's, and why."""
        if left <= 0:
            return containers, {}, ["annotations: no time left after the kubelet"]
        try:
            pods = node_pod_annotations(self._session, self.config, left)
        except ApiServerError as exc:
            return containers, {}, ["annotations not read, kubelet ids shown: {}".format(exc)]
        corrected, _, problems = apply_annotations(containers, pods)
        replaced = {}
        for before, after in zip(containers, corrected):
            for (resource, old_ids), (_, new_ids) in zip(before.devices, after.devices):
                if old_ids != new_ids:
                    replaced[(before.namespace, before.pod, before.container, resource)] = old_ids
        return corrected, replaced, problems

    def close(self) -> None:
        self._session.close()

    def warning(self, value: PodMap) -> Optional[str]:
        return value.warning

    def contribute(self, parts: Parts, now: float) -> Parts:
        pod_map = self.reading.value(now)
        if pod_map is None or not parts.chips:
            return parts
        attachments, _ = attach(parts.chips, pod_map.containers)
        allocatable = None if pod_map.answer.allocatable is None else allocatable_chips(
            parts.chips, pod_map.answer.allocatable)
        chips = tuple(_with_pods(chip, attachments.get(chip.key, []), allocatable, pod_map)
                      for chip in parts.chips)
        return dataclasses.replace(parts, chips=chips)


def _with_pods(chip: ChipSample, attachments: List[Attachment], allocatable: Optional[set],
               pod_map: PodMap) -> ChipSample:
    pids = pod_map.process_containers
    only = attachments[0] if len(attachments) == 1 else None
    processes = []
    for process in chip.processes:
        if process.pid not in pids:
            continue
        container_id, pod_uid = pids[process.pid]
        processes.append({"pid": process.pid, "container_id": container_id, "pod_uid": pod_uid,
                          "namespace": only and only.namespace, "pod": only and only.pod,
                          "container": only and only.container})
    pods = []
    for attachment in attachments:
        entry = attachment.to_json()
        kubelet_ids = pod_map.kubelet_ids.get((attachment.namespace, attachment.pod, attachment.container,
                                               attachment.resource))
        if kubelet_ids is not None:  # the device plugin's annotation named the chip; the kubelet had these
            entry["kubelet_device_ids"] = list(kubelet_ids)
        pods.append(entry)
    extra = dict(chip.extra, pods=pods,
                 kubelet_allocatable=None if allocatable is None else chip.key in allocatable,
                 process_containers=processes)
    return dataclasses.replace(chip, extra=extra)


def build(context: SourceContext) -> Optional[KubernetesSource]:
    config = context.config.kubernetes
    if config.enabled is False or (config.enabled is None and not os.path.exists(config.socket)):
        return None
    timeout = min(config.timeout_seconds, ONE_PASS_TIMEOUT_SECONDS) if context.one_pass else None
    return KubernetesSource(config, os.path.join(context.target.root, "proc"), context.config.max_age_seconds,
                            clock=context.clock, timeout_seconds=timeout)


CHIP = ("npu", "chip")
METRICS = (
    MetricSpec("npumon_chip_pod_info", CHIP + ("namespace", "pod", "container"),
               "A container holding the chip, from the kubelet's pod-resources API (one series per container)."),
    MetricSpec("npumon_chip_kubelet_allocatable", CHIP,
               "1 if the kubelet lists the chip as allocatable (healthy to its device plugin), else 0."),
    MetricSpec("npumon_chip_process_container_info",
               CHIP + ("pid", "container_id", "namespace", "pod", "container"),
               "An NPU process that runs in a container (from its cgroup); pod labels empty when several "
               "containers hold the chip."),
)


def export(snapshot: Snapshot, out: Families) -> None:
    for chip in snapshot.chips:
        ids = (chip.npu, chip.chip)
        for pod in chip.extra.get("pods") or ():
            out.add("npumon_chip_pod_info", 1, ids + (pod["namespace"], pod["pod"], pod["container"]))
        allocatable: Any = chip.extra.get("kubelet_allocatable")
        if allocatable is not None:
            out.add("npumon_chip_kubelet_allocatable", int(allocatable), ids)
        for process in chip.extra.get("process_containers") or ():
            out.add("npumon_chip_process_container_info", 1, ids + (
                process["pid"], process["container_id"], process["namespace"], process["pod"], process["container"]))


SPEC = SourceSpec(NAME, build, section=Section("kubernetes", KubernetesConfig,
                                               lambda section, config: kubernetes_config_problems(section)),
                  metrics=METRICS, export=export)
