"""`npumon run`: the scheduler, the in-memory state that every reader shares, signals and systemd.

Polling: one APScheduler job per tier of every listed source (sources/registry.py). A job never overlaps
itself (max_instances=1), a late run is coalesced into one, and nothing in a job can block for long: every
source polls under a deadline. A tier may ask to run again early (a retry); its source says when. The primary
tier's job (npu-smi's main table) also evaluates the rules, so findings follow the freshest numbers; it and
the watchdog ping run on threads of their own, so slow services can never delay them.

Readers (the exporter, /status, /healthz) only read `DaemonState`: a scrape never runs npu-smi, and
nothing served over HTTP changes state.

Lifecycle: SIGHUP reloads the config (a bad one is refused with one log line and the old one keeps
running; rule state survives), SIGTERM/SIGINT stop within STOP_GRACE_SECONDS and leave no npu-smi behind.
systemd hears READY/STATUS/RELOADING/STOPPING, and WATCHDOG only while the primary job makes progress.
"""

import dataclasses
import datetime
import logging
import random
import signal
import socket
import threading
import time
from typing import Callable, Dict, List, Optional, Tuple

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

from ..config.errors import ConfigError
from ..config.schema import Config
from ..model import SourceStatus
from ..outputs.exporter import ExporterView, build_registry
from ..outputs.report import SCHEMA, rfc3339, status_document
from ..outputs.web import WebServer, WebServerError, parse_listen
from ..rules.engine import RuleEngine
from ..rules.loader import RuleError
from ..sources.collection import SourceSet
from ..sources.target import Target
from .sdnotify import Notifier
from .services import Service, build_services
from .state import (DaemonState, StartupError, collection_settings, ensure_state_dir, judge_health, load_rule_set,
                    progress_deadline, status_line)

log = logging.getLogger(__name__)

STOP_GRACE_SECONDS = 3.0  # SIGTERM to exit, well inside the promised 5 s and the unit's TimeoutStopSec
JOB_THREADS = 32  # more than there are jobs, so a job never waits for a thread


