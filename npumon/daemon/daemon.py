"""`npumon run`: the scheduler, the in-memory state that every reader shares, signals and systemd.

Polling: one APScheduler job per tier of every listed source (sources/registry.py). A job never overlaps
itself (max_instances=1), a late run is coalesced into one, and nothing in a job can block for long: every
source polls under a deadline. A tier may ask for its next run sooner (a retry) or later (the call budget,
sources/budget.py); its source says when. The primary tier's job (npu-smi's main table) also evaluates the
rules, so findings follow the freshest numbers; it and the watchdog ping run on threads of their own, so slow
services can never delay them.

Readers (the exporter, /status, /healthz) only read `DaemonState`: a scrape never runs npu-smi, and
nothing served over HTTP changes state (but for an authenticated POST /v1/ack, which records an acknowledgement in
the event history, as `npumon ack` does). Each publish also tells the operator what changed (journal.py):
a source down or up, a finding fired or resolved, one rate-limited log line each.

Lifecycle: SIGHUP reloads the config (a bad one is refused with one log line and the old one keeps
running; rule state survives), SIGTERM/SIGINT stop within STOP_GRACE_SECONDS and leave no npu-smi behind.
systemd hears READY/STATUS/RELOADING/STOPPING, and WATCHDOG only while the primary job makes progress and
the HTTP server can serve (/healthz says the same, and more).
"""

import dataclasses
import logging
import random
import signal
import threading
import time
from typing import Callable, List, Optional, Tuple

from prometheus_client.registry import CollectorRegistry

from ..config.errors import ConfigError
from ..model import Snapshot
from ..outputs.call_metrics import CallStatsCollector
from ..outputs.exporter import ExporterView, build_registry
from ..outputs.exposition import ExpositionRegistry
from ..outputs.health_api import Answer, HealthApi, Unavailable
from ..outputs.npu_exporter import resolve_node_label
from ..outputs.http_metrics import HttpStatsCollector
from ..outputs.report import SCHEMA, rfc3339, status_document, verdict_of
from ..outputs.web import WebServer, WebServerError, parse_listen
from ..outputs.webconfig import WebSecurity, load_web_config
from ..rules.engine import RuleEngine
from ..rules.loader import RuleError
from ..rules.verdict import HostVerdict
from ..rules.verdict_tracker import VerdictTracker
from ..services.context import ServiceContext
from ..services.events.store import EventStore, EventStoreError, events_path
from ..settings import Config
from ..sources.base import Tier
from ..sources.children import kill_orphaned_calls
from ..sources.collection import SourceSet
from ..sources.target import Target
from .jobs import Jobs, guarded
from .journal import Journal
from .memory import freeze_startup_objects
from .sdnotify import Notifier, set_log_level
from .services import ServiceSet, build_services
from .state import (DaemonState, StartupError, collection_settings, ensure_state_dir, judge_all, judge_health,
                    judge_healthz, load_rule_set, progress_deadline, status_line)
from .wakeup import SignalWakeup

log = logging.getLogger(__name__)

# A judged tier's poll (Tier.judged) is judged this long after it ends, so that the tiers ending together are
# judged once; not when the primary tier polls (and judges) within JUDGE_SKIP_SECONDS anyway.
JUDGE_DELAY_SECONDS = 0.5
JUDGE_SKIP_SECONDS = 3.0
JUDGE_DUE_MARGIN_SECONDS = 0.05  # after a `for:` runs out, so that the pass sees it run out
STOP_GRACE_SECONDS = 3.0  # SIGTERM to exit, well inside the promised 5 s and the unit's TimeoutStopSec

# The sweeps of what changes slowly (intervals of minutes) start within their first START_WINDOW_SECONDS: on a
# 16-chip A3 over npu-smi the first polls of every tier come to about four minutes of call-slot time, and when
# they all came within 10 s the minute tiers (usages, health) waited behind them for a tier thread, asked
# nothing for two minutes and went stale on a healthy host.
MINUTE_TIER_SECONDS = 60.0  # a tier polled this often or more often is a minute tier; the others sweep
FAST_TIER_START_SECONDS = 10.0  # a minute tier starts within this
START_WINDOW_SECONDS = 120.0


