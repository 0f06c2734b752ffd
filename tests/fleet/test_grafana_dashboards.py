"""The Grafana dashboards and provisioning files: generated from grafana/build_dashboards.py, well formed,
and accepted by Grafana's own published dashboard types.

Schema check: Grafana publishes its dashboard model as TypeScript types in the npm package @grafana/schema
(generated from its CUE schema: Dashboard, Panel, VariableModel, and each panel plugin's Options and
FieldConfig). The test writes every dashboard, and every panel's options and custom field config, as typed
TypeScript constants and runs the TypeScript compiler on them: an unknown key, a wrong type or a value
outside an enum fails. It needs Node.js and `npm ci --prefix tests/grafana_schema` (.ci/run does that) and
is skipped otherwise. The structural tests below run everywhere.

The queries themselves are run against a real Prometheus in test_fleet_prometheus.py.
"""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml
from paths import REPO

GRAFANA = os.path.join(REPO, "grafana")
DASHBOARD_DIR = os.path.join(GRAFANA, "dashboards")
SCHEMA_DIR = os.path.join(REPO, "tests", "grafana_schema")
SCHEMA_PACKAGE = os.path.join(SCHEMA_DIR, "node_modules", "@grafana", "schema")
TSC = os.path.join(SCHEMA_DIR, "node_modules", "typescript", "bin", "tsc")

DASHBOARD_FILES = sorted(name for name in os.listdir(DASHBOARD_DIR) if name.endswith(".json"))
BUILT_IN_VARIABLES = {"__rate_interval", "__interval", "__range", "__url_time_range", "__value", "__data",
                      "__field", "__series"}


def load(name):
    with open(os.path.join(DASHBOARD_DIR, name), encoding="utf-8") as handle:
        return json.load(handle)


def panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])


def test_the_four_dashboards_exist():
    assert DASHBOARD_FILES == ["npumon-fleet-npu-exporter.json", "npumon-fleet.json",
                               "npumon-node-npu-exporter.json", "npumon-node.json"]


