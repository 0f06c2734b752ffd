"""Which receivers get an alert, and which pending notifications go out together. Pure functions.

Routing: every route whose conditions all match adds its receivers; with no routes at all, every alert
goes to every receiver.

Grouping: a receiver sends one message for everything it has pending. A notification waits at least
`group_wait` for company (default 0: the first finding after a quiet spell goes out at once); after a
message, the next waits until `group_interval` has passed, so a burst of findings becomes one message. A message carries at most one notification per
alert (a later state change of the same alert waits for the next message, so each arrives in order), and
at most as many as the service takes at once.
"""

import fnmatch
from typing import Iterable, List, Optional, Sequence, TypeVar

from .alert import Alert
from .config import RouteConfig

T = TypeVar("T")


def route_matches(route: RouteConfig, alert: Alert) -> bool:
    if route.severity and alert.severity not in route.severity:
        return False
    if route.rule and not any(fnmatch.fnmatchcase(alert.rule, pattern) for pattern in route.rule):
        return False
    return all(alert.labels.get(name) == value for name, value in route.labels.items())


def receivers_for(alert: Alert, routes: Sequence[RouteConfig], all_receivers: Sequence[str]) -> List[str]:
    if not routes:
        return list(all_receivers)
    chosen: List[str] = []
    for route in routes:
        if route_matches(route, alert):
            chosen.extend(name for name in route.receivers if name not in chosen)
    return chosen


def group_due(now: float, oldest_pending: Optional[float], last_message: Optional[float],
              group_wait: float, group_interval: float) -> bool:
    """Whether a receiver with notifications pending since `oldest_pending` may send a message now."""
    if oldest_pending is None:
        return False
    if last_message is not None and now - last_message < group_interval:
        return False
    return now - oldest_pending >= group_wait


def one_per_alert(pending: Iterable[T], fingerprint_of, limit: int) -> List[T]:
    """The oldest pending notification of each alert, oldest first, at most `limit`."""
    chosen: List[T] = []
    seen = set()
    for item in pending:
        key = fingerprint_of(item)
        if key in seen:
            continue
        seen.add(key)
        chosen.append(item)
        if len(chosen) >= limit:
            break
    return chosen
