"""What npu-exporter's consumers ask Prometheus: every panel target and template variable of a Grafana
dashboard, every record of a rule file, every query of a tool's query list, and Grafana's variables filled
in the way Grafana fills them for a Prometheus datasource.

Pure: no I/O. The caller asks Prometheus for the values of each variable (in `resolution_order`) and
passes them to `substitute`; `scope` (promql_scope.py) then narrows a query to one simulated host.
"""

import re
from collections import namedtuple
from typing import Dict, Iterator, List, Mapping, Optional, Sequence, Set

PanelQuery = namedtuple("PanelQuery", "title ref_id expr instant repeat")
Variable = namedtuple("Variable", "name kind query multi include_all all_value regex options")
VariableQuery = namedtuple("VariableQuery", "function selector label")  # function: label_values, query_result, ...

# Families Huawei's npu-exporter serves (COMPAT.md); a query naming none of them reads other exporters only.
NPU_EXPORTER_SERIES = re.compile(
    r"\b(npu_\w+|machine_(?:npu|card|healthy_npu|unhealthy_npu|unknown_npu)_nums|container_npu_\w+|"
    r"vnpu_pod_\w+|node_base_info)\b")

# Grafana's built-in variables, as Grafana fills them for a 5 minute range and a 1 s scrape interval.
BUILT_INS = {"__interval": "1s", "__interval_ms": "1000", "__rate_interval": "4s", "__range": "300s",
             "__range_s": "300", "__range_ms": "300000"}

_REFERENCE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\[\[(\w+)(?::(\w+))?\]\]|\$(\w+)")
_REGEX_SPECIAL = re.compile(r"([$^*{}\[\]'+?.()|])")


# --- Grafana dashboards ---------------------------------------------------------------------------------


def panels(dashboard: Mapping) -> Iterator[Mapping]:
    """Every panel, rows included, however nested: `panels` inside row panels, and schema < 16 `rows`."""
    top = list(dashboard.get("panels") or [])
    for row in dashboard.get("rows") or []:
        top.extend(row.get("panels") or [])
    stack = list(reversed(top))
    while stack:
        panel = stack.pop()
        yield panel
        stack.extend(reversed(panel.get("panels") or []))


def panel_queries(dashboard: Mapping) -> List[PanelQuery]:
    """The Prometheus expression of every target that Grafana runs (hidden targets are not run)."""
    found = []
    for panel in panels(dashboard):
        for target in panel.get("targets") or []:
            expr = target.get("expr")
            if expr and not target.get("hide"):
                found.append(PanelQuery(panel.get("title", ""), target.get("refId", ""), expr,
                                        bool(target.get("instant")), panel.get("repeat")))
    return found


def variables(dashboard: Mapping) -> List[Variable]:
    found = []
    for item in (dashboard.get("templating") or {}).get("list") or []:
        query = item.get("query")
        if isinstance(query, Mapping):  # Grafana 7.4+ stores {"query": ..., "refId": ...}
            query = query.get("query", "")
        options = [option.get("value") for option in item.get("options") or [] if option.get("value") != "$__all"]
        found.append(Variable(item["name"], item.get("type", "query"), query or "", bool(item.get("multi")),
                              bool(item.get("includeAll")), item.get("allValue"), item.get("regex") or "",
                              options))
    return found


def parse_variable_query(text: str) -> VariableQuery:
    """label_values(label), label_values(selector, label), query_result(expr), label_names(), metrics(re)."""
    text = text.strip()
    match = re.fullmatch(r"label_values\(\s*(\w+)\s*\)", text)
    if match:
        return VariableQuery("label_values", None, match.group(1))
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\s*\)", text, re.S)
    if match:
        return VariableQuery("label_values", match.group(1).strip(), match.group(2))
    for function in ("query_result", "metrics", "label_names"):
        match = re.fullmatch(function + r"\((.*)\)", text, re.S)
        if match:
            return VariableQuery(function, match.group(1).strip() or None, None)
    raise ValueError("not a Prometheus variable query Grafana knows: {!r}".format(text))


def references(text: str) -> Set[str]:
    """Names of the dashboard variables a text uses (built-ins such as $__interval left out)."""
    names = set()
    for match in _REFERENCE.finditer(text or ""):
        name = match.group(1) or match.group(3) or match.group(5)
        if not name.startswith("__"):
            names.add(name)
    return names


