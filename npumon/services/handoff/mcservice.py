"""The MindCluster hand-off as a daemon service: the verdict comes in on the poll path (`on_verdict`, quick),
ClusterD is told by the service's own job, so a slow or failing ClusterD never delays polling or scraping."""

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ...model import Finding, Snapshot, SourceStatus
from ...rules.verdict import HostVerdict
from ...sources.k8s.config import resolve
from ...sources.k8s.devices import chip_number
from .config import MindClusterHandoffConfig
from .heldfile import HELD_FILE
from .kubeapi import ConfigProblem, endpoint_for, request
from .kubesink import Send
from .mcroute import ConfigMapRoute, GrpcRoute, grpc_modules
from .mcsink import MindClusterSink, Route
from .metrics import HandoffMetrics

if TYPE_CHECKING:
    from ..context import ServiceContext

log = logging.getLogger(__name__)

NAME = "handoff-mindcluster"


def mindcluster_handoff_services(context: "ServiceContext") -> List["MindClusterHandoffService"]:
    config: MindClusterHandoffConfig = context.config.handoff.mindcluster
    if not config.enabled:
        return []
    return [MindClusterHandoffService(config, context, dict(os.environ))]


def open_route(config: MindClusterHandoffConfig, node: str, environ: Dict[str, str]) -> Tuple[Route, str]:
    """The route the config chooses, ready to send (a dry run's sends nothing), and a word for the journal;
    ConfigProblem when it cannot be set up."""
    if config.route == "grpc":
        if not config.dry_run:
            grpc_modules()  # a missing grpcio is a problem now, not at the first fault
        return GrpcRoute(config.grpc_target, config.timeout_seconds), "gRPC " + config.grpc_target
    send: Optional[Send] = None
    where = "dry run"
    if not config.dry_run:
        endpoint, where = endpoint_for(config.kubeconfig, environ)
        timeout = config.timeout_seconds

        def send(method: str, path: str, body: Optional[Dict[str, Any]], content_type: str) -> Dict[str, Any]:
            return request(endpoint, method, path, timeout, body, content_type)
        where = "{} ({})".format(endpoint.server, where)
    return ConfigMapRoute(config.namespace, node, send), "ConfigMap in {} via {}".format(config.namespace, where)


class MindClusterHandoffService:
    name = NAME

    def __init__(self, config: MindClusterHandoffConfig, context: "ServiceContext", environ: Dict[str, str]):
        self._config = config
        self._problem: Optional[str] = None
        self._phy_ids: Dict[str, int] = {}
        node = resolve(config.node_name, environ)
        if not node and config.dry_run:
            node = context.host_name()  # a dry run outside a cluster still shows the messages it would send
        route: Optional[Route] = None
        if not node:
            self._problem = "no node name ({} is unset): set handoff.mindcluster.node_name".format(config.node_name)
        else:
            try:
                route, where = open_route(config, node, environ)
            except ConfigProblem as exc:
                self._problem = str(exc)
            else:
                log.info("mindcluster hand-off for node %s as %s: %s", node, config.resource, where)
        if self._problem:
            log.error("mindcluster hand-off off: %s", self._problem)
            context.record_event("handoff_problem", node or "-", "MindCluster hand-off off: " + self._problem,
                                 "warning")
        run_soon = context.run_soon
        self._wake = None if run_soon is None else lambda seconds: run_soon(NAME, seconds)
        self._sink = None if route is None else MindClusterSink(
            config, node, route, config.dry_run, context.clock, context.record_event, self._wake,
            os.path.join(context.config.state_dir, HELD_FILE))
        self._metrics = None if self._sink is None else HandoffMetrics("mindcluster", self._sink.state)
        self._owns_metrics = True

    @property
    def sink(self) -> Optional[MindClusterSink]:
        return self._sink

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None:
        """Only the chips' physical ids, which the public faults name (the verdict comes through on_verdict)."""
        self._phy_ids = {chip.subject: chip_number(chip, position) for position, chip in enumerate(snapshot.chips)}

    def on_verdict(self, verdict: HostVerdict) -> None:
        if self._sink is not None and self._sink.offer(verdict, self._phy_ids) and self._wake is not None:
            self._wake(0.0)  # a change goes out now, not at the job's next interval

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]:
        return [] if self._sink is None else [(NAME, self._config.interval_seconds, self._sink.sync)]

    def share_metrics(self, metrics: HandoffMetrics) -> None:
        """Show this sink's metrics in `metrics`, shared with the other sinks (sinks.handoff_services)."""
        if self._sink is None:
            return
        self._owns_metrics = not metrics.sinks()
        metrics.add("mindcluster", self._sink.state)
        self._metrics = metrics

    def collectors(self) -> List[object]:
        return [self._metrics] if self._metrics is not None and self._owns_metrics else []

    def statuses(self) -> Dict[str, SourceStatus]:
        if self._sink is None:
            return {NAME: SourceStatus(ok=False, error=self._problem)}
        state = self._sink.state()
        return {NAME: SourceStatus(ok=state.problem is None, error=state.problem, last_success=state.last_success)}

    def close(self) -> None:
        """Nothing held open: each message has its own connection or channel."""
