"""The services the daemon runs besides polling, and THE list of them."""

from typing import Any, Callable, Dict, List, Protocol, Tuple

from ..model import Finding, Snapshot, SourceStatus
from ..services.control.service import control_services
from ..services.events.service import event_services
from ..services.notify.service import notify_services


class Service(Protocol):
    """Something the daemon runs besides polling (event history, notifications, control, ...)."""

    name: str

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]: ...  # (job id, interval seconds, function)

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None: ...  # quick: runs in the primary job

    def collectors(self) -> List[object]: ...  # extra prometheus_client collectors for /metrics

    def statuses(self) -> Dict[str, SourceStatus]: ...  # shown with the snapshot's sources (e.g. "events")

    def close(self) -> None: ...


def build_services(daemon: Any) -> List[Service]:
    """`daemon`: the Daemon (daemon.py), whose config, target and event recorder the services use."""
    # Every service that the config turns on. One line per service.
    services: List[Service] = []
    services.extend(event_services(daemon))  # first: sets daemon.events, which later services record into
    services.extend(notify_services(daemon))  # alert delivery, when notify.receivers are configured
    services.extend(control_services(daemon))  # fan control under the governor, when control.enabled
    return services
