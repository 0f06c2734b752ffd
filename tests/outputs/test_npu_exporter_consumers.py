"""npumon in npu-exporter compatibility mode against real consumers of npu-exporter's series.

Every simulated product runs as its own `npumon run --simulate` host in compat mode, serving npu-exporter's
families on their own listener (`exporter.npu_exporter_listen`, what a scrape config made for npu-exporter's
:8082 reaches) with a `node` label (`exporter.node_label`). One real Prometheus scrapes all of them, the way
the consumers expect npu-exporter to be scraped:
  - job `npu-exporter` (KubeSphere's rules and most tools select it);
  - one job per node, named after the node (Huawei's MindX DL dashboards select `job="$hostname"`);
  - job `kubelet`: a stand-in serving kubelet_node_name{node=...}, the series MindX DL's $hostname reads.
Each target carries `product`; every query is scoped to one product (promql_scope.scope), so a query passes
only if it returns data on a host of that product alone. The consumers and their sources are in
tests/fixtures/npu_exporter_consumers/SOURCES.md; the queries that by nature return nothing are in
exceptions.yaml there. Queries on other exporters' series only (cAdvisor, kube-state-metrics) are skipped.
"""

import json
import os
import random
import re
import shutil
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import yaml

import npu_exporter_queries as queries
from npumon.sim.fleet import FAST_POLL, Fleet, SimHost
from npumon.sim.products import PRODUCTS
from paths import FIXTURES
from promql_scope import scope

PROMETHEUS = shutil.which("prometheus")
CONSUMERS = os.path.join(FIXTURES, "npu_exporter_consumers")
PRODUCT_NAMES = sorted(PRODUCTS)
NPU_EXPORTER_JOB = "npu-exporter"
POLL = dict(FAST_POLL, table_seconds=1, host_seconds=1, usages_seconds=1, power_seconds=1, health_seconds=1,
            ecc_seconds=1, board_seconds=300,
            # the die-id sweep follows info -m at once; identity_seconds short for the later sweeps
            identity_seconds=2, common_seconds=2, memory_seconds=2, volt_seconds=2)
DATA_DEADLINE_SECONDS = 60  # only a failure waits this long
RANGE_SECONDS = 60
VDIE_ID = re.compile(r"[0-9A-F]{8}(?:-[0-9A-F]{8}){4}")

