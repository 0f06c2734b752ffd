"""The health API (outputs/health_api.py) through the real HTTP server: verdicts and their 200/503, chips by
device or pod, the bounded event history, and POST /v1/ack only behind authentication."""

import dataclasses
import socket

import bcrypt
import pytest
import requests

from simulated_pass import judged_pass
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.outputs.health_api import MAX_EVENTS, HealthApi, Unavailable
from npumon.outputs.report import verdict_of
from npumon.outputs.web import WebServer
from npumon.outputs.webconfig import load_web_config

PASSWORD = "correct horse"
HASH = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()


@pytest.fixture(scope="module")
def hbm_pass(tmp_path_factory):
    snapshot, findings = judged_pass(tmp_path_factory.mktemp("sim"), "hbm-ecc-fault")
    # the kubelet's pod map: a serving pod on device 0 and 1, another on device 3
    pods = {0: "serving/llm-0", 1: "serving/llm-0", 3: "batch/train-7"}
    chips = tuple(dataclasses.replace(chip, extra=dict(chip.extra, pods=[
        {"namespace": pods[chip.device_id].split("/")[0], "pod": pods[chip.device_id].split("/")[1],
         "container": "main"}] if chip.device_id in pods else [])) for chip in snapshot.chips)
    snapshot = dataclasses.replace(snapshot, chips=chips)
    return snapshot, findings


@pytest.fixture
def serve(tmp_path, hbm_pass):
    servers, calls = [], {"events": [], "acks": []}
    snapshot, findings = hbm_pass

    def events(limit, since):
        calls["events"].append((limit, since))
        if since == 0:
            raise Unavailable("no event history here")
        return [{"id": n, "kind": "verdict_changed"} for n in range(limit)]

    def ack(rule, subject, user, note):
        calls["acks"].append((rule, subject, user, note))
        return 202, {"rule": rule}

    def start(web_config_text=None, state=None):
        security = None
        if web_config_text is not None:
            path = tmp_path / "web-{}.yml".format(len(servers))
            path.write_text(web_config_text)
            security = load_web_config(str(path))
        api = HealthApi(state or (lambda: (snapshot, verdict_of(snapshot, findings))), events, ack)
        server = WebServer("127.0.0.1:0", build_registry(lambda: ExporterView(None, [])), lambda: {},
                           lambda: (True, ""), security=security, api=api)
        server.start()
        servers.append(server)
        return server

    start.calls = calls
    yield start
    for server in servers:
        server.stop()


def get(server, path, **kwargs):
    return requests.get("http://127.0.0.1:{}{}".format(server.port, path), timeout=5, **kwargs)


def post(server, path, **kwargs):
    return requests.post("http://127.0.0.1:{}{}".format(server.port, path), timeout=5, **kwargs)


def test_health_is_503_while_a_chip_is_out_and_names_it(serve):
    response = get(serve(), "/v1/health")
    assert response.status_code == 503 and response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert body["healthy"] is False and body["state"] == "degraded"
    out = [(chip["npu"], chip["device_id"], chip["state"]) for chip in body["chips"] if chip["state"] != "healthy"]
    assert out == [(3, 3, "out_of_service")]
    assert len(body["chips"]) == 8


@pytest.mark.parametrize("query, status, devices", [
    ("devices=0,1", 200, [0, 1]),
    ("devices=3", 503, [3]),
    ("devices=1,3,1", 503, [1, 3]),
    ("pod=serving/llm-0", 200, [0, 1]),
    ("pod=batch/train-7", 503, [3]),
])
def test_health_of_some_chips(serve, query, status, devices):
    response = get(serve(), "/v1/health?" + query)
    assert response.status_code == status
    assert [chip["device_id"] for chip in response.json()["chips"]] == devices


