"""PagerDuty Events API v2: one event per alert -- `trigger` while firing, `resolve` when resolved --
with the alert's fingerprint as dedup_key, so the resolve closes the incident the trigger opened and a
repeated trigger does not open a second one."""

from typing import Any, Dict, Sequence

from ...outputs.report import rfc3339
from . import text
from .alert import FIRING, Alert
from .flavour import Flavour, Request, SendContext, Timing, json_request

EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
SUMMARY_LIMIT = 1024


class PagerDuty(Flavour):
    kind = "pagerduty"
    max_alerts = 1  # the Events API takes one event per request
    # PagerDuty groups into incidents by dedup_key itself; repeating a trigger changes nothing.
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=0.0, repeat_seconds=0.0, max_per_minute=120)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        (alert,) = alerts
        return json_request(context.secrets.get("url", EVENTS_URL), event(alert, context))


def event(alert: Alert, context: SendContext) -> Dict[str, Any]:
    document: Dict[str, Any] = {"routing_key": context.secrets["routing_key"], "dedup_key": alert.fingerprint}
    if alert.status != FIRING:
        document["event_action"] = "resolve"
        return document
    summary = "{}: {}".format(context.host, text.headline(alert))
    document.update({
        "event_action": "trigger",
        "payload": {
            "summary": summary if len(summary) <= SUMMARY_LIMIT else summary[:SUMMARY_LIMIT - 3] + "...",
            "source": context.host,
            "severity": alert.severity,  # npumon's info/warning/critical are PagerDuty severities too
            "timestamp": rfc3339(alert.starts_at),
            "component": alert.subject,
            "class": alert.rule,
            "custom_details": {"hint": alert.hint, "labels": dict(alert.labels)},
        },
        "client": "npumon",
    })
    if context.external_url:
        document["client_url"] = context.external_url
    return document
