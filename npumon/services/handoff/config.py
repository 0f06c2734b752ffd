"""The `handoff:` section: which cluster sinks carry the verdicts, and how (docs/handoff.md)."""

import re
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from ...rules.verdict_tracker import GuardRails, guard_rail_problems

TAINT_KEY = "npumon.io/npu-out-of-service"
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
# a qualified name: optional DNS prefix and "/", then 1-63 of [A-Za-z0-9._-] starting and ending alphanumeric
_QUALIFIED_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class TaintConfig:
    """`handoff.kubernetes.taint`: a taint while the host is out of service, behind a circuit breaker."""

    enabled: bool = False  # opt-in: it needs RBAC to patch Nodes, which allows editing any field of any Node
    key: str = TAINT_KEY
    value: str = "true"
    effect: str = "NoSchedule"  # NoExecute would also evict the running pods that do not tolerate it
    # the circuit breaker: never taint when more than this share of the cluster's nodes, or this many nodes
    # (unset: no count limit), already carry the taint; a fleet-wide cause is not this host's fault
    max_share: float = 0.10
    max_nodes: Optional[int] = None


@dataclass(frozen=True)
class KubernetesHandoffConfig:
    """`handoff.kubernetes`: npumon's node conditions and events (and an optional taint) on this node."""

    enabled: bool = False
    dry_run: bool = False  # send nothing: log and record the exact request each action would send
    node_name: str = "$NODE_NAME"  # "$VAR" reads environment VAR (the DaemonSet sets NODE_NAME from spec.nodeName)
    kubeconfig: Optional[str] = None  # unset: in-cluster service account (token and CA under /var/run/secrets)
    event_namespace: str = "default"  # Node events are namespaced; kubectl describe node shows those of default
    timeout_seconds: float = 5.0  # one request's deadline
    interval_seconds: float = 10.0  # how often the sink checks the node against the verdict (and retries)
    heartbeat_seconds: float = 300.0  # re-send the conditions this often even when unchanged (as NPD does)
    max_backoff_seconds: float = 60.0  # retries after failures wait 1 s doubling up to this (or Retry-After)
    taint: TaintConfig = field(default_factory=TaintConfig)


MINDCLUSTER_ROUTES = ("configmap", "grpc")
MINDCLUSTER_LEVELS = ("NotHandleFault", "SubHealthFault", "PreSeparateNPU", "SeparateNPU")  # a sender's choices
_FAULT_CODE = re.compile(r"^[0-9A-Za-z]{9}$")
_RESOURCE = re.compile(r"^[A-Za-z0-9_.-]{1,32}$")


@dataclass(frozen=True)
class FaultCodes:
    """The 9-character public-fault code npumon sends for each level; ClusterD drops a code its fault config
    (publicCustomization.json) does not list. Digit 1 type (0 chip), 2 default level, 3-4 00, 5 "1"
    user-defined, 6-9 a number (MindCluster's code scheme)."""

    not_handle_fault: str = "000016001"
    sub_health_fault: str = "010016001"
    pre_separate_npu: str = "020016002"
    separate_npu: str = "020016001"

    def code(self, level: str) -> str:
        return {"NotHandleFault": self.not_handle_fault, "SubHealthFault": self.sub_health_fault,
                "PreSeparateNPU": self.pre_separate_npu, "SeparateNPU": self.separate_npu}[level]


@dataclass(frozen=True)
class MindClusterHandoffConfig:
    """`handoff.mindcluster`: the verdicts as MindCluster public faults, which ClusterD and Volcano act on."""

    enabled: bool = False
    dry_run: bool = False  # send nothing: log and record the exact request each action would send
    route: str = "configmap"  # or grpc: ClusterD's SendPublicFault
    node_name: str = "$NODE_NAME"  # "$VAR" reads environment VAR; the node ClusterD files the faults under
    resource: str = "npumon"  # the sender's name: ClusterD accepts it only once listed in publicFaultResource
    namespace: str = "cluster-system"  # of the ConfigMap npumon-fault-<node> (ClusterD reads every namespace)
    kubeconfig: Optional[str] = None  # unset: in-cluster service account (the ConfigMap route)
    grpc_target: str = "clusterd-grpc-svc.mindx-dl.svc.cluster.local:8899"  # host:port, or unix:PATH
    timeout_seconds: float = 5.0  # one request's deadline
    interval_seconds: float = 10.0  # how often the sink compares what it sent with the verdict (and retries)
    max_backoff_seconds: float = 60.0  # retries after failures wait 1 s doubling up to this
    fault_codes: FaultCodes = field(default_factory=FaultCodes)


