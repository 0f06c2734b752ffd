"""Feishu / Lark custom bot: an interactive card with a red (critical), orange (warning), blue (info) or
green (all resolved) header. With a signing secret, `timestamp` and `sign` go inside the JSON body."""

import json
from dataclasses import replace
from typing import Sequence

from . import text
from .alert import FIRING, Alert
from .flavour import DELIVERED, FAILED, RETRY, Flavour, Request, SendContext, Timing, json_request, status_outcome
from .signing import feishu_fields

FREQUENCY_LIMITED = 11232
_HEADER_COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}


class Feishu(Flavour):
    kind = "feishu"
    max_alerts = 30
    max_bytes = 19000  # the bot takes bodies up to 20 KB
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=30.0, repeat_seconds=4 * 3600.0,
                    max_per_minute=20)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        lines = []
        for alert in alerts:
            lines.append("**[{}]** {}".format(text.state_word(alert), text.headline(alert)))
            if alert.status == FIRING and alert.hint:
                lines.append(alert.hint)
            lines.append(text.timing(alert))
            lines.append("")
        if context.external_url:
            lines.append("[npumon]({})".format(context.external_url))
        body = {}
        if "secret" in context.secrets:
            body.update(feishu_fields(context.secrets["secret"], context.now))
        body.update({"msg_type": "interactive", "card": {
            "header": {"title": {"tag": "plain_text", "content": text.title(alerts, context.host)},
                       "template": _colour(alerts)},
            "elements": [{"tag": "div", "text": {"tag": "lark_md", "content": "\n".join(lines).strip()}}],
        }})
        signature = (body["sign"],) if "sign" in body else ()
        return replace(json_request(context.secrets["url"], body), credentials=signature)

    def outcome(self, status: int, answer: str) -> str:
        outcome = status_outcome(status)
        if outcome != DELIVERED:
            return outcome
        try:
            document = json.loads(answer)
            code = document.get("code", document.get("StatusCode"))  # older bots answer StatusCode
        except (ValueError, AttributeError):
            return FAILED
        if code == 0:
            return DELIVERED
        return RETRY if code == FREQUENCY_LIMITED else FAILED


def _colour(alerts: Sequence[Alert]) -> str:
    firing = [alert.severity for alert in alerts if alert.status == FIRING]
    for severity in ("critical", "warning", "info"):
        if severity in firing:
            return _HEADER_COLOURS[severity]
    return "green"
