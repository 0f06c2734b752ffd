"""`npumon fleet`: reading Prometheus's query API, rebuilding facts from series, ordering, output and errors.

A small Prometheus stand-in on loopback answers /api/v1/query from canned vectors, so the client's HTTP,
error and timeout handling run for real. The whole path against a real Prometheus is in
test_fleet_prometheus.py.
"""

import http.server
import json
import socket
import sys
import threading
import time
import urllib.parse

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from npumon.fleet.client import PrometheusClient, PrometheusError, redact_url
from npumon.fleet.render import render_findings, render_text, view_document
from npumon.fleet.series import snapshot_from_series, subject_facts
from npumon.fleet.view import FindingRow, build_view, sorted_hosts, worst_chips
from npumon.model import MIB, ChipSample, HostSample, NumaNode, PcieLink, Snapshot, SourceStatus
from npumon.outputs.exporter import ExporterView, build_registry
from npumon.rules.loader import load_rules

NOW = 1767225600.0


def sample_snapshot():
    hot = ChipSample(npu=0, chip=0, name="910B3", health="OK", bus_id="0000:C1:00.0", temperature_celsius=87.0,
                     power_watts=290.0, aicore_ratio=0.6, aivector_ratio=0.3, hbm_bandwidth_ratio=0.4,
                     hbm_used_bytes=1024 * MIB, hbm_total_bytes=65536 * MIB,
                     memory_used_bytes=0, memory_total_bytes=0,
                     ecc={"hbm": {"single": 4, "double": 1, "isolated_pages": 2}},
                     pcie=PcieLink(current_speed_gts=16.0, max_speed_gts=32.0, current_width=16, max_width=16))
    alarm = ChipSample(npu=1, chip=0, name="910B3", health="Alarm", bus_id="0000:C2:00.0", temperature_celsius=50.0,
                       error_codes=["8C03A000", "A4025021"], aicore_ratio=0.1)
    host = HostSample(hostname="a", cpu_ratio=0.25, memory_total_bytes=512 * 1024 ** 3,
                      memory_available_bytes=400 * 1024 ** 3, serving_queue_depth=7.0, numa_balancing=0,
                      max_map_count=262144, driver_version="25.5.1", firmware_version="7.8.0.5.220",
                      numa_nodes=[NumaNode(node=0, cpu_ratio=0.9), NumaNode(node=1, cpu_ratio=0.1)])
    sources = {"npu-smi": SourceStatus(ok=True, duration_seconds=0.2, last_success=NOW - 5),
               "npu-smi:board": SourceStatus(ok=False, error="timed out", last_success=NOW - 900)}
    return Snapshot(time=NOW, host=host, chips=[hot, alarm], sources=sources)


def exported_series(snapshot, findings=(), extra_labels=None):
    """The samples Prometheus would hold after scraping this snapshot, as (labels, value) pairs."""
    view = ExporterView(snapshot, list(findings))
    text = generate_latest(build_registry(lambda: view)).decode()
    samples = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = dict(sample.labels, __name__=sample.name, job="npumon", instance="10.0.0.1:9842")
            labels.update(extra_labels or {})
            samples.append((labels, sample.value))
    return samples


# --------------------------------------------------------------------------------------------- facts

def test_snapshot_from_series_inverts_the_exporter_for_what_rules_read():
    original = sample_snapshot()
    rebuilt, process_counts = snapshot_from_series(exported_series(original))
    assert rebuilt.time == NOW
    hot, alarm = rebuilt.chips
    for field in ("name", "health", "bus_id", "temperature_celsius", "power_watts", "aicore_ratio", "aivector_ratio",
                  "hbm_bandwidth_ratio", "hbm_used_bytes", "hbm_total_bytes"):
        assert getattr(hot, field) == getattr(original.chips[0], field), field
    assert (hot.ecc_single_bit_errors, hot.ecc_double_bit_errors, hot.ecc_isolated_pages) == (4, 1, 2)
    assert hot.pcie.degraded is True
    assert alarm.health == "Alarm" and alarm.error_codes == ["8C03A000", "A4025021"]
    assert process_counts == {(0, 0): 0, (1, 0): 0}
    assert rebuilt.host.serving_queue_depth == 7.0 and rebuilt.host.cpu_ratio == 0.25
    assert [(n.node, n.cpu_ratio) for n in rebuilt.host.numa_nodes] == [(0, 0.9), (1, 0.1)]
    assert rebuilt.host.driver_version == "25.5.1"
    assert rebuilt.sources["npu-smi"].ok and not rebuilt.sources["npu-smi:board"].ok
    assert rebuilt.sources["npu-smi:board"].last_success == NOW - 900


