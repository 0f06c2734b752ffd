"""Narrow a PromQL expression to one host: add label matchers to every vector selector in it.

One Prometheus scrapes every simulated product; a consumer's query that sums over the fleet
(`sum(machine_npu_nums)`) says nothing about one product. Scoped, the query reads what it would read on a
fleet of that product alone. This is what Grafana's ad hoc filters do, with a small tokenizer instead of
Grafana's PromQL parser: strings, `{...}` matcher blocks, `[...]` ranges, grouping label lists
(`by (...)`, `on (...)`, ...), function calls and keywords are told apart; every other name is a metric.
"""

import re
from typing import List, Mapping

_IDENTIFIER = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_NUMBER = re.compile(r"(?:0[xX][0-9a-fA-F]+|[0-9.][0-9a-zA-Z.]*)")  # 1024, 1e3, 0x1F, 5m (offset)
_KEYWORDS = frozenset(("and", "or", "unless", "bool", "offset", "atan2", "inf", "nan", "start", "end"))
_LABEL_LISTS = frozenset(("by", "without", "on", "ignoring", "group_left", "group_right"))
_AGGREGATIONS = frozenset(("sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
                           "bottomk", "topk", "quantile", "limitk", "limit_ratio"))


def _skip_string(expr: str, start: int) -> int:
    """Index just after the string literal opening at `start`."""
    quote = expr[start]
    index = start + 1
    while index < len(expr):
        if expr[index] == "\\" and quote != "`":
            index += 2
            continue
        if expr[index] == quote:
            return index + 1
        index += 1
    raise ValueError("unterminated string in " + expr)


def _closing(expr: str, start: int, opening: str, closing: str) -> int:
    """Index of the bracket closing the one at `start`, strings inside skipped."""
    depth = 0
    index = start
    while index < len(expr):
        char = expr[index]
        if char in "\"'`":
            index = _skip_string(expr, index)
            continue
        if char == opening:
            depth += 1
        elif char == closing:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    raise ValueError("unbalanced {}{} in {}".format(opening, closing, expr))


def _next_char(expr: str, index: int) -> str:
    while index < len(expr) and expr[index].isspace():
        index += 1
    return expr[index] if index < len(expr) else ""


def _matchers(block: str, extra: Mapping[str, str]) -> str:
    """The inside of a `{...}` block with the extra matchers its selector does not already have."""
    added = ['{}="{}"'.format(label, value) for label, value in sorted(extra.items())
             if not re.search(r"(?:^|[\s,])" + re.escape(label) + r"\s*(?:=~|!~|!=|=)", "," + block)]
    inner = block.strip().rstrip(",")
    return ",".join(added + ([inner] if inner else []))


def scope(expr: str, extra: Mapping[str, str]) -> str:
    """`expr` with `label="value"` of `extra` added to each vector selector."""
    out: List[str] = []
    index = 0
    while index < len(expr):
        char = expr[index]
        if char in "\"'`":
            end = _skip_string(expr, index)
            out.append(expr[index:end])
            index = end
        elif char == "{":  # a selector without a metric name: {job="x"}
            end = _closing(expr, index, "{", "}")
            out.append("{" + _matchers(expr[index + 1:end], extra) + "}")
            index = end + 1
        elif char == "[":
            end = _closing(expr, index, "[", "]")
            out.append(expr[index:end + 1])
            index = end + 1
        elif _NUMBER.match(expr, index) and not _IDENTIFIER.match(expr, index):
            end = _NUMBER.match(expr, index).end()
            out.append(expr[index:end])
            index = end
        elif _IDENTIFIER.match(expr, index):
            name = _IDENTIFIER.match(expr, index).group(0)
            index += len(name)
            out.append(name)
            following = _next_char(expr, index)
            if name.lower() in _LABEL_LISTS:
                if following == "(":  # a label list, not a selector: copy it as it is
                    start = expr.index("(", index)
                    end = _closing(expr, start, "(", ")")
                    out.append(expr[index:end + 1])
                    index = end + 1
            elif following == "(" or name.lower() in _KEYWORDS or (
                    name.lower() in _AGGREGATIONS and re.match(r"\s*(?:by|without)\b", expr[index:], re.I)):
                pass  # a function or an aggregation (`sum by (x) (...)`), or an operator word
            elif following == "{":
                start = expr.index("{", index)
                end = _closing(expr, start, "{", "}")
                out.append(expr[index:start] + "{" + _matchers(expr[start + 1:end], extra) + "}")
                index = end + 1
            else:
                out.append("{" + _matchers("", extra) + "}")
        else:
            out.append(char)
            index += 1
    return "".join(out)
