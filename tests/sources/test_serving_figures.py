"""The inference server's own figures (sources/serving/engines.py, figures.py, view.py): each engine's answer
parsed from text in its real format, two answers turned into rates and interval means, hostile answers, the
source, the metrics, the simulator's endpoint and `npumon check --simulate` showing them.

The samples are written from the engines' documented metric names, types and labels: vLLM's metrics (its
docs/design/metrics.md and vllm/v1/metrics/loggers.py: `vllm:` prefix, labels model_name and engine,
request_success_total by finished_reason), Triton's (docs/user_guide/metrics.md and its L0_metrics tests:
counters without `_total`, labels model and version, nv_model_load_duration_secs), MindIE Service's Prometheus
interface (its documented sample answer, with the exposer_* summary whose quantiles are `Nan`, and a time to
first token histogram that has no _sum line)."""

import json
import math
import textwrap
import time
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from npumon.model import HostSample, Snapshot
from npumon.outputs.families import Families
from npumon.sim import ScenarioError, prepare_simulation, serving_metrics
from npumon.sim.scenario import load_scenario
from npumon.sources.base import Parts
from npumon.sources.serving.config import PRESETS, ServingConfig
from npumon.sources.serving.engines import ENGINES, MINDIE, TRITON, VLLM, metric_names
from npumon.sources.serving.fetch import ServingError
from npumon.sources.serving.figures import MAX_SAMPLE_LINES, Exposition, figures, parse_exposition
from npumon.sources.serving.source import METRICS, ServingQueueSource, export, host_facts
from npumon.sources.serving.view import serving_text

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def vllm_text(success=1200, tokens=300000, e2e_sum=3000.0, ttft_sum=360.0, running=24, waiting=3):
    """vLLM V1's answer (prometheus_client's text format: counters under their _total name)."""
    labels = 'engine="0",model_name="{}"'.format(MODEL)
    return textwrap.dedent("""\
        # HELP vllm:num_requests_running Number of requests in model execution batches.
        # TYPE vllm:num_requests_running gauge
        vllm:num_requests_running{{{l}}} {running}
        # HELP vllm:num_requests_waiting Number of requests waiting to be processed.
        # TYPE vllm:num_requests_waiting gauge
        vllm:num_requests_waiting{{{l}}} {waiting}
        # HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
        # TYPE vllm:kv_cache_usage_perc gauge
        vllm:kv_cache_usage_perc{{{l}}} 0.41
        # HELP vllm:request_success_total Count of successfully processed requests.
        # TYPE vllm:request_success_total counter
        vllm:request_success_total{{{l},finished_reason="stop"}} {stop}
        vllm:request_success_total{{{l},finished_reason="length"}} {length}
        vllm:request_success_total{{{l},finished_reason="abort"}} 0.0
        # HELP vllm:generation_tokens_total Number of generation tokens processed.
        # TYPE vllm:generation_tokens_total counter
        vllm:generation_tokens_total{{{l}}} {tokens}
        # HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
        # TYPE vllm:time_to_first_token_seconds histogram
        vllm:time_to_first_token_seconds_bucket{{{l},le="0.25"}} 400.0
        vllm:time_to_first_token_seconds_bucket{{{l},le="0.5"}} 1100.0
        vllm:time_to_first_token_seconds_bucket{{{l},le="+Inf"}} {success}
        vllm:time_to_first_token_seconds_count{{{l}}} {success}
        vllm:time_to_first_token_seconds_sum{{{l}}} {ttft_sum}
        # HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
        # TYPE vllm:e2e_request_latency_seconds histogram
        vllm:e2e_request_latency_seconds_bucket{{{l},le="2.5"}} 700.0
        vllm:e2e_request_latency_seconds_bucket{{{l},le="+Inf"}} {success}
        vllm:e2e_request_latency_seconds_count{{{l}}} {success}
        vllm:e2e_request_latency_seconds_sum{{{l}}} {e2e_sum}
        """).format(l=labels, running=float(running), waiting=float(waiting), stop=float(success - 20),
                    length=20.0, tokens=float(tokens), success=float(success), ttft_sum=ttft_sum, e2e_sum=e2e_sum)