def first_run_delay(interval: float, draw: float) -> float:
    """Seconds from start to a tier's first poll, for `draw` in [0, 1): within 10 s for a minute tier, within
    half its interval (at most START_WINDOW_SECONDS) for a slower one."""
    window = FAST_TIER_START_SECONDS if interval <= MINUTE_TIER_SECONDS else min(interval / 2, START_WINDOW_SECONDS)
    return (0.1 + 0.9 * draw) * min(interval, window)


class Daemon:
    def __init__(self, config: Config, target: Target, listen: Optional[str] = None,
                 log_level: Optional[str] = None, web_config_file: Optional[str] = None):
        """Checks everything that can be wrong before anything starts; raises StartupError (or RuleError).
        `listen`, `log_level` and `web_config_file` come from the command line and win over the config,
        also on reload."""
        ensure_state_dir(config)
        self.config = config
        self.target = target
        self._listen = listen
        self._log_level = log_level
        self._web_config_file = web_config_file
        rules, params = load_rule_set(config)
        self.engine = RuleEngine(rules, params)
        self.verdicts = VerdictTracker(config.handoff, self.engine.for_seconds())
        self._context: Optional[ServiceContext] = None  # the services' (its event history), once started
        self._lock = threading.Lock()
        self._state = DaemonState()
        self._stop = threading.Event()
        self._reload_requested = threading.Event()
        self._wakeup: Optional[SignalWakeup] = None  # while serve_forever runs
        self._last_status: Optional[str] = None
        self.journal = Journal()  # source down/up and finding fired/resolved lines, rate-limited
        self.notifier = Notifier()
        self.jobs = Jobs()
        self.scheduler = self.jobs.scheduler
        node = resolve_node_label(config.exporter.node_label)
        self.registry = build_registry(self.view, npu_exporter_compat=config.exporter.npu_exporter_compat, node=node,
                                       process_series_per_chip=config.exporter.process_series_per_chip)
        security = self._web_security(config)
        self.web = self._web_server(config, security)
        self.registry.register(HttpStatsCollector(lambda: self.web.stats))
        self.npu_exporter_web = self._npu_exporter_web_server(config, node, security)
        self.collection = SourceSet(config, target)
        self.registry.register(CallStatsCollector(lambda: self.collection.npu_smi.stats,
                                                  lambda: self.collection.npu_smi.budget.state()))
        self.services = ServiceSet([], self.registry)  # started by start(), once the port is ours

    def _web_server(self, config: Config, security: Optional[WebSecurity]) -> WebServer:
        listen = self._listen or config.exporter.listen
        try:
            parse_listen(listen)
        except WebServerError as exc:
            raise StartupError("{}: {}".format(self._listen_origin(), exc)) from None
        # the listen address is fine: a failure now is the TLS files'
        api = HealthApi(self._health_state, self._events, self._ack)
        return self._listener(config, listen, self.registry, security, "exporter.tls_cert_file", api)

    def _npu_exporter_web_server(self, config: Config, node: Optional[str],
                                 security: Optional[WebSecurity]) -> Optional[WebServer]:
        """exporter.npu_exporter_listen: npu-exporter's families alone, where a scrape config made for
        npu-exporter looks (its default port is 8082, its path /metrics). As exposed as the main listener, so
        under the same limits and web config."""
        listen = config.exporter.npu_exporter_listen
        if listen is None:
            return None
        registry = build_registry(self.view, node=node, only_npu_exporter=True)
        return self._listener(config, listen, registry, security, "exporter.npu_exporter_listen")

    def _listener(self, config: Config, listen: str, registry: CollectorRegistry, security: Optional[WebSecurity],
                  blamed_key: str, api: Optional[HealthApi] = None) -> WebServer:
        """A web server with the exporter's TLS files, limits and web config; its failure to start blames
        `blamed_key` in one line."""
        exporter = config.exporter
        try:
            return WebServer(listen, registry, self.status, self.health,
                             tls_cert=exporter.tls_cert_file, tls_key=exporter.tls_key_file,
                             client_timeout=exporter.request_timeout_seconds, workers=exporter.http_workers,
                             max_connections=exporter.max_connections, security=security, api=api)
        except WebServerError as exc:
            raise StartupError("{}: {}: {}".format(config.source, blamed_key, exc)) from None

    def _web_security(self, config: Config) -> Optional[WebSecurity]:
        """The web config file's settings (--web-config-file, else exporter.web_config_file), read again on
        every start and reload; raises ConfigError (a WebConfigError) or StartupError, one line."""
        path = self._web_config_file or config.exporter.web_config_file
        if not path:
            return None
        security = load_web_config(path)
        if security.tls is not None and config.exporter.tls_cert_file:
            raise StartupError("{}: exporter.tls_cert_file: TLS is set both here and in the web config {}; "
                               "keep one".format(config.source, path))
        return security

    def _listen_origin(self) -> str:
        """Where the listen address came from, for error messages."""
        return "--listen" if self._listen else "{}: exporter.listen".format(self.config.source)

    def _start_services(self) -> ServiceSet:
        context = ServiceContext.open(self.config, self.engine, self.target, self.collection.npu_smi,
                                      run_soon=self.jobs.run_soon)
        self._context = context
        return ServiceSet(build_services(context), self.registry)

    # -- readers ---------------------------------------------------------------------------------------

    def state(self) -> DaemonState:
        with self._lock:
            return self._state

    def view(self) -> ExporterView:
        state = self.state()
        return ExporterView(snapshot=state.snapshot, findings=list(state.findings),
                            driver_version=state.snapshot.driver_version if state.snapshot else None,
                            verdict=state.verdict)

    def status(self) -> dict:
        """The `npumon check --json` document of the latest poll."""
        state = self.state()
        if state.snapshot is None:
            return {"schema": SCHEMA, "host": self.target.host_name(), "time": rfc3339(time.time()),
                    "status": "unknown", "error": "no poll has finished yet", "chips": [], "findings": [],
                    "sources": {}}
        return status_document(state.snapshot, state.findings, acknowledged=state.acknowledged,
                               verdict=state.verdict)

    def _health_state(self) -> Tuple[Optional[Snapshot], Optional[HostVerdict]]:
        state = self.state()
        return state.snapshot, state.verdict

    def _events(self, limit: int, since: Optional[float]) -> List[dict]:
        """/v1/events: the newest `limit` events of the history."""
        config = self.config
        if not config.events.enabled:
            raise Unavailable("no event history: events.enabled is false")
        try:
            store = EventStore(events_path(config.state_dir), config.events.retention_days * 86400, readonly=True)
            try:
                events = store.query(since=since, limit=limit)
            finally:
                store.close()
        except EventStoreError as exc:
            raise Unavailable(str(exc)) from None
        return [dict(dataclasses.asdict(event), rfc3339=rfc3339(event.time)) for event in events]

    def _ack(self, rule: str, subject: str, user: str, note: str) -> Answer:
        """POST /v1/ack: acknowledge an active finding as `npumon ack` does (an event the events service hands
        the engine at the next poll), or straight to the engine when no event history is kept."""
        if (rule, subject) not in {(finding.rule, finding.subject) for finding in self.state().findings}:
            return 404, {"error": "no active finding {} on {}".format(rule, subject)}
        context = self._context
        if context is not None and context.events is not None:
            context.record_event("finding_acknowledged", subject, "{} acknowledged by {} over HTTP{}".format(
                rule, user, ": " + note if note else ""), "info", {"rule": rule, "note": note or None, "user": user})
            return 202, {"rule": rule, "subject": subject, "acknowledged": "at the next poll"}
        if self.engine.acknowledge(rule, subject):
            return 200, {"rule": rule, "subject": subject, "acknowledged": "now"}
        return 404, {"error": "no active finding {} on {}".format(rule, subject)}

    def health(self) -> Tuple[bool, str]:
        """/healthz: the poll loop makes progress, the primary source has answered at least once, and the HTTP
        server can serve."""
        return judge_all(judge_healthz(self.state(), self.collection.primary().name, time.monotonic(),
                                       progress_deadline(self.config)), self.web.health())

    def loop_health(self) -> Tuple[bool, str]:
        """The watchdog's judgement: whether the poll loop makes progress and the HTTP server can serve (a
        restart mends both). A restart would not bring a missing npu-smi back, so a source that never
        answered does not stop the pings."""
        return judge_all(judge_health(self.state(), time.monotonic(), progress_deadline(self.config)),
                         self.web.health())

    # -- jobs ------------------------------------------------------------------------------------------

    def run_tier(self, tier: str) -> None:
        """Poll one tier; after the primary tier, judge and publish. A tier that asks for its next run at another
        time (a retry sooner, the call budget's stretch later) gets it."""
        collection = self.collection  # a reload may swap it
        retry = collection.poll(tier)
        if retry is not None:
            self.jobs.run_soon(tier, retry)
        primary = collection.primary().name
        if tier == primary:
            self._publish(collection)
        elif collection.wants_judgement(tier):
            self._judge_soon(primary)

    def _judge_soon(self, primary: str) -> None:
        """A judged tier polled: judge the rules on its readings now rather than at the primary's next pass (a
        driver fault read by the kernel log would otherwise wait up to a table interval to become a finding)."""
        due = self.jobs.seconds_to_next_run(primary)
        if due is not None and due < JUDGE_SKIP_SECONDS:
            return
        # on the primary tier's thread: one pass at a time, never beside the primary's own
        self.jobs.once_soon("judge", JUDGE_DELAY_SECONDS, self._publish, self.collection, True, executor="primary")

    def _judge_when_due(self, due: Optional[float], now: float) -> None:
        """A rule's `for:` (or clear time) runs out at `due` (the snapshot clock): judge then, unless the
        primary polls (and judges) just after anyway, so that a finding fires when its `for:` ends, not up to
        a table interval later."""
        if due is None or due <= now:
            return
        seconds = due - now + JUDGE_DUE_MARGIN_SECONDS
        primary = self.jobs.seconds_to_next_run(self.collection.primary().name)
        if primary is not None and seconds <= primary < seconds + JUDGE_SKIP_SECONDS:
            return
        self.jobs.once_at("judge-due", seconds, self._publish, self.collection, True, executor="primary")

    def _publish(self, collection: SourceSet, early: bool = False) -> None:
        """Judge a new snapshot, hand it to the services, then publish it. `early`: a judged tier's pass
        between the primary's; it publishes only when a finding fires or resolves, and is not the primary's
        progress."""
        engine, services = self.engine, self.services
        if collection is not self.collection:
            return  # reloaded meanwhile with new collection settings: the new collection's primary job follows
        if self._stop.is_set():
            return  # a poll the stop cut short: what it saw is npumon stopping, not the host
        snapshot = collection.snapshot()
        primary = snapshot.sources.get(collection.primary().name)
        findings = guarded("rules", engine.evaluate, snapshot, snapshot.time)
        transitions = guarded("rules", engine.transitions) or []
        self._judge_when_due(guarded("rules", engine.next_due), snapshot.time)
        if early and not transitions:
            return  # nothing new to say: the primary's next pass publishes as usual
        previous = self.state()
        if findings is None:  # the rules failed (logged): keep showing what they said last
            findings = previous.findings
        # Services first, so what they show with the sources (e.g. the events source) is published with it.
        shown = services.evaluated(snapshot, findings, transitions)
        snapshot = dataclasses.replace(snapshot, sources={**snapshot.sources, **shown})  # never mutated in place
        # after the services: the events service hands `npumon ack`s to the engine
        acknowledged = guarded("rules", engine.acknowledged_findings) or []
        verdict = guarded("verdict", self._judge, snapshot, findings) or previous.verdict
        services.verdict(verdict)  # the cluster hand-off sinks only take it; they send from their own jobs
        with self._lock:
            self._state = DaemonState(snapshot=snapshot, findings=findings, acknowledged=acknowledged, verdict=verdict,
                                      last_progress=previous.last_progress if early else time.monotonic(),
                                      started=previous.started, polls=previous.polls + (0 if early else 1),
                                      primary_answered=previous.primary_answered or bool(primary and primary.ok))
        for server in (self.web, self.npu_exporter_web):  # rendered ahead where scrapers take every snapshot
            if server is not None and isinstance(server.registry, ExpositionRegistry):
                guarded("exporter", server.registry.published)
        guarded("journal", self.journal.publish, previous.snapshot, snapshot, transitions,
                {(finding.rule, finding.subject) for finding in acknowledged})
        line = status_line(snapshot, findings, collection.primary().name, acknowledged)
        if line != self._last_status:
            self._last_status = line
            self.notifier.status(line)

    def _judge(self, snapshot, findings) -> HostVerdict:
        """The guarded verdicts of this pass; each change is an event in the history."""
        verdict = self.verdicts.update(verdict_of(snapshot, findings))
        context = self._context
        for change in self.verdicts.transitions:
            log.info("verdict: %s %s -> %s", change.subject, change.old, change.new)
            if context is not None:
                why = change.reasons[0] if change.reasons else None
                context.record_event("verdict_changed", change.subject, "{} -> {}{}".format(
                    change.old, change.new, "" if why is None else " ({}: {})".format(why.rule, why.summary)),
                    "warning" if change.new != "healthy" else "info",
                    {"old": change.old, "new": change.new, "rules": [reason.rule for reason in change.reasons]})
        return verdict

    def _watchdog_ping(self) -> None:
        healthy, reason = self.loop_health()
        if healthy:  # only when the poll loop really made progress: otherwise let systemd restart us
            self.notifier.watchdog()
        else:
            log.warning("not pinging the systemd watchdog: %s", reason)

    def _executor(self, tier: Tier) -> str:
        """The minute tiers that call through the shared slots run on `calls`; the slower ones, one at a time,
        on `background`: on a busy A3 three tiers of every five minutes held all three `calls` threads for a
        minute while the usages and health tiers waited in line for one."""
        if tier.primary:
            return "primary"
        if not self.collection.shares_slots(tier.name):
            return "default"
        return "background" if tier.background or tier.interval > MINUTE_TIER_SECONDS else "calls"

    def _schedule(self) -> None:
        """Add every job. A tier starts after its first_run (the main table at once), or else at a random
        moment of its start window (first_run_delay), so that the npu-smi calls of the tiers do not all land at
        once."""
        self.jobs.fit_calls(self.collection.npu_smi.max_concurrent)
        for tier in self.collection.tiers():
            if tier.interval <= 0:
                continue
            first = tier.first_run if tier.first_run is not None else first_run_delay(tier.interval, random.random())
            executor = self._executor(tier)
            self.jobs.add(tier.name, tier.interval, self.run_tier, tier.name, executor=executor, first=first)
        for job_id, seconds, func in self.services.jobs():
            self.jobs.add(job_id, seconds, func)
        watchdog = self.notifier.watchdog_interval()
        if watchdog:
            self.jobs.add("watchdog", watchdog, self._watchdog_ping, executor="watchdog")

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        """Listen, then poll. Raises StartupError (port in use, ...) with nothing left running."""
        orphans = kill_orphaned_calls()
        if orphans:
            log.warning("killed %d process(es) left running by the calls of an npumon that was killed", orphans)
        try:
            self.web.start()
        except WebServerError as exc:
            self.collection.close()
            raise StartupError("{}: {}".format(self._listen_origin(), exc)) from None
        if self.npu_exporter_web is not None:
            try:
                self.npu_exporter_web.start()
            except WebServerError as exc:
                self.web.stop()
                self.collection.close()
                raise StartupError("{}: exporter.npu_exporter_listen: {}".format(self.config.source, exc)) from None
        self.services = self._start_services()
        self._schedule()
        # the npu-exporter compatible listener is named too: dashboards that expected it look for it here
        compat = "" if self.npu_exporter_web is None else "; npu-exporter compatible /metrics on port {} at {}".format(
            self.npu_exporter_web.port, self.npu_exporter_web.url)
        log.info("npumon serving on port %d at %s%s; polling %s every %gs", self.web.port, self.web.url, compat,
                 self.target.describe(), self.config.poll.table_seconds)
        # READY before the first poll can publish its STATUS: on a busy host the first pass may end first
        self.notifier.ready("started; first poll running")
        self.jobs.start()

    def request_stop(self, *_ignored) -> None:
        self._stop.set()
        self._wake_main()

    def request_reload(self, *_ignored) -> None:
        self._reload_requested.set()
        self._wake_main()

    def _wake_main(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None:
            wakeup.wake()

    def serve_forever(self, load_config: Callable[[], Config]) -> List[str]:
        """Run until SIGTERM/SIGINT; SIGHUP reloads the config. Returns what stop() returns."""
        signal.signal(signal.SIGTERM, self.request_stop)
        signal.signal(signal.SIGINT, self.request_stop)
        signal.signal(signal.SIGHUP, self.request_reload)
        self._wakeup = SignalWakeup()  # before start(): a signal from then on wakes the loop below
        try:
            self.start()
            freeze_startup_objects()
            while not self._stop.is_set():
                # Signal handlers only set flags; the work happens here, on the main thread, never re-entered.
                # The wait ends on a signal whichever thread the kernel handed it to (wakeup.py).
                if not self._reload_requested.is_set():
                    self._wakeup.wait()
                if self._reload_requested.is_set() and not self._stop.is_set():
                    self._reload_requested.clear()
                    self.reload(load_config)
            return self.stop()
        finally:
            wakeup, self._wakeup = self._wakeup, None
            wakeup.close()

    def reload(self, load_config: Callable[[], Config]) -> bool:
        """Apply a new config, or refuse it (one log line) and keep the running one."""
        self.notifier.reloading()
        log.info("reload started; the config from %s keeps running until the new one is checked", self.config.source)
        try:
            config = load_config()
            rules, params = load_rule_set(config)
            ensure_state_dir(config)
            security = self._web_security(config)
        except (ConfigError, RuleError, StartupError) as exc:
            log.error("reload refused, still running the previous config: %s", exc)
            self.notifier.ready("reload refused: {}".format(exc))
            return False
        for server in (self.web, self.npu_exporter_web):  # the web config file is read again: new passwords,
            if server is not None:                       # certificates
                server.use_security(security)
        if dataclasses.replace(config.exporter, web_config_file=None) != \
                dataclasses.replace(self.config.exporter, web_config_file=None):
            log.warning("exporter settings changed: they take effect on restart, not on reload")
        self.engine.replace_rules(rules, params)  # keeps the state of rules whose id remains
        self.verdicts.config, self.verdicts.hold_for = config.handoff, self.engine.for_seconds()  # states kept
        old_collection = None
        if collection_settings(config) != collection_settings(self.config):
            self.target = self.target.reconfigured(config)  # npu_smi or root may have changed
            old_collection = self.collection
            self.collection = SourceSet(config, self.target)
        self.config = config
        if self._log_level is None:
            set_log_level(config.log_level)
        self.services.close()
        self.services = self._start_services()
        self.jobs.remove_all()
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
        self._stop.set()  # nothing is published from now on
        self.notifier.stopping()
        self.jobs.shutdown()
        self.web.stop()
        if self.npu_exporter_web is not None:
            self.npu_exporter_web.stop()
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        closer = threading.Thread(target=self._close_collection, name="npumon-stop", daemon=True)
        closer.start()
        closer.join(STOP_GRACE_SECONDS)
        stuck = self.jobs.wait_for_running(deadline)
        if closer.is_alive():
            stuck.append("closing services")
        if stuck:
            log.warning("stopping with work still running after %.0fs: %s", STOP_GRACE_SECONDS, ", ".join(stuck))
        log.info("npumon stopped")
        return stuck

    def _close_collection(self) -> None:
        self.collection.close()  # kills npu-smi calls in flight and refuses new ones
        self.services.close()