def test_json_files_are_what_the_generator_writes(tmp_path):
    script = os.path.join(GRAFANA, "build_dashboards.py")
    assert subprocess.run([sys.executable, script, "--check"], capture_output=True).returncode == 0
    # and --check notices a hand edit
    out = tmp_path / "dashboards"
    subprocess.run([sys.executable, script, "--out", str(out)], check=True)
    (out / "npumon-node.json").write_text("{}\n")
    result = subprocess.run([sys.executable, script, "--check", "--out", str(out)], capture_output=True, text=True)
    assert result.returncode == 1 and "npumon-node.json" in result.stderr


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_dashboard_structure(name):
    dashboard = load(name)
    assert dashboard["uid"] == name[:-len(".json")] and len(dashboard["uid"]) <= 40
    assert dashboard["id"] is None  # Grafana assigns ids; a fixed one clashes on import
    ids = [panel["id"] for panel in panels(dashboard)]
    assert len(ids) == len(set(ids))
    occupied = set()
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] >= 1 and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not cells & occupied, "{} overlaps another panel".format(panel["title"])
        occupied |= cells
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["targets"], panel["title"]
        ref_ids = [target["refId"] for target in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids))
        for target in panel["targets"]:
            assert target["datasource"] == panel["datasource"]
            assert target["instant"] != target["range"]
            assert target["expr"].count("(") == target["expr"].count(")"), target["expr"]


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_every_variable_a_query_uses_is_defined(name):
    dashboard = load(name)
    defined = {variable["name"] for variable in dashboard["templating"]["list"]}
    texts = [target["expr"] for panel in panels(dashboard) for target in panel.get("targets", [])]
    texts += [variable["query"]["query"] for variable in dashboard["templating"]["list"] if variable["type"] == "query"]
    texts += [json.dumps(panel.get("fieldConfig", {})) for panel in panels(dashboard)]
    used = {match for text in texts for match in re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", text)}
    assert used - BUILT_IN_VARIABLES <= defined
    assert {"datasource", "job", "host"} <= defined
    if "node" in name:
        assert ("npu" if "npu-exporter" not in name else "id") in defined


@pytest.mark.parametrize("name", DASHBOARD_FILES)
def test_variables_are_label_values_queries_chained_by_job_and_host(name):
    variables = {v["name"]: v for v in load(name)["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for variable in variables.values():
        if variable["type"] != "query":
            continue
        assert re.fullmatch(r"label_values\(.+, [a-z_]+\)", variable["query"]["query"])
    assert '$job' in variables["host"]["query"]["query"]


def test_variants_use_only_their_own_metric_names():
    for name in DASHBOARD_FILES:
        exprs = " ".join(target["expr"] for panel in panels(load(name)) for target in panel.get("targets", []))
        if "npu-exporter" in name:
            assert "npumon_" not in exprs and "npu_chip_info_" in exprs
        else:
            assert "npu_chip_info_" not in exprs and "machine_" not in exprs


def test_the_node_dashboard_covers_what_the_issue_asks():
    titles = {panel["title"] for panel in panels(load("npumon-node.json"))}
    for wanted in ("Temperature", "Power", "Utilisation by engine", "Memory in use", "Memory bandwidth",
                   "ECC errors", "Serving queue against AI Core", "Host CPU per NUMA node", "Probe results"):
        assert wanted in titles


def test_provisioning_files():
    with open(os.path.join(GRAFANA, "provisioning", "datasources", "npumon.yaml"), encoding="utf-8") as handle:
        datasources = yaml.safe_load(handle)
    assert datasources["apiVersion"] == 1
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["access"] == "proxy" and source["url"].startswith("http")
    assert source["jsonData"]["timeInterval"]  # $__rate_interval needs the scrape interval
    with open(os.path.join(GRAFANA, "provisioning", "dashboards", "npumon.yaml"), encoding="utf-8") as handle:
        providers = yaml.safe_load(handle)
    assert providers["apiVersion"] == 1
    (provider,) = providers["providers"]
    assert provider["type"] == "file" and os.path.isabs(provider["options"]["path"])


# --------------------------------------------------------------------------------------------- schema

# String enums of @grafana/schema accept only enum members in TypeScript; JSON holds their string values.
# Lit<T> swaps every string enum for the union of its values, and keeps everything else as strict as it is.
TS_PRELUDE = """\
type Lit<T> = T extends string ? `${T}` : T extends readonly (infer U)[] ? Lit<U>[]
    : T extends object ? { [K in keyof T]: Lit<T[K]> } : T;
"""


def _panel_module(panel_type):
    path = os.path.join(SCHEMA_PACKAGE, "dist", "types", "raw", "composable", panel_type, "panelcfg", "x",
                        "types.gen.d.ts")
    return path if os.path.exists(path) else None


def typescript_source():
    """One TypeScript file typing every dashboard, and every panel's options and custom field config."""
    index = os.path.join(SCHEMA_PACKAGE, "dist", "types", "index")
    lines = ["import type { Dashboard } from " + json.dumps(index) + ";", TS_PRELUDE]
    imported = set()
    for file_index, name in enumerate(DASHBOARD_FILES):
        dashboard = load(name)
        lines.append("export const dashboard{}: Lit<Dashboard> = {};".format(file_index, json.dumps(dashboard)))
        for panel in panels(dashboard):
            module = _panel_module(panel["type"]) if panel["type"] != "row" else None
            if module is None:
                continue
            alias = "panel_" + panel["type"]
            if alias not in imported:
                lines.insert(1, "import type * as {} from {};".format(alias, json.dumps(module[:-len(".d.ts")])))
                imported.add(alias)
            label = "d{}p{}".format(file_index, panel["id"])
            lines.append("export const {}_options: Lit<Partial<{}.Options>> = {};".format(
                label, alias, json.dumps(panel.get("options", {}))))
            with open(module, encoding="utf-8") as handle:
                has_field_config = "export interface FieldConfig " in handle.read()
            custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
            if has_field_config and custom is not None:
                lines.append("export const {}_custom: Lit<Partial<{}.FieldConfig>> = {};".format(
                    label, alias, json.dumps(custom)))
    return "\n".join(lines) + "\n"


def _typescript_ready():
    return shutil.which("node") is not None and os.path.exists(TSC) and os.path.isdir(SCHEMA_PACKAGE)


needs_typescript = pytest.mark.skipif(
    not _typescript_ready(),
    reason="Grafana's schema types are not installed: run `npm ci --prefix tests/grafana_schema` (needs Node.js)")


def misspelt(source):
    """The source with a misspelt key in the first dashboard and a bad enum value in a time series' options."""
    lines = source.splitlines()
    dashboard = next(i for i, line in enumerate(lines) if ": Lit<Dashboard> = " in line)
    lines[dashboard] = lines[dashboard].replace('"gridPos":', '"gridpos":', 1)
    options = next(i for i, line in enumerate(lines) if "panel_timeseries.Options" in line)
    lines[options] = lines[options].replace('"displayMode": "table"', '"displayMode": "tabel"')
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def tsc_errors(tmp_path_factory):
    """file name -> tsc's error lines for it, the dashboards and their misspelt copy checked in one run (most
    of a run is checking Grafana's own types, about 5 s of CPU)."""
    directory = tmp_path_factory.mktemp("tsc")
    source = typescript_source()
    files = {"dashboards.ts": source, "misspelt.ts": misspelt(source)}
    for name, text in files.items():
        (directory / name).write_text(text)
    result = subprocess.run(["node", TSC, "--noEmit", "--strict", "--target", "es2020", "--module", "esnext",
                             "--moduleResolution", "bundler", "--skipLibCheck", "false", "--pretty", "false"]
                            + [str(directory / name) for name in files],
                            capture_output=True, text=True, timeout=120)
    errors = {name: [] for name in files}
    current = "elsewhere"
    for line in filter(None, result.stdout.splitlines()):
        if not line[:1].isspace():  # an indented line goes on with the error above it
            name = os.path.basename(line.split("(", 1)[0])
            current = name if name in errors else "elsewhere"
        errors.setdefault(current, []).append(line)
    assert (result.returncode != 0) == any(errors.values()), result.stderr[-2000:]
    return errors


@needs_typescript
def test_dashboards_type_check_against_grafanas_schema(tsc_errors):
    assert tsc_errors["dashboards.ts"] == [] and tsc_errors.get("elsewhere", []) == [], tsc_errors


@needs_typescript
def test_the_schema_check_rejects_a_misspelt_key_and_a_bad_enum_value(tsc_errors):
    errors = "\n".join(tsc_errors["misspelt.ts"])
    assert """'"gridpos"' does not exist""" in errors
    assert """'"tabel"' is not assignable""" in errors


@needs_typescript
def test_schema_version_is_the_current_grafanas():
    with open(os.path.join(SCHEMA_PACKAGE, "dist", "esm", "raw", "dashboard", "x", "types.gen.mjs"),
              encoding="utf-8") as handle:
        current = int(re.search(r"schemaVersion:\s*(\d+)", handle.read()).group(1))
    for name in DASHBOARD_FILES:
        assert load(name)["schemaVersion"] == current
