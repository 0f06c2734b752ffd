"""Alertmanager API v2 push: POST <url>/api/v2/alerts with a JSON array of alerts, so the site's own
routing, inhibition and silences apply.

Alertmanager forgets a firing alert at its endsAt, so firing alerts are re-sent every `repeat_seconds`
(default 60) with endsAt four intervals ahead -- as Prometheus does -- and a daemon that dies lets its
alerts expire instead of leaving them firing forever. A resolved alert is sent with its real endsAt.
"""

from typing import Any, Dict, Sequence

from ...outputs.report import rfc3339
from .alert import FIRING, Alert
from .flavour import Flavour, Request, SendContext, Timing, json_request, with_bearer_token
from .webhook import annotations

API_PATH = "/api/v2/alerts"
RESENDS_BEFORE_EXPIRY = 4


class AlertmanagerPush(Flavour):
    kind = "alertmanager"
    max_alerts = 500
    # Alertmanager groups and throttles itself; npumon only has to keep firing alerts alive.
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=0.0, repeat_seconds=60.0, max_per_minute=0)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        request = json_request(alerts_url(context.secrets["url"]), [_alert(alert, context) for alert in alerts])
        return with_bearer_token(request, context)


def alerts_url(base: str) -> str:
    """The configured URL is Alertmanager's base (http://am:9093, or behind a path prefix)."""
    base = base.rstrip("/")
    return base if base.endswith(API_PATH) else base + API_PATH


def _alert(alert: Alert, context: SendContext) -> Dict[str, Any]:
    if alert.status == FIRING:
        ends_at = context.now + RESENDS_BEFORE_EXPIRY * context.repeat_seconds
    else:
        ends_at = alert.ends_at if alert.ends_at is not None else context.now
    item = {"labels": dict(alert.labels), "annotations": annotations(alert),
            "startsAt": rfc3339(alert.starts_at), "endsAt": rfc3339(ends_at)}
    if context.external_url:
        item["generatorURL"] = context.external_url
    return item