class _OverlapNoticeFilter(logging.Filter):
    """APScheduler warns each time a run is skipped because the previous one of the same job still runs.
    For npumon that is the design (a job never overlaps itself), not news: the tier's duration and source
    status already show a slow npu-smi, and the warning would repeat every interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in record.getMessage()


_OVERLAP_NOTICE_FILTER = _OverlapNoticeFilter()


def _utc_in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


class Daemon:
    def __init__(self, config: Config, target: Target, listen: Optional[str] = None,
                 log_level: Optional[str] = None):
        """Checks everything that can be wrong before anything starts; raises StartupError (or RuleError).
        `listen` and `log_level` come from the command line and win over the config, also on reload."""
        ensure_state_dir(config)
        self.config = config
        self.target = target
        self._listen = listen
        self._log_level = log_level
        rules, self.params = load_rule_set(config)
        self.engine = RuleEngine(rules, self.params)
        self._lock = threading.Lock()
        self._state = DaemonState()
        self._stop = threading.Event()
        self._reload_requested = threading.Event()
        self._stopping = False
        self._jobs_lock = threading.Condition()
        self._running_jobs: Dict[str, int] = {}
        self._last_status: Optional[str] = None
        self.notifier = Notifier()
        self.scheduler = BackgroundScheduler(
            timezone="UTC",
            executors={"default": ThreadPoolExecutor(JOB_THREADS), "primary": ThreadPoolExecutor(1),
                       "watchdog": ThreadPoolExecutor(1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        self.registry = build_registry(self.view, npu_exporter_compat=config.exporter.npu_exporter_compat)
        self.web = self._web_server(config)
        self.collection = SourceSet(config, target)
        self.events = None  # the event history, when the config keeps one (set by its service)
        self.services: List[Service] = []  # started by start(), once the port is ours
        self._service_collectors: Dict[int, List[object]] = {}

    def _web_server(self, config: Config) -> WebServer:
        exporter = config.exporter
        listen = self._listen or exporter.listen
        try:
            parse_listen(listen)
        except WebServerError as exc:
            raise StartupError("{}: {}".format(self._listen_origin(), exc)) from None
        try:
            return WebServer(listen, self.registry, self.status, self.health,
                             tls_cert=exporter.tls_cert_file, tls_key=exporter.tls_key_file)
        except WebServerError as exc:  # the listen address is fine: it is the TLS files
            raise StartupError("{}: exporter.tls_cert_file: {}".format(config.source, exc)) from None

    def _listen_origin(self) -> str:
        """Where the listen address came from, for error messages."""
        return "--listen" if self._listen else "{}: exporter.listen".format(self.config.source)

    def _start_services(self) -> List[Service]:
        services = build_services(self)
        for service in services:
            collectors = service.collectors()  # kept: a second call may well return new objects
            for collector in collectors:
                self.registry.register(collector)
            self._service_collectors[id(service)] = collectors
        return services

    def _stop_services(self, services: List[Service]) -> None:
        for service in services:
            for collector in self._service_collectors.pop(id(service), []):
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
        """The `npumon check --json` document of the latest poll."""
        state = self.state()
        if state.snapshot is None:
            return {"schema": SCHEMA, "host": socket.gethostname(), "time": rfc3339(time.time()),
                    "status": "unknown", "error": "no poll has finished yet", "chips": [], "findings": [],
                    "sources": {}}
        return status_document(state.snapshot, state.findings)

    def health(self) -> Tuple[bool, str]:
        return judge_health(self.state(), time.monotonic(), progress_deadline(self.config))

    # -- jobs ------------------------------------------------------------------------------------------

    def run_tier(self, tier: str) -> None:
        """Poll one tier; after the primary tier, judge and publish. A tier that asks to run again early does."""
        collection = self.collection  # a reload may swap it
        retry = collection.poll(tier)
        if retry is not None:
            self._run_tier_again(tier, retry)
        if tier == collection.primary().name:
            self._publish(collection)

    def _publish(self, collection: SourceSet) -> None:
        """Judge a new snapshot, hand it to the services, then publish it."""
        engine, services = self.engine, self.services
        if collection is not self.collection:
            return  # reloaded meanwhile with new collection settings: the new collection's primary job follows
        snapshot = collection.snapshot()
        findings = self._guarded("rules", engine.evaluate, snapshot, snapshot.time)
        transitions = self._guarded("rules", engine.transitions) or []
        previous = self.state()
        if findings is None:  # the rules failed (logged): keep showing what they said last
            findings = previous.findings
        # Services first, so what they show with the sources (e.g. the events source) is published with it.
        for service in services:
            self._guarded(service.name, service.on_evaluation, snapshot, findings, transitions)
        shown: Dict[str, SourceStatus] = {}
        for service in services:
            shown.update(self._guarded(service.name, service.statuses) or {})
        snapshot = dataclasses.replace(snapshot, sources={**snapshot.sources, **shown})  # never mutated in place
        with self._lock:
            self._state = DaemonState(snapshot=snapshot, findings=findings, last_progress=time.monotonic(),
                                      started=previous.started, polls=previous.polls + 1)
        line = status_line(snapshot, findings, collection.primary().name)
        if line != self._last_status:
            self._last_status = line
            self.notifier.status(line)

    def _run_tier_again(self, tier: str, seconds: float) -> None:
        try:
            self.scheduler.modify_job(tier, next_run_time=_utc_in(seconds))
        except JobLookupError:  # removed by a reload or a stop meanwhile
            pass

    def _watchdog_ping(self) -> None:
        healthy, reason = self.health()
        if healthy:  # only when the poll loop really made progress: otherwise let systemd restart us
            self.notifier.watchdog()
        else:
            log.warning("not pinging the systemd watchdog: %s", reason)

    def _job(self, name: str, func: Callable, *args) -> None:
        """Every scheduled job runs through here: counted (stop() waits for it) and guarded."""
        with self._jobs_lock:
            if self._stopping:  # queued before the stop, started after it
                return
            self._running_jobs[name] = self._running_jobs.get(name, 0) + 1
        try:
            self._guarded(name, func, *args)
        finally:
            with self._jobs_lock:
                self._running_jobs[name] -= 1
                if not self._running_jobs[name]:
                    del self._running_jobs[name]
                self._jobs_lock.notify_all()

    def _guarded(self, what: str, func: Callable, *args):
        """A bug in one tier must not kill the scheduler thread or the other tiers: log it, go on."""
        try:
            return func(*args)
        except Exception:  # noqa: BLE001 - the daemon must outlive any single failure
            log.exception("%s job failed", what)
            return None

    def _schedule(self) -> None:
        """Add every job. A tier starts after its first_run (the main table at once), or else spread over its
        first interval (10 s at most), so that the npu-smi calls of the tiers do not all land at once."""
        for tier in self.collection.tiers():
            if tier.interval <= 0:
                continue
            first = tier.first_run if tier.first_run is not None else random.uniform(0.1, 1.0) * min(tier.interval, 10.0)
            self.scheduler.add_job(self._job, "interval", args=(tier.name, self.run_tier, tier.name),
                                   seconds=tier.interval, id=tier.name, replace_existing=True,
                                   executor="primary" if tier.primary else "default", next_run_time=_utc_in(first))
        for service in self.services:
            for job_id, seconds, func in service.jobs():
                self.scheduler.add_job(self._job, "interval", args=(job_id, func), seconds=seconds, id=job_id,
                                       replace_existing=True)
        watchdog = self.notifier.watchdog_interval()
        if watchdog:
            self.scheduler.add_job(self._job, "interval", args=("watchdog", self._watchdog_ping), seconds=watchdog,
                                   id="watchdog", executor="watchdog", replace_existing=True)

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen, then poll. Raises StartupError (port in use, ...) with nothing left running."""
        try:
            self.web.start()
        except WebServerError as exc:
            self.collection.close()
            raise StartupError("{}: {}".format(self._listen_origin(), exc)) from None
        self.services = self._start_services()
        self._schedule()
        logging.getLogger("apscheduler.scheduler").addFilter(_OVERLAP_NOTICE_FILTER)  # a no-op the second time
        self.scheduler.start()
        log.info("npumon serving on port %d; polling %s every %gs", self.web.port,
                 "a simulated host" if self.target.simulated else " ".join(self.target.npu_smi_argv),
                 self.config.poll.table_seconds)
        self.notifier.ready("started; first poll running")

    def request_stop(self, *_ignored) -> None:
        self._stop.set()

    def request_reload(self, *_ignored) -> None:
        self._reload_requested.set()

    def serve_forever(self, load_config: Callable[[], Config]) -> List[str]:
        """Run until SIGTERM/SIGINT; SIGHUP reloads the config. Returns what stop() returns."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)
        self.start()
        while not self._stop.is_set():
            # Signal handlers only set flags; the work happens here, on the main thread, never re-entered.
            self._stop.wait(0.2)
            if self._reload_requested.is_set() and not self._stop.is_set():
                self._reload_requested.clear()
                self.reload(load_config)
        return self.stop()

    def reload(self, load_config: Callable[[], Config]) -> bool:
        """Apply a new config, or refuse it (one log line) and keep the running one."""
        self.notifier.reloading()
        try:
            config = load_config()
            rules, params = load_rule_set(config)
            ensure_state_dir(config)
        except (ConfigError, RuleError, StartupError) as exc:
            log.error("reload refused, still running the previous config: %s", exc)
            self.notifier.ready("reload refused: {}".format(exc))
            return False
        if config.exporter != self.config.exporter:
            log.warning("exporter settings changed: they take effect on restart, not on reload")
        self.engine.replace_rules(rules, params)  # keeps the state of rules whose id remains
        self.params = params
        old_collection = None
        if collection_settings(config) != collection_settings(self.config):
            if not self.target.simulated:
                self.target = Target.real(config)  # npu_smi or root may have changed
            old_collection = self.collection
            self.collection = SourceSet(config, self.target)
        self.config = config
        if self._log_level is None:
            from ..cli.common import set_log_level

            set_log_level(config.log_level)
        self._stop_services(self.services)
        self.services = self._start_services()
        self.scheduler.remove_all_jobs()
        self._schedule()
        if old_collection is not None:
            old_collection.close()
        log.info("config reloaded from %s%s", config.source,
                 "" if old_collection is None else "; collection restarted with the new settings")
        self.notifier.ready("config reloaded; polling every {:g}s".format(config.poll.table_seconds))
        return True

    def stop(self) -> List[str]:
        """Stop polling and serving, kill npu-smi calls in flight, close the services. Returns the jobs still
        running after STOP_GRACE_SECONDS (normally none; the caller then exits without waiting for them)."""
        self.notifier.stopping()
        with self._jobs_lock:
            self._stopping = True
        self.scheduler.shutdown(wait=False)
        self.web.stop()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        closer = threading.Thread(target=self._close_collection, name="npumon-stop", daemon=True)
        closer.start()
        closer.join(STOP_GRACE_SECONDS)
        with self._jobs_lock:
            while self._running_jobs and time.monotonic() < deadline:
                self._jobs_lock.wait(deadline - time.monotonic())
            stuck = sorted(self._running_jobs)
        if closer.is_alive():
            stuck.append("closing services")
        if stuck:
            log.warning("stopping with work still running after %.0fs: %s", STOP_GRACE_SECONDS, ", ".join(stuck))
        log.info("npumon stopped")
        return stuck

    def _close_collection(self) -> None:
        self.collection.close()  # kills npu-smi calls in flight and refuses new ones
        self._stop_services(self.services)
        self.services = []
