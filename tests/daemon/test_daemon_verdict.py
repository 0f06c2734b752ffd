"""The daemon's verdicts end to end (in-process daemon, simulated host, real HTTP): /v1/health, /status,
/metrics and the event history agree on hbm-ecc-fault, and an acknowledgement over HTTP reaches the engine."""

import bcrypt
import requests

from daemon_harness import sample, wait_until
from npumon.daemon.daemon import Daemon
from npumon.sim import prepare_simulation
from npumon.sim.target import simulated_target
from test_daemon import fast_config, load

PASSWORD = "correct horse"


def test_hbm_ecc_fault_shows_the_chip_out_everywhere_and_acks_over_http(tmp_path, running):
    web = tmp_path / "web.yml"
    web.write_text("basic_auth_users:\n  alice: '{}'\n".format(
        bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(4)).decode()))
    target = simulated_target(prepare_simulation(str(tmp_path / "sim"), "hbm-ecc-fault"))
    daemon = running(Daemon(load(fast_config(tmp_path, "probe: {enabled: false}\n")), target,
                            listen="127.0.0.1:0", web_config_file=str(web)))
    base = "http://127.0.0.1:{}".format(daemon.web.port)
    auth = ("alice", PASSWORD)

    def out_chips():
        response = requests.get(base + "/v1/health", auth=auth, timeout=5)
        return [chip["subject"] for chip in response.json().get("chips", []) if chip["state"] == "out_of_service"]
    # before the first poll: 503 without chips; the fault's rules have no `for:`, so the chip goes out at once
    wait_until(lambda: out_chips() != [], timeout=30, what="a chip out of service on /v1/health")
    response = requests.get(base + "/v1/health", auth=auth, timeout=5)
    health = response.json()
    assert response.status_code == 503
    assert [chip["subject"] for chip in health["chips"] if chip["state"] == "out_of_service"] == ["npu3/chip0"]
    # device ids come with a slower tier than the main table: 404 until then
    wait_until(lambda: requests.get(base + "/v1/health?devices=0", auth=auth, timeout=5).status_code == 200,
               timeout=10, what="/v1/health?devices=0")
    assert requests.get(base + "/v1/health?devices=3", auth=auth, timeout=5).status_code == 503
    status = requests.get(base + "/status", auth=auth, timeout=5).json()
    assert status["verdict"]["chips"][3]["state"] == "out_of_service"
    metrics = requests.get(base + "/metrics", auth=auth, timeout=5).text
    assert sample(metrics, "npumon_chip_verdict", npu="3", chip="0", state="out_of_service") == 1.0
    assert sample(metrics, "npumon_chip_verdict", npu="3", chip="0", state="healthy") == 0.0
    assert sample(metrics, "npumon_host_verdict", state="degraded") == 1.0

    def changes():
        events = requests.get(base + "/v1/events?limit=1000", auth=auth, timeout=5).json()["events"]
        return [(e["subject"], e["details"]["new"]) for e in events if e["kind"] == "verdict_changed"]
    wait_until(lambda: ("npu3/chip0", "out_of_service") in changes(), timeout=10, what="verdict_changed event")
    # the chip is out on health-alarm from the main table alone; the ECC tier comes later, and the ack needs it
    wait_until(lambda: ("ecc-uncorrectable", "npu3/chip0") in {(f.rule, f.subject) for f in daemon.state().findings},
               timeout=10, what="ecc-uncorrectable active")

    ack = requests.post(base + "/v1/ack", auth=auth, timeout=5,
                        json={"rule": "ecc-uncorrectable", "subject": "npu3/chip0", "note": "inspected"})
    assert ack.status_code == 202, (ack.text, [(f.rule, f.subject) for f in daemon.state().findings])
    wait_until(lambda: ("ecc-uncorrectable", "npu3/chip0") in daemon.engine.acknowledged(), timeout=10,
               what="the acknowledgement in the engine")
    missing = requests.post(base + "/v1/ack", auth=auth, timeout=5, json={"rule": "nope", "subject": "host"})
    assert missing.status_code == 404
