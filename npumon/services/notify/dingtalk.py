"""DingTalk custom robot: a markdown message; with a signing secret, `timestamp` and `sign` are added to
the URL's query. The robot takes 20 messages a minute (more throttles it for 10 minutes), so npumon
sends at most that and aggregates the rest into the next message."""

from dataclasses import replace
from typing import Sequence
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from . import text
from .alert import FIRING, Alert
from .flavour import Flavour, Request, SendContext, Timing, chat_outcome, json_request
from .signing import dingtalk_query

SEND_TOO_FAST = 130101  # "send too fast": over the robot's rate limit


class DingTalk(Flavour):
    kind = "dingtalk"
    max_alerts = 30
    max_bytes = 18000  # DingTalk's documented message limit is 20000 bytes; keep a margin
    timing = Timing(group_wait_seconds=0.0, group_interval_seconds=30.0, repeat_seconds=4 * 3600.0,
                    max_per_minute=20)

    def build(self, alerts: Sequence[Alert], context: SendContext) -> Request:
        url = context.secrets["url"]
        signature = ()
        if "secret" in context.secrets:
            query = dingtalk_query(context.secrets["secret"], context.now)
            url, signature = add_query(url, query), (query["sign"],)  # the sign opens the robot for an hour
        title = text.title(alerts, context.host)
        lines = ["#### " + title, ""]
        for alert in alerts:
            lines.append("**[{}]** {}  ".format(text.state_word(alert), text.headline(alert)))
            if alert.status == FIRING and alert.hint:
                lines.append("> {}  ".format(alert.hint))
            lines.append("> {}".format(text.timing(alert)))
            lines.append("")
        if context.external_url:
            lines.append("[npumon]({})".format(context.external_url))
        request = json_request(url, {"msgtype": "markdown", "markdown": {"title": title, "text": "\n".join(lines)}})
        return replace(request, credentials=signature)

    def outcome(self, status: int, answer: str) -> str:
        return chat_outcome(status, answer, "errcode", (SEND_TOO_FAST,))


def add_query(url: str, params) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))
