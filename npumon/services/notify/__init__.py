"""Alert delivery to on-call: findings -> durable outbox -> webhooks, Alertmanager, chat robots, PagerDuty.

    config.py        the `notify:` config section and its validation
    alert.py         Alert (a finding as receivers see it) and its stable fingerprint
    routing.py       which receivers get an alert; grouping (pure)
    outbox.py        the SQLite outbox: written before any attempt, survives kill -9
    service.py       the daemon Service: queue on evaluation, deliver on a thread pool, retry with backoff
    receiver.py      a configured receiver and `send()`, the one path every message takes
    transport.py     the HTTP POST (TLS verified, no redirects, errors without URLs, answers read bounded)
    secrets.py       secrets inline / from files / from the environment
    redact.py        every form of every secret masked in answers and errors; the 512-byte cap (pure)
    signing.py       DingTalk and Feishu signatures
    flavour.py       what a receiver flavour provides, and shared answer handling
    webhook.py alertmanager.py dingtalk.py feishu.py wecom.py slack.py pagerduty.py   one per flavour
    text.py          wording shared by the chat flavours
    metrics.py       npumon_notifications_total and the outbox gauges
    cli.py           `npumon notify test`

Nothing here is imported by `npumon check`; the package's modules import requests only where they send.
"""