def triton_text(success=4000, inferences=4000, executions=500, duration_us=180000000, load=1.611378656):
    """Triton's answer: per-model counters without _total, a summary whose idle quantiles are NaN, GPU-less."""
    return textwrap.dedent("""\
        # HELP nv_inference_request_success Number of successful inference requests, all batch sizes
        # TYPE nv_inference_request_success counter
        nv_inference_request_success{{model="preprocessor",version="1"}} {success}
        nv_inference_request_success{{model="identity_long",version="1"}} 0
        # HELP nv_inference_request_failure Number of failed inference requests, all batch sizes
        # TYPE nv_inference_request_failure counter
        nv_inference_request_failure{{model="preprocessor",reason="REJECTED",version="1"}} 0
        nv_inference_request_failure{{model="preprocessor",reason="BACKEND",version="1"}} 0
        # HELP nv_inference_count Number of inferences performed (does not include cached requests)
        # TYPE nv_inference_count counter
        nv_inference_count{{model="preprocessor",version="1"}} {inferences}
        # HELP nv_inference_exec_count Number of model executions performed (does not include cached requests)
        # TYPE nv_inference_exec_count counter
        nv_inference_exec_count{{model="preprocessor",version="1"}} {executions}
        # HELP nv_inference_request_duration_us Cumulative inference request duration in microseconds (includes cached requests)
        # TYPE nv_inference_request_duration_us counter
        nv_inference_request_duration_us{{model="preprocessor",version="1"}} {duration}
        # HELP nv_inference_queue_summary_us Summary of inference queuing duration in microseconds (includes cached requests)
        # TYPE nv_inference_queue_summary_us summary
        nv_inference_queue_summary_us_count{{model="identity_long",version="1"}} 0
        nv_inference_queue_summary_us_sum{{model="identity_long",version="1"}} 0
        nv_inference_queue_summary_us{{model="identity_long",version="1",quantile="0.5"}} NaN
        # HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
        # TYPE nv_inference_pending_request_count gauge
        nv_inference_pending_request_count{{model="preprocessor",version="1"}} 6
        nv_inference_pending_request_count{{model="identity_long",version="1"}} 0
        # HELP nv_model_load_duration_secs Model load time in seconds
        # TYPE nv_model_load_duration_secs gauge
        nv_model_load_duration_secs{{model="preprocessor",version="1"}} {load}
        nv_model_load_duration_secs{{model="identity_long",version="1"}} 0.004683712
        # HELP nv_cpu_utilization CPU utilization rate [0.0 - 1.0]
        # TYPE nv_cpu_utilization gauge
        nv_cpu_utilization 0.0287
        """).format(success=success, inferences=inferences, executions=executions, duration=duration_us, load=load)


