"""Generic webhook: the Alertmanager webhook payload (version "4"), so any receiver written for
Alertmanager's webhook_config (prometheus-webhook-dingtalk, ticketing bridges, ...) works unchanged.
One group per receiver and host: groupLabels is {host}."""

from typing import Any, Dict, List, Sequence

from ...outputs.report import rfc3339
from .alert import FIRING, RESOLVED, Alert
from .flavour import Flavour, Request, SendContext, Timing, json_request, with_bearer_token

# Alertmanager writes Go's zero time as the end of an alert that has not ended.
ZERO_TIME = "0001-01-01T00:00:00Z"


class Webhook(Flavour):
    kind = "webhook"
    max_alerts = 100
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=10.0, repeat_seconds=4 * 3600.0,
                    max_per_minute=0)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        return with_bearer_token(json_request(context.secrets["url"], webhook_payload(alerts, context)), context)


def annotations(alert: Alert) -> Dict[str, str]:
    return {"summary": alert.summary, "description": alert.hint}


def webhook_payload(alerts: Sequence[Alert], context: SendContext) -> Dict[str, Any]:
    items = [_alert_item(alert, context) for alert in alerts]
    return {
        "version": "4",
        "groupKey": '{}:{{host="{}"}}'.format("{}", context.host),
        "truncatedAlerts": 0,
        "status": FIRING if any(alert.status == FIRING for alert in alerts) else RESOLVED,
        "receiver": context.receiver,
        "groupLabels": {"host": context.host},
        "commonLabels": _common([item["labels"] for item in items]),
        "commonAnnotations": _common([item["annotations"] for item in items]),
        "externalURL": context.external_url or "",
        "alerts": items,
    }


def _alert_item(alert: Alert, context: SendContext) -> Dict[str, Any]:
    return {
        "status": alert.status,
        "labels": dict(alert.labels),
        "annotations": annotations(alert),
        "startsAt": rfc3339(alert.starts_at),
        "endsAt": rfc3339(alert.ends_at) if alert.ends_at is not None else ZERO_TIME,
        "generatorURL": context.external_url or "",
        "fingerprint": alert.fingerprint,
    }


def _common(mappings: List[Dict[str, str]]) -> Dict[str, str]:
    """The name/value pairs every mapping has."""
    if not mappings:
        return {}
    common = dict(mappings[0])
    for mapping in mappings[1:]:
        common = {name: value for name, value in common.items() if mapping.get(name) == value}
    return common
