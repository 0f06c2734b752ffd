"""The Kubernetes hand-off as a daemon service: the verdict comes in on the poll path (`on_verdict`, quick), the
node is written by the service's own job, so a slow or failing API server never delays polling or scraping."""

import logging
import os
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from ...model import Finding, Snapshot, SourceStatus
from ...rules.verdict import HostVerdict
from ...sources.k8s.config import resolve
from .config import KubernetesHandoffConfig
from .kubeapi import ConfigProblem, Endpoint, endpoint_for, request
from .kubesink import KubernetesSink, Send
from .metrics import HandoffMetrics

if TYPE_CHECKING:
    from ..context import ServiceContext

log = logging.getLogger(__name__)

NAME = "handoff-kubernetes"


def kubernetes_handoff_services(context: "ServiceContext") -> List["KubernetesHandoffService"]:
    config: KubernetesHandoffConfig = context.config.handoff.kubernetes
    if not config.enabled:
        return []
    return [KubernetesHandoffService(config, context, dict(os.environ))]


def _sender(endpoint: Endpoint, timeout: float) -> Send:
    def send(method: str, path: str, body: Optional[Dict[str, Any]], content_type: str) -> Dict[str, Any]:
        return request(endpoint, method, path, timeout, body, content_type)
    return send


class KubernetesHandoffService:
    name = NAME

    def __init__(self, config: KubernetesHandoffConfig, context: "ServiceContext", environ: Dict[str, str]):
        self._config = config
        self._problem: Optional[str] = None
        node = resolve(config.node_name, environ)
        if not node and config.dry_run:
            node = context.host_name()  # a dry run outside a cluster still shows the requests it would send
        send: Optional[Send] = None
        if not node:
            self._problem = "no node name ({} is unset): set handoff.kubernetes.node_name".format(config.node_name)
        elif not config.dry_run:
            try:
                endpoint, where = endpoint_for(config.kubeconfig, environ)
            except ConfigProblem as exc:
                self._problem = str(exc)
            else:
                send = _sender(endpoint, config.timeout_seconds)
                log.info("kubernetes hand-off to %s for node %s (%s)", endpoint.server, node, where)
        if self._problem:
            log.error("kubernetes hand-off off: %s", self._problem)
            context.record_event("handoff_problem", node or "-", "Kubernetes hand-off off: " + self._problem, "warning")
        run_soon = context.run_soon
        self._wake = None if run_soon is None else lambda seconds: run_soon(NAME, seconds)
        self._sink = KubernetesSink(config, node or "-", send, context.clock, context.record_event, self._wake)
        self._metrics, self._owns_metrics = HandoffMetrics("kubernetes", self._sink.state), True

    @property
    def sink(self) -> KubernetesSink:
        return self._sink

    def on_verdict(self, verdict: HostVerdict) -> None:
        if self._problem is None and self._sink.offer(verdict) and self._wake is not None:
            self._wake(0.0)  # a transition goes out now, not at the job's next interval

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]:
        return [] if self._problem else [(NAME, self._config.interval_seconds, self._sink.sync)]

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None:
        """Nothing: the sink reads verdicts, never raw findings (DESIGN.md); they come through on_verdict."""

    def share_metrics(self, metrics: HandoffMetrics) -> None:
        """Show this sink's metrics in `metrics`, shared with the other sinks (sinks.handoff_services)."""
        self._owns_metrics = not metrics.sinks()
        metrics.add("kubernetes", self._sink.state)
        self._metrics = metrics

    def collectors(self) -> List[object]:
        return [self._metrics] if self._owns_metrics else []

    def statuses(self) -> Dict[str, SourceStatus]:
        if self._problem:
            return {NAME: SourceStatus(ok=False, error=self._problem)}
        state = self._sink.state()
        error = state.problem
        if error is None and state.breaker_open:
            error = "taint circuit breaker open: too many nodes already carry npumon's taint"
        return {NAME: SourceStatus(ok=state.problem is None, error=error, last_success=state.last_success,
                                   degraded=state.problem is None and state.breaker_open)}

    def close(self) -> None:
        """Nothing held open: each request has its own connection."""
