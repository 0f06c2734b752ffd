"""Every receiver flavour against a real HTTP server on 127.0.0.1: payload shape, signatures recomputed
here (independently of npumon's signing code), and how each service's answers are read.

"""

import base64
import hashlib
import hmac
from typing import Optional
from urllib.parse import parse_qs, quote_plus

import pytest

from npumon.model import Finding
from npumon.services.notify.alert import alert_from_finding
from npumon.services.notify.config import ReceiverConfig
from npumon.services.notify.receiver import Receiver
from recording_server import RecordingServer, json_reply

HOST = "npu-host-01"
NOW = 1767225600.0  # 2026-01-01T00:00:00Z
DINGTALK_SECRET = "SEC0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcd"
FEISHU_SECRET = "feishu-signing-secret-xyz"
TOKEN = "tok3n5ecretvalue42"


def finding(rule="health-alarm", severity="critical", subject="npu0/chip0", since=NOW - 120, labels=None,
            summary="health Alarm; error codes: A4025021", hint="Check dmesg & the <device> logs."):
    return Finding(rule=rule, severity=severity, subject=subject, summary=summary, hint=hint, since=since,
                   labels=labels or {})


def alert(resolved_at=None, **kwargs):
    made = alert_from_finding(finding(**kwargs), HOST, {"cluster": "c1"})
    return made.resolved(resolved_at) if resolved_at is not None else made


def receiver(kind: str, url: Optional[str] = None, **settings) -> Receiver:
    config = ReceiverConfig(name="r-" + kind, type=kind, url=url, **settings)
    return Receiver.from_config(config, 0, "<test>")


# ------------------------------------------------------------------------------------------ webhook