@dataclass(frozen=True)
class HandoffConfig(GuardRails):
    """The verdicts' guard rails (healthy_seconds, max_transitions_per_hour) and the sinks that carry them."""

    kubernetes: KubernetesHandoffConfig = field(default_factory=KubernetesHandoffConfig)
    mindcluster: MindClusterHandoffConfig = field(default_factory=MindClusterHandoffConfig)


def handoff_config_problems(handoff: HandoffConfig) -> List[Tuple[str, str]]:
    return (guard_rail_problems(handoff) + kubernetes_handoff_problems(handoff.kubernetes)
            + mindcluster_handoff_problems(handoff.mindcluster))


def mindcluster_handoff_problems(mc: MindClusterHandoffConfig) -> List[Tuple[str, str]]:
    where = "handoff.mindcluster."
    problems: List[Tuple[str, str]] = []
    if mc.route not in MINDCLUSTER_ROUTES:
        problems.append((where + "route", "must be one of " + ", ".join(MINDCLUSTER_ROUTES)))
    if not mc.node_name:
        problems.append((where + "node_name", "must not be empty (e.g. $NODE_NAME)"))
    if not _RESOURCE.match(mc.resource):
        problems.append((where + "resource", "must be 1-32 of A-Z a-z 0-9 - _ . (the sender name ClusterD lists)"))
    if not _NAMESPACE.match(mc.namespace):
        problems.append((where + "namespace", "must be a namespace name, e.g. cluster-system"))
    if mc.kubeconfig is not None and not mc.kubeconfig:
        problems.append((where + "kubeconfig", "must be a file path (leave it unset for in-cluster auth)"))
    if not mc.grpc_target or any(c.isspace() for c in mc.grpc_target):
        problems.append((where + "grpc_target", "must be host:port or unix:PATH"))
    if not 0 < mc.timeout_seconds < mc.interval_seconds:
        problems.append((where + "timeout_seconds", "must be greater than 0 and less than interval_seconds"))
    if not 1 <= mc.max_backoff_seconds <= 3600:
        problems.append((where + "max_backoff_seconds", "must be between 1 and 3600"))
    codes = mc.fault_codes
    for name in ("not_handle_fault", "sub_health_fault", "pre_separate_npu", "separate_npu"):
        if not _FAULT_CODE.match(getattr(codes, name)):
            problems.append((where + "fault_codes." + name, "must be 9 letters or digits, quoted, e.g. '020016001'"))
    if len(set(codes.code(level) for level in MINDCLUSTER_LEVELS)) != len(MINDCLUSTER_LEVELS):
        problems.append((where + "fault_codes", "must be four different codes: ClusterD knows a code's level by it"))
    return problems


def kubernetes_handoff_problems(k8s: KubernetesHandoffConfig) -> List[Tuple[str, str]]:
    where = "handoff.kubernetes."
    problems: List[Tuple[str, str]] = []
    if not k8s.node_name:
        problems.append((where + "node_name", "must not be empty (e.g. $NODE_NAME)"))
    if not _NAMESPACE.match(k8s.event_namespace):
        problems.append((where + "event_namespace", "must be a namespace name, e.g. default"))
    if k8s.kubeconfig is not None and not k8s.kubeconfig:
        problems.append((where + "kubeconfig", "must be a file path (leave it unset for in-cluster auth)"))
    if not 0 < k8s.timeout_seconds < k8s.interval_seconds:
        problems.append((where + "timeout_seconds", "must be greater than 0 and less than interval_seconds"))
    if k8s.heartbeat_seconds < k8s.interval_seconds:
        problems.append((where + "heartbeat_seconds", "must be at least interval_seconds"))
    if not 1 <= k8s.max_backoff_seconds <= 3600:
        problems.append((where + "max_backoff_seconds", "must be between 1 and 3600"))
    taint = k8s.taint
    if not _QUALIFIED_NAME.match(taint.key):
        problems.append((where + "taint.key", "must be a qualified name, e.g. " + TAINT_KEY))
    if taint.effect not in TAINT_EFFECTS:
        problems.append((where + "taint.effect", "must be one of " + ", ".join(TAINT_EFFECTS)))
    if len(taint.value) > 63:
        problems.append((where + "taint.value", "must be at most 63 characters"))
    if not 0 <= taint.max_share < 1:
        problems.append((where + "taint.max_share", "must be a share from 0 to below 1, e.g. 0.1 for 10 %"))
    if taint.max_nodes is not None and taint.max_nodes < 0:
        problems.append((where + "taint.max_nodes", "must be 0 or more"))
    return problems
