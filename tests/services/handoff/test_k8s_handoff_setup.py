"""The Kubernetes sink's config, its service and its connection: off by default, a bad section is one line
naming the key, in-cluster and kubeconfig auth (the token re-read on every request, for rotation), and a
service that cannot reach a cluster says why in its status instead of failing the daemon."""

import base64
import os
import subprocess
import sys
import tempfile

import pytest

from npumon.sim.apiserver import TOKEN, ApiServer
from npumon.config.errors import ConfigError
from npumon.daemon.services import ServiceSet, build_services
from npumon.rules.verdict import HEALTHY, OUT_OF_SERVICE, ChipVerdict, HostVerdict, Reason
from npumon.services.handoff.kubeapi import ConfigProblem, from_kubeconfig, in_cluster, request
from npumon.settings import parse_config
from pki import make_pki
from prometheus_client.registry import CollectorRegistry
from service_context import close_context, open_context, recorded


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(str(tmp_path_factory.mktemp("pki")))


@pytest.mark.parametrize("text, key", [
    ("handoff:\n  kubernetes:\n    enabled: true\n    taint: {enabled: true, effect: NoEvict}\n", "taint.effect"),
    ("handoff:\n  kubernetes:\n    taint: {max_share: 1.5}\n", "taint.max_share"),
    ("handoff:\n  kubernetes:\n    taint: {key: 'bad key!'}\n", "taint.key"),
    ("handoff:\n  kubernetes:\n    timeout_seconds: 20\n", "timeout_seconds"),
    ("handoff:\n  kubernetes:\n    event_namespace: Default\n", "event_namespace"),
    ("handoff:\n  kubernetes:\n    enabeld: true\n", "enabeld"),
    ("handoff:\n  kubernetes:\n    dry_run: maybe\n", "dry_run"),
])
def test_a_bad_section_is_one_line_naming_the_key(text, key):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "npumon.yaml")
    message = str(caught.value)
    assert "\n" not in message and key in message and message.startswith("npumon.yaml:")


