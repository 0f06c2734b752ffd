"""What a notification is about: an Alert, made from a Finding, with a stable key.

The key (`fingerprint`) depends only on host, rule and subject, so the fired and the resolved
notification of one finding share it: PagerDuty closes the right incident with it, Alertmanager webhook
receivers see it as the alert's fingerprint, and receivers deduplicate a repeated delivery by
(fingerprint, status, startsAt).
"""

import hashlib
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Dict, Optional

from ...model import Finding, parse_chip_subject

FIRING = "firing"
RESOLVED = "resolved"


@dataclass(frozen=True)
class Alert:
    fingerprint: str
    status: str  # firing | resolved
    rule: str
    severity: str
    subject: str  # "host" or "npu<N>/chip<C>"
    host: str
    summary: str
    hint: str
    starts_at: float  # unix time the condition started to hold
    ends_at: Optional[float] = None  # unix time it resolved
    labels: Dict[str, str] = field(default_factory=dict)  # the full label set, see alert_labels()

    def resolved(self, at: float) -> "Alert":
        return replace(self, status=RESOLVED, ends_at=at)

    def to_json(self) -> Dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Alert":
        return cls(**data)


def fingerprint(host: str, rule: str, subject: str) -> str:
    """16 hex digits, like Alertmanager's fingerprints; stable across restarts and hosts' lifetimes."""
    digest = hashlib.sha256("\0".join((host, rule, subject)).encode("utf-8")).hexdigest()
    return digest[:16]


def alert_labels(finding: Finding, host: str, extra: Dict[str, str]) -> Dict[str, str]:
    """alertname, severity, host, subject (+ npu, chip) -- these cannot be overridden -- over the rule's
    own labels, over the config's `notify.labels`."""
    labels = dict(extra)
    labels.update(finding.labels)
    labels.update({"alertname": finding.rule, "severity": finding.severity, "host": host,
                   "subject": finding.subject})
    chip = parse_chip_subject(finding.subject)
    if chip is not None:
        labels.update({"npu": str(chip[0]), "chip": str(chip[1])})
    return labels


def alert_from_finding(finding: Finding, host: str, extra_labels: Dict[str, str]) -> Alert:
    return Alert(fingerprint=fingerprint(host, finding.rule, finding.subject), status=FIRING, rule=finding.rule,
                 severity=finding.severity, subject=finding.subject, host=host, summary=finding.summary,
                 hint=finding.hint, starts_at=finding.since, labels=alert_labels(finding, host, extra_labels))