def test_facts_from_series_feed_the_builtin_templates():
    facts = subject_facts(exported_series(sample_snapshot()))
    hot = facts["npu0/chip0"]
    assert hot["temperature_celsius"] == 87.0 and hot["host.max_chip_temperature_celsius"] == 87.0
    assert hot["process_count"] == 0
    # not in Prometheus: said so, not a wrong "none" nor a bare n/a in the middle of a hint
    assert hot["error_information_text"].startswith("the driver's text is not in Prometheus")
    assert facts["npu1/chip0"]["error_code_text"] == "8C03A000, A4025021"
    assert facts["host"]["down_sources"] == ["npu-smi:board"]
    assert facts["host"]["numa_cpu_max_ratio"] == 0.9


def test_findings_are_rendered_from_the_local_rules():
    rules, params = load_rules()
    series = exported_series(sample_snapshot())
    samples = [({"rule": "temperature-critical", "severity": "critical", "subject": "npu0/chip0", "host": "a"}, 1.0),
               ({"rule": "health-alarm", "severity": "critical", "subject": "npu1/chip0", "host": "a"}, 1.0),
               ({"rule": "my-own-rule", "severity": "warning", "subject": "host", "host": "a"}, 1.0)]
    asked = []

    def facts_of_host(host):
        asked.append(host)
        return subject_facts(series)

    rows = render_findings(samples, "host", {rule.id: rule for rule in rules}, params, facts_of_host)
    assert rows[0].summary == "temperature 87 C, at or above the critical 85 C"
    assert rows[0].hint.startswith("Check the airflow first") and "-i 0" in rows[0].hint
    assert rows[1].summary == "health Alarm; error codes: 8C03A000, A4025021"
    assert "major fault: the driver's text is not in Prometheus (npumon check on the host shows it)" in rows[1].hint
    assert "n/a" not in rows[1].hint
    assert "not in this npumon's rule files" in rows[2].summary and rows[2].hint == ""
    assert set(asked) == {"a"}


def test_a_host_wide_finding_is_rendered_from_the_chips_it_holds_for():
    rules, params = load_rules()
    starved = {"aicore_ratio": 0.12, "process_count": 2, "host.serving_queue_depth": 12.0}
    facts = {"host": {"serving_queue_depth": 12.0},
             "npu0/chip0": dict(starved), "npu1/chip0": dict(starved, aicore_ratio=0.8),
             "npu10/chip0": dict(starved), "npu2/chip0": dict(starved)}
    samples = [({"rule": "cpu-bottleneck", "severity": "warning", "subject": "host", "host": "a"}, 1.0)]
    rows = render_findings(samples, "host", {rule.id: rule for rule in rules}, params, lambda host: facts)
    assert rows[0].summary.startswith("on 3 chips (npu0/chip0, npu2/chip0, npu10/chip0): AI Core only 12%")
    assert "queue 12" in rows[0].summary


# --------------------------------------------------------------------------------------------- ordering

def fleet_results():
    """Fleet-wide query results for three hosts: b critical, c down, a ok (and d only seen through `up`)."""
    def chip(host, npu, value, **labels):
        return (dict({"host": host, "npu": str(npu), "chip": "0", "instance": host + ":9842"}, **labels), value)

    return {
        "up": [({"host": "a", "instance": "a:9842"}, 1), ({"host": "b", "instance": "b:9842"}, 1),
               ({"host": "c", "instance": "c:9842"}, 0), ({"instance": "d:9842"}, 1)],
        "chip_info": [chip("a", 0, 1, name="910B3"), chip("b", 0, 1, name="910B3"), chip("b", 1, 1, name="910B3")],
        "health": [chip("a", 0, 1, state="OK"), chip("b", 0, 1, state="OK"), chip("b", 1, 1, state="Alarm")],
        "temperature": [chip("a", 0, 70.0), chip("b", 0, 88.0), chip("b", 1, 50.0)],
        "power": [chip("a", 0, 150.0)],
        "aicore": [chip("a", 0, 0.5)],
        "ecc_double": [chip("a", 0, 0.0), chip("b", 0, 0.0), chip("b", 1, 2.0)],
        "isolated_pages": [],
        "sources_down": [({"host": "a", "source": "npu-smi:board"}, 0)],
    }


FINDINGS = [FindingRow("b", "temperature-critical", "critical", "npu0/chip0", "hot", "cool it"),
            FindingRow("b", "health-alarm", "critical", "npu1/chip0", "alarm", "look"),
            FindingRow("a", "source-down", "warning", "host", "down", "check")]


