"""A real Prometheus scraping `npumon run --simulate` through a web config: once with basic_auth, once with a
client certificate (mTLS); a wrong password gets 401 and a scraper without a certificate fails its
handshake, and npumon counts both in npumon_http_auth_failures_total, which the good jobs store."""

import os
import subprocess

import bcrypt
import pytest
import requests
import yaml

from daemon_harness import DaemonProcess, free_port, wait_until
from pki import make_pki

pytestmark = pytest.mark.integration

PROMETHEUS = "/usr/bin/prometheus"
PASSWORD = "scrape-me"
CONFIG = "state_dir: {state}\npoll:\n  table_seconds: 0.5\n"


def job(name, port, **settings):
    return dict({"job_name": name, "static_configs": [{"targets": ["127.0.0.1:{}".format(port)]}]}, **settings)


class Prometheus:
    def __init__(self, tmp_path, jobs):
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump({"global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
                                          "scrape_configs": jobs}))
        self.port = free_port()
        self.log = tmp_path / "prometheus.log"  # a file, not a pipe nobody reads: a full pipe would stall it
        with open(str(self.log), "wb") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, "--config.file=" + str(config), "--storage.tsdb.path=" + str(tmp_path / "tsdb"),
                 "--web.listen-address=127.0.0.1:{}".format(self.port)],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, start_new_session=True)

    def ready(self):
        try:
            return requests.get("http://127.0.0.1:{}/-/ready".format(self.port), timeout=1).status_code == 200
        except requests.ConnectionError:
            assert self.proc.poll() is None, self.log.read_text()[-2000:]
            return False

    def api(self, path, **params):
        response = requests.get("http://127.0.0.1:{}/api/v1/{}".format(self.port, path), params=params, timeout=5)
        response.raise_for_status()
        return response.json()["data"]

    def targets(self):
        """job -> (health, last error) of every scraped target."""
        return {t["labels"]["job"]: (t["health"], t["lastError"]) for t in self.api("targets")["activeTargets"]}

    def value(self, query):
        result = self.api("query", query=query)["result"]
        return float(result[0]["value"][1]) if result else None

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_prometheus_scrapes_through_basic_auth_and_mtls_and_wrong_credentials_are_counted(tmp_path):
    if not os.access(PROMETHEUS, os.X_OK):
        pytest.skip("{} is not installed (Debian package prometheus)".format(PROMETHEUS))
    pki = make_pki(str(tmp_path / "pki"))
    basic_web = tmp_path / "basic.yml"
    basic_web.write_text("basic_auth_users:\n  prometheus: '{}'\n".format(
        bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode().replace("$2b$", "$2y$")))  # as htpasswd writes
    mtls_web = tmp_path / "mtls.yml"
    mtls_web.write_text(yaml.safe_dump({"tls_server_config": {
        "cert_file": pki.server_cert, "key_file": pki.server_key, "client_ca_file": pki.ca,
        "client_auth_type": "RequireAndVerifyClientCert", "client_allowed_sans": ["prometheus"]}}))
    (tmp_path / "npumon.yaml").write_text(CONFIG.format(state=tmp_path / "state"))
    daemons = []
    prometheus = None
    try:
        for web in (basic_web, mtls_web):
            daemons.append(DaemonProcess(["--simulate", "--listen", "127.0.0.1:0", "--config",
                                          str(tmp_path / "npumon.yaml"), "--web-config-file", str(web)]))
        basic_port, mtls_port = (daemon.wait_serving() for daemon in daemons)
        client_tls = {"ca_file": pki.ca, "cert_file": pki.client_cert, "key_file": pki.client_key}
        prometheus = Prometheus(tmp_path, [
            job("basic", basic_port, basic_auth={"username": "prometheus", "password": PASSWORD}),
            job("basic-wrong", basic_port, basic_auth={"username": "prometheus", "password": "guess"}),
            job("mtls", mtls_port, scheme="https", tls_config=client_tls),
            job("mtls-no-cert", mtls_port, scheme="https", tls_config={"ca_file": pki.ca}),
            job("mtls-other-cert", mtls_port, scheme="https", tls_config=dict(
                client_tls, cert_file=pki.other_client_cert, key_file=pki.other_client_key)),
        ])

        wait_until(prometheus.ready, timeout=15, what="Prometheus ready")

        def settled():
            targets = prometheus.targets()
            done = len(targets) == 5 and all(health != "unknown" for health, _ in targets.values())
            return targets if done else None

        targets = wait_until(settled, timeout=30, interval=0.5, what="every target scraped once")
        assert targets["basic"] == ("up", ""), targets
        assert targets["mtls"] == ("up", ""), targets
        assert targets["basic-wrong"][0] == "down" and "401" in targets["basic-wrong"][1], targets
        assert targets["mtls-no-cert"][0] == "down", targets
        assert targets["mtls-other-cert"][0] == "down", targets

        def stored(query):
            return wait_until(lambda: [v for v in [prometheus.value(query)] if v], timeout=15, interval=0.5,
                              what=query)[0]

        assert stored('npumon_build_info{job="basic"}') == 1
        assert stored('npumon_build_info{job="mtls"}') == 1
        assert stored('npumon_http_auth_failures_total{job="basic",reason="wrong_credentials"}') >= 1
        assert stored('npumon_http_auth_failures_total{job="mtls",reason="client_cert_missing"}') >= 1
        assert stored('npumon_http_auth_failures_total{job="mtls",reason="client_cert_san"}') >= 1
        assert prometheus.value('npumon_http_auth_failures_total{job="basic",reason="missing"}') == 0
    finally:
        if prometheus is not None:
            prometheus.stop()
        for daemon in daemons:
            daemon.close()
