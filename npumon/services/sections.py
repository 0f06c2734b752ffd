"""The config sections of the daemon's services (event history, notifications, fans and power, cluster hand-off)."""

from ..config.schema import Section
from .control.settings import ControlConfig, control_config_problems
from .handoff.config import HandoffConfig, handoff_config_problems
from .events.store import EventsConfig, events_config_problems
from .notify.config import NotifyConfig, notify_config_problems

SECTIONS = (
    Section("events", EventsConfig, lambda section, config: events_config_problems(section)),
    Section("notify", NotifyConfig, lambda section, config: notify_config_problems(section)),
    Section("control", ControlConfig,
            lambda section, config: control_config_problems(section, config.poll.table_seconds)),
    Section("handoff", HandoffConfig, lambda section, config: handoff_config_problems(section)),
)
