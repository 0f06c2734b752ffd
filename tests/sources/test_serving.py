"""The serving-queue source against real HTTP servers on 127.0.0.1, its config section, the simulator's queue
endpoint, and `npumon check --simulate` reading the queue depth through them."""

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from contextlib import contextmanager

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon_harness import free_port
from npumon.sources.base import Parts, SourceContext
from npumon.sources.runner import CommandRunner
from npumon.sources.target import Target
from npumon.config.errors import ConfigError
from npumon.settings import parse_config
from npumon.settings import Config
from npumon.model import HostSample
from npumon.sim import prepare_simulation, serving_queue_depth
from npumon.sim.queue_server import QueueServer
from npumon.sources.serving.config import PRESETS, ServingConfig, display_url
from npumon.sources.serving.fetch import ServingError
from npumon.sources.serving.figures import parse_exposition
from npumon.sources.serving.source import ServingQueueSource, build

# Expositions written in each server's format (metric and label names as the servers document them).
VLLM_TEXT = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="qwen2.5-7b"} 12.0
vllm:num_requests_running{engine="1",model_name="qwen2.5-7b"} 11.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen2.5-7b"} 4.0
vllm:num_requests_waiting{engine="1",model_name="qwen2.5-7b"} 3.0
vllm:num_requests_waiting{engine="0",model_name="bge-m3"} 2.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="qwen2.5-7b"} 183211.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.1",model_name="qwen2.5-7b"} 30.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="qwen2.5-7b"} 41.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="qwen2.5-7b"} 41.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="qwen2.5-7b"} 5.2
"""

TRITON_TEXT = """\
# HELP nv_inference_request_success Number of successful inference requests, all batch sizes
# TYPE nv_inference_request_success counter
nv_inference_request_success{model="resnet50",version="1"} 1200
nv_inference_request_success{model="bert",version="2"} 310
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model="resnet50",version="1"} 5
nv_inference_pending_request_count{model="bert",version="2"} 9
"""

MINDIE_TEXT = """\
# HELP request_received_total Number of requests received so far.
# TYPE request_received_total counter
request_received_total{model_name="llama3-8b"} 3188
# HELP num_requests_running Number of requests currently running on NPU.
# TYPE num_requests_running gauge
num_requests_running{model_name="llama3-8b"} 16
# HELP num_requests_waiting Number of requests waiting to be processed.
# TYPE num_requests_waiting gauge
num_requests_waiting{model_name="llama3-8b"} 27
"""

PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"
TIMEOUT = 0.5  # seconds, for the deadline tests
SECRET = "s3cret-token"


# --- a real HTTP server on 127.0.0.1 whose answer each test chooses ------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's dispatch name
        self.server.paths.append(self.path)
        self.server.route(self)

    def log_message(self, format, *args):  # noqa: A002 - http.server's signature
        """Keep pytest's output clean."""


def answer(code, body, content_type=PROMETHEUS_TEXT, headers=(), length=True):
    """A route that sends one fixed answer (`length=False`: no Content-Length, the body ends at close)."""
    def route(handler):
        data = body.encode("utf-8") if isinstance(body, str) else body
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        if length:
            handler.send_header("Content-Length", str(len(data)))
        for name, value in headers:
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)
    return route


