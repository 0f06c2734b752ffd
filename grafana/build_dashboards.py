#!/usr/bin/env python3
"""Writes npumon's Grafana dashboards (grafana/dashboards/*.json) from the panel lists below.

    python grafana/build_dashboards.py            # rewrite the JSON files
    python grafana/build_dashboards.py --check    # exit 1 if a JSON file is not what this script writes

Two dashboards, each in two variants:

* fleet: hosts and chips by health, hottest chips, ECC, findings by severity, an AI Core heat map across
  all chips, stale sources; template variables job and host (multi-select).
* node: one host's chips (temperature, power, utilisation by engine, HBM use and bandwidth, ECC), serving
  queue against AI Core, host CPU per NUMA node, probe results, control actions, findings and sources;
  template variables job, host and npu.
* `-npu-exporter` variants run on the metric names of Huawei's npu-exporter (`npu_chip_info_*`,
  `machine_*`), which npumon also serves with `exporter.npu_exporter_compat: true`. A panel without an
  equivalent in those names (findings, sources, host CPU, probe, control) is left out of the variant.

Every panel is written once here with its native query and, where one exists, its npu-exporter query, so
the variants cannot drift apart. Hosts are told apart by a `host` target label (set it in the scrape
config: file_sd labels or relabelling, see exporters/); `job` selects the scrape job.
"""

import argparse
import json
import os
import sys
from typing import Any, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "dashboards")

# The dashboard JSON model version of current Grafana (13.x); tests compare it with @grafana/schema.
SCHEMA_VERSION = 42
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
GRID_WIDTH = 24
NATIVE, COMPAT = "native", "npu-exporter"

# Label matchers that the template variables fill in.
FLEET = 'job=~"$job",host=~"$host"'
NODE = 'job=~"$job",host=~"$host"'
CHIPS = 'job=~"$job",host=~"$host",npu=~"$npu"'
COMPAT_CHIPS = 'job=~"$job",host=~"$host",id=~"$id"'

CHIP_LEGEND = "npu{{npu}}/chip{{chip}}"
HOST_CHIP_LEGEND = "{{host}} npu{{npu}}/chip{{chip}}"
COMPAT_LEGEND = "id {{id}}"
HOST_COMPAT_LEGEND = "{{host}} id {{id}}"

UNHEALTHY_STATES = "Warning|Alarm|Critical|UNKNOWN"
SEVERITY_COLORS = {"critical": "red", "warning": "orange", "info": "blue", "ok": "green"}
HEALTH_COLORS = {"OK": "green", "Warning": "orange", "Alarm": "red", "Critical": "dark-red", "UNKNOWN": "purple"}


# --------------------------------------------------------------------------------------------- queries

class Query:
    """One PromQL target. `instant` queries feed tables, stats and bar gauges; the rest are ranges."""

    def __init__(self, expr: str, legend: str = "", instant: bool = False, table: bool = False):
        self.expr = expr
        self.legend = legend
        self.instant = instant or table
        self.table = table

    def target(self, ref_id: str) -> Dict[str, Any]:
        return {
            "datasource": DATASOURCE,
            "editorMode": "code",
            "expr": self.expr,
            "format": "table" if self.table else "time_series",
            "instant": self.instant,
            "legendFormat": self.legend or "__auto",
            "range": not self.instant,
            "refId": ref_id,
        }


def instant(expr: str, legend: str = "") -> Query:
    return Query(expr, legend, instant=True)


def table(expr: str) -> Query:
    return Query(expr, table=True)


class Panel:
    """A panel with its native queries and, optionally, the npu-exporter-names queries of the same view.

    `feature` names what must be turned on for the panel to have data (probe, control); the tests use it
    to look for the data on the fleet host that has the feature."""

    def __init__(self, kind: str, title: str, description: str, queries: Sequence[Query],
                 compat: Optional[Sequence[Query]] = None, width: int = 12, height: int = 8,
                 unit: str = "short", options: Optional[Dict[str, Any]] = None,
                 defaults: Optional[Dict[str, Any]] = None, overrides: Sequence[Dict[str, Any]] = (),
                 compat_overrides: Optional[Sequence[Dict[str, Any]]] = None,
                 compat_unit: Optional[str] = None, transformations: Sequence[Dict[str, Any]] = (),
                 compat_transformations: Optional[Sequence[Dict[str, Any]]] = None,
                 feature: Optional[str] = None):
        self.kind = kind
        self.title = title
        self.description = description
        self.queries = {NATIVE: list(queries), COMPAT: list(compat) if compat is not None else None}
        self.width, self.height = width, height
        self.units = {NATIVE: unit, COMPAT: compat_unit or unit}
        self.options = options or {}
        self.defaults = defaults or {}
        self.overrides = {NATIVE: list(overrides),
                          COMPAT: list(compat_overrides) if compat_overrides is not None else list(overrides)}
        self.transformations = {NATIVE: list(transformations),
                                COMPAT: list(compat_transformations) if compat_transformations is not None
                                else list(transformations)}
        self.feature = feature

    def supports(self, variant: str) -> bool:
        return self.queries[variant] is not None

    def to_json(self, variant: str, panel_id: int, grid: Dict[str, int]) -> Dict[str, Any]:
        color = "palette-classic" if self.kind in ("timeseries", "heatmap") else "thresholds"
        defaults = {"unit": self.units[variant], "thresholds": _thresholds(), "color": {"mode": color}}
        defaults.update(self.defaults)
        panel = {
            "datasource": DATASOURCE,
            "description": self.description,
            "fieldConfig": {"defaults": defaults, "overrides": self.overrides[variant]},
            "gridPos": grid,
            "id": panel_id,
            "options": self.options,
            "targets": [query.target(chr(ord("A") + i)) for i, query in enumerate(self.queries[variant])],
            "title": self.title,
            "type": self.kind,
        }
        if self.transformations[variant]:
            panel["transformations"] = self.transformations[variant]
        return panel


