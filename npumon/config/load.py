"""YAML configuration -> frozen dataclasses (schema.py), validated.

Every error names the file, the line and the dotted key, in one line, so a user can fix it without reading
a traceback. The conversion follows the dataclasses' type hints, so adding a setting is adding one field.
Range checks come from each owner of a part of the config (`checks`: config -> [(dotted key, problem)]); this
module knows only the core settings' own (core_problems). npumon/settings.py puts the whole config together.
"""

import dataclasses
import math
import re
import typing
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import yaml

from . import yamlparse
from .errors import ConfigError, line_of
from .schema import LOG_LEVELS, PollConfig

Check = Callable[[Any], List[Tuple[str, str]]]  # config -> [(dotted key, problem)]


def load_yaml_as(path: str, cls: Any, what: str) -> Tuple[Any, Optional[yaml.Node]]:
    """Another YAML file (e.g. the exporter's web config) read into the dataclass `cls` with the config's
    one-line errors (unknown keys, wrong types, file:line: key); also returns the document, for line_of()."""
    text = read_text(path, what)
    node = _compose(text, path)
    return (cls() if node is None else _convert(node, cls, path, "")), node


def read_text(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ConfigError("{}: cannot read {}: {}".format(path, what, exc.strerror or exc)) from None
    except UnicodeDecodeError:
        raise ConfigError("{}: {} is not UTF-8 text".format(path, what)) from None


def _compose(text: str, path: str) -> Optional[yaml.Node]:
    try:
        return yamlparse.compose(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError("{}:{}: bad YAML: {}".format(path, line, exc.problem or exc.context)) from None
    except yaml.YAMLError as exc:
        raise ConfigError("{}: bad YAML: {}".format(path, str(exc).splitlines()[0])) from None


def parse_document(text: str, path: str, cls: Any, checks: Sequence[Check]) -> Any:
    """A config document as the dataclass `cls`, checked by core_problems and `checks`; the first problem raises."""
    node = _compose(text, path)
    if node is None:  # empty file: all defaults
        return dataclasses.replace(cls(), source=path)
    config = _convert(node, cls, path, "")
    config = dataclasses.replace(config, source=path)
    problems = _validate(config, node, path, checks)
    if problems:
        raise ConfigError(problems[0])
    return config


def document_problems(path: str, cls: Any, checks: Sequence[Check]) -> Tuple[Optional[Any], List[str]]:
    """Every problem of a config file, one line each (`npumon config check`), rather than the first: a key
    that cannot be read is reported and left at its default, so the keys after it are still checked."""
    try:
        node = _compose(read_text(path, "config"), path)
    except ConfigError as exc:
        return None, [str(exc)]
    if node is None:
        return dataclasses.replace(cls(), source=path), []
    problems: List[str] = []
    try:
        config = dataclasses.replace(_convert(node, cls, path, "", problems), source=path)
    except ConfigError as exc:  # the document itself is not a mapping
        return None, [str(exc)]
    return config, sorted(problems + _validate(config, node, path, checks), key=_line_number)


def _line_number(problem: str) -> int:
    """The LINE of 'FILE:LINE: ...' (problems in file order), 0 when there is none."""
    match = re.match(r"^.*?:(\d+): ", problem)
    return int(match.group(1)) if match else 0


def _where(path: str, node: yaml.Node, key: str) -> str:
    return "{}:{}: {}".format(path, node.start_mark.line + 1, key or "<top level>")


def _convert(node: yaml.Node, hint: Any, path: str, key: str, collect: Optional[List[str]] = None) -> Any:
    """Turn a YAML node into a value of the type `hint`, or raise ConfigError naming where it went wrong."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin is typing.Union:  # Optional[X]
        if _is_null(node):
            return None
        inner = [arg for arg in args if arg is not type(None)][0]
        return _convert(node, inner, path, key, collect)
    if dataclasses.is_dataclass(hint):
        return _convert_dataclass(node, hint, path, key, collect)
    if origin in (list, List):
        if not isinstance(node, yaml.SequenceNode):
            raise ConfigError("{}: expected a list".format(_where(path, node, key)))
        return [_convert(item, args[0], path, "{}[{}]".format(key, i)) for i, item in enumerate(node.value)]
    if origin in (dict, Dict):
        if not isinstance(node, yaml.MappingNode):
            raise ConfigError("{}: expected a mapping".format(_where(path, node, key)))
        result = {}
        for key_node, value_node in node.value:
            name = _scalar_key(key_node, path, key)
            result[name] = _convert(value_node, args[1], path, _join(key, name))
        return result
    return _convert_scalar(node, hint, path, key)


def _convert_dataclass(node: yaml.Node, cls: Any, path: str, key: str, collect: Optional[List[str]] = None) -> Any:
    """`collect`: a list to append each key's problem to (the key then keeps its default), instead of raising."""
    if _is_null(node):
        return cls()
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError("{}: expected a mapping".format(_where(path, node, key)))
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls) if f.name != "source"}
    values = {}
    for key_node, value_node in node.value:
        try:
            name = _scalar_key(key_node, path, key)
            full = _join(key, name)
            if name not in known:
                raise ConfigError("{}: unknown key (known: {})".format(_where(path, key_node, full),
                                                                      ", ".join(sorted(known))))
            if name in values:
                raise ConfigError("{}: key given twice".format(_where(path, key_node, full)))
            values[name] = _convert(value_node, hints[name], path, full, collect)
        except ConfigError as exc:
            if collect is None:
                raise
            collect.append(str(exc))
    return cls(**values)


