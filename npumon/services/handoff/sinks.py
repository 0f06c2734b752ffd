"""THE list of the cluster hand-off sinks as daemon services, sharing one metrics collector: each sink's
npumon_handoff_* families carry its `sink` label, and two collectors would expose each family twice."""

from typing import TYPE_CHECKING, List, Union

from .mcservice import MindClusterHandoffService, mindcluster_handoff_services
from .metrics import HandoffMetrics
from .service import KubernetesHandoffService, kubernetes_handoff_services

if TYPE_CHECKING:
    from ..context import ServiceContext


def handoff_services(context: "ServiceContext") -> List[Union[KubernetesHandoffService, MindClusterHandoffService]]:
    """Every sink the config turns on (each off by default); the first one carries the shared collector."""
    services: List[Union[KubernetesHandoffService, MindClusterHandoffService]] = []
    services.extend(kubernetes_handoff_services(context))  # node conditions, events and taint
    services.extend(mindcluster_handoff_services(context))  # MindCluster public faults
    shared = HandoffMetrics()
    for service in services:
        service.share_metrics(shared)
    return services
