"""The kernel-log patterns (patterns.yaml, plus users' files): a driver log line -> a fault. Pure but for
reading the files once.

A line matches the first pattern whose regex it contains; a pattern marked `ignore` says the line is no fault;
an `[ascend]` error line that none matches is a generic `driver_error`. The device id a line names is the
driver's device id, which npumon takes as the chip's logical id (FAULTS.md §2.2: "treat as logic id -- not
verified").
"""

import os
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import yaml

from ..config import yamlparse
from . import catalogue, levels

PATTERNS_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "patterns.yaml")
KINDS = ("hardware", "device", "transient")
GENERIC_CLASS = "driver_error"
_ASCEND = "[ascend]"
_ERROR_LINE = re.compile(r"\[ascend\] (?:\[[^\]]*\] )?\[ERROR\]")
_ANY_DEVICE = re.compile(r"\b(?:(?:dev_id|devid|device_id|deviceid|device|dev)=|device\()(\d+)\b")
_CLASS_NAME = re.compile(r"[a-z][a-z0-9_]*")
# The kind of a fault known only by its code, from the code's handling level.
_KIND_OF_LEVEL = {"SeparateNPU": "hardware", "PreSeparateNPU": "hardware", "ManuallySeparateNPU": "hardware",
                  "RestartNPU": "device", "FreeRestartNPU": "device"}


class PatternError(ValueError):
    """A pattern file problem; the one-line message names the file and the pattern."""


@dataclass(frozen=True)
class Pattern:
    fault_class: str
    regex: Any  # compiled re.Pattern
    kind: Optional[str]  # None: from the matched code
    repair_action: Optional[str]
    code: Optional[str]
    summary: str
    ascend_only: bool = True
    ignore: bool = False  # a line it matches is no fault


@dataclass(frozen=True)
class LineFault:
    """What one log line says."""

    fault_class: str
    kind: str
    repair_action: str
    level: Optional[str]
    summary: str
    device: Optional[int] = None  # the driver's device id
    bus: Optional[str] = None  # a PCI address, lower case
    code: Optional[str] = None


def load_patterns(extra_files: Sequence[str] = ()) -> List[Pattern]:
    """The users' patterns first, then the built-in ones that they do not replace (by class). Read once per
    version of the files: validating the config and building the source both ask, at every start."""
    paths = list(extra_files) + [PATTERNS_PATH]
    key = tuple((path,) + _file_version(path) for path in paths)
    if _last_loaded and _last_loaded[0] == key:
        return list(_last_loaded[1])
    patterns = _load(paths)
    _last_loaded[:] = [key, patterns]
    return list(patterns)


_last_loaded: List[Any] = []  # [key, patterns] of the last successful load


def _file_version(path: str) -> tuple:
    try:
        status = os.stat(path)
    except OSError:
        return (None, None)  # reading it will say why
    return (status.st_mtime_ns, status.st_size)


def _load(paths: Sequence[str]) -> List[Pattern]:
    """A class may have several patterns in one file (one per driver wording); a class an earlier file named
    is not taken from a later one."""
    patterns: List[Pattern] = []
    for path in paths:
        taken = {known.fault_class for known in patterns}
        patterns.extend(pattern for pattern in _read_file(path) if pattern.fault_class not in taken)
    return patterns


def _read_file(path: str) -> List[Pattern]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = yamlparse.safe_load(handle.read())
    except OSError as exc:
        raise PatternError("{}: {}".format(path, exc.strerror or exc)) from None
    except yaml.YAMLError as exc:
        raise PatternError("{}: not valid YAML: {}".format(path, str(exc).splitlines()[0])) from None
    entries = data.get("patterns") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise PatternError("{}: expected a mapping with a list under 'patterns'".format(path))
    return [_pattern(path, number, entry) for number, entry in enumerate(entries, 1)]


