"""The query extraction behind the consumer test (test_npu_exporter_consumers.py), on the collected
dashboards, rules and query lists themselves and on the Grafana forms they do not happen to use."""

import json
import os

import pytest
import yaml

import npu_exporter_queries as queries
from paths import FIXTURES
from promql_scope import scope

CONSUMERS = os.path.join(FIXTURES, "npu_exporter_consumers")


def load(name):
    with open(os.path.join(CONSUMERS, name), encoding="utf-8") as handle:
        return json.load(handle) if name.endswith(".json") else yaml.safe_load(handle)


def test_every_target_and_variable_of_huaweis_device_dashboard():
    dashboard = load("mindxdl_device_status.json")
    assert [(q.ref_id, q.expr, q.instant, q.repeat) for q in queries.panel_queries(dashboard)] == [
        ("A", 'npu_chip_info_name{job=~"$hostname"}', True, "hostname"),
        ("B", 'npu_chip_info_health_status{job="$hostname"}', True, "hostname"),
        ("A", 'npu_chip_info_utilization{job=~"$hostname"}', False, "hostname"),
    ]
    (hostname,) = queries.variables(dashboard)
    assert (hostname.name, hostname.query, hostname.multi, hostname.include_all) == (
        "hostname", "label_values(kubelet_node_name, node)", False, False)
    assert queries.parse_variable_query(hostname.query) == ("label_values", "kubelet_node_name", "node")


def test_huaweis_cluster_dashboard_is_told_apart_into_npu_exporter_and_other_exporters_queries():
    found = queries.panel_queries(load("mindxdl_cluster_status.json"))
    assert len(found) == 11
    assert [q.expr for q in found if queries.is_npu_exporter_query(q.expr)] == [
        "sum(machine_npu_nums)", "sum(machine_npu_nums)-count(npu_container_info)", "machine_npu_nums",
        "count(npu_container_info) by(job)"]
    # cAdvisor, kube-state-metrics and Prometheus's own `up`: not npu-exporter's
    assert not queries.is_npu_exporter_query("sum(machine_cpu_cores)")
    assert not queries.is_npu_exporter_query('up{job="kubernetes-nodes"}')


def test_kubesphere_rules_are_filled_from_the_mixins_config():
    found = queries.rule_queries(load("kubesphere_ascend_npu_rules.yaml"))
    assert len(found) == 10
    temperature = next(q for q in found if q.title == "node:gpu_device:gpu_temperature")
    assert 'npu_chip_info_temperature{job="npu-exporter"}' in temperature.expr
    assert "%(" not in "".join(q.expr for q in found)
    assert sum(queries.is_npu_exporter_query(q.expr) for q in found) == 8  # 2 read kube-state-metrics only


def test_hami_queries_are_built_as_the_tool_builds_them():
    listed = load("hami_webui_queries.yaml")["queries"]
    assert len(listed) == 9
    devices = listed[0]
    assert queries.tool_query(devices["template"], ["node-1"]) == 'npu_chip_info_health_status{node="node-1"}'
    assert all(entry["fills"] == ["vdie_id"] for entry in listed[1:])
    with pytest.raises(ValueError):
        queries.tool_query(devices["template"], [])


def test_rows_nested_and_legacy_are_walked_and_hidden_targets_left_out():
    dashboard = {
        "panels": [{"type": "row", "title": "row", "panels": [
            {"title": "inner", "targets": [{"expr": "a", "refId": "A"}, {"expr": "b", "refId": "B", "hide": True}]}]}],
        "rows": [{"panels": [{"title": "old", "targets": [{"expr": "c", "refId": "A"}]}]}],
    }
    assert [(q.title, q.expr) for q in queries.panel_queries(dashboard)] == [("inner", "a"), ("old", "c")]


def variable(name, query="", multi=False, include_all=False, all_value=None):
    return queries.Variable(name, "query", query, multi, include_all, all_value, "", [])


@pytest.mark.parametrize("text, expected", [
    ('x{a="$v"}', 'x{a="one"}'),
    ('x{a="${v}"}', 'x{a="one"}'),
    ('x{a="[[v]]"}', 'x{a="one"}'),
    ('rate(x[$__rate_interval]) + rate(x[$__interval]) + x[$__range]', "rate(x[4s]) + rate(x[1s]) + x[300s]"),
    ('label_replace(x, "d", "npu${1}", "id", "(.*)")', 'label_replace(x, "d", "npu${1}", "id", "(.*)")'),
])
def test_single_value_forms(text, expected):
    assert queries.substitute(text, {"v": ["one"]}, [variable("v")]) == expected