def test_a_bad_section_stops_the_daemon_with_one_line_and_no_traceback(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("handoff:\n  kubernetes:\n    enabled: true\n    taint: {effect: NoEvict}\n")
    proc = subprocess.run([sys.executable, "-m", "npumon.cli.main", "run", "--config", str(config)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert (proc.stderr + proc.stdout).strip().count("\n") == 0 and "taint.effect" in proc.stderr + proc.stdout


def test_off_by_default(tmp_path):
    config = parse_config("{}\n")
    assert not config.handoff.kubernetes.enabled and not config.handoff.kubernetes.taint.enabled
    context = open_context(config, tmp_path)
    try:
        assert [service.name for service in build_services(context)
                if service.name.startswith("handoff")] == []
    finally:
        close_context(context)


def test_a_service_without_a_node_name_says_so_in_its_status_and_runs_no_job(tmp_path, monkeypatch):
    monkeypatch.delenv("NODE_NAME", raising=False)
    config = parse_config("state_dir: {}\nhandoff:\n  kubernetes:\n    enabled: true\n".format(tmp_path))
    context = open_context(config, tmp_path)
    try:
        [service] = [s for s in build_services(context) if s.name == "handoff-kubernetes"]
        status = service.statuses()["handoff-kubernetes"]
        assert not status.ok and "NODE_NAME" in status.error and service.jobs() == []
    finally:
        close_context(context)


def test_the_service_takes_verdicts_from_the_service_set_and_writes_them_in_its_job(tmp_path, monkeypatch):
    stub = ApiServer(("node-a",))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG.format(server=stub.url, user="token: " + TOKEN))
    config = parse_config("state_dir: {}\nhandoff:\n  kubernetes:\n    enabled: true\n    node_name: node-a\n"
                          "    kubeconfig: {}\n".format(tmp_path, kubeconfig))
    woken = []
    context = open_context(config, tmp_path)
    context = context.__class__(context.config, context.engine, context.target, context.npu_smi, context.events,
                                context.clock, lambda job, seconds: woken.append((job, seconds)))
    services = ServiceSet([s for s in build_services(context) if s.name == "handoff-kubernetes"],
                          CollectorRegistry())
    try:
        verdict = HostVerdict(HEALTHY, (), (ChipVerdict("npu2/chip0", OUT_OF_SERVICE,
                                                        (Reason("hbm-ecc", "critical", "HBM ECC", "replace"),)),))
        services.verdict(verdict)
        assert woken == [("handoff-kubernetes", 0.0)]  # the transition goes out now, not at the next interval
        [(job, interval, run)] = services.jobs()
        assert (job, interval) == ("handoff-kubernetes", 10.0)
        run()
        assert stub.condition("node-a", "NpuOutOfService")["status"] == "True"
        [service] = list(services)
        assert service.statuses()["handoff-kubernetes"].ok
        assert ("handoff_action", "node-a") in recorded(context)  # the event history takes the sink's records
    finally:
        services.close()
        close_context(context)
        stub.close()
    assert stub.invalid == []


KUBECONFIG = """apiVersion: v1
kind: Config
current-context: c
contexts:
  - name: c
    context: {{cluster: k, user: u}}
clusters:
  - name: k
    cluster: {{server: "{server}"}}
users:
  - name: u
    user: {{{user}}}
"""


def test_a_kubeconfig_token_file_is_read_on_every_request(tmp_path):
    stub = ApiServer(("node-a",), token="first")
    try:
        (tmp_path / "token").write_text("first\n")
        path = tmp_path / "kubeconfig"
        path.write_text(KUBECONFIG.format(server=stub.url, user="tokenFile: token"))
        endpoint = from_kubeconfig(str(path))
        assert request(endpoint, "GET", "/api/v1/nodes/node-a", 10.0)["metadata"]["name"] == "node-a"
        stub.token = "rotated"
        (tmp_path / "token").write_text("rotated\n")  # the kubelet rotated the projected token
        assert request(endpoint, "GET", "/api/v1/nodes/node-a", 10.0)["metadata"]["name"] == "node-a"
    finally:
        stub.close()


@pytest.mark.parametrize("text, words", [
    ("current-context: missing\ncontexts: []\n", "missing"),
    ("{{{ not yaml", "cannot read kubeconfig"),
    (KUBECONFIG.format(server="https://k:6443", user="exec: {command: aws}"), "exec plugin is not supported"),
    (KUBECONFIG.format(server="k:6443", user="token: t"), "is not an http(s) URL"),
])
def test_a_broken_kubeconfig_is_one_line(tmp_path, text, words):
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    with pytest.raises(ConfigProblem) as caught:
        from_kubeconfig(str(path))
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_in_cluster_needs_the_service_variables_and_reads_the_account_directory(tmp_path, pki):
    with pytest.raises(ConfigProblem, match="not in a pod"):
        in_cluster({})
    (tmp_path / "ca.crt").write_bytes(open(pki.ca, "rb").read())
    (tmp_path / "token").write_text("t\n")
    endpoint = in_cluster({"KUBERNETES_SERVICE_HOST": "fd00::1", "KUBERNETES_SERVICE_PORT": "443"}, str(tmp_path))
    assert endpoint.server == "https://[fd00::1]:443" and endpoint.headers() == {"Authorization": "Bearer t"}
    with pytest.raises(ConfigProblem, match="CA"):
        in_cluster({"KUBERNETES_SERVICE_HOST": "h", "KUBERNETES_SERVICE_PORT": "443"}, str(tmp_path / "none"))


def test_a_kubeconfig_with_inline_ca_and_client_certificate_loads(tmp_path, pki, monkeypatch):
    def data(path):
        return base64.b64encode(open(path, "rb").read()).decode()
    text = KUBECONFIG.format(server="https://127.0.0.1:6443", user="client-certificate-data: {}, "
                             "client-key-data: {}".format(data(pki.client_cert), data(pki.client_key)))
    text = text.replace('server: "https://127.0.0.1:6443"',
                        'server: "https://127.0.0.1:6443", certificate-authority-data: {}'.format(data(pki.ca)))
    path = tmp_path / "kubeconfig"
    path.write_text(text)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    endpoint = from_kubeconfig(str(path))
    assert endpoint.ssl_context is not None and endpoint.headers() == {}
    assert os.listdir(str(scratch)) == []  # the private key's temporary copy is gone
