#!/usr/bin/env python3
"""Regenerate the reference tables of docs/configuration.md and docs/metrics.md from the code.

    python3 docs/reference.py          # rewrite the generated parts
    python3 docs/reference.py --check  # exit 1 if they are out of date (tests/test_docs_reference.py)

Configuration: every key of the config (npumon/settings.py: config/schema.py plus each source's and service's
section), its default and the comment the schema gives it. Metrics: every family a MetricSpec declares, with
its labels and HELP text, plus the self-metric families the collectors build directly. Rules: the facts. Only the text
between the `<!-- generated: NAME -->` and `<!-- end: NAME -->` markers is replaced; the prose around it is
written by hand.
"""

import ast
import dataclasses
import inspect
import io
import os
import re
import sys
import textwrap
import tokenize
import typing
from typing import Any, Dict, Iterator, List, Tuple

DOCS = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(DOCS))

from npumon.config.schema import DEFAULT_STATE_DIR, default_state_dir  # noqa: E402
from npumon.settings import Config  # noqa: E402

INTERNAL_KEYS = {"source"}  # set by the loader (where the config came from), not a YAML key


# ------------------------------------------------------------------------------------------- configuration

def field_comments(cls: Any) -> Dict[str, str]:
    """The comment of each field in the class body: the comment lines right above it and the one after it."""
    try:
        lines, _ = inspect.getsourcelines(cls)
    except (OSError, TypeError):
        return {}
    source = textwrap.dedent("".join(lines))
    comments: Dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = token.string.lstrip("#").strip()
    code_lines = source.splitlines()
    found = {}
    for node in ast.parse(source).body[0].body:
        if not isinstance(node, ast.AnnAssign) or not isinstance(node.target, ast.Name):
            continue
        above = []
        line = node.lineno - 1
        while line >= 1 and line in comments and code_lines[line - 1].strip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        after = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments]
        found[node.target.id] = " ".join(above + after)
    return found


def default_text(spec: dataclasses.Field) -> str:
    if spec.default is not dataclasses.MISSING:
        value = spec.default
    elif spec.default_factory is default_state_dir:  # not the override the environment (a test run) may give
        value = DEFAULT_STATE_DIR
    elif spec.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        value = spec.default_factory()  # type: ignore[misc]
    else:
        return "(required)"
    if dataclasses.is_dataclass(value):
        return "(section)"
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)) and not value:
        return "[]"
    if isinstance(value, dict) and not value:
        return "{}"
    if value == "":
        return '`""`'
    return "`{}`".format(value)


def config_keys(cls: Any = Config, prefix: str = "") -> Iterator[Tuple[str, str, str]]:
    """(dotted key, default, comment) of every setting, sections and list items (`key[].sub`) included."""
    comments: Dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass):
            comments.update(field_comments(klass))
    hints = typing.get_type_hints(cls)
    for spec in dataclasses.fields(cls):
        if not prefix and spec.name in INTERNAL_KEYS:
            continue
        key = prefix + spec.name
        hint = hints[spec.name]
        item = _list_item(hint)
        comment = comments.get(spec.name, "") or (_class_doc(hint) if dataclasses.is_dataclass(hint) else "")
        yield key, default_text(spec), comment
        if dataclasses.is_dataclass(hint):
            yield from config_keys(hint, key + ".")
        elif item is not None and dataclasses.is_dataclass(item):
            yield from config_keys(item, key + "[].")


def _list_item(hint: Any) -> Any:
    if typing.get_origin(hint) in (list, List):
        (item,) = typing.get_args(hint)
        return item
    return None


def _class_doc(cls: Any) -> str:
    doc = inspect.getdoc(cls) or ""
    return "" if doc.startswith(cls.__name__ + "(") else " ".join(doc.split())


def config_table() -> str:
    rows = ["| key | default | what it is |", "|---|---|---|"]
    for key, default, comment in config_keys():
        rows.append("| `{}` | {} | {} |".format(key, default, _cell(comment)))
    return "\n".join(rows)