@pytest.mark.parametrize("query, status, error", [
    ("devices=9", 404, "no chip with device id 9"),
    ("pod=serving/nope", 404, "no pod 'serving/nope'"),
    ("devices=0&pod=a/b", 400, "not both"),
    ("devices=zero", 400, "devices: expected device ids"),
    ("devices=" + ",".join(["1"] * 65), 400, "at most 64"),
    ("color=red", 400, "unknown parameter 'color'"),
    ("devices=0&devices=1", 400, "given twice"),
    ("x=" + "a" * 2000, 400, "query longer than 1024 bytes"),
])
def test_bad_or_unknown_health_queries(serve, query, status, error):
    response = get(serve(), "/v1/health?" + query)
    assert response.status_code == status and error in response.json()["error"]


def test_health_before_the_first_poll_is_503(serve):
    response = get(serve(state=lambda: (None, None)), "/v1/health")
    assert response.status_code == 503 and response.json() == {"error": "no poll has finished yet"}


def test_events_are_bounded(serve):
    server = serve()
    assert len(get(server, "/v1/events").json()["events"]) == 100
    assert len(get(server, "/v1/events?limit=3&since=1767225600").json()["events"]) == 3
    for query in ("limit=0", "limit={}".format(MAX_EVENTS + 1), "limit=many", "since=nan", "since=-1"):
        assert get(server, "/v1/events?" + query).status_code == 400, query
    gone = get(server, "/v1/events?since=0")
    assert gone.status_code == 503 and gone.json() == {"error": "no event history here"}
    assert serve.calls["events"] == [(100, None), (3, 1767225600.0), (100, 0.0)]


def test_ack_is_refused_without_authentication(serve):
    response = post(serve(), "/v1/ack", json={"rule": "ecc-uncorrectable", "subject": "npu3/chip0"})
    assert response.status_code == 403 and "needs authentication" in response.json()["error"]
    assert serve.calls["acks"] == []


def test_ack_behind_basic_auth(serve):
    server = serve("basic_auth_users:\n  alice: '{}'\n".format(HASH))
    ack = {"rule": "ecc-uncorrectable", "subject": "npu3/chip0", "note": "card swapped"}
    assert post(server, "/v1/ack", json=ack).status_code == 401
    assert post(server, "/v1/ack", json=ack, auth=("alice", "wrong")).status_code == 401
    assert get(server, "/v1/health").status_code == 401  # the listener's auth covers the health API too
    assert post(server, "/v1/ack", json=ack, auth=("alice", PASSWORD)).status_code == 202
    assert serve.calls["acks"] == [("ecc-uncorrectable", "npu3/chip0", "alice", "card swapped")]
    for bad in ({"rule": "x"}, {"rule": "x", "subject": "gpu0"}, [1], {"rule": "x", "subject": "host", "note": 5}):
        assert post(server, "/v1/ack", json=bad, auth=("alice", PASSWORD)).status_code == 400, bad
    assert post(server, "/v1/ack", data=b"\xff\xfe", auth=("alice", PASSWORD)).status_code == 400
    big = post(server, "/v1/ack", data=b"{" + b" " * 5000 + b"}", auth=("alice", PASSWORD))
    assert big.status_code == 413
    assert post(server, "/v1/health", json=ack, auth=("alice", PASSWORD)).status_code == 405
    assert len(serve.calls["acks"]) == 1


def test_ack_without_a_length_or_with_a_short_body_is_refused(serve):
    server = serve("basic_auth_users:\n  alice: '{}'\n".format(HASH))
    token = __import__("base64").b64encode("alice:{}".format(PASSWORD).encode()).decode()
    for head, status in ((b"", b"411"), (b"Content-Length: 50\r\n", b"400")):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"POST /v1/ack HTTP/1.0\r\nAuthorization: Basic " + token.encode() + b"\r\n" + head
                         + b"\r\n{}")
            sock.shutdown(socket.SHUT_WR)
            answer = sock.recv(200)
        assert answer.split()[1] == status, answer
    assert serve.calls["acks"] == []