class Row:
    def __init__(self, title: str):
        self.title = title


# --------------------------------------------------------------------------------------------- panel kinds

def _thresholds(*steps) -> Dict[str, Any]:
    """Absolute thresholds: green below the first (value, color) step."""
    return {"mode": "absolute",
            "steps": [{"color": "green", "value": None}] + [{"color": color, "value": value} for value, color in steps]}


def _by_name(name: str, color: Optional[str] = None, **properties) -> Dict[str, Any]:
    props = [{"id": key.replace("__", "."), "value": value} for key, value in properties.items()]
    if color:
        props.append({"id": "color", "value": {"fixedColor": color, "mode": "fixed"}})
    return {"matcher": {"id": "byName", "options": name}, "properties": props}


def _color_by_name(colors: Dict[str, str]) -> List[Dict[str, Any]]:
    return [_by_name(name, color) for name, color in colors.items()]


def _graph_custom(fill: int = 10, stack: bool = False) -> Dict[str, Any]:
    return {"drawStyle": "line", "lineInterpolation": "linear", "lineWidth": 1, "fillOpacity": fill,
            "gradientMode": "none", "showPoints": "never", "pointSize": 4, "spanNulls": False,
            "axisPlacement": "auto", "axisLabel": "", "axisSoftMin": 0,
            "stacking": {"group": "A", "mode": "normal" if stack else "none"}}


def timeseries(title: str, description: str, queries: Sequence[Query], compat: Optional[Sequence[Query]] = None,
               unit: str = "short", stack: bool = False, legend_table: bool = True, **kwargs) -> Panel:
    options = {
        "legend": {"calcs": ["lastNotNull", "max"] if legend_table else [], "displayMode": "table" if legend_table
                   else "list", "placement": "right" if legend_table else "bottom", "showLegend": True},
        "tooltip": {"mode": "multi", "sort": "desc"},
    }
    defaults = {"custom": _graph_custom(fill=30 if stack else 10, stack=stack)}
    defaults.update(kwargs.pop("defaults", {}))
    return Panel("timeseries", title, description, queries, compat, unit=unit, options=options,
                 defaults=defaults, **kwargs)


def stat(title: str, description: str, queries: Sequence[Query], compat: Optional[Sequence[Query]] = None,
         width: int = 4, height: int = 4, color_mode: str = "value", **kwargs) -> Panel:
    options = {
        "colorMode": color_mode, "graphMode": "none", "justifyMode": "auto", "orientation": "auto",
        "percentChangeColorMode": "standard", "showPercentChange": False, "textMode": "value_and_name",
        "wideLayout": True,
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
    }
    return Panel("stat", title, description, queries, compat, width=width, height=height, options=options, **kwargs)


def bargauge(title: str, description: str, queries: Sequence[Query], compat: Optional[Sequence[Query]] = None,
             **kwargs) -> Panel:
    options = {
        "displayMode": "gradient", "legend": {"calcs": [], "displayMode": "list", "placement": "bottom",
                                              "showLegend": False},
        "maxVizHeight": 300, "minVizHeight": 16, "minVizWidth": 8, "namePlacement": "left",
        "orientation": "horizontal", "showUnfilled": True, "sizing": "auto", "valueMode": "color",
        "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
    }
    return Panel("bargauge", title, description, queries, compat, options=options, **kwargs)


def table_panel(title: str, description: str, queries: Sequence[Query], compat: Optional[Sequence[Query]] = None,
                sort_by: Optional[str] = None, descending: bool = True, hide: Sequence[str] = ("Time",),
                rename: Optional[Dict[str, str]] = None, order: Sequence[str] = (),
                compat_rename: Optional[Dict[str, str]] = None, compat_order: Optional[Sequence[str]] = None,
                no_value: str = "", **kwargs) -> Panel:
    """Instant queries in table format, merged into one row per label set, columns renamed and ordered."""
    options = {"cellHeight": "sm", "frameIndex": 0, "showHeader": True}
    if sort_by:
        options["sortBy"] = [{"desc": descending, "displayName": sort_by}]
    defaults = {"custom": {"align": "auto", "cellOptions": {"type": "auto"}, "inspect": False, "filterable": True}}
    if no_value:
        defaults["noValue"] = no_value

    def transformations(names: Optional[Dict[str, str]], columns: Sequence[str]) -> List[Dict[str, Any]]:
        steps = []
        if len(queries) > 1:
            steps.append({"id": "merge", "options": {}})
        steps.append({"id": "organize", "options": {
            "excludeByName": {name: True for name in hide},
            "indexByName": {name: i for i, name in enumerate(columns)},
            "renameByName": names or {},
        }})
        return steps

    return Panel("table", title, description, queries, compat, options=options, defaults=defaults,
                 transformations=transformations(rename, order),
                 compat_transformations=transformations(compat_rename if compat_rename is not None else rename,
                                                        compat_order if compat_order is not None else order),
                 **kwargs)


def heatmap(title: str, description: str, queries: Sequence[Query], compat: Optional[Sequence[Query]] = None,
            bucket: float = 0.1, unit: str = "percentunit", compat_bucket: Optional[float] = None,
            compat_unit: Optional[str] = None, **kwargs) -> "HeatmapPanel":
    return HeatmapPanel(title, description, queries, compat, bucket, compat_bucket or bucket, unit,
                        compat_unit or unit, **kwargs)