def test_webhook_carries_the_alertmanager_v4_payload():
    with RecordingServer() as server:
        sender = receiver("webhook", server.url("/hook?token=" + TOKEN))
        firing = alert()
        resolved = alert(rule="temperature-warning", severity="warning", subject="npu1/chip0", resolved_at=NOW - 5,
                         labels={"team": "infra"})
        answer = sender.send([firing, resolved], HOST, NOW, "http://npu-host-01:9842/status")
        (request,) = server.requests
    assert answer.outcome == "delivered" and answer.sent == 2 and answer.detail == "HTTP 200: ok"
    assert request.path == "/hook" and parse_qs(request.query) == {"token": [TOKEN]}
    assert request.headers["Content-Type"].startswith("application/json")
    payload = request.json()
    assert set(payload) >= {"version", "groupKey", "status", "receiver", "groupLabels", "commonLabels",
                            "commonAnnotations", "externalURL", "alerts"}
    assert payload["version"] == "4" and payload["status"] == "firing" and payload["receiver"] == "r-webhook"
    assert payload["groupLabels"] == {"host": HOST}
    assert payload["commonLabels"] == {"host": HOST, "cluster": "c1", "chip": "0"}
    assert payload["commonAnnotations"] == {"summary": "health Alarm; error codes: A4025021",
                                            "description": "Check dmesg & the <device> logs."}
    assert payload["externalURL"] == "http://npu-host-01:9842/status"
    first, second = payload["alerts"]
    assert set(first) == {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL", "fingerprint"}
    assert first["status"] == "firing" and first["labels"] == {
        "alertname": "health-alarm", "severity": "critical", "host": HOST, "subject": "npu0/chip0",
        "npu": "0", "chip": "0", "cluster": "c1"}
    assert first["annotations"] == {"summary": "health Alarm; error codes: A4025021",
                                    "description": "Check dmesg & the <device> logs."}
    assert first["startsAt"] == "2025-12-31T23:58:00Z" and first["endsAt"] == "0001-01-01T00:00:00Z"
    assert len(first["fingerprint"]) == 16 and first["fingerprint"] != second["fingerprint"]
    assert second["status"] == "resolved" and second["endsAt"] == "2025-12-31T23:59:55Z"
    assert second["labels"]["team"] == "infra"


def test_fingerprint_is_stable_and_distinguishes_hosts_rules_subjects():
    assert alert().fingerprint == alert(summary="other words", since=NOW).fingerprint
    assert alert().fingerprint == alert(resolved_at=NOW).fingerprint
    assert alert().fingerprint != alert(subject="npu0/chip1").fingerprint
    assert alert().fingerprint != alert(rule="health-warning").fingerprint
    assert alert().fingerprint != alert_from_finding(finding(), "other-host", {}).fingerprint


def test_rule_labels_cannot_override_the_identity_labels():
    made = alert(labels={"severity": "info", "alertname": "x", "team": "infra"})
    assert made.labels["severity"] == "critical" and made.labels["alertname"] == "health-alarm"
    assert made.labels["team"] == "infra"


# ------------------------------------------------------------------------------------------ alertmanager (fake)

def test_alertmanager_push_shape_and_expiry():
    with RecordingServer() as server:
        sender = receiver("alertmanager", server.url("/prefix/"))
        assert sender.send([alert(), alert(subject="npu2/chip0", resolved_at=NOW - 1)], HOST, NOW,
                           None).outcome == "delivered"
        (request,) = server.requests
    assert request.path == "/prefix/api/v2/alerts"
    firing, resolved = request.json()
    assert set(firing) == {"labels", "annotations", "startsAt", "endsAt"}  # no generatorURL without external_url
    assert firing["labels"]["alertname"] == "health-alarm"
    assert firing["startsAt"] == "2025-12-31T23:58:00Z"
    assert firing["endsAt"] == "2026-01-01T00:04:00Z"  # four default 60 s resend intervals ahead
    assert resolved["endsAt"] == "2025-12-31T23:59:59Z"


def test_alertmanager_400_is_final_and_500_is_retried():
    for status, outcome in ((400, "failed"), (500, "retry"), (503, "retry"), (429, "retry")):
        with RecordingServer(json_reply("at least one label pair required", status)) as server:
            answer = receiver("alertmanager", server.url()).send([alert()], HOST, NOW, None)
        assert (answer.outcome, answer.status) == (outcome, status)
        assert "label pair" in answer.detail or status != 400


# ------------------------------------------------------------------------------------------ DingTalk

def test_dingtalk_markdown_and_signature_recomputed():
    with RecordingServer(json_reply({"errcode": 0, "errmsg": "ok"})) as server:
        sender = receiver("dingtalk", server.url("/robot/send?access_token=" + TOKEN), secret=DINGTALK_SECRET)
        answer = sender.send([alert(), alert(subject="npu1/chip0", resolved_at=NOW)], HOST, NOW, None)
        (request,) = server.requests
    assert answer.outcome == "delivered"
    query = parse_qs(request.query)
    assert query["access_token"] == [TOKEN]
    timestamp = query["timestamp"][0]
    assert timestamp == str(int(NOW * 1000))  # milliseconds
    expected = base64.b64encode(hmac.new(DINGTALK_SECRET.encode(), "{}\n{}".format(timestamp, DINGTALK_SECRET).encode(),
                                         hashlib.sha256).digest()).decode()
    assert query["sign"] == [expected]
    assert "sign=" + quote_plus(expected) in request.query  # URL-encoded as DingTalk's sample does
    body = request.json()
    assert body["msgtype"] == "markdown"
    assert body["markdown"]["title"].startswith("[FIRING 1, RESOLVED 1] npu-host-01: health-alarm on npu0/chip0")
    text = body["markdown"]["text"]
    assert "**[CRITICAL]** health-alarm on npu0/chip0: health Alarm" in text
    assert "**[RESOLVED]** health-alarm on npu1/chip0" in text and "after 2m00s" in text


def test_dingtalk_without_secret_sends_no_signature():
    with RecordingServer(json_reply({"errcode": 0, "errmsg": "ok"})) as server:
        receiver("dingtalk", server.url("/robot/send?access_token=" + TOKEN)).send([alert()], HOST, NOW, None)
        (request,) = server.requests
    assert set(parse_qs(request.query)) == {"access_token"}


@pytest.mark.parametrize("errcode, outcome", [(0, "delivered"), (130101, "retry"), (310000, "failed"),
                                              (300001, "failed")])
def test_dingtalk_reads_the_errcode_of_an_http_200(errcode, outcome):
    with RecordingServer(json_reply({"errcode": errcode, "errmsg": "answer " + TOKEN})) as server:
        answer = receiver("dingtalk", server.url("/robot/send?access_token=" + TOKEN)).send([alert()], HOST, NOW, None)
    assert answer.outcome == outcome and answer.status == 200
    assert TOKEN not in answer.detail and "<secret>" in answer.detail  # an echoed token is masked


# ------------------------------------------------------------------------------------------ Feishu

def test_feishu_card_and_its_own_signature_scheme():
    with RecordingServer(json_reply({"code": 0, "msg": "success", "data": {}})) as server:
        sender = receiver("feishu", server.url("/open-apis/bot/v2/hook/" + TOKEN), secret=FEISHU_SECRET)
        answer = sender.send([alert(severity="warning", rule="temperature-warning")], HOST, NOW, None)
        (request,) = server.requests
    assert answer.outcome == "delivered"
    body = request.json()
    assert body["timestamp"] == str(int(NOW))  # seconds, in the body
    # key = "timestamp\nsecret", empty message -- not DingTalk's key = secret
    expected = base64.b64encode(hmac.new("{}\n{}".format(body["timestamp"], FEISHU_SECRET).encode(), b"",
                                         hashlib.sha256).digest()).decode()
    assert body["sign"] == expected
    dingtalk_style = base64.b64encode(hmac.new(FEISHU_SECRET.encode(), "{}\n{}".format(
        body["timestamp"], FEISHU_SECRET).encode(), hashlib.sha256).digest()).decode()
    assert body["sign"] != dingtalk_style
    assert request.query == ""
    assert body["msg_type"] == "interactive"
    assert body["card"]["header"]["template"] == "orange"
    assert "temperature-warning on npu0/chip0" in body["card"]["elements"][0]["text"]["content"]


@pytest.mark.parametrize("answer_doc, outcome", [
    ({"code": 0, "msg": "success"}, "delivered"),
    ({"StatusCode": 0, "StatusMessage": "success"}, "delivered"),
    ({"code": 19021, "msg": "sign match fail or timestamp is not within one hour from current time"}, "failed"),
    ({"code": 9499, "msg": "Bad Request"}, "failed"),
    ({"code": 11232, "msg": "frequency limited"}, "retry"),
])
def test_feishu_answers(answer_doc, outcome):
    with RecordingServer(json_reply(answer_doc)) as server:
        answer = receiver("feishu", server.url("/hook/" + TOKEN)).send([alert()], HOST, NOW, None)
    assert answer.outcome == outcome


# ------------------------------------------------------------------------------------------ WeCom

def test_wecom_markdown_content_stays_within_4096_bytes_and_the_rest_waits():
    with RecordingServer(json_reply({"errcode": 0, "errmsg": "ok"})) as server:
        sender = receiver("wecom", server.url("/cgi-bin/webhook/send?key=" + TOKEN))
        many = [alert(subject="npu{}/chip0".format(n), hint="温度过高 " * 40) for n in range(15)]
        answer = sender.send(many, HOST, NOW, None)
        (request,) = server.requests
    content = request.json()["markdown"]["content"]
    assert request.json()["msgtype"] == "markdown"
    assert len(content.encode("utf-8")) <= 4096
    assert 1 <= answer.sent < 15  # the rest goes in the next message
    assert content.count("[CRITICAL]") == answer.sent
    assert '<font color="warning">[CRITICAL]</font>' in content


def test_wecom_single_huge_alert_is_shortened_to_fit():
    with RecordingServer(json_reply({"errcode": 0, "errmsg": "ok"})) as server:
        answer = receiver("wecom", server.url("/send?key=" + TOKEN)).send(
            [alert(hint="x" * 10000, summary="y" * 5000)], HOST, NOW, None)
        (request,) = server.requests
    assert answer.sent == 1
    assert len(request.json()["markdown"]["content"].encode("utf-8")) <= 4096


def test_wecom_rate_limit_code_is_retried():
    with RecordingServer(json_reply({"errcode": 45009, "errmsg": "api freq out of limit"})) as server:
        assert receiver("wecom", server.url("/send?key=" + TOKEN)).send([alert()], HOST, NOW, None).outcome == "retry"


# ------------------------------------------------------------------------------------------ Slack

def test_slack_text_is_escaped_mrkdwn():
    with RecordingServer() as server:
        answer = receiver("slack", server.url("/services/T000/B000/" + TOKEN)).send([alert()], HOST, NOW,
                                                                                     "https://x/status")
        (request,) = server.requests
    assert answer.outcome == "delivered"
    text = request.json()["text"]
    assert "*[CRITICAL]* health-alarm on npu0/chip0" in text
    assert "&amp; the &lt;device&gt; logs" in text
    assert "<https://x/status|npumon>" in text


def test_slack_4xx_is_final_with_its_reason():
    with RecordingServer(lambda request: (404, {}, b"no_service")) as server:
        answer = receiver("slack", server.url("/services/T/B/" + TOKEN)).send([alert()], HOST, NOW, None)
    assert (answer.outcome, answer.detail) == ("failed", "HTTP 404: no_service")


# ------------------------------------------------------------------------------------------ PagerDuty

def test_pagerduty_trigger_then_resolve_with_one_dedup_key():
    accepted = json_reply({"status": "success", "message": "Event processed"}, 202)
    with RecordingServer(accepted) as server:
        sender = receiver("pagerduty", server.url("/v2/enqueue"), routing_key="R" * 32)
        first = sender.send([alert(), alert(subject="npu3/chip0")], HOST, NOW, "https://x/status")
        second = sender.send([alert(resolved_at=NOW + 60)], HOST, NOW + 60, None)
        trigger, resolve = [request.json() for request in server.requests]
    assert first.sent == 1 and first.outcome == "delivered"  # one event per request
    assert second.outcome == "delivered"
    assert trigger["event_action"] == "trigger" and trigger["routing_key"] == "R" * 32
    assert trigger["dedup_key"] == alert().fingerprint
    assert trigger["payload"]["summary"].startswith("npu-host-01: health-alarm on npu0/chip0: health Alarm")
    assert trigger["payload"]["source"] == HOST and trigger["payload"]["severity"] == "critical"
    assert trigger["payload"]["timestamp"] == "2025-12-31T23:58:00Z"
    assert trigger["client_url"] == "https://x/status"
    assert resolve == {"routing_key": "R" * 32, "dedup_key": trigger["dedup_key"], "event_action": "resolve"}


def test_pagerduty_summary_is_cut_at_1024_characters():
    with RecordingServer(json_reply({}, 202)) as server:
        receiver("pagerduty", server.url(), routing_key="k" * 32).send([alert(summary="s" * 3000)], HOST, NOW, None)
        (request,) = server.requests
    assert len(request.json()["payload"]["summary"]) == 1024


@pytest.mark.parametrize("status, outcome", [(202, "delivered"), (400, "failed"), (429, "retry"), (500, "retry")])
def test_pagerduty_answers(status, outcome):
    with RecordingServer(json_reply({"status": "x"}, status)) as server:
        assert receiver("pagerduty", server.url(), routing_key="k" * 32).send(
            [alert()], HOST, NOW, None).outcome == outcome


def test_pagerduty_default_url_is_the_events_api():
    sender = receiver("pagerduty", routing_key="k" * 32)
    assert sender.endpoint == "https://events.pagerduty.com"


# ------------------------------------------------------------------------------------------ transport

def test_connection_refused_is_retried_and_names_no_secret():
    with RecordingServer() as server:
        url = server.url("/robot/send?access_token=" + TOKEN)
    answer = receiver("dingtalk", url, secret=DINGTALK_SECRET).send([alert()], HOST, NOW, None)
    assert answer.outcome == "retry" and answer.status is None
    assert answer.detail == "cannot connect: Connection refused"


def test_timeout_is_retried():
    with RecordingServer(delay=1.0) as server:
        answer = receiver("webhook", server.url(), timeout_seconds=0.2).send([alert()], HOST, NOW, None)
    assert (answer.outcome, answer.detail) == ("retry", "timed out after 0.2s")


def test_redirects_are_not_followed():
    with RecordingServer(lambda request: (302, {"Location": "http://127.0.0.1:1/elsewhere"}, b"")) as server:
        answer = receiver("webhook", server.url()).send([alert()], HOST, NOW, None)
        assert len(server.requests) == 1
    assert answer.outcome == "failed" and answer.status == 302


def test_retry_after_is_passed_on():
    with RecordingServer(lambda request: (429, {"Retry-After": "30"}, b"slow down")) as server:
        answer = receiver("webhook", server.url()).send([alert()], HOST, NOW, None)
    assert (answer.outcome, answer.retry_after) == ("retry", 30.0)


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_tls_is_verified_by_default_and_ca_file_trusts_a_private_ca(certificate):
    cert, key = certificate
    with RecordingServer(tls=(cert, key)) as server:
        refused = receiver("webhook", server.url("/hook")).send([alert()], HOST, NOW, None)
        trusted = receiver("webhook", server.url("/hook"), ca_file=cert).send([alert()], HOST, NOW, None)
        insecure = receiver("webhook", server.url("/hook"), insecure_skip_verify=True).send([alert()], HOST, NOW, None)
    assert refused.outcome == "retry" and refused.detail.startswith("TLS error: certificate verify failed")
    assert trusted.outcome == "delivered" and insecure.outcome == "delivered"


def test_an_unreadable_ca_file_is_a_one_line_config_error(tmp_path):
    from npumon.services.notify.secrets import SecretError

    with pytest.raises(SecretError, match=r"^<test>:1: notify.receivers\[0\].ca_file: receiver 'r-webhook': "
                                          r"cannot read .*missing.pem$"):
        receiver("webhook", "https://127.0.0.1:1/", ca_file=str(tmp_path / "missing.pem"))