MINDIE_TEXT = textwrap.dedent("""\
    # HELP exposer_transferred_bytes_total Transferred bytes to metrics services
    # TYPE exposer_transferred_bytes_total counter
    exposer_transferred_bytes_total 7901
    # HELP exposer_request_latencies Latencies of serving scrape requests, in microseconds
    # TYPE exposer_request_latencies summary
    exposer_request_latencies_count 1
    exposer_request_latencies_sum 282
    exposer_request_latencies{quantile="0.5"} Nan
    # HELP request_received_total Number of requests received so far.
    # TYPE request_received_total counter
    request_received_total{model_name="llama3-8b"} 3188
    # HELP request_success_total Number of requests proceed successfully so far.
    # TYPE request_success_total counter
    request_success_total{model_name="llama3-8b"} 2267
    # HELP num_requests_running Number of requests currently running on NPU.
    # TYPE num_requests_running gauge
    num_requests_running{model_name="llama3-8b"} 16
    # HELP num_requests_waiting Number of requests waiting to be processed.
    # TYPE num_requests_waiting gauge
    num_requests_waiting{model_name="llama3-8b"} 0
    # HELP generation_tokens_total Number of generation tokens processed.
    # TYPE generation_tokens_total counter
    generation_tokens_total{model_name="llama3-8b"} 84425
    # HELP avg_generation_throughput_toks_per_s Average generation throughput in tokens/s.
    # TYPE avg_generation_throughput_toks_per_s gauge
    avg_generation_throughput_toks_per_s{model_name="llama3-8b"} 2.375296831130981
    # HELP time_to_first_token_seconds Histogram of time to first token in seconds.
    # TYPE time_to_first_token_seconds histogram
    time_to_first_token_seconds_count{model_name="llama3-8b"} 2523
    time_to_first_token_seconds_bucket{model_name="llama3-8b",le="0.1"} 104
    time_to_first_token_seconds_bucket{model_name="llama3-8b",le="+Inf"} 2523
    # HELP e2e_request_latency_seconds Histogram of end to end request latency in seconds.
    # TYPE e2e_request_latency_seconds histogram
    e2e_request_latency_seconds_count{model_name="llama3-8b"} 2267
    e2e_request_latency_seconds_sum{model_name="llama3-8b"} 12684.5319980979
    e2e_request_latency_seconds_bucket{model_name="llama3-8b",le="10"} 2267
    e2e_request_latency_seconds_bucket{model_name="llama3-8b",le="+Inf"} 2267
    """)


def read(engine, text, labels=None):
    return parse_exposition(text, PRESETS[engine.name].metric, labels or {}, metric_names(engine))


# --- each engine's answer -------------------------------------------------------------------------------


def test_vllm_answer_gives_its_batch_latencies_and_counters():
    exposition = read(VLLM, vllm_text())
    assert exposition.queue_depth == 3.0
    assert exposition.values["vllm:request_success_total"] == 1200.0  # summed over finished_reason
    found = figures(VLLM, exposition, 1000.0)
    assert (found.engine, found.running_requests, found.batch_size) == ("vllm", 24.0, 24.0)
    assert found.request_latency_seconds == pytest.approx(2.5)
    assert found.time_to_first_token_seconds == pytest.approx(0.3)
    # one answer: the counters are there, a rate is not yet
    assert found.requests_per_second is None and found.generation_tokens_per_second is None
    assert found.model_load_seconds is None and "--max-num-seqs" in found.batch_setting


def test_triton_answer_gives_its_executed_batch_latency_and_model_load():
    exposition = read(TRITON, triton_text())
    assert exposition.queue_depth == 6.0
    # counters written without _total are still found (the parser names their samples ..._total)
    assert exposition.values["nv_inference_request_success"] == 4000.0
    found = figures(TRITON, exposition, 1000.0)
    assert found.batch_size == 8.0  # 4000 inferences in 500 executions
    assert found.request_latency_seconds == pytest.approx(0.045)  # 180 s of requests over 4000 of them
    assert found.model_load_seconds == pytest.approx(1.611378656)  # the slowest model, not the sum
    assert (found.running_requests, found.time_to_first_token_seconds, found.generation_tokens_per_second) == (
        None, None, None)
    assert "max_batch_size" in found.batch_setting


def test_mindie_answer_with_its_nan_summary_and_a_histogram_without_sum():
    exposition = read(MINDIE, MINDIE_TEXT)
    assert exposition.queue_depth == 0.0
    found = figures(MINDIE, exposition, 1000.0)
    assert (found.running_requests, found.batch_size) == (16.0, 16.0)
    assert found.request_latency_seconds == pytest.approx(12684.5319980979 / 2267)
    assert found.time_to_first_token_seconds is None  # the answer has a count but no sum
    assert "maxBatchSize" in found.batch_setting


def test_custom_preset_reads_the_queue_only():
    exposition = parse_exposition(vllm_text(), "vllm:num_requests_waiting", {}, ())
    assert exposition.values == {} and figures(None, exposition, 1.0).engine is None