def _convert_scalar(node: yaml.Node, hint: Any, path: str, key: str) -> Any:
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError("{}: expected a {}".format(_where(path, node, key), _type_name(hint)))
    value = _construct(node)
    if hint is bool:
        if isinstance(value, bool):
            return value
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, str) and _EXPONENT_NUMBER.match(value):
            value = float(value)  # YAML 1.1 reads 1e9 (no dot, no sign) as a string; people mean the number
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not math.isfinite(value):  # refused here, at its own line, not by a range check that nan passes
                raise ConfigError("{}: expected a finite number, got {!r}".format(_where(path, node, key), value))
            return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    got = "null" if value is None else repr(value)
    raise ConfigError("{}: expected a {}, got {}".format(_where(path, node, key), _type_name(hint), got))


def _construct(node: yaml.ScalarNode) -> Any:
    loader = yaml.SafeLoader("")
    try:
        return loader.construct_object(node)
    finally:
        loader.dispose()


def _scalar_key(node: yaml.Node, path: str, parent: str) -> str:
    if not isinstance(node, yaml.ScalarNode):
        raise ConfigError("{}: keys must be plain names".format(_where(path, node, parent)))
    return str(node.value)


def _is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def _join(parent: str, name: str) -> str:
    return "{}.{}".format(parent, name) if parent else name


def _type_name(hint: Any) -> str:
    return {bool: "boolean (true/false)", int: "whole number", float: "number", str: "string"}.get(hint, str(hint))


_EXPONENT_NUMBER = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+$")
_KEY_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def key_path(dotted: str) -> List[Union[str, int]]:
    """"receivers[2].url" -> ["receivers", 2, "url"]."""
    return [int(index) if index else name for name, index in _KEY_PART.findall(dotted)]


def _validate(config: Any, node: yaml.Node, path: str, checks: Sequence[Check]) -> List[str]:
    """Range checks that types alone cannot express: one `file:line: key: problem` line each."""
    problems = core_problems(config)
    for check in checks:
        problems.extend(check(config))
    return ["{}:{}: {}: {}".format(path, line_of(node, key_path(key)), key, problem) for key, problem in problems]


def core_problems(config: Any) -> List[Tuple[str, str]]:
    """The core settings' (schema.CoreConfig) range checks: [(dotted key, problem)]."""
    problems: List[Tuple[str, str]] = []
    if config.npu_smi_timeout_seconds <= 0:
        problems.append(("npu_smi_timeout_seconds", "must be greater than 0"))
    if config.npu_smi_max_concurrent < 1:
        problems.append(("npu_smi_max_concurrent", "must be at least 1"))
    if config.npu_smi_max_output_bytes < 65536:
        problems.append(("npu_smi_max_output_bytes", "must be at least 65536 (a real answer is some kilobytes)"))
    if config.check_max_concurrent < 1:
        problems.append(("check_max_concurrent", "must be at least 1"))
    if config.max_age_seconds <= 0:
        problems.append(("max_age_seconds", "must be greater than 0"))
    if config.log_level not in LOG_LEVELS:
        problems.append(("log_level", "must be one of {}".format(", ".join(LOG_LEVELS))))
    if not config.npu_smi.strip():
        problems.append(("npu_smi", "must not be empty"))
    for poll_field in dataclasses.fields(PollConfig):
        seconds = getattr(config.poll, poll_field.name)
        if seconds is not None and seconds < 0:
            problems.append(("poll." + poll_field.name, "must be 0 (off) or more"))
    if config.poll.table_seconds <= 0:
        problems.append(("poll.table_seconds", "must be greater than 0 (the main table is always polled)"))
    return problems
