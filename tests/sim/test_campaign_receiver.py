"""The campaign's webhook receiver (npumon/sim/campaign_receiver.py): npumon's webhook payload in, the scorer's
`notified` events out."""

import requests

from npumon.sim.campaign_receiver import NotificationReceiver, notified_events

PAYLOAD = {"version": "4", "status": "firing", "alerts": [
    {"status": "firing", "labels": {"alertname": "temperature-critical", "subject": "npu3/chip0", "host": "x"}},
    {"status": "resolved", "labels": {"alertname": "job-fault", "subject": "host"}}]}


def test_each_alert_of_a_delivery_is_an_event_and_other_shapes_are_none():
    events = notified_events("campaign-02", 12.5, PAYLOAD)
    assert events == [
        {"host": "campaign-02", "time": 12.5, "kind": "notified", "subject": "npu3/chip0",
         "rule": "temperature-critical", "status": "firing"},
        {"host": "campaign-02", "time": 12.5, "kind": "notified", "subject": "host", "rule": "job-fault",
         "status": "resolved"}]
    assert notified_events("h", 1.0, None) == [] and notified_events("h", 1.0, {"alerts": "no"}) == []
    assert notified_events("h", 1.0, {"alerts": [3, {"labels": []}]}) == []


def test_the_receiver_records_who_sent_what_and_when():
    receiver = NotificationReceiver(clock=lambda: 99.0)
    receiver.start()
    try:
        assert requests.post(receiver.url_for("campaign-07"), json=PAYLOAD, timeout=10).status_code == 200
        assert requests.post(receiver.url_for("campaign-08"), data=b"not json", timeout=10).status_code == 200
    finally:
        receiver.stop()
    assert [(e["host"], e["time"], e["rule"]) for e in receiver.events()] == [
        ("campaign-07", 99.0, "temperature-critical"), ("campaign-07", 99.0, "job-fault")]
