"""`npumon run`: the scheduler, the in-memory state that every reader shares, signals and systemd.

One APScheduler job per polling tier. A job never overlaps itself (max_instances=1), a late run is
coalesced into one, and every npu-smi call inside a job has its own deadline (the runner kills the process
group), so one hung call cannot stall the other tiers. The table job also evaluates the rules, so findings
follow the freshest numbers. Readers (the exporter, /status, /healthz) only read `DaemonState`: a scrape
never runs npu-smi.
"""

import logging
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Protocol, Tuple

from apscheduler.schedulers.background import BackgroundScheduler

from .collect import Collector, Target
from .config import Config
from .exporter import ExporterView, build_registry
from .model import Finding, Snapshot
from .report import status_document
from .sdnotify import Notifier
from .web import WebServer

log = logging.getLogger(__name__)



class Service(Protocol):
    """Something the daemon runs besides polling (event history, notifications, control, ...)."""

    name: str

    def jobs(self) -> List[Tuple[str, float, Callable[[], None]]]: ...  # (job id, interval seconds, function)

    def on_evaluation(self, snapshot: Snapshot, findings: List[Finding],
                      transitions: List[Tuple[str, Finding]]) -> None: ...  # quick: runs in the table job

    def collectors(self) -> List[object]: ...  # extra prometheus_client collectors for /metrics

    def close(self) -> None: ...


def build_services(daemon: "Daemon") -> List[Service]:
    """Every service that the config turns on. One line per service."""
    services: List[Service] = []
    return services


@dataclass
class DaemonState:
    """What the readers see. Replaced as a whole under the lock; never mutated in place."""

    snapshot: Optional[Snapshot] = None
    findings: List[Finding] = field(default_factory=list)
    last_progress: Optional[float] = None  # monotonic time the table job last finished
    started: float = field(default_factory=time.monotonic)