# ------------------------------------------------------------------------------------------------ metrics

# Families built directly by collectors (self-metrics), found in the source: `XMetricFamily("name", ...` and the
# (name, help, ...) tables of the HTTP and call metrics.
_DIRECT = re.compile(r'MetricFamily\(\s*"([a-z_:][a-z0-9_:]*)",\s*\n?\s*"((?:[^"\\]|\\.)*)"')
_TABLE = re.compile(r'\(\s*"(npumon_[a-z0-9_]+)",\s*"((?:[^"\\]|\\.)*)"')


def declared_families() -> Dict[str, Tuple[str, str]]:
    """name -> (labels, help) of every family npumon can export."""
    from npumon.outputs import exporter, npu_exporter, npu_exporter_network
    families: Dict[str, Tuple[str, str]] = {}
    for spec in list(exporter.NATIVE_METRICS) + list(npu_exporter.BASE_METRICS):
        families.setdefault(spec.name, (", ".join(spec.labels), spec.help))
    for spec in npu_exporter_network.network_metrics(()):  # labelled like the chip families above
        families.setdefault(spec.name, ("npu-exporter's chip labels", spec.help))
    package = os.path.join(os.path.dirname(DOCS), "npumon")
    for directory, _, files in os.walk(package):
        for name in sorted(files):
            if not name.endswith(".py") or "sim" in directory.split(os.sep):
                continue
            with open(os.path.join(directory, name), encoding="utf-8") as handle:
                text = handle.read()
            for pattern in (_DIRECT, _TABLE):
                for match in pattern.finditer(text):
                    families.setdefault(match.group(1), ("", match.group(2)))
    return families


def metrics_table(native: bool) -> str:
    rows = ["| family | labels | what it is |", "|---|---|---|"]
    for name, (labels, help_text) in sorted(declared_families().items()):
        if name.startswith("npumon_") == native:
            rows.append("| `{}` | {} | {} |".format(name, labels, _cell(help_text)))
    return "\n".join(rows)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


# -------------------------------------------------------------------------------------------------- facts

def facts_list() -> str:
    """The names rule expressions and templates can use, per subject kind (rules/facts.py)."""
    from npumon.rules.facts import CHIP_FACTS, HOST_FACTS
    chip_only = sorted(name for name in CHIP_FACTS if not name.startswith("host."))
    return "\n".join([
        "Chip facts (a chip rule also sees every host fact as `host.<name>`):", "",
        ", ".join("`{}`".format(name) for name in chip_only), "",
        "Host facts (`source_up.<source>` and `source_age_seconds.<source>` exist for every source):", "",
        ", ".join("`{}`".format(name) for name in sorted(HOST_FACTS)),
    ])


# ------------------------------------------------------------------------------------------------ files

GENERATED = {
    "configuration.md": {"config-reference": config_table},
    "rules.md": {"facts": facts_list},
    "metrics.md": {"native-metrics": lambda: metrics_table(True), "compat-metrics": lambda: metrics_table(False)},
}


def regenerate(text: str, parts: Dict[str, Any]) -> str:
    for name, build in parts.items():
        pattern = re.compile(r"(<!-- generated: {0} -->\n).*?(<!-- end: {0} -->)".format(re.escape(name)), re.S)
        if not pattern.search(text):
            raise SystemExit("docs: no '<!-- generated: {} -->' ... '<!-- end: {} -->' markers".format(name, name))
        text = pattern.sub(lambda match: match.group(1) + build() + "\n" + match.group(2), text)
    return text


def main(argv: List[str]) -> int:
    check = "--check" in argv
    stale = []
    for file_name, parts in GENERATED.items():
        path = os.path.join(DOCS, file_name)
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        new = regenerate(text, parts)
        if new != text:
            stale.append(file_name)
            if not check:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(new)
    if check and stale:
        print("out of date: {} (run python3 docs/reference.py)".format(", ".join("docs/" + s for s in stale)))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