def test_the_label_filter_applies_to_the_figures_too():
    text = vllm_text() + vllm_text(success=100, e2e_sum=900.0, running=2).replace(MODEL, "bge-m3").replace(
        "# ", "# x ")  # a second model's series (comments made plain comments, not a second TYPE)
    both = figures(VLLM, read(VLLM, text), 1.0)
    one = figures(VLLM, read(VLLM, text, {"model_name": MODEL}), 1.0)
    assert both.running_requests == 26.0 and one.running_requests == 24.0
    assert one.request_latency_seconds == pytest.approx(2.5)
    assert both.request_latency_seconds == pytest.approx(3900.0 / 1300)


# --- two answers: interval means and rates --------------------------------------------------------------


def test_the_second_answer_gives_rates_and_means_over_the_interval():
    first = read(VLLM, vllm_text())
    # 15 s later: 30 more requests, 36 s more of e2e latency (1.2 s each), 6000 more tokens
    second = read(VLLM, vllm_text(success=1230, tokens=306000, e2e_sum=3036.0, ttft_sum=363.0))
    found = figures(VLLM, second, 1015.0, (1000.0, first))
    assert found.requests_per_second == pytest.approx(2.0)
    assert found.generation_tokens_per_second == pytest.approx(400.0)
    assert found.request_latency_seconds == pytest.approx(1.2)  # not the 2.47 s since the start
    assert found.time_to_first_token_seconds == pytest.approx(0.1)


def test_no_request_finished_in_the_interval_falls_back_to_the_mean_since_the_start():
    first = read(VLLM, vllm_text())
    found = figures(VLLM, read(VLLM, vllm_text()), 1015.0, (1000.0, first))
    assert found.request_latency_seconds == pytest.approx(2.5) and found.requests_per_second == 0.0


def test_a_restarted_server_gives_no_rate_and_its_own_means():
    before = read(VLLM, vllm_text())
    after = read(VLLM, vllm_text(success=10, tokens=2000, e2e_sum=20.0, ttft_sum=1.0))  # counters went down
    found = figures(VLLM, after, 1015.0, (1000.0, before))
    assert found.requests_per_second is None and found.generation_tokens_per_second is None
    assert found.request_latency_seconds == pytest.approx(2.0)


def test_triton_batch_over_the_interval():
    first = read(TRITON, triton_text())
    second = read(TRITON, triton_text(success=4400, inferences=4400, executions=600, duration_us=190000000))
    found = figures(TRITON, second, 1010.0, (1000.0, first))
    assert found.batch_size == pytest.approx(4.0)  # 400 inferences in 100 executions: batches got smaller
    assert found.request_latency_seconds == pytest.approx(0.025)
    assert found.requests_per_second == pytest.approx(40.0)


def test_the_source_keeps_the_previous_answer_between_polls():
    answers = [vllm_text(), vllm_text(success=1230, tokens=306000, e2e_sum=3036.0)]
    now = [1000.0]
    source = ServingQueueSource(ServingConfig(enabled=True), fetch=lambda *args: answers.pop(0),
                                clock=lambda: now[0], max_age=60)
    source.poll("serving-queue", [])
    now[0] = 1015.0
    source.poll("serving-queue", [])
    host = source.contribute(Parts(time=now[0], host=HostSample()), now[0]).host
    source.close()
    assert host.serving_queue_depth == 3.0
    assert host.extra["serving"]["requests_per_second"] == pytest.approx(2.0)
    facts = host_facts(Snapshot(time=now[0], host=host, chips=[], sources={}))
    assert facts["serving_engine"] == "vllm" and facts["serving_batch_size"] == 24.0


# --- hostile answers ------------------------------------------------------------------------------------


WANTED = sorted({name for engine in ENGINES.values() for name in metric_names(engine)})


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(WANTED + ["num_requests_waiting", "# TYPE ", "# HELP x ", "counter",
                                                    "histogram", "{", "}", '="', "\"", ",", " ", "\n", "NaN",
                                                    "+Inf", "-1", "1e308", "_total", "_sum", "_count"]),
                          st.text(alphabet='a_:{}="\\ \n#0123456789.eE+-,\t', max_size=8)), max_size=40))