class Daemon:
    def __init__(self, config: Config, target: Target, listen: Optional[str] = None,
                 engine_factory: Optional[Callable[[Config], Tuple[object, Dict[str, float]]]] = None):
        from .cli import load_rule_engine  # the same rule loading as `check`

        self._engine_factory = engine_factory or (lambda cfg: load_rule_engine(cfg, one_shot=False))
        self.config = config
        self.target = target
        self.collector = Collector(config, target)
        self.engine, self.params = self._engine_factory(config)
        self._lock = threading.Lock()
        self._state = DaemonState()
        self._stop = threading.Event()
        self._reload_requested = threading.Event()
        self.notifier = Notifier()
        self.scheduler = BackgroundScheduler(timezone="UTC", job_defaults={
            "coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        self.registry = build_registry(self.view, npu_exporter_compat=config.exporter.npu_exporter_compat)
        self.web = WebServer(listen or config.exporter.listen, self.registry, self.status, self.health,
                             tls_cert=config.exporter.tls_cert_file, tls_key=config.exporter.tls_key_file)
        self.events = None  # the event history, when the config keeps one
        self.services = self._start_services()

    def _start_services(self) -> List[Service]:
        services = build_services(self)
        for service in services:
            for collector in service.collectors():
                self.registry.register(collector)
        return services

    def _stop_services(self, services: List[Service]) -> None:
        for service in services:
            for collector in service.collectors():
                self.registry.unregister(collector)
            self._guarded(service.name, service.close)

    def record_event(self, kind: str, subject: str, message: str, severity: Optional[str] = None,
                     details: Optional[dict] = None) -> None:
        """Services record what they did (control actions, probe failures, ...) in the event history."""
        if self.events is not None:
            self._guarded("events", self.events.record, kind, subject, message, severity, details)

    # -- readers ---------------------------------------------------------------------------------------

    def state(self) -> DaemonState:
        with self._lock:
            return self._state

    def view(self) -> ExporterView:
        state = self.state()
        return ExporterView(snapshot=state.snapshot, findings=list(state.findings),
                            driver_version=state.snapshot.driver_version if state.snapshot else None)

    def status(self) -> dict:
        state = self.state()
        if state.snapshot is None:
            return {"schema": "npumon.check/v1", "status": "unknown", "error": "no poll has completed yet",
                    "chips": [], "findings": [], "sources": {}}
        return status_document(state.snapshot, state.findings)

    def progress_deadline(self) -> float:
        """How long the table job may go without finishing before the daemon counts as stuck."""
        return 2 * self.config.poll.table_seconds + self.config.npu_smi_timeout_seconds + 5

    def health(self) -> Tuple[bool, str]:
        state = self.state()
        now = time.monotonic()
        if state.last_progress is None:
            if now - state.started < self.progress_deadline():
                return True, "starting"
            return False, "no poll has finished since start {:.0f}s ago".format(now - state.started)
        age = now - state.last_progress
        if age > self.progress_deadline():
            return False, "poll loop stuck: last poll finished {:.0f}s ago".format(age)
        return True, "ok"

    # -- jobs ------------------------------------------------------------------------------------------

    def run_table_tier(self) -> None:
        """Poll the main table, then judge the new snapshot."""
        self._guarded("table", self.collector.poll, "table")
        snapshot = self.collector.snapshot()
        findings = self._guarded("rules", self.engine.evaluate, snapshot, snapshot.time)
        transitions = self._guarded("rules", self.engine.transitions) or []
        with self._lock:
            previous = self._state
            self._state = DaemonState(snapshot=snapshot,
                                      findings=previous.findings if findings is None else findings,
                                      last_progress=time.monotonic(), started=previous.started)
        for service in self.services:
            self._guarded(service.name, service.on_evaluation, snapshot, self._state.findings, transitions)

    def run_tier(self, tier: str) -> None:
        self._guarded(tier, self.collector.poll, tier)

    def _guarded(self, what: str, func: Callable, *args):
        """A bug in one tier must not kill the scheduler thread or the other tiers: log it, go on."""
        try:
            return func(*args)
        except Exception:  # noqa: BLE001 - the daemon must outlive any single failure
            log.exception("%s job failed", what)
            return None

    def _schedule(self) -> None:
        for tier, seconds in self.collector.tiers().items():
            if seconds <= 0:
                continue
            func, args = (self.run_table_tier, ()) if tier == "table" else (self.run_tier, (tier,))
            # Spread the slow tiers over time so their npu-smi calls do not all land with the table poll.
            first_delay = 0.0 if tier in ("table", "host") else random.uniform(1.0, min(seconds, 10.0))
            self.scheduler.add_job(func, "interval", args=args, seconds=seconds, id=tier, replace_existing=True,
                                   next_run_time=_utc_in(first_delay))
        for service in self.services:
            for job_id, seconds, func in service.jobs():
                self.scheduler.add_job(self._guarded, "interval", args=(job_id, func), seconds=seconds,
                                       id=job_id, replace_existing=True)
        watchdog = self.notifier.watchdog_interval()
        if watchdog:
            self.scheduler.add_job(self._watchdog_ping, "interval", seconds=watchdog, id="watchdog",
                                   replace_existing=True)

    def _watchdog_ping(self) -> None:
        healthy, reason = self.health()
        if healthy:  # only when the poll loop really made progress: otherwise let systemd restart us
            self.notifier.watchdog()
        else:
            log.warning("not pinging the systemd watchdog: %s", reason)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.web.start()
        self._schedule()
        self.scheduler.start()
        log.info("npumon serving on port %d; polling %s", self.web.port,
                 "a simulated host" if self.target.simulated else " ".join(self.target.npu_smi_argv))
        self.notifier.ready("polling every {:.0f}s".format(self.config.poll.table_seconds))

    def request_stop(self, *_ignored) -> None:
        self._stop.set()

    def request_reload(self, *_ignored) -> None:
        self._reload_requested.set()
        self._stop.set()  # wake the main loop; it clears the flag when it is only a reload

    def serve_forever(self, reload_config: Callable[[], Config]) -> None:
        """Run until SIGTERM/SIGINT; SIGHUP reloads the config (a bad one is refused, the old one keeps running)."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)
        self.start()
        while True:
            self._stop.wait()
            if self._reload_requested.is_set():
                self._reload_requested.clear()
                self._stop.clear()
                self.reload(reload_config)
                continue
            break
        self.stop()

    def reload(self, reload_config: Callable[[], Config]) -> bool:
        from .config import ConfigError
        from .cli import UserError

        self.notifier.reloading()
        try:
            config = reload_config()
            engine, params = self._engine_factory(config)
        except (ConfigError, UserError) as exc:
            log.error("reload refused, keeping the running config: %s", exc)
            self.notifier.status("reload refused: {}".format(exc))
            self.notifier.ready("polling (old config)")
            return False
        if config.exporter != self.config.exporter:
            log.warning("exporter settings changed: they take effect on restart, not on reload")
        old_collector, old_services = self.collector, self.services
        self.config, self.engine, self.params = config, engine, params
        self.collector = Collector(config, self.target)
        self._stop_services(old_services)
        self.services = self._start_services()
        self.scheduler.remove_all_jobs()
        self._schedule()
        old_collector.close()
        log.info("config reloaded from %s", config.source)
        self.notifier.ready("polling every {:.0f}s (reloaded)".format(config.poll.table_seconds))
        return True

    def stop(self) -> None:
        self.notifier.stopping()
        self.scheduler.shutdown(wait=False)
        self.collector.close()
        self._stop_services(self.services)
        self.web.stop()
        log.info("npumon stopped")


def _utc_in(seconds: float):
    import datetime

    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)
