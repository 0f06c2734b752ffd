"""Slack incoming webhook: `{"text": ...}` in Slack's mrkdwn. Slack answers a plain `ok`; errors come as
4xx with a short reason (invalid_payload, no_service, ...), which are final."""

from typing import Sequence

from . import text
from .alert import FIRING, Alert
from .flavour import Flavour, Request, SendContext, Timing, json_request

_ICONS = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":large_blue_circle:"}


class Slack(Flavour):
    kind = "slack"
    max_alerts = 30
    max_bytes = 35000  # Slack truncates text past 40000 characters
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=30.0, repeat_seconds=4 * 3600.0,
                    max_per_minute=60)  # about one message a second

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        lines = ["*{}*".format(_escape(text.title(alerts, context.host)))]
        for alert in alerts:
            icon = _ICONS.get(alert.severity, "") if alert.status == FIRING else ":white_check_mark:"
            lines.append("{} *[{}]* {}".format(icon, text.state_word(alert), _escape(text.headline(alert))))
            if alert.status == FIRING and alert.hint:
                lines.append(">" + _escape(alert.hint))
            lines.append("_{}_".format(text.timing(alert)))
        if context.external_url:
            lines.append("<{}|npumon>".format(context.external_url))
        return json_request(context.secrets["url"], {"text": "\n".join(lines)})


def _escape(value: str) -> str:
    """Slack's three control characters in mrkdwn."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