def test_any_answer_gives_figures_or_one_line_error(parts):
    text = "".join(parts)
    try:
        exposition = parse_exposition(text, "num_requests_waiting", {}, WANTED)
    except ServingError as exc:
        assert "\n" not in str(exc) and len(str(exc)) < 300
        return
    for engine in ENGINES.values():
        found = figures(engine, exposition, 2.0, (1.0, exposition))
        for value in (found.batch_size, found.request_latency_seconds, found.requests_per_second):
            assert value is None or isinstance(value, float)


def test_non_finite_figures_are_left_out_not_exported():
    text = vllm_text().replace("vllm:num_requests_running{", "vllm:num_requests_running{x=\"1\",", 1)
    text += 'vllm:num_requests_running{engine="1",model_name="m"} +Inf\n'
    sum_line = 'vllm:e2e_request_latency_seconds_sum{{engine="0",model_name="{}"}} '.format(MODEL)
    text = text.replace(sum_line + "3000.0", sum_line + "NaN")
    found = figures(VLLM, read(VLLM, text), 1.0)
    assert found.running_requests == 24.0  # the +Inf series left out
    assert found.request_latency_seconds is None  # its only sum is NaN


def test_figures_no_server_means_are_left_out():
    # an overflowing sum, a negative latency sum and a negative running count
    text = textwrap.dedent("""\
        vllm:num_requests_waiting 2
        vllm:num_requests_running -3
        vllm:generation_tokens_total 1e308
        vllm:generation_tokens_total{engine="1"} 1e308
        vllm:e2e_request_latency_seconds_sum -40
        vllm:e2e_request_latency_seconds_count 10
        """)
    exposition = read(VLLM, text)
    assert "vllm:generation_tokens_total" not in exposition.values  # infinite once summed
    found = figures(VLLM, exposition, 1.0)
    assert (found.running_requests, found.batch_size, found.request_latency_seconds) == (None, None, None)
    assert json.dumps(found.__dict__, allow_nan=False)  # check --json stays valid JSON


@pytest.mark.parametrize("name", [
    "vllm:num_requests_running",
    # skipped line by line under tracemalloc: about 19 s of CPU
    pytest.param("vllm:iteration_tokens_total_bucket", marks=pytest.mark.slow)])