@contextmanager
def http_server(route):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.route = route
    server.paths = []
    server.url = "http://127.0.0.1:{}/metrics".format(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


def serving_sources(config, target):
    """The serving source as the source list would build it for this config and target ([] when off)."""
    source = build(SourceContext(config, target, CommandRunner(target.npu_smi_argv, 1.0)))
    return [] if source is None else [source]


def depth_in(source, now):
    """The queue depth the source puts into a Snapshot made at `now`."""
    return source.contribute(Parts(time=now, host=HostSample()), now).host.serving_queue_depth


def poll_once(url, **settings):
    """Poll a source for `url` once; returns (status, depth written into a snapshot)."""
    source = ServingQueueSource(ServingConfig(enabled=True, url=url, **settings), max_age=60)
    try:
        source.poll("serving-queue", [])
        now = time.time()
        return source.statuses(now)["serving-queue"], depth_in(source, now)
    finally:
        source.close()


# --- presets and the sum over series --------------------------------------------------------------------


@pytest.mark.parametrize("preset, text, depth", [
    ("vllm", VLLM_TEXT, 9.0),  # two engines of one model plus a second model
    ("triton", TRITON_TEXT, 14.0),  # one series per model
    ("mindie", MINDIE_TEXT, 27.0),
])
def test_each_preset_reads_its_server_and_sums_every_series(preset, text, depth):
    with http_server(answer(200, text)) as server:
        status, value = poll_once(server.url, preset=preset)
    assert status.ok and status.error is None and status.last_success is not None
    assert value == depth
    assert server.paths == ["/metrics"]


def test_preset_defaults_and_overrides():
    assert ServingConfig().enabled is False and ServingConfig().preset == "vllm"
    assert ServingConfig(preset="vllm").resolved_url() == "http://127.0.0.1:8000/metrics"
    assert ServingConfig(preset="vllm").resolved_metric() == "vllm:num_requests_waiting"
    assert ServingConfig(preset="triton").resolved_url() == "http://127.0.0.1:8002/metrics"
    assert ServingConfig(preset="triton").resolved_metric() == "nv_inference_pending_request_count"
    assert ServingConfig(preset="mindie").resolved_url() == "http://127.0.0.2:1027/metrics"
    assert ServingConfig(preset="mindie").resolved_metric() == "num_requests_waiting"
    custom = ServingConfig(preset="triton", url="http://10.0.0.5:9000/m", metric="my_queue")
    assert (custom.resolved_url(), custom.resolved_metric()) == ("http://10.0.0.5:9000/m", "my_queue")
    assert ServingConfig(preset="custom").resolved_url() is None


def test_label_filter_counts_only_matching_series():
    with http_server(answer(200, VLLM_TEXT)) as server:
        status, value = poll_once(server.url, labels={"model_name": "qwen2.5-7b"})
        assert status.ok and value == 7.0
        status, value = poll_once(server.url, labels={"model_name": "qwen2.5-7b", "engine": "1"})
        assert status.ok and value == 3.0
        status, value = poll_once(server.url, labels={"model_name": "llama"})
    assert not status.ok and value is None
    assert status.error == ('{}: none of the 3 series of vllm:num_requests_waiting has {{model_name="llama"}}'
                            .format(server.url))


def test_custom_metric_name_and_counter_sample_name():
    with http_server(answer(200, VLLM_TEXT)) as server:
        status, value = poll_once(server.url, metric="vllm:prompt_tokens_total")
    assert status.ok and value == 183211.0


def test_a_large_answer_is_parsed_family_by_family_not_all_held():
    # an 8 MiB answer (serving.max_body_bytes) of histograms, the queue gauge last
    family = ("# HELP vllm:latency_{0} Latency.\n# TYPE vllm:latency_{0} histogram\n" +
              "".join('vllm:latency_{{0}}_bucket{{{{model_name="llama-70b",le="{0}"}}}} {0}\n'.format(le)
                      for le in range(40)))
    blocks = [family.format(n) for n in range(8 * 1024 * 1024 // len(family.format(99999)))]
    text = "".join(blocks) + '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="a"} 7\n'
    tracemalloc.start()
    try:
        assert parse_exposition(text, "vllm:num_requests_waiting", {}).queue_depth == 7.0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 0.5 * len(text), "peak {:.1f} x the answer".format(peak / len(text))


def test_nan_series_are_skipped_and_all_nan_is_an_error():
    text = "queue{m=\"a\"} NaN\nqueue{m=\"b\"} 4\n"
    assert parse_exposition(text, "queue", {}).queue_depth == 4.0
    with pytest.raises(ServingError, match="NaN or infinite"):
        parse_exposition("queue NaN\n", "queue", {}).queue_depth


# --- every failure kind is a one-line status, never an exception ----------------------------------------


@pytest.mark.parametrize("route, expected", [
    (answer(503, "overloaded\n", "text/plain", ()), "answered HTTP 503 Service Unavailable"),
    (answer(404, "no such page\n", "text/plain"), "answered HTTP 404 Not Found"),
    (answer(500, "<html><body>Internal error</body></html>", "text/html"), "answered HTTP 500 Internal Server Error"),
    (answer(200, "<!DOCTYPE html>\n<html><title>Login</title></html>\n", "text/html"),
     "answered with an HTML page, not Prometheus metrics"),
    (answer(200, "<html><body>proxy page</body></html>", "text/plain"),
     "answered with an HTML page, not Prometheus metrics"),
    (answer(200, '{"waiting": 3}', "application/json"), "not Prometheus text format: Invalid labels"),
    (answer(200, "this is not metrics at all\n"), "not Prometheus text format: could not convert string"),
    (answer(200, b"\xff\xfe\x00q\x00 \x001\x00"), "the answer is not UTF-8 text"),
    (answer(200, ""), "the answer holds no metrics"),
    (answer(200, TRITON_TEXT), "no metric vllm:num_requests_waiting in the answer (2 other metric families; "
                               "check serving.metric or serving.preset)"),
])
def test_failure_kinds(route, expected):
    with http_server(route) as server:
        status, value = poll_once(server.url)
    assert not status.ok and value is None
    assert status.error.startswith(server.url + ": " + expected), status.error
    assert "\n" not in status.error and status.last_success is None and status.duration_seconds is not None


def test_connection_refused():
    url = "http://127.0.0.1:{}/metrics".format(free_port())
    status, value = poll_once(url)
    assert value is None
    assert status.error == url + ": connection refused (is the inference server running, with its metrics on?)"


def test_deadline_when_the_server_never_answers():
    with socket.socket() as silent:  # accepts connections (the kernel does) but never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        url = "http://127.0.0.1:{}/metrics".format(silent.getsockname()[1])
        started = time.monotonic()
        status, value = poll_once(url, timeout_seconds=TIMEOUT)
        elapsed = time.monotonic() - started
    assert status.error == url + ": no complete answer within 0.5s" and value is None
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT + 1.0


def test_deadline_when_the_server_trickles_its_answer():
    stop = threading.Event()

    def trickle(handler):
        handler.send_response(200)
        handler.send_header("Content-Type", PROMETHEUS_TEXT)
        handler.send_header("Content-Length", "100000")
        handler.end_headers()
        try:
            while not stop.is_set():  # one byte every 50 ms: no single read ever waits long
                handler.wfile.write(b"#")
                handler.wfile.flush()
                time.sleep(0.05)
        except OSError:  # the client hung up: what the deadline is for
            pass

    with http_server(trickle) as server:
        started = time.monotonic()
        status, value = poll_once(server.url, timeout_seconds=TIMEOUT)
        elapsed = time.monotonic() - started
        stop.set()
    assert status.error == server.url + ": no complete answer within 0.5s" and value is None
    assert elapsed < TIMEOUT + 1.0


@pytest.mark.parametrize("length", [True, False], ids=["content-length", "until-close"])
def test_body_size_limit(length):
    big = "# filler\n" * 2000 + VLLM_TEXT  # about 18 kB
    with http_server(answer(200, big, length=length)) as server:
        status, value = poll_once(server.url, max_body_bytes=16384)
        assert status.error == server.url + ": answer larger than 16384 bytes (serving.max_body_bytes)"
        assert value is None
        status, value = poll_once(server.url, max_body_bytes=32768)
        assert status.ok and value == 9.0


# --- redirects: same origin only ------------------------------------------------------------------------


def test_redirect_within_the_same_server_is_followed():
    def route(handler):
        if handler.path == "/metrics":
            answer(302, "", headers=[("Location", "/v2/metrics")])(handler)
        else:
            answer(200, VLLM_TEXT)(handler)

    with http_server(route) as server:
        status, value = poll_once(server.url)
    assert status.ok and value == 9.0 and server.paths == ["/metrics", "/v2/metrics"]


def test_redirect_to_another_host_or_port_is_refused():
    with http_server(answer(200, VLLM_TEXT)) as elsewhere:
        location = "http://127.0.0.1:{}/metrics?token={}".format(elsewhere.server_address[1], SECRET)
        with http_server(answer(301, "", headers=[("Location", location)])) as server:
            status, value = poll_once(server.url)
    assert value is None and elsewhere.paths == []
    assert status.error == "{}: redirects to {}; not following a redirect to another host, port or scheme (set " \
                           "serving.url to the final address)".format(server.url, elsewhere.url)


def test_redirect_loop_stops():
    with http_server(answer(307, "", headers=[("Location", "/metrics")])) as server:
        status, _ = poll_once(server.url)
    assert status.error == server.url + ": more than 3 redirects" and len(server.paths) == 4


# --- secrets, proxies, freshness ------------------------------------------------------------------------


def test_credentials_and_query_never_appear_in_errors():
    url = "http://operator:{0}@127.0.0.1:{1}/metrics?token={0}".format(SECRET, free_port())
    status, _ = poll_once(url)
    assert SECRET not in status.error and "operator" not in status.error
    assert status.error.startswith("http://127.0.0.1:")
    assert display_url("https://u:p@[::1]:8443/m?x=1") == "https://[::1]:8443/m"


def test_proxy_environment_is_ignored_for_the_local_endpoint(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:{}".format(free_port()))
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:{}".format(free_port()))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    with http_server(answer(200, VLLM_TEXT)) as server:
        status, value = poll_once(server.url)
    assert status.ok and value == 9.0


def test_failed_poll_keeps_the_last_value_while_fresh_then_drops_it():
    clock = [1000.0]
    with http_server(answer(200, MINDIE_TEXT)) as server:
        source = ServingQueueSource(ServingConfig(enabled=True, preset="mindie", url=server.url),
                                    clock=lambda: clock[0], max_age=60)
        assert source.statuses(clock[0])["serving-queue"].error == "not polled yet"
        source.poll("serving-queue", [])
        server.route = answer(503, "busy\n")
        clock[0] = 1030.0
        source.poll("serving-queue", [])
    status = source.statuses(1030.0)["serving-queue"]
    assert depth_in(source, 1030.0) == 27.0  # the 30 s old value is still fresh
    assert not status.ok and status.last_success == 1000.0 and "HTTP 503" in status.error
    assert depth_in(source, 1061.0) is None
    source.close()


def test_a_successful_source_goes_stale_when_it_stops_polling():
    with http_server(answer(200, VLLM_TEXT)) as server:
        source = ServingQueueSource(ServingConfig(enabled=True, url=server.url), clock=lambda: 1000.0, max_age=60)
        source.poll("serving-queue", [])
    source.close()
    assert source.statuses(1050.0)["serving-queue"].ok
    stale = source.statuses(1100.0)["serving-queue"]
    assert not stale.ok and stale.error == "stale: last success 100s ago (max age 60s)"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from('ab_:{}="\\ \n#0123456789.eE+-,\t<>HELPTYPE'), max_size=120))
def test_parsing_any_text_gives_a_number_or_a_serving_error(text):
    try:
        value = parse_exposition(text, "a", {}).queue_depth
    except ServingError as exc:
        assert "\n" not in str(exc)
    else:
        assert isinstance(value, float)


# --- config ---------------------------------------------------------------------------------------------


def test_off_by_default_and_a_full_section_parses(tmp_path):
    assert Config().serving == ServingConfig() and Config().serving.enabled is False
    assert serving_sources(Config(), Target(["npu-smi"], None, "/")) == []
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked here\n")
    config = parse_config(
        "serving:\n"
        "  enabled: true\n"
        "  preset: triton\n"
        "  url: https://127.0.0.1:8002/metrics\n"
        "  labels: {model: resnet50}\n"
        "  interval_seconds: 5\n"
        "  timeout_seconds: 2\n"
        "  max_body_bytes: 1000000\n"
        "  ca_file: " + str(ca) + "\n", "npumon.yaml")
    assert config.serving == ServingConfig(enabled=True, preset="triton", url="https://127.0.0.1:8002/metrics",
                                           labels={"model": "resnet50"}, interval_seconds=5.0, timeout_seconds=2.0,
                                           max_body_bytes=1000000, ca_file=str(ca))
    (source,) = serving_sources(config, Target(["npu-smi"], None, "/"))
    assert source.tiers()[0].interval == 5.0 and source.metric == PRESETS["triton"].metric
    source.close()


@pytest.mark.parametrize("text, expected", [
    ("serving:\n  preset: sglang\n", "npumon.yaml:2: serving.preset: unknown preset 'sglang' (known: mindie, "
                                     "triton, vllm, custom)"),
    ("serving:\n  enabled: true\n  preset: custom\n  metric: q\n", "npumon.yaml:2: serving.url: required with "
                                                                   "the custom preset"),
    ("serving:\n  preset: custom\n  url: http://127.0.0.1:9/m\n", "npumon.yaml:2: serving.metric: required "
                                                                  "with the custom preset"),
    ("serving:\n  url: ftp://127.0.0.1/metrics\n", "npumon.yaml:2: serving.url: expected an http:// or "
                                                   "https:// URL with a host"),
    ("serving:\n  url: http://127.0.0.1:99999/metrics\n", "npumon.yaml:2: serving.url: not a valid URL"),
    ("serving:\n  metric: 'queue depth'\n", "npumon.yaml:2: serving.metric: 'queue depth' is not a Prometheus "
                                            "metric name"),
    ("serving:\n  labels:\n    model-name: x\n", "npumon.yaml:3: serving.labels.model-name: not a Prometheus "
                                                 "label name"),
    ("serving:\n  labels:\n    version: 1\n", "npumon.yaml:3: serving.labels.version: expected a string, got 1"),
    ("serving:\n  interval_seconds: 0\n", "npumon.yaml:2: serving.interval_seconds: must be greater than 0"),
    ("serving:\n  timeout_seconds: -1\n", "npumon.yaml:2: serving.timeout_seconds: must be greater than 0"),
    ("serving:\n  max_body_bytes: 0\n", "npumon.yaml:2: serving.max_body_bytes: must be at least 1"),
    ("serving:\n  ca_file: /nonexistent/ca.pem\n", "npumon.yaml:2: serving.ca_file: no such file"),
    ("serving:\n  enable: true\n", "npumon.yaml:2: serving.enable: unknown key"),
])
def test_config_mistakes_name_file_line_and_key(text, expected):
    with pytest.raises(ConfigError) as caught:
        parse_config(text, "npumon.yaml")
    assert str(caught.value).startswith(expected), str(caught.value)
    assert "\n" not in str(caught.value)


# --- the simulator's endpoint ---------------------------------------------------------------------------


def test_simulated_endpoint_serves_the_scenario_depth_in_vllm_format(tmp_path):
    prepare_simulation(str(tmp_path), "cpu-bottleneck", time_scale=0)  # frozen clock: a fixed depth
    expected = float(round(serving_queue_depth(str(tmp_path))))
    with QueueServer(str(tmp_path)) as queue:
        assert queue.url.startswith("http://127.0.0.1:")
        # on although the config leaves it off
        (source,) = serving_sources(Config(), Target(["npu-smi"], None, "/", serving_url=queue.url))
        source.poll("serving-queue", [])
        now = time.time()
        depth = depth_in(source, now)
        source.close()
    assert expected >= 100 and depth == expected


def test_simulated_endpoint_answers_404_elsewhere_and_500_without_state(tmp_path):
    prepare_simulation(str(tmp_path), "healthy", time_scale=0)
    with QueueServer(str(tmp_path)) as queue:
        status, _ = poll_once(queue.url.replace("/metrics", "/other"))
        assert status.error.endswith("answered HTTP 404 Not Found")
        os.unlink(str(tmp_path / "state.json"))
        status, _ = poll_once(queue.url)
        assert status.error.endswith("answered HTTP 500 Internal Server Error")


def test_simulated_config_keeps_timing_but_not_the_real_endpoint():
    config = ServingConfig(enabled=False, preset="triton", labels={"model": "x"}, timeout_seconds=2.0,
                           interval_seconds=7.0, url="http://10.1.1.1/metrics")
    (source,) = serving_sources(Config(serving=config),
                                Target(["npu-smi"], None, "/", serving_url="http://127.0.0.1:1/metrics"))
    assert (source.url, source.metric, source.tiers()[0].interval) == ("http://127.0.0.1:1/metrics",
                                                              "vllm:num_requests_waiting", 7.0)
    assert source.config.labels == {} and source.config.timeout_seconds == 2.0
    source.close()


def test_standalone_queue_server(tmp_path):
    prepare_simulation(str(tmp_path), "cpu-bottleneck", time_scale=0)
    proc = subprocess.Popen([sys.executable, "-m", "npumon.sim.queue_server", "--state", str(tmp_path),
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        status, value = poll_once(url)
        assert status.ok and value == float(round(serving_queue_depth(str(tmp_path))))
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_standalone_queue_server_without_a_simulation_is_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "npumon.sim.queue_server", "--state", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and proc.stderr.startswith("queue_server: cannot read simulation state")
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# --- end to end: `npumon check --simulate` --------------------------------------------------------------


def run_check(cli, tmp_path, scenario):
    # A generous npu-smi deadline: on a loaded CI machine the simulated npu-smi calls can take seconds each,
    # and a timed-out query would add a source-down finding that has nothing to do with the serving queue.
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi_timeout_seconds: 60\n")
    return cli("check", "--json", "--config", str(config), "--simulate=" + scenario)  # main() in-process


def test_check_cpu_bottleneck_shows_the_queue_depth(cli, tmp_path):
    proc = run_check(cli, tmp_path, "cpu-bottleneck")
    doc = json.loads(proc.stdout)
    assert doc["sources"]["serving-queue"]["ok"] is True
    summaries = [f["summary"] for f in doc["findings"] if f["rule"] == "cpu-bottleneck"]
    assert summaries and all("serving queue n/a" not in s for s in summaries)
    depths = {s.split("serving queue ")[1].split(",")[0] for s in summaries}
    assert len(depths) == 1 and 140 <= float(depths.pop()) <= 220  # the scenario's 180 +- 40
    assert proc.returncode == 1


def test_check_healthy_stays_ok_with_the_serving_source(cli, tmp_path):
    proc = run_check(cli, tmp_path, "healthy")
    doc = json.loads(proc.stdout)
    assert doc["sources"]["serving-queue"]["ok"] is True
    assert doc["status"] == "ok" and doc["findings"] == [] and proc.returncode == 0


def test_a_source_polled_less_often_than_max_age_is_not_stale_between_polls():
    with http_server(answer(200, VLLM_TEXT)) as server:
        source = ServingQueueSource(ServingConfig(enabled=True, url=server.url, interval_seconds=300),
                                    clock=lambda: 1000.0)
        source.poll("serving-queue", [])
    source.close()
    assert source.statuses(1000.0 + 299)["serving-queue"].ok  # waiting for the next poll, not stale
    assert source.statuses(1000.0 + 601)["serving-queue"].error == "stale: last success 601s ago (max age 600s)"