class HeatmapPanel(Panel):
    """Grafana computes the heat map from the raw series: how many chips sit in each band, over time."""

    def __init__(self, title, description, queries, compat, bucket, compat_bucket, unit, compat_unit, **kwargs):
        super().__init__("heatmap", title, description, queries, compat, unit=unit, compat_unit=compat_unit,
                         defaults={"custom": {"hideFrom": {"legend": False, "tooltip": False, "viz": False},
                                              "scaleDistribution": {"type": "linear"}}}, **kwargs)
        self.buckets = {NATIVE: bucket, COMPAT: compat_bucket}

    def to_json(self, variant: str, panel_id: int, grid: Dict[str, int]) -> Dict[str, Any]:
        self.options = {
            "calculate": True,
            "calculation": {"yBuckets": {"mode": "size", "value": str(self.buckets[variant])}},
            "cellGap": 1,
            "color": {"exponent": 0.5, "fill": "dark-orange", "mode": "scheme", "reverse": False,
                      "scale": "exponential", "scheme": "Oranges", "steps": 64},
            "exemplars": {"color": "rgba(255,0,255,0.7)"},
            "legend": {"show": True},
            "rowsFrame": {"layout": "auto"},
            "showValue": "never",
            "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": True},
            "yAxis": {"axisPlacement": "left", "reverse": False, "unit": self.units[variant]},
        }
        return super().to_json(variant, panel_id, grid)


# --------------------------------------------------------------------------------------------- variables

def _datasource_variable() -> Dict[str, Any]:
    return {"hide": 0, "includeAll": False, "label": "Prometheus", "multi": False,
            "name": "datasource", "options": [], "query": "prometheus", "refresh": 1, "regex": "",
            "type": "datasource"}