def test_a_huge_family_is_refused_or_skipped_in_bounded_memory(name):
    # 8 MiB (serving.max_body_bytes) in one family: the parser would hold all of it at once
    line = name + '{{engine="{}",model_name="m"}} 1\n'
    body = "".join(line.format(n) for n in range(8 * 1024 * 1024 // len(line.format(99999))))
    text = "# TYPE {} gauge\n".format(name) + body + "vllm:num_requests_waiting 5\n"
    tracemalloc.start()
    try:
        try:
            exposition = read(VLLM, text)
        except ServingError as exc:
            exposition = str(exc)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    if name == "vllm:num_requests_running":  # one the figures read: refused past the limit
        assert exposition == ("more than 10000 series of the metrics npumon reads: not an inference server's "
                              "answer (check serving.url)")
    else:  # one they do not read: its lines never reach the parser
        assert exposition.queue_depth == 5.0
    # bounded by the limit's samples (some 5 MiB as parsed), not by the answer
    assert peak < 8 * 1024 * 1024, "peak {:.1f} MiB".format(peak / 2 ** 20)


@pytest.mark.parametrize("text, families", [
    ("a 1\nb_total 2\nb_created 3\nc_bucket{le=\"1\"} 1\nc_sum 2\nc_count 1\n", 3),  # no comments at all
    ("# TYPE x counter\nx_total 1\nx_created 2\n# HELP y h\ny 1\nz 4\n", 3),
])
def test_an_answer_without_the_queue_says_how_many_other_families_it_has(text, families):
    # the samples of metrics npumon does not read never reach the parser, yet the message counts their families
    with pytest.raises(ServingError) as caught:
        parse_exposition(text, "q", {}, ())
    assert str(caught.value) == ("no metric q in the answer ({} other metric families; check serving.metric or "
                                 "serving.preset)".format(families))


def test_up_to_the_limit_every_series_counts():
    lines = "".join('vllm:num_requests_running{{engine="{}"}} 1\n'.format(n) for n in range(MAX_SAMPLE_LINES - 1))
    exposition = read(VLLM, lines + "vllm:num_requests_waiting 5\n")
    assert exposition.values["vllm:num_requests_running"] == MAX_SAMPLE_LINES - 1


# --- metrics, the view --------------------------------------------------------------------------------


def test_every_figure_is_exported_as_a_gauge_and_unknown_ones_are_left_out():
    host = HostSample(serving_queue_depth=3.0, extra={"serving": {"engine": "triton", "batch_size": 8.0,
                                                                  "model_load_seconds": 1250.0,
                                                                  "requests_per_second": None}})
    out = Families({spec.name: spec for spec in METRICS})
    export(Snapshot(time=1.0, host=host, chips=[], sources={}), out)
    rows = {name: dict(family_rows) for name, _spec, family_rows in out.rows()}
    assert rows == {"npumon_host_serving_queue_depth": {(): 3.0}, "npumon_host_serving_batch_size": {(): 8.0},
                    "npumon_host_serving_model_load_seconds": {(): 1250.0}}
    assert all(spec.name.startswith("npumon_host_serving_") for spec in METRICS)


def test_the_line_shows_what_the_engine_exports():
    assert serving_text(None, None) is None
    assert serving_text(5.0, None) == "server: queue 5"
    assert serving_text(3.0, {"engine": "triton", "batch_size": 12.0, "request_latency_seconds": 0.045,
                              "model_load_seconds": 1250.0}) == (
        "triton: queue 3, batch 12.0, latency 45ms, requests/s -, model load 1250s")
    assert serving_text(62.0, {"engine": "vllm", "batch_size": 4.0, "request_latency_seconds": 14.0,
                               "time_to_first_token_seconds": 9.5, "requests_per_second": 0.8,
                               "generation_tokens_per_second": 190.0}) == (
        "vllm: queue 62, batch 4.0, latency 14.00s, first token 9.50s, requests/s 0.8, tokens/s 190")
    # a document's junk (top reads JSON) shows as unknown
    assert serving_text(1.0, {"engine": "mindie", "batch_size": "many", "request_latency_seconds": math.nan}) == (
        "mindie: queue 1, batch -, latency -, first token -, requests/s -, tokens/s -")


# --- the simulator --------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario, engine", [("healthy", VLLM), ("serving-small-batch", VLLM),
                                              ("serving-slow-model-load", TRITON)])
def test_simulated_endpoint_serves_the_scenario_figures_in_its_engine_format(tmp_path, scenario, engine):
    prepare_simulation(str(tmp_path), scenario, time_scale=0)
    spec = load_scenario(scenario)
    start = json.loads(json.dumps(spec))["serving"]
    text = serving_metrics(str(tmp_path), now=0.0)
    found = figures(engine, read(engine, text), 1.0)
    assert found.engine == engine.name
    assert found.batch_size == pytest.approx(start.get("batch_size", 32), rel=1e-3)
    assert found.request_latency_seconds == pytest.approx(start.get("request_latency_seconds", 2.5), rel=1e-3)
    if engine is TRITON:
        assert found.model_load_seconds == start["model_load_seconds"]
    else:
        assert found.time_to_first_token_seconds == pytest.approx(start.get("time_to_first_token_seconds", 0.35))


def test_a_scenario_can_imitate_mindie_and_check_reads_it_with_the_mindie_names(cli, tmp_path):
    scenario = tmp_path / "mindie.yaml"
    scenario.write_text("product: atlas-800i-a2\nserving_queue_depth: 5\n"
                        "serving: {engine: mindie, batch_size: 24, request_latency_seconds: 3.0}\n")
    prepare_simulation(str(tmp_path / "sim"), str(scenario), time_scale=0)
    text = serving_metrics(str(tmp_path / "sim"))
    assert "\nnum_requests_waiting{" in text and "vllm:" not in text
    proc = run_check(cli, tmp_path, str(scenario), "--json")
    serving = json.loads(proc.stdout)["host_facts"]["extra"]["serving"]
    assert (serving["engine"], serving["batch_size"], serving["request_latency_seconds"]) == ("mindie", 24.0, 3.0)
    assert "maxBatchSize" in serving["batch_setting"]