def _pattern(path: str, number: int, entry: Any) -> Pattern:
    where = "{}: pattern {}".format(path, number)
    if not isinstance(entry, dict):
        raise PatternError("{}: expected a mapping".format(where))
    unknown = sorted(set(entry) - {"class", "match", "ascend", "kind", "repair_action", "code", "summary", "ignore"})
    name = entry.get("class")
    if not isinstance(name, str) or not _CLASS_NAME.fullmatch(name):
        raise PatternError("{}: class must be a lower-case name like heartbeat_lost, got {!r}".format(where, name))
    where = "{} ({})".format(where, name)
    if unknown:
        raise PatternError("{}: unknown keys {}".format(where, ", ".join(unknown)))
    try:
        regex = re.compile(str(entry.get("match", "")))
    except re.error as exc:
        raise PatternError("{}: match is not a regular expression: {}".format(where, exc)) from None
    if not entry.get("match"):
        raise PatternError("{}: match is required".format(where))
    kind, action, code = entry.get("kind"), entry.get("repair_action"), entry.get("code")
    ignore = entry.get("ignore", False)
    if not isinstance(ignore, bool):
        raise PatternError("{}: ignore must be true or false, got {!r}".format(where, ignore))
    if ignore:
        extra = sorted(key for key in ("kind", "repair_action", "code", "summary") if key in entry)
        if extra:
            raise PatternError("{}: an ignore pattern takes only class, match and ascend, not {}".format(
                where, ", ".join(extra)))
        return Pattern(fault_class=name, regex=regex, kind=None, repair_action=None, code=None, summary="",
                       ascend_only=entry.get("ascend", True) is not False, ignore=True)
    if kind is not None and kind not in KINDS:
        raise PatternError("{}: kind must be one of {}, got {!r}".format(where, ", ".join(KINDS), kind))
    if action is not None and action not in levels.REPAIR_ACTIONS:
        raise PatternError("{}: repair_action must be one of {}, got {!r}".format(
            where, ", ".join(levels.REPAIR_ACTIONS), action))
    if code is not None and catalogue.normalize(str(code)) is None:
        raise PatternError("{}: code must be a fault code like 80E01801, got {!r}".format(where, code))
    if kind is None and "code" not in regex.groupindex:
        raise PatternError("{}: kind is required unless the match has a (?P<code>...) group".format(where))
    return Pattern(fault_class=name, regex=regex, kind=kind, repair_action=action,
                   code=None if code is None else catalogue.normalize(str(code)),
                   summary=str(entry.get("summary") or name.replace("_", " ")),
                   ascend_only=entry.get("ascend", True) is not False)


def match_line(message: str, patterns: Sequence[Pattern]) -> Optional[LineFault]:
    """The fault a log message reports; None for a line that is not about a fault."""
    ascend = _ASCEND in message
    for pattern in patterns:
        if pattern.ascend_only and not ascend:
            continue
        found = pattern.regex.search(message)
        if found is None or (not pattern.ascend_only and not _ascend_code(found.groupdict().get("code"))):
            continue
        return None if pattern.ignore else _fault(pattern, found.groupdict(), message)
    if ascend and _ERROR_LINE.search(message):
        device = _ANY_DEVICE.search(message)
        return LineFault(GENERIC_CLASS, "transient", "none", None, "the NPU driver logged an error",
                         device=None if device is None else int(device.group(1)))
    return None


def _ascend_code(code: Optional[str]) -> bool:
    """Whether a code a line without the driver's tag names is an Ascend one (in the catalogue, or with the
    0x8 node/sensor layout): other drivers log "event_id=0x..." too. True where the match has no code."""
    if code is None:
        return True
    normal = catalogue.normalize(code)
    return normal is not None and (catalogue.known(normal) or bool(catalogue.decode(normal)))


def _fault(pattern: Pattern, groups: Dict[str, Optional[str]], message: str) -> LineFault:
    code = catalogue.normalize(groups["code"]) if groups.get("code") else pattern.code
    known = catalogue.lookup(code) if code else None
    level = known.level if known else None
    kind = pattern.kind or _KIND_OF_LEVEL.get(level or "", "transient")
    action = pattern.repair_action or (known.repair_action if known else None) or "none"
    fault_class = pattern.fault_class
    if groups.get("code") and known is not None and known.family:
        fault_class = "{}_{}".format(known.family, pattern.fault_class)  # e.g. memory_fault_event
    summary = pattern.summary
    if groups.get("code") and known is not None:
        summary = "{}: {}".format(summary, known.describe())
    device = groups.get("device")
    if device is None:  # no device group, or the line's wording took the other branch of the match
        any_device = _ANY_DEVICE.search(message)
        device = any_device.group(1) if any_device else None
    return LineFault(fault_class, kind, action, level, summary, device=None if device is None else int(device),
                     bus=groups["bus"].lower() if groups.get("bus") else None, code=code)