def _query_variable(name: str, label: str, query: str, multi: bool, include_all: bool = True) -> Dict[str, Any]:
    variable = {
        "datasource": DATASOURCE, "hide": 0, "includeAll": include_all,
        "label": label, "multi": multi, "name": name, "options": [],
        "query": {"qryType": 1, "query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": 2, "regex": "", "sort": 3 if name in ("npu", "id") else 1, "type": "query",
    }
    if include_all:
        variable["allValue"] = ".*"
        variable["current"] = {"text": ["All"], "value": ["$__all"]}
    return variable


def variables(dashboard: str, variant: str) -> List[Dict[str, Any]]:
    info = "npumon_build_info" if variant == NATIVE else "npu_chip_info_name"
    result = [
        _datasource_variable(),
        _query_variable("job", "Job", "label_values({}, job)".format(info), multi=True),
        _query_variable("host", "Host", 'label_values({}{{job=~"$job"}}, host)'.format(info),
                        multi=dashboard == "fleet", include_all=dashboard == "fleet"),
    ]
    if dashboard == "node":
        if variant == NATIVE:
            result.append(_query_variable("npu", "NPU", 'label_values(npumon_chip_info{job=~"$job",host=~"$host"}, npu)',
                                          multi=True))
        else:
            result.append(_query_variable("id", "Chip id", 'label_values(npu_chip_info_name{job=~"$job",host=~"$host"}, id)',
                                          multi=True))
    return result


# --------------------------------------------------------------------------------------------- fleet

def fleet_panels() -> List[Any]:
    host_status_order = ["host", "Up", "Chips", "Unhealthy chips", "Hottest", "Critical", "Warning", "Sources down"]
    return [
        Row("Fleet"),
        stat("Hosts up", "Scrape targets Prometheus reaches.",
             [instant('count(up{%s} == 1) or vector(0)' % FLEET, "up")],
             [instant('count(up{%s} == 1) or vector(0)' % FLEET, "up")]),
        stat("Hosts down", "Scrape targets Prometheus cannot reach: the host, npumon or the network is down.",
             [instant('count(up{%s} == 0) or vector(0)' % FLEET, "down")],
             [instant('count(up{%s} == 0) or vector(0)' % FLEET, "down")],
             defaults={"thresholds": _thresholds((1, "red"))}),
        stat("Hosts by status", "Hosts by their worst active finding (npumon's rules, as exported).",
             [instant('count(count by (host) (npumon_finding_active{%s,severity="critical"})) or vector(0)' % FLEET,
                      "critical"),
              instant('count(count by (host) (npumon_finding_active{%s,severity="warning"}) unless on (host) '
                      'count by (host) (npumon_finding_active{%s,severity="critical"})) or vector(0)' % (FLEET, FLEET),
                      "warning"),
              instant('count(count by (host) (npumon_build_info{%s}) unless on (host) count by (host) '
                      '(npumon_finding_active{%s,severity=~"critical|warning"})) or vector(0)' % (FLEET, FLEET),
                      "ok")],
             width=6, overrides=_color_by_name({k: v for k, v in SEVERITY_COLORS.items() if k != "info"})),
        stat("Chips by health", "Chips by the health state npu-smi reports.",
             [instant('sum by (state) (npumon_chip_health{%s})' % FLEET, "{{state}}")],
             [instant('count(npu_chip_info_health_status{%s} == 1) or vector(0)' % FLEET, "healthy"),
              instant('count(npu_chip_info_health_status{%s} == 0) or vector(0)' % FLEET, "unhealthy"),
              instant('count(npu_chip_info_health_status{%s} == -1) or vector(0)' % FLEET, "unknown")],
             width=10, overrides=_color_by_name(HEALTH_COLORS),
             compat_overrides=_color_by_name({"healthy": "green", "unhealthy": "red", "unknown": "purple"})),
        Row("Hosts"),
        table_panel(
            "Hosts", "Every host of the selected jobs, worst first. The host name links to the node dashboard.",
            [table('max by (host) (up{%s})' % FLEET),
             table('count by (host) (npumon_chip_info{%s})' % FLEET),
             table('sum by (host) (npumon_chip_health{%s,state=~"%s"})' % (FLEET, UNHEALTHY_STATES)),
             table('max by (host) (npumon_chip_temperature_celsius{%s})' % FLEET),
             table('count by (host) (npumon_finding_active{%s,severity="critical"})' % FLEET),
             table('count by (host) (npumon_finding_active{%s,severity="warning"})' % FLEET),
             table('sum by (host) (1 - npumon_source_up{%s})' % FLEET)],
            [table('max by (host) (up{%s})' % FLEET),
             table('max by (host) (machine_npu_nums{%s})' % FLEET),
             table('max by (host) (machine_unhealthy_npu_nums{%s})' % FLEET),
             table('max by (host) (npu_chip_info_temperature{%s})' % FLEET)],
            width=24, height=9, sort_by="Critical",
            rename={"Value #A": "Up", "Value #B": "Chips", "Value #C": "Unhealthy chips", "Value #D": "Hottest",
                    "Value #E": "Critical", "Value #F": "Warning", "Value #G": "Sources down"},
            order=host_status_order,
            compat_rename={"Value #A": "Up", "Value #B": "Chips", "Value #C": "Unhealthy chips",
                           "Value #D": "Hottest"},
            compat_order=host_status_order[:5],
            overrides=[_host_link("host"), _by_name("Hottest", unit="celsius"),
                       _by_name("Up", custom__cellOptions={"type": "color-text"},
                                thresholds=_thresholds((0, "red"), (1, "green")))],
            compat_overrides=[_host_link("host", compat=True), _by_name("Hottest", unit="celsius")]),
        Row("Chips"),
        bargauge("Hottest chips", "The ten hottest chips of the selection.",
                 [instant('topk(10, npumon_chip_temperature_celsius{%s})' % FLEET, HOST_CHIP_LEGEND)],
                 [instant('topk(10, npu_chip_info_temperature{%s})' % FLEET, HOST_COMPAT_LEGEND)],
                 unit="celsius", height=9,
                 defaults={"min": 30, "max": 100, "thresholds": _thresholds((80, "orange"), (85, "red"))}),
        timeseries("Hottest chip per host", "The temperature of each host's hottest chip.",
                   [Query('max by (host) (npumon_chip_temperature_celsius{%s})' % FLEET, "{{host}}")],
                   [Query('max by (host) (npu_chip_info_temperature{%s})' % FLEET, "{{host}}")],
                   unit="celsius", height=9),
        heatmap("AI Core utilisation across all chips", "How many chips run at each AI Core utilisation, over "
                "time: a band at the bottom is idle capacity, one at the top saturation.",
                [Query('npumon_chip_utilization_ratio{%s,engine="aicore"}' % FLEET, HOST_CHIP_LEGEND)],
                [Query('npu_chip_info_utilization{%s}' % FLEET, HOST_COMPAT_LEGEND)],
                bucket=0.1, unit="percentunit", compat_bucket=10, compat_unit="percent", height=9),
        table_panel("Unhealthy chips", "Chips whose health is not OK, with the error codes they report.",
                    [table('npumon_chip_health{%s,state=~"%s"} == 1' % (FLEET, UNHEALTHY_STATES)),
                     table('count by (host, npu, chip) (npumon_chip_error_code_info{%s})' % FLEET)],
                    [table('npu_chip_info_health_status{%s} != 1' % FLEET)],
                    height=9, hide=("Time", "__name__", "job", "instance", "Value #A"),
                    rename={"state": "Health", "Value #B": "Error codes"},
                    order=["host", "npu", "chip", "state", "Value #B"],
                    compat_rename={"Value": "Health status (0 unhealthy, -1 unknown)"},
                    compat_order=["host", "id", "model_name"],
                    no_value="all chips OK"),
        Row("ECC"),
        timeseries("Uncorrectable ECC errors and isolated pages by host",
                   "Double-bit errors and retired pages: the data of a job that hit them is suspect.",
                   [Query('sum by (host) (npumon_chip_ecc_errors{%s,bit="double"})' % FLEET, "{{host}} double-bit"),
                    Query('sum by (host) (npumon_chip_ecc_isolated_pages{%s})' % FLEET, "{{host}} isolated pages")],
                   [Query('sum by (host) (npu_chip_info_hbm_ecc_double_bit_error_cnt{%s})' % FLEET,
                          "{{host}} double-bit")],
                   height=8),
        bargauge("Single-bit ECC errors, increase over the time range",
                 "Corrected errors are harmless one by one; a steady rise often comes before uncorrectable ones. "
                 "npu-smi can clear the count, which increase() treats as a reset.",
                 [instant('topk(10, increase(npumon_chip_ecc_errors{%s,bit="single"}[$__range]))' % FLEET,
                          HOST_CHIP_LEGEND + " {{memory}}")],
                 [instant('topk(10, increase(npu_chip_info_hbm_ecc_single_bit_error_cnt{%s}[$__range]))' % FLEET,
                          HOST_COMPAT_LEGEND)],
                 height=8, defaults={"decimals": 0, "thresholds": _thresholds((10, "orange"), (100, "red"))}),
        Row("Findings"),
        timeseries("Active findings by severity", "Findings of npumon's rules that notify, by severity.",
                   [Query('sum by (severity) (npumon_finding_active{%s})' % FLEET, "{{severity}}")],
                   stack=True, legend_table=False, height=8, overrides=_color_by_name(SEVERITY_COLORS)),
        table_panel("Active findings", "Every active finding; `npumon fleet` prints them with their hints.",
                    [table('npumon_finding_active{%s}' % FLEET)],
                    height=8, hide=("Time", "__name__", "job", "instance", "Value"),
                    rename={"host": "Host", "severity": "Severity", "rule": "Rule", "subject": "Subject"},
                    order=["host", "severity", "rule", "subject"], sort_by="Severity", descending=False,
                    no_value="no active findings",
                    overrides=[_by_name("Severity", custom__cellOptions={"type": "color-text"},
                                        mappings=[_value_color(k, v) for k, v in SEVERITY_COLORS.items()])]),
        Row("npumon itself"),
        stat("Sources down", "npumon sources whose last poll failed (npu-smi, its -t queries, host, serving queue).",
             [instant('count(npumon_source_up{%s} == 0) or vector(0)' % FLEET, "down")],
             width=4, height=8, defaults={"thresholds": _thresholds((1, "orange"))}),
        table_panel("Stale sources", "The sources with the oldest data: time since each last succeeded.",
                    [table('topk(20, time() - npumon_source_last_success_timestamp_seconds{%s})' % FLEET)],
                    width=20, height=8, hide=("Time", "job", "instance"), sort_by="Age",
                    rename={"Value": "Age", "source": "Source"}, order=["host", "source", "Value"],
                    overrides=[_by_name("Age", unit="s", custom__cellOptions={"type": "color-text"},
                                        thresholds=_thresholds((120, "orange"), (600, "red")))]),
    ]


def _value_color(value: str, color: str) -> Dict[str, Any]:
    return {"type": "value", "options": {value: {"color": color, "index": 0}}}


def _host_link(field: str, compat: bool = False) -> Dict[str, Any]:
    uid = "npumon-node-npu-exporter" if compat else "npumon-node"
    return _by_name(field, links=[{
        "title": "Node dashboard for ${__value.text}",
        "url": "/d/{}?var-datasource=${{datasource}}&var-job=${{job}}&var-host=${{__value.text}}&${{__url_time_range}}"
               .format(uid),
    }])


# --------------------------------------------------------------------------------------------- node

def node_panels() -> List[Any]:
    chip_table_order = ["npu", "chip", "state", "Value #B", "Value #C", "Value #D", "Value #E", "Value #F"]
    return [
        Row("Chips"),
        stat("Chips", "Chips on this host.",
             [instant('count(npumon_chip_info{%s})' % CHIPS, "chips")],
             [instant('count(npu_chip_info_name{%s})' % COMPAT_CHIPS, "chips")]),
        stat("Unhealthy chips", "Chips whose health is not OK.",
             [instant('sum(npumon_chip_health{%s,state=~"%s"})' % (CHIPS, UNHEALTHY_STATES), "unhealthy")],
             [instant('count(npu_chip_info_health_status{%s} != 1) or vector(0)' % COMPAT_CHIPS, "unhealthy")],
             defaults={"thresholds": _thresholds((1, "red"))}),
        stat("Hottest chip", "The temperature of the hottest selected chip.",
             [instant('max(npumon_chip_temperature_celsius{%s})' % CHIPS, "hottest")],
             [instant('max(npu_chip_info_temperature{%s})' % COMPAT_CHIPS, "hottest")],
             unit="celsius", defaults={"thresholds": _thresholds((80, "orange"), (85, "red"))}),
        stat("Active findings", "Findings of npumon's rules on this host.",
             [instant('count(npumon_finding_active{%s}) or vector(0)' % NODE, "findings")],
             defaults={"thresholds": _thresholds((1, "orange"))}),
        stat("Serving queue", "Requests waiting in the inference server's queue.",
             [instant('npumon_host_serving_queue_depth{%s}' % NODE, "waiting")]),
        stat("Host CPU", "Whole-host CPU utilisation.",
             [instant('npumon_host_cpu_ratio{%s}' % NODE, "cpu")],
             unit="percentunit", defaults={"thresholds": _thresholds((0.9, "orange"))}),
        table_panel(
            "Chips", "One row per chip: health, temperature, power, AI Core, memory in use (HBM, or DDR on "
            "chips without HBM), double-bit ECC errors.",
            [table('max by (npu, chip, state) (npumon_chip_health{%s} == 1)' % CHIPS),
             table('max by (npu, chip) (npumon_chip_temperature_celsius{%s})' % CHIPS),
             table('max by (npu, chip) (npumon_chip_power_watts{%s})' % CHIPS),
             table('max by (npu, chip) (npumon_chip_utilization_ratio{%s,engine="aicore"})' % CHIPS),
             table('max by (npu, chip) (npumon_chip_memory_used_bytes{%s} / '
                   '(npumon_chip_memory_total_bytes{%s} > 0))' % (CHIPS, CHIPS)),
             table('sum by (npu, chip) (npumon_chip_ecc_errors{%s,bit="double"})' % CHIPS)],
            [table('max by (id, model_name) (npu_chip_info_health_status{%s})' % COMPAT_CHIPS),
             table('max by (id) (npu_chip_info_temperature{%s})' % COMPAT_CHIPS),
             table('max by (id) (npu_chip_info_power{%s})' % COMPAT_CHIPS),
             table('max by (id) (npu_chip_info_utilization{%s})' % COMPAT_CHIPS),
             table('max by (id) (npu_chip_info_hbm_utilization{%s})' % COMPAT_CHIPS),
             table('max by (id) (npu_chip_info_hbm_ecc_double_bit_error_cnt{%s})' % COMPAT_CHIPS)],
            width=24, height=9, sort_by="npu", descending=False, hide=("Time", "Value #A"),
            rename={"state": "Health", "Value #B": "Temperature", "Value #C": "Power", "Value #D": "AI Core",
                    "Value #E": "Memory used", "Value #F": "Double-bit ECC"},
            order=chip_table_order,
            compat_rename={"Value #A": "Health (1 ok, 0 unhealthy, -1 unknown)", "Value #B": "Temperature",
                           "Value #C": "Power", "Value #D": "AI Core", "Value #E": "HBM used",
                           "Value #F": "Double-bit ECC"},
            compat_order=["id", "model_name", "Value #A", "Value #B", "Value #C", "Value #D", "Value #E", "Value #F"],
            overrides=[_by_name("Temperature", unit="celsius"), _by_name("Power", unit="watt"),
                       _by_name("AI Core", unit="percentunit"), _by_name("Memory used", unit="percentunit"),
                       _by_name("Health", custom__cellOptions={"type": "color-text"},
                                mappings=[_value_color(k, v) for k, v in HEALTH_COLORS.items()])],
            compat_overrides=[_by_name("Temperature", unit="celsius"), _by_name("Power", unit="watt"),
                              _by_name("AI Core", unit="percent"), _by_name("HBM used", unit="percent")]),
        Row("Per chip"),
        timeseries("Temperature", "Chip temperature; npumon warns at 80 C and alerts at 85 C by default.",
                   [Query('npumon_chip_temperature_celsius{%s}' % CHIPS, CHIP_LEGEND)],
                   [Query('npu_chip_info_temperature{%s}' % COMPAT_CHIPS, COMPAT_LEGEND)],
                   unit="celsius", defaults={"thresholds": _thresholds((80, "orange"), (85, "red"))}),
        timeseries("Power", "Chip power draw (Atlas A3 reports it once per NPU, on its first die).",
                   [Query('npumon_chip_power_watts{%s}' % CHIPS, CHIP_LEGEND)],
                   [Query('npu_chip_info_power{%s}' % COMPAT_CHIPS, COMPAT_LEGEND)], unit="watt"),
        timeseries("AI Core utilisation", "AI Core (cube) utilisation per chip.",
                   [Query('npumon_chip_utilization_ratio{%s,engine="aicore"}' % CHIPS, CHIP_LEGEND)],
                   [Query('npu_chip_info_utilization{%s}' % COMPAT_CHIPS, COMPAT_LEGEND)],
                   unit="percentunit", compat_unit="percent", defaults={"max": 1}),
        timeseries("Utilisation by engine", "Mean utilisation of each engine over the selected chips: AI Core, "
                   "AI Vector, AI CPU, control CPU (which engines a chip reports depends on the product).",
                   [Query('avg by (engine) (npumon_chip_utilization_ratio{%s})' % CHIPS, "{{engine}}")],
                   [Query('avg(npu_chip_info_utilization{%s})' % COMPAT_CHIPS, "AI Core"),
                    Query('avg(npu_chip_info_vector_utilization{%s})' % COMPAT_CHIPS, "vector"),
                    Query('avg(npu_chip_info_overall_utilization{%s})' % COMPAT_CHIPS, "overall")],
                   unit="percentunit", compat_unit="percent"),
        timeseries("Memory in use", "HBM (and DDR where the chip has it) in use, as a share of its size.",
                   [Query('npumon_chip_memory_used_bytes{%s} / (npumon_chip_memory_total_bytes{%s} > 0)' % (CHIPS, CHIPS),
                          CHIP_LEGEND + " {{memory}}")],
                   [Query('npu_chip_info_hbm_utilization{%s}' % COMPAT_CHIPS, COMPAT_LEGEND + " hbm")],
                   unit="percentunit", compat_unit="percent"),
        timeseries("Memory bandwidth", "HBM / DDR bandwidth in use; above 90% for long the workload is "
                   "memory-bound.",
                   [Query('npumon_chip_memory_bandwidth_ratio{%s}' % CHIPS, CHIP_LEGEND + " {{memory}}")],
                   [Query('npu_chip_info_hbm_bandwidth_utilization{%s}' % COMPAT_CHIPS, COMPAT_LEGEND + " hbm")],
                   unit="percentunit", compat_unit="percent"),
        timeseries("ECC errors", "ECC error counts and isolated pages (npu-smi can clear the counts).",
                   [Query('npumon_chip_ecc_errors{%s}' % CHIPS, CHIP_LEGEND + " {{memory}} {{bit}}-bit"),
                    Query('npumon_chip_ecc_isolated_pages{%s}' % CHIPS, CHIP_LEGEND + " {{memory}} isolated pages")],
                   [Query('npu_chip_info_hbm_ecc_single_bit_error_cnt{%s}' % COMPAT_CHIPS, COMPAT_LEGEND + " single-bit"),
                    Query('npu_chip_info_hbm_ecc_double_bit_error_cnt{%s}' % COMPAT_CHIPS, COMPAT_LEGEND + " double-bit")],
                   defaults={"decimals": 0}),
        Row("Host"),
        timeseries("Serving queue against AI Core", "A deep queue with a low AI Core means the host feeds the NPUs "
                   "too slowly (cpu-bottleneck); a growing queue at a high AI Core means saturation.",
                   [Query('npumon_host_serving_queue_depth{%s}' % NODE, "queue depth"),
                    Query('avg(npumon_chip_utilization_ratio{%s,engine="aicore"})' % CHIPS, "mean AI Core")],
                   legend_table=False,
                   overrides=[_by_name("mean AI Core", unit="percentunit", max=1, custom__axisPlacement="right")]),
        timeseries("Host CPU per NUMA node", "CPU utilisation of each NUMA node's CPUs; the processes feeding an "
                   "NPU should run on its node.",
                   [Query('npumon_host_numa_cpu_ratio{%s}' % NODE, "node {{node}}"),
                    Query('npumon_host_cpu_ratio{%s}' % NODE, "whole host")],
                   unit="percentunit", legend_table=False, defaults={"max": 1}),
        Row("Inference server"),
        timeseries("Serving latency and batch", "The inference server's own figures (docs/serving.md): mean "
                   "end-to-end latency and time to first token of the requests finished between polls, and the "
                   "batch it runs. A backlog with small batches and idle chips: raise the batch size "
                   "(serving-small-batch).",
                   [Query('npumon_host_serving_request_latency_seconds{%s}' % NODE, "mean latency"),
                    Query('npumon_host_serving_time_to_first_token_seconds{%s}' % NODE, "time to first token"),
                    Query('npumon_host_serving_batch_size{%s}' % NODE, "batch size")],
                   unit="s", legend_table=False, width=10,
                   overrides=[_by_name("batch size", unit="short", custom__axisPlacement="right")]),
        timeseries("Serving throughput", "Requests completed and tokens generated per second, between npumon's "
                   "polls of the inference server.",
                   [Query('npumon_host_serving_requests_per_second{%s}' % NODE, "requests/s"),
                    Query('npumon_host_serving_generation_tokens_per_second{%s}' % NODE, "tokens/s")],
                   legend_table=False, width=10, overrides=[_by_name("tokens/s", custom__axisPlacement="right")]),
        stat("Model load time", "How long the inference server's slowest model took to load (Triton exports it; "
             "serving-slow-model-load above 600 s).",
             [instant('npumon_host_serving_model_load_seconds{%s}' % NODE, "load")],
             width=4, height=8, unit="s", defaults={"thresholds": _thresholds((600, "orange"))}, feature="triton"),
        Row("NPU network"),
        timeseries("RoCE link", "1 if the NPU's RoCE port (hccn_tool -link) is UP, 0 if DOWN: HCCL jobs over a "
                   "down port time out. 910-family hosts only.",
                   [Query('npumon_chip_network_link_up{%s}' % CHIPS, CHIP_LEGEND)],
                   [Query('npu_chip_info_link_status{%s}' % COMPAT_CHIPS, COMPAT_LEGEND)],
                   legend_table=False, feature="network", defaults={"min": 0, "max": 1, "decimals": 0}),
        timeseries("RoCE errors and pause frames", "Per second: RoCE error packets and PFC/MAC pause frames on "
                   "each port (hccn_tool -stat); a rise means loss or congestion on the HCCL network.",
                   [Query('sum by (npu, chip) (rate(npumon_chip_network_stat{%s,counter=~"roce_(rx|tx)_err_pkt_num"}'
                          '[$__rate_interval]))' % CHIPS, CHIP_LEGEND + " RoCE errors"),
                    Query('sum by (npu, chip) (rate(npumon_chip_network_stat{%s,counter=~"mac_(rx|tx)_(mac_pause|pfc_pkt)'
                          '_num"}[$__rate_interval]))' % CHIPS, CHIP_LEGEND + " pause frames")],
                   [Query('rate(npu_chip_roce_rx_err_pkt_num{%s}[$__rate_interval]) + '
                          'rate(npu_chip_roce_tx_err_pkt_num{%s}[$__rate_interval])' % (COMPAT_CHIPS, COMPAT_CHIPS),
                          COMPAT_LEGEND + " RoCE errors"),
                    Query('rate(npu_chip_mac_rx_pfc_pkt_num{%s}[$__rate_interval]) + '
                          'rate(npu_chip_mac_tx_pfc_pkt_num{%s}[$__rate_interval])' % (COMPAT_CHIPS, COMPAT_CHIPS),
                          COMPAT_LEGEND + " pause frames")],
                   unit="pps", feature="network"),
        Row("Probe"),
        timeseries("Probe results", "1 if the last probe computed correctly on the chip, 0 if it failed.",
                   [Query('npumon_probe_success{%s}' % CHIPS, CHIP_LEGEND)],
                   legend_table=False, feature="probe", defaults={"min": 0, "max": 1, "decimals": 0}),
        timeseries("Probe duration by stage", "How long each stage of the probe took.",
                   [Query('npumon_probe_duration_seconds{%s}' % CHIPS, CHIP_LEGEND + " {{stage}}")],
                   unit="s", feature="probe"),
        Row("Control"),
        timeseries("Control actions", "What the fan governor did, by knob and result (ok, failed, refused, "
                   "dry_run: decided and logged, nothing touched).",
                   [Query('sum by (knob, result) (increase(npumon_control_actions_total{%s}[$__rate_interval]))'
                          % NODE, "{{knob}} {{result}}")],
                   legend_table=False, feature="control",
                   defaults={"custom": dict(_graph_custom(fill=80), drawStyle="bars"), "decimals": 0}),
        timeseries("Fan duty and governor inputs", "The fan duty npumon set (or would set in dry run) and the "
                   "temperatures it decided on.",
                   [Query('npumon_control_fan_duty_ratio{%s}' % NODE, "fan duty"),
                    Query('npumon_control_input_temperature_celsius{%s}' % NODE, "{{input}} temperature")],
                   unit="percentunit", legend_table=False, feature="control",
                   overrides=[{"matcher": {"id": "byRegexp", "options": ".* temperature"},
                               "properties": [{"id": "unit", "value": "celsius"},
                                              {"id": "custom.axisPlacement", "value": "right"}]}]),
        Row("Findings and sources"),
        table_panel("Active findings", "Findings of npumon's rules on this host; `npumon check` or /status on the "
                    "host gives their summaries and hints.",
                    [table('npumon_finding_active{%s}' % NODE)],
                    height=8, hide=("Time", "__name__", "job", "instance", "host", "Value"),
                    rename={"severity": "Severity", "rule": "Rule", "subject": "Subject"},
                    order=["severity", "rule", "subject"], sort_by="Severity", descending=False,
                    no_value="no active findings",
                    overrides=[_by_name("Severity", custom__cellOptions={"type": "color-text"},
                                        mappings=[_value_color(k, v) for k, v in SEVERITY_COLORS.items()])]),
        table_panel("Sources", "npumon's sources: whether the last poll worked, how long it took, how old the data is.",
                    [table('max by (source) (npumon_source_up{%s})' % NODE),
                     table('max by (source) (npumon_source_duration_seconds{%s})' % NODE),
                     table('max by (source) (time() - npumon_source_last_success_timestamp_seconds{%s})' % NODE)],
                    height=8, sort_by="source", descending=False,
                    rename={"Value #A": "Up", "Value #B": "Duration", "Value #C": "Age"},
                    order=["source", "Value #A", "Value #B", "Value #C"],
                    overrides=[_by_name("Duration", unit="s"), _by_name("Age", unit="s"),
                               _by_name("Up", custom__cellOptions={"type": "color-text"},
                                        thresholds=_thresholds((0, "red"), (1, "green")))]),
    ]


# --------------------------------------------------------------------------------------------- assembly

DASHBOARDS = {
    # file stem: (panel list, title, description)
    "fleet": (fleet_panels, "NPU fleet", "Every npumon host: health, temperatures, ECC, findings, utilisation."),
    "node": (node_panels, "NPU node", "One npumon host: per-chip telemetry, host CPU, serving queue, probe, "
                                     "control actions, findings."),
}


def _layout(items: Sequence[Any], variant: str) -> List[Dict[str, Any]]:
    """Grid positions, left to right, wrapping at 24 columns; a row header starts a new line."""
    panels, x, y, line_height, panel_id = [], 0, 0, 0, 1
    for item in items:
        if isinstance(item, Row):
            y += line_height
            x, line_height = 0, 0
            panels.append({"collapsed": False, "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": y},
                           "id": panel_id, "panels": [], "title": item.title, "type": "row"})
            panel_id += 1
            y += 1
            continue
        if not item.supports(variant):
            continue
        if x + item.width > GRID_WIDTH:
            y += line_height
            x, line_height = 0, 0
        panels.append(item.to_json(variant, panel_id, {"h": item.height, "w": item.width, "x": x, "y": y}))
        panel_id += 1
        x += item.width
        line_height = max(line_height, item.height)
    return _drop_empty_rows(panels)