def test_hosts_are_listed_worst_first():
    view = build_view("http://p", ["npumon"], NOW, fleet_results(), FINDINGS, "host")
    hosts = {row.host: row for row in view.hosts}
    assert hosts["b"].status == "critical" and hosts["c"].status == "down" and hosts["a"].status == "warning"
    assert hosts["d:9842"].status == "ok"  # no host label: the instance names it
    assert [row.host for row in sorted_hosts(view.hosts)] == ["b", "c", "a", "d:9842"]
    assert [row.host for row in sorted_hosts(view.hosts, "host")] == ["a", "b", "c", "d:9842"]
    assert [row.host for row in sorted_hosts(view.hosts, "temperature")][:2] == ["b", "a"]
    assert hosts["b"].chips == 2 and hosts["b"].unhealthy_chips == 1 and hosts["b"].hottest_celsius == 88.0
    assert hosts["a"].sources_down == ["npu-smi:board"]


def test_worst_chips_put_bad_health_before_heat():
    view = build_view("http://p", ["npumon"], NOW, fleet_results(), FINDINGS, "host")
    assert [(row.host, row.npu) for row in worst_chips(view.chips, 10)] == [("b", 1), ("b", 0), ("a", 0)]
    assert [(row.host, row.npu) for row in worst_chips(view.chips, 2, "temperature")] == [("b", 0), ("a", 0)]
    assert worst_chips(view.chips, 0) == []


def test_text_and_json_output():
    view = build_view("http://p", ["npumon"], NOW, fleet_results(), FINDINGS, "host")
    text = render_text(view, top=5)
    lines = text.splitlines()
    assert lines[0].startswith("FLEET 4 host(s) from http://p (job npumon): 1 critical, 1 down, 1 warning")
    assert [line.split()[0] for line in lines[2:6]] == ["b", "c", "a", "d:9842"]
    findings = text.split("\nFINDINGS\n")[1].splitlines()
    assert findings[0].split()[:3] == ["CRITICAL", "b", "npu0/chip0"] and findings[1].strip() == "hint: cool it"
    assert "hint:" not in render_text(view, top=5, hints=False)
    document = view_document(view, top=5)
    assert document["schema"] == "npumon.fleet/v1"
    assert document["summary"] == {"critical": 1, "down": 1, "warning": 1, "info": 0, "ok": 1}
    assert [f["host"] for f in document["findings"]] == ["b", "b", "a"]
    assert document["worst_chips"][0]["subject"] == "npu1/chip0"
    json.dumps(document)


# --------------------------------------------------------------------------------------------- HTTP

