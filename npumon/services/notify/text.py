"""Human wording shared by the chat flavours (DingTalk, Feishu, WeCom, Slack, PagerDuty summaries).
Pure functions; each flavour adds its own markup around these."""

from typing import Sequence

from ...outputs.report import rfc3339
from .alert import FIRING, Alert


def title(alerts: Sequence[Alert], host: str) -> str:
    """`[FIRING 2, RESOLVED 1] host01: health-alarm on npu0/chip0, ...` -- short enough for a push
    notification preview."""
    firing = sum(1 for alert in alerts if alert.status == FIRING)
    resolved = len(alerts) - firing
    counts = ", ".join(part for part in ("FIRING {}".format(firing) if firing else "",
                                         "RESOLVED {}".format(resolved) if resolved else "") if part)
    first = alerts[0]
    more = " and {} more".format(len(alerts) - 1) if len(alerts) > 1 else ""
    return "[{}] {}: {} on {}{}".format(counts, host, first.rule, first.subject, more)


def state_word(alert: Alert) -> str:
    return "RESOLVED" if alert.status != FIRING else alert.severity.upper()


def headline(alert: Alert) -> str:
    """`health-alarm on npu0/chip0: health Alarm; error codes: ...`"""
    return "{} on {}: {}".format(alert.rule, alert.subject, alert.summary)


def timing(alert: Alert) -> str:
    if alert.status == FIRING or alert.ends_at is None:
        return "since {}".format(rfc3339(alert.starts_at))
    return "resolved {} after {}".format(rfc3339(alert.ends_at), duration(alert.ends_at - alert.starts_at))


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return "{}s".format(seconds)
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return "{}m{:02d}s".format(minutes, seconds)
    hours, minutes = divmod(minutes, 60)
    return "{}h{:02d}m".format(hours, minutes)