def test_simulated_counters_grow_at_the_scenario_rates(tmp_path):
    prepare_simulation(str(tmp_path), "serving-small-batch", time_scale=1)
    later = time.time() + 1000
    first = read(VLLM, serving_metrics(str(tmp_path), now=later))
    second = read(VLLM, serving_metrics(str(tmp_path), now=later + 100))
    found = figures(VLLM, second, 100.0, (0.0, first))
    assert found.requests_per_second == pytest.approx(0.8, abs=0.02)
    assert found.generation_tokens_per_second == pytest.approx(190, abs=1)


@pytest.mark.parametrize("serving, message", [
    ("{engine: sglang}", "serving.engine: must be one of vllm, triton, mindie"),
    ("{batch_size: -1}", "serving.batch_size: must be within [0.0, inf], got -1"),
    ("{batch: 8}", "serving.batch: unknown key; known keys: engine, batch_size"),
    ("[1, 2]", "serving: expected a mapping"),
])
def test_scenario_serving_mistakes_are_one_line(tmp_path, serving, message):
    path = tmp_path / "bad.yaml"
    path.write_text("product: atlas-800i-a2\nserving: {}\n".format(serving))
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert "bad.yaml:2" in str(caught.value)


# --- `npumon check --simulate` --------------------------------------------------------------------------


def run_check(cli, tmp_path, scenario, *args):
    config = tmp_path / "npumon.yaml"
    config.write_text("npu_smi_timeout_seconds: 60\n")  # a loaded machine's simulated npu-smi is slow
    return cli("check", "--config", str(config), "--simulate=" + scenario, *args)


def test_check_shows_a_backlog_of_small_batches_and_says_raise_the_batch_size(cli, tmp_path):
    proc = run_check(cli, tmp_path, "serving-small-batch", "--json")
    doc = json.loads(proc.stdout)
    serving = doc["host_facts"]["extra"]["serving"]
    assert (serving["engine"], serving["batch_size"], serving["request_latency_seconds"]) == ("vllm", 4.0, 14.0)
    assert serving["requests_per_second"] is None  # one answer: no rate yet
    assert [(f["rule"], f["subject"]) for f in doc["findings"]] == [("serving-small-batch", "host")]
    assert "raise the batch size" in doc["findings"][0]["hint"] and "--max-num-seqs" in doc["findings"][0]["hint"]
    assert proc.returncode == 1
    table = run_check(cli, tmp_path, "serving-small-batch").stdout
    line = next(line for line in table.splitlines() if line.startswith("SERVING "))
    assert line.startswith("SERVING vllm: queue ") and ", batch 4.0, latency 14.00s, first token 9.50s" in line


def test_check_says_a_slow_model_load_without_failing_the_check(cli, tmp_path):
    proc = run_check(cli, tmp_path, "serving-slow-model-load", "--json")
    doc = json.loads(proc.stdout)
    assert doc["host_facts"]["extra"]["serving"]["model_load_seconds"] == 1250.0
    (finding,) = doc["findings"]
    assert (finding["rule"], finding["severity"]) == ("serving-slow-model-load", "info")
    assert "1250s to load" in finding["summary"]
    assert proc.returncode == 0 and doc["status"] == "ok"


def test_exposition_holds_only_what_was_asked_for():
    assert read(VLLM, vllm_text()) == Exposition(3.0, {
        "vllm:num_requests_running": 24.0, "vllm:request_success_total": 1200.0,
        "vllm:generation_tokens_total": 300000.0, "vllm:e2e_request_latency_seconds_sum": 3000.0,
        "vllm:e2e_request_latency_seconds_count": 1200.0, "vllm:time_to_first_token_seconds_sum": 360.0,
        "vllm:time_to_first_token_seconds_count": 1200.0})
