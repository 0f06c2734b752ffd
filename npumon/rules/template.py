"""Summary and hint templates: `{fact}` / `{fact:spec}` / `{param.name}` and nothing else.

A deliberately small formatter instead of str.format: a field is a fact name (dots are part of the name,
never attribute access or indexing), the optional spec is a plain format spec (`.0f`, `.0%`, `>8`).
`{{` and `}}` are literal braces. Null prints as `n/a`, a list as its comma-joined items, and a value the
spec does not fit (a string under `.0f`) prints plainly instead of failing.
"""

import functools
import re
from typing import Any, FrozenSet, List, Mapping, Tuple, Union

from .expr import PARAM_PREFIX

NULL_TEXT = "n/a"
_FIELD = re.compile(r"\{([^{}:]*)(?::([^{}]*))?\}")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


class TemplateError(ValueError):
    """A malformed template; the message says where."""


# A compiled template is a list of literal strings and (name, spec) fields.
Part = Union[str, Tuple[str, str]]


class Template:
    __slots__ = ("text", "names", "_parts")

    def __init__(self, text: str, parts: List[Part]):
        self.text = text
        self._parts = tuple(parts)  # shared: compiled once per text (_compile)
        self.names: FrozenSet[str] = frozenset(part[0] for part in parts if isinstance(part, tuple))

    def render(self, facts: Mapping[str, Any], params: Mapping[str, Any]) -> str:
        pieces = []
        for part in self._parts:
            if isinstance(part, str):
                pieces.append(part)
                continue
            name, spec = part
            if name.startswith(PARAM_PREFIX):
                value = params.get(name[len(PARAM_PREFIX):])
            else:
                value = facts.get(name)
            pieces.append(format_value(value, spec))
        return "".join(pieces)


def format_value(value: Any, spec: str = "") -> str:
    if value is None:
        return NULL_TEXT
    if isinstance(value, (list, tuple)):
        return ", ".join(format_value(item, spec) for item in value) if value else "none"
    if isinstance(value, bool):
        return "true" if value else "false"  # as the expression language writes them
    if not spec:
        return "{:.4g}".format(value) if isinstance(value, float) else str(value)
    try:
        return format(value, spec)
    except (TypeError, ValueError):
        return str(value)


def compile_template(text: str) -> Template:
    if not isinstance(text, str):
        raise TemplateError("a template must be a string")
    return _compile(text)


# A Template never changes once made, and every load of the rules (each start, reload and `npumon check`)
# compiles the same few hundred texts twice (checking them, then building the engine): made once each.
@functools.lru_cache(maxsize=2048)
def _compile(text: str) -> Template:
    parts: List[Part] = []
    literal: List[str] = []
    pos = 0
    while pos < len(text):
        char = text[pos]
        if text.startswith("{{", pos) or text.startswith("}}", pos):
            literal.append(char)
            pos += 2
            continue
        if char == "}":
            raise TemplateError("single '}}' at column {} (write '}}}}' for a literal brace)".format(pos + 1))
        if char != "{":
            literal.append(char)
            pos += 1
            continue
        match = _FIELD.match(text, pos)
        if not match:
            raise TemplateError("unclosed '{{' at column {} (write '{{{{' for a literal brace)".format(pos + 1))
        name, spec = match.group(1).strip(), match.group(2) or ""
        _check_field(name, spec, pos)
        if literal:
            parts.append("".join(literal))
            literal = []
        parts.append((name, spec))
        pos = match.end()
    if literal:
        parts.append("".join(literal))
    return Template(text, parts)


def _check_field(name: str, spec: str, pos: int) -> None:
    if not _NAME.fullmatch(name) or any(part.startswith("__") for part in name.split(".")):
        raise TemplateError("bad field {{{}}} at column {}: a field is a fact or param.<name>".format(name, pos + 1))
    if spec and not _spec_fits_something(spec):
        raise TemplateError("bad format spec {!r} for {{{}}} at column {}".format(spec, name, pos + 1))


def _spec_fits_something(spec: str) -> bool:
    """A spec is valid if it formats a number or a string (facts are one or the other)."""
    for sample in (1.5, 1, "text"):
        try:
            format(sample, spec)
            return True
        except ValueError:
            continue
    return False