def test_multi_values_become_grafanas_escaped_regex_and_all_its_custom_value():
    multi = variable("m", multi=True)
    assert queries.substitute('x{i=~"$m"}', {"m": ["10.0.0.1:80", "b"]}, [multi]) == r'x{i=~"(10\\.0\\.0\\.1:80|b)"}'
    assert queries.substitute('x{i=~"${m:pipe}"}', {"m": ["a", "b"]}, [multi]) == 'x{i=~"a|b"}'
    everything = variable("all", include_all=True, all_value=".*")
    assert queries.substitute('x{i=~"$all"}', {"all": ["a", "b"]}, [everything]) == 'x{i=~".*"}'
    with pytest.raises(ValueError):
        queries.substitute('x{i="$v"}', {"v": []}, [variable("v")])


def test_variables_resolve_after_those_they_use():
    first, second = variable("node", "label_values(kubelet_node_name, node)"), \
        variable("pod", 'label_values(x{instance="$node"}, pod)')
    assert [v.name for v in queries.resolution_order([second, first])] == ["node", "pod"]
    with pytest.raises(ValueError):
        queries.resolution_order([variable("a", "label_values(x{b=\"$b\"}, a)"),
                                  variable("b", "label_values(x{a=\"$a\"}, b)")])


@pytest.mark.parametrize("text, expected", [
    ("label_values(job)", ("label_values", None, "job")),
    ('label_values(up{job="a", x=~"b,c"}, instance)', ("label_values", 'up{job="a", x=~"b,c"}', "instance")),
    ("query_result(count by (id) (npu_chip_info_name))", ("query_result", "count by (id) (npu_chip_info_name)", None)),
    ("metrics(npu_.*)", ("metrics", "npu_.*", None)),
])
def test_variable_query_forms(text, expected):
    assert queries.parse_variable_query(text) == expected


def test_a_variable_regex_keeps_matches_or_their_group():
    assert queries.apply_regex(["10.0.0.1:8082", "x"], r"/(.*):\d+/") == ["10.0.0.1"]
    assert queries.apply_regex(["a", "b"], "") == ["a", "b"]


@pytest.mark.parametrize("expr, expected", [
    ("sum(machine_npu_nums)-count(npu_container_info)",
     'sum(machine_npu_nums{p="x"})-count(npu_container_info{p="x"})'),
    ("count(npu_container_info) by(job)", 'count(npu_container_info{p="x"}) by(job)'),
    ('npu_chip_info_name{job=~"a|b"}', 'npu_chip_info_name{p="x",job=~"a|b"}'),
    ('sum by (cluster, node) (k{r="huawei_com_Ascend910"}) / on(id) group_left(model_name) y',
     'sum by (cluster, node) (k{p="x",r="huawei_com_Ascend910"}) / on(id) group_left(model_name) y{p="x"}'),
    ('label_replace(m * 1024, "d", "npu${1}", "id", "(.*)") != +Inf',
     'label_replace(m{p="x"} * 1024, "d", "npu${1}", "id", "(.*)") != +Inf'),
    ("rate(x[5m] offset 1m) and vector(1)", 'rate(x{p="x"}[5m] offset 1m) and vector(1)'),
    ('{__name__=~"npu_.*"}', '{p="x",__name__=~"npu_.*"}'),
    ('x{p="y"}', 'x{p="y"}'),
])
def test_scope_adds_the_matchers_to_every_selector_and_nothing_else(expr, expected):
    assert scope(expr, {"p": "x"}) == expected


def consumer_queries(consumer):
    """Every published query text (and rule record name) of a collected consumer."""
    if consumer.startswith("mindxdl_"):
        return {q.expr for q in queries.panel_queries(load(consumer + ".json"))}
    if consumer.startswith("kubesphere_"):
        return {q.title for q in queries.rule_queries(load(consumer + ".yaml"))}
    return {entry["template"] for entry in load(consumer + ".yaml")["queries"]}


def test_every_documented_exception_names_a_query_its_consumer_has():
    from npumon.sim.products import PRODUCTS

    for item in load("exceptions.yaml")["exceptions"]:
        assert (item.get("query") or item.get("record")) in consumer_queries(item["consumer"]), item
        assert set(item.get("products", [])) <= set(PRODUCTS), item
        assert item["why"].strip(), item
