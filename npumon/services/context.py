"""What a service may use: built once, before any service, and handed to each (daemon/services.py).

A service never sees the Daemon. It reads the config, records into the event history through
`record_event`, and hands the daemon what it shows through the Service protocol (statuses, collectors, jobs).
The event history is opened here, with the context, so every service can record from the moment it is built:
the services can be built in any order.
"""

import logging
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

from ..rules.engine import RuleEngine
from ..sources.base import AnyConfig
from ..sources.runner import CommandRunner
from ..sources.target import Target
from .events.service import EventService, open_event_history

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServiceContext:
    config: AnyConfig  # the whole config (npumon/settings.py, a floor above)
    engine: RuleEngine  # the daemon's rules: the event history restores findings and acknowledgements into them
    target: Target  # the monitored host: npu-smi's argv and environment, its root, its name
    npu_smi: CommandRunner  # the one npu-smi pool the sources share; its owner closes it, not the services
    events: Optional[EventService] = None  # the event history, when the config keeps one
    clock: Callable[[], float] = time.time
    # run_soon(job_id, seconds): move one of the services' jobs up (the scheduler's); None: jobs keep their interval
    run_soon: Optional[Callable[[str, float], None]] = None

    @classmethod
    def open(cls, config: AnyConfig, engine: RuleEngine, target: Target, npu_smi: CommandRunner,
             clock: Callable[[], float] = time.time,
             run_soon: Optional[Callable[[str, float], None]] = None) -> "ServiceContext":
        """The context for one config, with its event history open (the events service closes it)."""
        return cls(config, engine, target, npu_smi, open_event_history(config, lambda: engine, clock), clock,
                   run_soon)

    def host_name(self) -> str:
        """The monitored host's name (a simulated host's own), the one /status gives."""
        return self.target.host_name()

    def record_event(self, kind: str, subject: str, message: str, severity: Optional[str] = None,
                     details: Optional[Dict[str, Any]] = None) -> None:
        """Record what a service did (a control action, a failed notification, ...) in the event history, when
        one is kept. Never raises: a bad record costs that record, not the service's work."""
        if self.events is None:
            return
        try:
            self.events.record(kind, subject, message, severity, details)
        except Exception:  # noqa: BLE001 - the caller is in the middle of its own job
            log.exception("recording a %s event failed", kind)