# slow: six simulated hosts, a kubelet stand-in and a Prometheus run in real time for the whole module (about
# 20 s of CPU and 30-45 s of a worker); .ci/run runs the slow suite on every change
pytestmark = [pytest.mark.integration, pytest.mark.slow,
              pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not on PATH (Debian: apt-get install prometheus)")]


def load(name):
    with open(os.path.join(CONSUMERS, name), encoding="utf-8") as handle:
        return json.load(handle) if name.endswith(".json") else yaml.safe_load(handle)


EXCEPTIONS = load("exceptions.yaml")["exceptions"]


def exception_for(consumer, query, product, chip_id=None):
    """The documented exception of a consumer's query (by its text, or by its rule's record name) on a
    product (and chip), or None."""
    for item in EXCEPTIONS:
        if item["consumer"] == consumer and query in (item.get("query"), item.get("record")) \
                and product in item.get("products", [product]) \
                and (chip_id is None or int(chip_id) in item.get("ids", [int(chip_id)])):
            return item
    return None


# --- the hosts, the kubelet stand-in and Prometheus -----------------------------------------------------


class KubeletStandIn:
    """Serves GET /<node>/metrics: `kubelet_node_name{node="<node>"} 1`, as a node's kubelet does."""

    def __init__(self, nodes):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                node = self.path.strip("/").split("/")[0]
                body = ('kubelet_node_name{{node="{}"}} 1\n'.format(node) if node in nodes else "").encode()
                self.send_response(200 if body else 404)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.address = "127.0.0.1:{}".format(self.httpd.server_address[1])
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def npu_exporter_address(index, base_port, hosts):
    """The host's npu-exporter listener: its own loopback address, a port after the main listeners'."""
    return "127.0.0.{}:{}".format(index + 2, base_port + hosts + index + 1)


def compat_config(index, base_port, hosts, node):
    """A host's config in compat mode, as a DaemonSet replacing npu-exporter would set it."""
    return {"exporter": {"npu_exporter_compat": True, "node_label": node,
                         "npu_exporter_listen": npu_exporter_address(index, base_port, hosts)}}


def scrape_config(fleet, kubelet):
    def target(host):
        return {"targets": [host.config["exporter"]["npu_exporter_listen"]], "labels": {"product": host.product}}

    jobs = [{"job_name": NPU_EXPORTER_JOB, "static_configs": [target(host) for host in fleet.hosts]}]
    jobs += [{"job_name": host.name, "static_configs": [target(host)]} for host in fleet.hosts]
    jobs.append({"job_name": "kubelet", "static_configs": [
        {"targets": [kubelet.address], "labels": {"product": host.product, "__metrics_path__": "/{}/metrics".format(
            host.name)}} for host in fleet.hosts]})
    for job in jobs:
        job.update(scrape_interval="1s", scrape_timeout="1s")
    return {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": jobs}


class ConsumerFleet(Fleet):
    """The shipped simulated fleet, with this test's scrape config instead of the shipped one."""

    def __init__(self, *args, kubelet, **kwargs):
        super().__init__(*args, **kwargs)
        self.kubelet = kubelet

    def _start_prometheus(self):
        directory = os.path.join(self.directory, "prometheus")
        os.makedirs(directory, exist_ok=True)
        with open(self.prometheus_config_path, "w", encoding="utf-8") as handle:
            yaml.safe_dump(scrape_config(self, self.kubelet), handle, sort_keys=False)
        self._spawn("prometheus", [self.prometheus_binary, "--config.file=" + self.prometheus_config_path,
                                   "--storage.tsdb.path=" + os.path.join(directory, "data"),
                                   "--web.listen-address=127.0.0.1:{}".format(self.prometheus_port)])


def _free_base_port(count):
    """A base port with Prometheus's, every main and every npu-exporter listener's port free."""
    for _ in range(50):
        # below Linux's ephemeral ports (32768-60999), which an outgoing connection may take at any moment
        base = random.randrange(20000, 32000 - 2 * count - 1)
        # fleet-sim's main listeners are on 127.0.0.1; the npu-exporter listeners on their own addresses
        addresses = [("127.0.0.1", base + offset) for offset in range(count + 1)]
        addresses += [tuple(npu_exporter_address(index, base, count).rsplit(":", 1)) for index in range(count)]
        addresses = [(host, int(port)) for host, port in addresses]
        try:
            for address in addresses:
                with socket.socket() as probe:
                    probe.bind(address)
            return base
        except OSError:
            continue
    pytest.skip("no free block of loopback ports")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    base_port = _free_base_port(len(PRODUCT_NAMES))
    hosts = [SimHost(name, "healthy", name, config=compat_config(index, base_port, len(PRODUCT_NAMES), name))
             for index, name in enumerate(PRODUCT_NAMES)]
    kubelet = KubeletStandIn({host.name for host in hosts})
    try:
        with ConsumerFleet(str(tmp_path_factory.mktemp("consumers")), hosts, base_port=base_port,
                           prometheus=PROMETHEUS, poll=POLL, kubelet=kubelet) as running:
            running.started = time.monotonic()
            _wait_scraped(running)
            yield running
            assert not running.exited(), {name: running.log_tail(name) for name in running.exited()}
    finally:
        kubelet.close()


def _wait_scraped(fleet):
    """Until every target of every job is up and has been scraped a few times."""
    deadline = time.monotonic() + DATA_DEADLINE_SECONDS
    expected = 3 * len(fleet.hosts)  # npu-exporter, per-node and kubelet targets
    while time.monotonic() < deadline:
        try:
            up = _api(fleet, "/api/v1/query", query="count_over_time(up[10s]) >= 3 and up == 1")["result"]
            # and every chip's die id swept (an empty vdie_id: the identity tier has not answered yet)
            unswept = _api(fleet, "/api/v1/query", query='npu_chip_info_name{vdie_id=""}')["result"]
            if len(up) == expected and not unswept:
                return
        except (requests.RequestException, ValueError):  # not listening yet, or not answering JSON yet
            pass
        if fleet.exited():
            break
        time.sleep(0.5)
    pytest.fail("not every target was scraped: {}\nprometheus: {}\n{}".format(
        fleet.exited(), fleet.log_tail("prometheus", 10),
        {host.name: fleet.log_tail(host.name, 5) for host in fleet.hosts}))


def _api(fleet, path, **params):
    response = requests.post(fleet.prometheus_url + path, data=params, timeout=10)
    document = response.json()
    assert document["status"] == "success", (path, params, document)
    return document["data"]


def instant(fleet, expr):
    return _api(fleet, "/api/v1/query", query=expr)["result"]


def has_data(fleet, expr, is_instant=True):
    if is_instant:
        return bool(instant(fleet, expr))
    now = time.time()
    result = _api(fleet, "/api/v1/query_range", query=expr, start=now - RANGE_SECONDS, end=now, step=1)["result"]
    return any(series["values"] for series in result)


def eventually(fleet, find_problems):
    """Re-check until nothing is wrong or the deadline (from the fleet's start) passes; the last problems,
    one a line, each expression on one line."""
    while True:
        problems = find_problems()
        if not problems or time.monotonic() - fleet.started > DATA_DEADLINE_SECONDS:
            return "\n".join(" ".join(problem.split()) for problem in problems)
        time.sleep(2)


def in_product(product):
    return {"product": product}


# --- Grafana dashboards ---------------------------------------------------------------------------------


def variable_values(fleet, product, variable, known):
    """A variable's values as Grafana finds them, on one product's host."""
    if variable.kind == "custom":
        return [value.strip() for value in variable.query.split(",") if value.strip()]
    if variable.kind in ("constant", "textbox", "interval"):
        return [variable.query.split(",")[0].strip()]
    if variable.kind != "query":
        return []
    parsed = queries.parse_variable_query(queries.substitute(variable.query, known))
    if parsed.function == "label_values":
        selector = scope(parsed.selector or "{}", in_product(product))
        found = _api(fleet, "/api/v1/series", **{"match[]": selector})
        values = sorted({series[parsed.label] for series in found if parsed.label in series})
    elif parsed.function == "query_result":
        values = [_series_text(series) for series in instant(fleet, scope(parsed.selector, in_product(product)))]
    else:
        raise AssertionError("variable {} uses {}(), which no collected dashboard uses".format(
            variable.name, parsed.function))
    return queries.apply_regex(values, variable.regex)


def _series_text(series):
    """How Grafana shows a query_result row: name{labels} value timestamp."""
    labels = dict(series["metric"])
    name = labels.pop("__name__", "")
    inner = ", ".join('{}="{}"'.format(key, value) for key, value in sorted(labels.items()))
    return "{}{{{}}} {} {}".format(name, inner, series["value"][1], int(float(series["value"][0]) * 1000))


def dashboard_problems(fleet, consumer, product):
    dashboard = load(consumer + ".json")
    listed = queries.variables(dashboard)
    values, problems = {}, []
    for variable in queries.resolution_order(listed):
        values[variable.name] = variable_values(fleet, product, variable, values)
        if not values[variable.name]:
            problems.append("variable ${} ({}) has no value".format(variable.name, variable.query))
    if problems:
        return problems
    for query in queries.panel_queries(dashboard):
        if not queries.is_npu_exporter_query(query.expr):
            continue  # other exporters' series only
        # A repeated panel is drawn once per value of its variable, with just that value selected.
        choices = [{**values, query.repeat: [value]} for value in values[query.repeat]] if query.repeat else [values]
        for chosen in choices:
            expr = scope(queries.substitute(query.expr, chosen, listed), in_product(product))
            problems += _judged(fleet, consumer, product, query.expr, expr, query.instant,
                                "{} / {}".format(query.title, query.ref_id))
    return problems


def _judged(fleet, consumer, product, published, expr, is_instant, where, chip_id=None):
    """[] when a query does what it should, else why not. A documented exception must stay empty, and its
    stand-in query (`instead`, scoped like the query) must have data."""
    exception = exception_for(consumer, published, product, chip_id)
    data = has_data(fleet, expr, is_instant)
    if exception is None:
        return [] if data else ["{}: {} returns nothing".format(where, expr)]
    if data:
        return ["{}: {} returns data now: drop its entry from exceptions.yaml".format(where, expr)]
    instead = exception.get("instead")
    if instead and not has_data(fleet, scope(instead, in_product(product))):
        return ["{}: {} (the documented stand-in for {}) returns nothing".format(where, instead, expr)]
    return []


# --- the tests ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("product", PRODUCT_NAMES)
@pytest.mark.parametrize("consumer", ["mindxdl_device_status", "mindxdl_cluster_status"])
def test_huaweis_mindx_dl_dashboards_have_data(fleet, consumer, product):
    problems = eventually(fleet, lambda: dashboard_problems(fleet, consumer, product))
    assert not problems, problems


@pytest.mark.parametrize("product", PRODUCT_NAMES)
def test_kubesphere_recording_rules_have_data(fleet, product):
    consumer = "kubesphere_ascend_npu_rules"

    def problems():
        found = []
        for rule in queries.rule_queries(load(consumer + ".yaml")):
            if queries.is_npu_exporter_query(rule.expr):
                found += _judged(fleet, consumer, product, rule.title, scope(rule.expr, in_product(product)), True,
                                 rule.title)
        return found

    wrong = eventually(fleet, problems)
    assert not wrong, wrong


def expected_chips(product):
    """The chips npu-exporter would list, in device order: (id, pcie_bus_info) per chip."""
    return [(str(slot.phy_id), slot.bus_id or "") for slot in PRODUCTS[product].slots()]


def chip_series(fleet, product, family="npu_chip_info_name"):
    return queries.label_sets(instant(fleet, '{}{{job="{}",product="{}"}}'.format(family, NPU_EXPORTER_JOB, product)))


@pytest.mark.parametrize("product", PRODUCT_NAMES)
def test_join_labels_id_and_vdie_id(fleet, product):
    """Tools join on `id` (0..n-1 in device order: HAMi-WebUI maps the i-th device of a node to id i) and on
    `vdie_id` (unique per chip)."""
    def problems():
        series = chip_series(fleet, product)
        found = sorted((labels.get("id", ""), labels.get("pcie_bus_info", "").upper()) for labels in series)
        wanted = sorted((chip_id, bus.upper()) for chip_id, bus in expected_chips(product))
        wrong = [] if found == wanted else ["(id, pcie_bus_info) {} instead of {}".format(found, wanted)]
        vdie_ids = [labels.get("vdie_id", "") for labels in series]
        if not all(VDIE_ID.fullmatch(value) for value in vdie_ids) or len(set(vdie_ids)) != len(vdie_ids):
            wrong.append("vdie_id not unique and in npu-exporter's format: {}".format(vdie_ids))
        return wrong

    wrong = eventually(fleet, problems)
    assert not wrong, wrong


@pytest.mark.parametrize("product", PRODUCT_NAMES)
def test_hami_webui_finds_every_chip_of_the_node_and_its_metrics(fleet, product):
    consumer = "hami_webui_queries"
    listed = load(consumer + ".yaml")["queries"]
    devices, per_chip = listed[0], listed[1:]

    def problems():
        chips = queries.label_sets(instant(fleet, scope(queries.tool_query(devices["template"], [product]),
                                                        in_product(product))))
        by_id = {labels.get("id"): labels.get("vdie_id", "") for labels in chips}
        wanted = [chip_id for chip_id, _ in expected_chips(product)]
        if sorted(by_id) != sorted(wanted) or not all(by_id.values()):
            return ["{}: id -> vdie_id {} (want ids {} with a vdie_id each)".format(devices["where"], by_id, wanted)]
        found = []
        for entry in per_chip:
            for chip_id in wanted:
                expr = scope(queries.tool_query(entry["template"], [by_id[chip_id]]), in_product(product))
                found += _judged(fleet, consumer, product, entry["template"], expr, True,
                                 "{} id {}".format(entry["where"], chip_id), chip_id)
        return found

    wrong = eventually(fleet, problems)
    assert not wrong, wrong
