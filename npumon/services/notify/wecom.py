"""WeCom (企业微信) group robot: a markdown message, whose content may be at most 4096 bytes. There is no
signing: the key in the URL is the secret. 20 messages a minute per robot."""

from typing import Sequence

from . import text
from .alert import FIRING, Alert
from .flavour import Flavour, Request, SendContext, Timing, chat_outcome, json_request

API_FREQ_OUT_OF_LIMIT = 45009
CONTENT_LIMIT_BYTES = 4096
_COLOURS = {"critical": "warning", "warning": "warning", "info": "comment"}  # WeCom has info/comment/warning


class WeCom(Flavour):
    kind = "wecom"
    max_alerts = 20
    max_bytes = CONTENT_LIMIT_BYTES
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=30.0, repeat_seconds=4 * 3600.0,
                    max_per_minute=20)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        lines = ["**{}**".format(text.title(alerts, context.host))]
        for alert in alerts:
            colour = _COLOURS.get(alert.severity, "comment") if alert.status == FIRING else "info"
            lines.append('<font color="{}">[{}]</font> {}'.format(colour, text.state_word(alert),
                                                                 text.headline(alert)))
            if alert.status == FIRING and alert.hint:
                lines.append("> " + alert.hint)
            lines.append('<font color="comment">{}</font>'.format(text.timing(alert)))
        if context.external_url:
            lines.append("[npumon]({})".format(context.external_url))
        content = "\n".join(lines)
        return json_request(context.secrets["url"], {"msgtype": "markdown", "markdown": {"content": content}},
                            size_of=content)

    def outcome(self, status: int, answer: str) -> str:
        return chat_outcome(status, answer, "errcode", (API_FREQ_OUT_OF_LIMIT,))