def _drop_empty_rows(panels: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    kept = []
    for i, panel in enumerate(panels):
        following = panels[i + 1] if i + 1 < len(panels) else None
        if panel["type"] == "row" and (following is None or following["type"] == "row"):
            continue
        kept.append(panel)
    return kept


def build_dashboard(name: str, variant: str) -> Dict[str, Any]:
    make_panels, title, description = DASHBOARDS[name]
    uid = "npumon-" + name + ("" if variant == NATIVE else "-npu-exporter")
    if variant == COMPAT:
        title += " (npu-exporter metric names)"
        description += " Built on the npu_chip_info_* names of Huawei's npu-exporter (npumon serves them with " \
                       "exporter.npu_exporter_compat: true)."
    other = "node" if name == "fleet" else "fleet"
    return {
        "annotations": {"list": [{
            "builtIn": 1, "datasource": {"type": "grafana", "uid": "-- Grafana --"}, "enable": True,
            "hide": True, "iconColor": "rgba(0, 211, 255, 1)", "name": "Annotations & Alerts", "type": "dashboard",
        }]},
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "id": None,
        "links": [{"asDropdown": False, "icon": "dashboard", "includeVars": True, "keepTime": True, "tags": [],
                   "targetBlank": False, "title": DASHBOARDS[other][1], "tooltip": "", "type": "link",
                   "url": "/d/npumon-{}{}".format(other, "" if variant == NATIVE else "-npu-exporter")}],
        "panels": _layout(make_panels(), variant),
        "refresh": "30s",
        "schemaVersion": SCHEMA_VERSION,
        "tags": ["npumon", "ascend", "npu"] + ([] if variant == NATIVE else ["npu-exporter"]),
        "templating": {"list": variables(name, variant)},
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }


def all_dashboards() -> Dict[str, Dict[str, Any]]:
    """file name -> dashboard JSON model."""
    result = {}
    for name in DASHBOARDS:
        for variant in (NATIVE, COMPAT):
            dashboard = build_dashboard(name, variant)
            result[dashboard["uid"] + ".json"] = dashboard
    return result


def render(dashboard: Dict[str, Any]) -> str:
    return json.dumps(dashboard, indent=2, sort_keys=True) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only check that the JSON files are up to date")
    parser.add_argument("--out", default=OUT_DIR, help="output directory (default: %(default)s)")
    args = parser.parse_args(argv)
    stale = []
    for file_name, dashboard in all_dashboards().items():
        path = os.path.join(args.out, file_name)
        text = render(dashboard)
        if args.check:
            try:
                with open(path, encoding="utf-8") as handle:
                    if handle.read() == text:
                        continue
            except FileNotFoundError:
                pass
            stale.append(path)
            continue
        os.makedirs(args.out, exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    if stale:
        print("out of date (run python grafana/build_dashboards.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