class FakePrometheus(http.server.ThreadingHTTPServer):
    """Answers /api/v1/query from `answers` (query text -> vector); records the queries it got."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.answers = {}
        self.queries = []
        self.mode = "ok"  # ok | error | html | slow
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "http://127.0.0.1:{}".format(self.server_address[1])

    def close(self):
        self.shutdown()
        self.server_close()

    def handle_error(self, request, client_address):
        # The fleet CLI drops its other in-flight queries once one answer settles the outcome; a write to such a
        # closed socket is the client's choice, not a server fault. (In-process CLI tests capture this thread's
        # stderr, so the default traceback would land in the command's own output.)
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length", 0))
        query = urllib.parse.parse_qs(self.rfile.read(length).decode())["query"][0]
        self.server.queries.append(query)
        mode = self.server.mode
        if mode == "slow":
            time.sleep(2)
        if mode == "html":
            return self._send(200, b"<html>login</html>", "text/html")
        if mode == "json":  # another JSON service at that address
            return self._send(200, json.dumps({"message": "hello"}).encode())
        if mode == "error":
            return self._send(400, json.dumps({"status": "error", "errorType": "bad_data",
                                               "error": "parse error"}).encode())
        result = []
        for key, vector in self.server.answers.items():
            if key in query:
                result = [{"metric": labels, "value": [NOW, str(value)]} for labels, value in vector]
                break
        self._send(200, json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode())

    def _send(self, code, body, content_type="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def prometheus():
    server = FakePrometheus()
    yield server
    server.close()


def test_client_reads_a_vector(prometheus):
    prometheus.answers["up"] = [({"__name__": "up", "instance": "a"}, 1)]
    assert PrometheusClient(prometheus.url).query("up") == [({"__name__": "up", "instance": "a"}, 1.0)]


@pytest.mark.parametrize("mode, message", [
    ("error", "refused the query up: HTTP 400: parse error"),
    ("html", "answered HTTP 200 with a body that is not JSON"),
    ("json", "answered HTTP 200 with JSON that is not a Prometheus query API answer: is this Prometheus's address?"),
])
def test_client_errors_are_one_line(prometheus, mode, message):
    prometheus.mode = mode
    with pytest.raises(PrometheusError) as info:
        PrometheusClient(prometheus.url).query("up")
    assert message in str(info.value) and "\n" not in str(info.value)
    assert "no error text" not in str(info.value)


def test_client_timeout_and_closed_port_never_show_credentials(prometheus):
    prometheus.mode = "slow"
    secret_url = prometheus.url.replace("http://", "http://admin:hunter2@") + "/?token=abc"
    with pytest.raises(PrometheusError) as info:
        PrometheusClient(secret_url, timeout_seconds=0.3).query("up")
    assert "timed out" in str(info.value)
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    with pytest.raises(PrometheusError) as refused:
        PrometheusClient("http://admin:hunter2@127.0.0.1:{}".format(port)).query("up")
    for error in (info.value, refused.value):
        assert "hunter2" not in str(error) and "admin" not in str(error) and "abc" not in str(error)
    assert "connection failed" in str(refused.value)


def test_redact_url():
    assert redact_url("https://u:p@prom.example:9090/prom/?token=x") == "https://prom.example:9090/prom/"
    assert redact_url("http://[::1]:9090") == "http://[::1]:9090"


@pytest.fixture
def run_cli(cli):
    """`npumon fleet ARGS...` through the CLI's main() in this process (tests/conftest.py's `cli`)."""
    return lambda *args: cli("fleet", *args)


def test_cli_reads_the_fleet_and_renders_hints(prometheus, run_cli):
    series = exported_series(sample_snapshot(), extra_labels={"host": "atlas-01"})
    prometheus.answers.update({
        "group by (job)": [({"job": "npumon"}, 1)],
        "up{": [({"host": "atlas-01", "instance": "10.0.0.1:9842", "job": "npumon"}, 1)],
        "npumon_finding_active": [({"host": "atlas-01", "instance": "10.0.0.1:9842", "job": "npumon",
                                    "rule": "temperature-critical", "severity": "critical", "subject": "npu0/chip0"}, 1)],
        '__name__=~"npumon_(chip|host|source|snapshot)_.+"': series,
        "npumon_chip_temperature_celsius{": [(labels, value) for labels, value in series
                                             if labels["__name__"] == "npumon_chip_temperature_celsius"],
    })
    result = run_cli("--prometheus", prometheus.url)
    assert result.returncode == 0, result.stderr
    assert "atlas-01            CRITICAL" in result.stdout
    assert "temperature-critical: temperature 87 C, at or above the critical 85 C" in result.stdout
    assert 'host="atlas-01"' in [q for q in prometheus.queries if "__name__=~" in q][0]
    document = json.loads(run_cli("--prometheus", prometheus.url, "--json", "--no-hints").stdout)
    assert document["hosts"][0]["status"] == "critical" and document["findings"][0]["hint"] == ""


def test_cli_exit_codes(prometheus, run_cli, tmp_path):
    result = run_cli("--prometheus", prometheus.url)  # no npumon_build_info: nothing to show
    assert result.returncode == 1 and "no npumon_build_info series" in result.stderr
    assert "Traceback" not in result.stderr
    assert run_cli("--prometheus", "prom:9090").returncode == 2
    assert run_cli("--prometheus", prometheus.url, "--top", "-1").returncode == 2
    config = tmp_path / "npumon.yaml"
    config.write_text("thresholds:\n  no_such_threshold: 1\n")
    bad_config = run_cli("--prometheus", prometheus.url, "--config", str(config))
    assert bad_config.returncode == 2 and "{}:2: thresholds.no_such_threshold".format(config) in bad_config.stderr
    prometheus.mode = "error"
    failed = run_cli("--prometheus", prometheus.url, "--job", "npumon")
    assert failed.returncode == 1 and failed.stderr.count("\n") == 1, failed.stderr



def test_cli_a_job_with_no_targets_is_an_error_naming_the_jobs_there_are(prometheus, run_cli):
    prometheus.answers.update({"group by (job)": [({"job": "npumon"}, 1)]})  # nothing for job "nope"
    result = run_cli("--prometheus", prometheus.url, "--job", "nope")
    assert result.returncode == 1 and "0 host(s)" not in result.stdout
    assert result.stderr == "npumon: no targets matched: Prometheus at {} has no target of job nope (jobs scraping " \
                            "npumon: npumon)\n".format(prometheus.url)
    assert run_cli("--prometheus", prometheus.url, "--job", "nope", "--json").returncode == 1


def test_cli_a_non_prometheus_json_service_is_one_clear_line(prometheus, run_cli):
    prometheus.mode = "json"
    result = run_cli("--prometheus", prometheus.url)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "is this Prometheus's address?" in result.stderr and "no error text" not in result.stderr