def resolution_order(items: Sequence[Variable]) -> List[Variable]:
    """Variables so that each comes after those its query uses (Grafana's order); a cycle is an error."""
    by_name = {item.name: item for item in items}
    ordered: List[Variable] = []
    visiting: Set[str] = set()

    def visit(item: Variable) -> None:
        if item in ordered:
            return
        if item.name in visiting:
            raise ValueError("variables depend on each other in a cycle: " + item.name)
        visiting.add(item.name)
        for name in sorted(references(item.query) & set(by_name)):
            visit(by_name[name])
        visiting.discard(item.name)
        ordered.append(item)

    for item in items:
        visit(item)
    return ordered


def apply_regex(values: Sequence[str], regex: str) -> List[str]:
    """A variable's `regex`: keep matching values, or the first capture group where it has one."""
    if not regex:
        return list(values)
    pattern = re.compile(regex[1:regex.rindex("/")] if regex.startswith("/") else regex)
    kept = []
    for value in values:
        match = pattern.search(value)
        if match:
            kept.append(match.group(1) if pattern.groups else value)
    return kept


def _regex_escape(value: str) -> str:
    # Two backslashes per escape: one for PromQL's string, one for the regex (Grafana does the same).
    return _REGEX_SPECIAL.sub(r"\\\\\1", value.replace("\\", "\\\\\\\\"))


def _format(variable: Optional[Variable], values: Sequence[str], fmt: Optional[str]) -> str:
    """What Grafana's Prometheus datasource writes for a variable (its interpolateQueryExpr)."""
    if fmt == "pipe":
        return "|".join(values)
    if fmt in ("csv", "raw", "text"):
        return ",".join(values)
    if variable is not None and variable.include_all and variable.all_value is not None:
        return variable.all_value  # "All" is what such a variable shows by default; its custom value is raw
    if fmt != "regex" and (variable is None or not (variable.multi or variable.include_all)):
        return values[0].replace("\\", "\\\\").replace("'", "\\'")
    escaped = [_regex_escape(value) for value in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


def substitute(text: str, values: Mapping[str, Sequence[str]], dashboard_variables: Sequence[Variable] = (),
               built_ins: Mapping[str, str] = BUILT_INS) -> str:
    """Fill $var, ${var}, ${var:fmt}, [[var]] and the built-ins; a multi value becomes Grafana's (a|b) regex.
    A variable without values is an error: Grafana would run the query with nothing selected."""
    by_name = {item.name: item for item in dashboard_variables}

    def replace(match: "re.Match") -> str:
        name = match.group(1) or match.group(3) or match.group(5)
        fmt = match.group(2) or match.group(4)
        if name in built_ins:
            return built_ins[name]
        if name not in values:
            return match.group(0)  # not a variable of this dashboard: PromQL's own $1 in label_replace
        chosen = list(values[name])
        if not chosen:
            raise ValueError("variable ${} has no value".format(name))
        return _format(by_name.get(name), chosen, fmt)

    return _REFERENCE.sub(replace, text)


def is_npu_exporter_query(expr: str) -> bool:
    return NPU_EXPORTER_SERIES.search(expr or "") is not None


# --- rule files and tools' query lists ------------------------------------------------------------------


def rule_queries(document: Mapping) -> List[PanelQuery]:
    """Every `expr` of a rules document; `%(name)s` filled from its `config` (a jsonnet mixin's _config)."""
    config = document.get("config") or {}
    found = []
    for group in document.get("groups") or []:
        for rule in group.get("rules") or []:
            found.append(PanelQuery(rule.get("record") or rule.get("alert"), group["name"],
                                    rule["expr"] % config, True, None))
    return found


def tool_query(template: str, fills: Sequence[str]) -> str:
    """A tool's query built as it builds it: Go's fmt.Sprintf with one %s per fill."""
    if template.count("%s") != len(fills):
        raise ValueError("{} needs {} values, got {}".format(template, template.count("%s"), len(fills)))
    return template % tuple(fills)


def label_sets(result: Sequence[Mapping]) -> List[Dict[str, str]]:
    """The label sets of an instant query result (Prometheus API `data.result`)."""
    return [dict(series.get("metric") or {}) for series in result]
