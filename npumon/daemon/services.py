"""The services the daemon runs besides polling, THE list of them, and the set running for one config."""

from typing import Callable, Dict, Iterator, List, Protocol, Sequence, Tuple

from prometheus_client.registry import CollectorRegistry

from ..model import Finding, Snapshot, SourceStatus
from ..rules.verdict import HostVerdict
from ..services.context import ServiceContext
from ..services.control.service import control_services
from ..services.events.service import event_services
from ..services.handoff.sinks import handoff_services
from ..services.notify.service import notify_services
from .jobs import guarded


class Service(Protocol):
    """Something the daemon runs besides polling (event history, notifications, control, ...)."""

    name: str

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]: ...  # (job id, interval seconds, function)

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None: ...  # quick: runs in the primary job

    def collectors(self) -> List[object]: ...  # extra prometheus_client collectors for /metrics

    def statuses(self) -> Dict[str, SourceStatus]: ...  # shown with the snapshot's sources (e.g. "events")

    def close(self) -> None: ...


# Every service the config may turn on, one line each. Each is built from the context alone (never from
# another service), so the order here does not matter.
SERVICES: Tuple[Callable[[ServiceContext], List[Service]], ...] = (
    event_services,  # the event history, which the context opened
    notify_services,  # alert delivery, when notify.receivers are configured
    control_services,  # fan control under the governor, when control.enabled
    handoff_services,  # the cluster hand-off sinks: handoff.kubernetes, handoff.mindcluster, when enabled
)


def build_services(context: ServiceContext) -> List[Service]:
    """Every service the context's config turns on."""
    return [service for build in SERVICES for service in build(context)]


class ServiceSet:
    """The services running for one config, with their collectors on the daemon's /metrics; a reload closes
    them and starts a new set."""

    def __init__(self, services: Sequence[Service], registry: CollectorRegistry):
        self._registry = registry
        self._running: List[Tuple[Service, List[object]]] = []
        for service in services:
            collectors = service.collectors()  # kept: a second call may well return new objects
            for collector in collectors:
                registry.register(collector)
            self._running.append((service, collectors))

    def __iter__(self) -> Iterator[Service]:
        return iter([service for service, _ in self._running])

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]:
        return [job for service in self for job in service.jobs()]

    def evaluated(self, snapshot: Snapshot, findings: List[Finding],
                  transitions: List[Tuple[str, Finding]]) -> Dict[str, SourceStatus]:
        """Hand one evaluation to every service; returns what they show with the sources. A service that fails
        costs its own part only."""
        for service in self:
            guarded(service.name, service.on_evaluation, snapshot, findings, transitions)
        shown: Dict[str, SourceStatus] = {}
        for service in self:
            shown.update(guarded(service.name, service.statuses) or {})
        return shown

    def verdict(self, verdict: HostVerdict) -> None:
        """Hand one pass's verdict to the services that act on verdicts (the cluster hand-off sinks)."""
        for service in self:
            on_verdict = getattr(service, "on_verdict", None)
            if on_verdict is not None:
                guarded(service.name, on_verdict, verdict)

    def close(self) -> None:
        running, self._running = self._running, []
        for service, collectors in running:
            for collector in collectors:
                self._registry.unregister(collector)
            guarded(service.name, service.close)
