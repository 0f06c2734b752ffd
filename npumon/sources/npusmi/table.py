"""Parse the main `npu-smi info` table and the process table printed below it.

One module on purpose (over 400 lines): every layout shares the header-to-regex reading and the cell
helpers, and splitting it by product would scatter the one place that knows the table's shape.

Pure text -> records, no I/O. Each chip takes two physical rows, and which columns they hold depends
on the product and the npu-smi version (FORMATS.md section 3). Rather than guess the layout from the
product name or from column offsets, we read the header rows and turn each into a regex for its data
rows: cells split on `|`, values on whitespace, a `used / total` pair is one value. A data row that
does not fit its header is malformed and raises NpuSmiParseError.

Truncated output (a capture cut mid-row, an excerpt gap, an author's "..." elision) yields what was
read: a row that stops early is dropped, together with the rest of its chip, when end of text or a
plain-text line follows it. The same row followed by more table lines is an error instead, because
npu-smi itself never prints a half row.

With `skip_bad_rows` (the daemon reading a live answer), a malformed chip is left out instead and named
in `MainTable.problems`: one bad row loses one chip, not the host. Chips are separated by border lines,
so reading starts again at the next one. Such a chip is still on the host, only unreadable: its bus id, where
its rows still show one, is kept in `MainTable.unreadable_chips`, so that the chip count does not take it for
a chip gone from the table.
"""

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

from ...model import MIB
from . import table_fast
from .common import NULL_TOKENS, NpuSmiParseError, to_float, to_int

# Header names that contain a space; every other header name is one whitespace-free word.
_HEADER_NAME = re.compile(r"NPU ID|NPU Util\(%\)|\S+")
_TITLE_TOOL = re.compile(r"npu-smi\s+(\S+)")
_TITLE_DRIVER = re.compile(r"Version:\s*(\S+)")
_NO_PROCESSES_TEXT = "No running processes found in NPU"
_NO_PROCESSES = re.compile(r"\|\s*" + _NO_PROCESSES_TEXT + r"\b")
_BUS_ID_SOURCE = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_BUS_ID = re.compile(_BUS_ID_SOURCE + r"\Z")
_BUS_ID_ANYWHERE = re.compile(r"(?<![\w:.])" + _BUS_ID_SOURCE + r"(?![\w:.])")

# Value patterns for the row regexes; a capturing group per field read.
_ONE = r"([^\s|]+)"
_PAIR = r"([^\s|/]+)\s*/\s*([^\s|/]+)"  # "3338 / 65536", "10568/ 65536", "NA / NA"
_ONE_OR_PAIR_SKIPPED = r"(?:[^\s|/]+\s*/\s*[^\s|/]+|[^\s|]+)"  # a column we do not know
# The fast path's bus id: a token _bus_id takes (a bus id or a null token), so the row regex checks the column
_BUS_ID_OR_NULL = r"({}|{})".format(_BUS_ID_SOURCE, "|".join(
    re.escape(token) for token in sorted(NULL_TOKENS, key=lambda token: (-len(token), token)) if token))
_WHOLE_CELL = r"([^|]*)"  # process names may be empty or contain spaces; _text strips the padding
_CELL_SKIPPED = r"[^|]*"

# Chip-table header name -> the TableChip fields its value fills (a pair fills used and total).
_CHIP_COLUMNS = {
    "NPU": ("npu",),
    "NPU ID": ("npu",),
    "Name": ("name",),
    "Health": ("health",),
    "Power(W)": ("power_watts",),
    "Temp(C)": ("temperature_celsius",),
    "Hugepages-Usage(page)": ("hugepages_used", "hugepages_total"),
    "Chip": ("chip",),
    "Device": ("device_id",),
    "Phy-ID": ("phy_id",),
    "Bus-Id": ("bus_id",),
    "AICore(%)": ("aicore_percent",),
    "NPU Util(%)": ("npu_util_percent",),
    "Memory-Usage(MB)": ("memory_used_mb", "memory_total_mb"),
    "HBM-Usage(MB)": ("hbm_used_mb", "hbm_total_mb"),
}

# Process-table header: names in the first cell ("NPU  Chip", on 950 "NPU ID"), then one column
# per cell, named by the whole cell because these names contain spaces.
_PROCESS_ID_COLUMNS = {"NPU": "npu", "NPU ID": "npu", "Chip": "chip"}
_PROCESS_COLUMNS = {
    "Process id": "pid",
    "Process name": "name",
    "Process memory(MB)": "memory_mb",
    "Process id in container": "container_pid",
}


# TableChip and TableProcess are plain (not frozen) dataclasses on purpose: a frozen dataclass sets each
# field through object.__setattr__, which cost a fifth of the time to parse a busy 16-chip table.
@dataclass
class TableChip:
    """One chip as the main table prints it, in the table's own units (W, C, %, MiB, pages)."""

    npu: int  # card id as printed (24, 2144, 32896 are real)
    chip: int  # index in the card (950: always 0)
    name: Optional[str] = None
    health: Optional[str] = None  # as printed: OK/Warning/Alarm/Critical/UNKNOWN
    device_id: Optional[int] = None  # the "Device" column (310 family), logical id
    phy_id: Optional[int] = None  # the "Phy-ID" column (A3)
    bus_id: Optional[str] = None
    power_watts: Optional[float] = None
    temperature_celsius: Optional[float] = None
    hugepages_used: Optional[int] = None
    hugepages_total: Optional[int] = None
    aicore_percent: Optional[float] = None  # AICore(%) or, on 950, NPU Util(%)
    memory_used_mb: Optional[int] = None
    memory_total_mb: Optional[int] = None
    hbm_used_mb: Optional[int] = None
    hbm_total_mb: Optional[int] = None
    # The "NPU Util(%)" column (950 only), kept apart so values() knows the table had one.
    npu_util_percent: Optional[float] = None

    def values(self) -> dict:
        """This chip under `model.ChipSample` field names, in base units (bytes, ratios 0..1)."""
        values = {
            "name": self.name,
            "health": self.health,
            "bus_id": self.bus_id,
            "device_id": self.device_id,
            "phy_id": self.phy_id,
            "temperature_celsius": self.temperature_celsius,
            "power_watts": self.power_watts,
            "aicore_ratio": _ratio(self.aicore_percent),
            # 910B, A3 and 950 print DDR as "0 / 0": not a reading, so null per the contract
            "memory_used_bytes": _bytes(self.memory_used_mb) if self.memory_total_mb else None,
            "memory_total_bytes": _bytes(self.memory_total_mb) if self.memory_total_mb else None,
            "hbm_used_bytes": _bytes(self.hbm_used_mb),
            "hbm_total_bytes": _bytes(self.hbm_total_mb),
            "hugepages_used": self.hugepages_used,
            "hugepages_total": self.hugepages_total,
        }
        # Only a table with an NPU Util column knows npu_util_ratio; leaving the key out elsewhere
        # keeps a value from `-t usages` intact whichever of the two is merged last.
        if self.npu_util_percent is not None:
            values["npu_util_ratio"] = _ratio(self.npu_util_percent)
        return values


@dataclass
class TableProcess:
    npu: int
    chip: Optional[int]  # None where the table has no chip column (950)
    pid: int
    name: Optional[str]  # None when printed empty (seen on A3)
    memory_mb: Optional[int]
    container_pid: Optional[int] = None  # 26.x "Process id in container", None for NA / absent


@dataclass(frozen=True)
class MainTable:
    tool_version: Optional[str]  # "npu-smi 23.0.rc3" -> "23.0.rc3"
    driver_version: Optional[str]  # "Version: 23.0.rc2.3" -> "23.0.rc2.3"
    chips: Tuple[TableChip, ...]
    processes: Tuple[TableProcess, ...]
    warnings: Tuple[str, ...]  # lines npu-smi printed starting with "[WARNING]"
    problems: Tuple[str, ...] = ()  # with skip_bad_rows: why each chip or process row left out was left out
    # with skip_bad_rows: one entry per chip left out, the bus id its rows still show (None where they show none)
    unreadable_chips: Tuple[Optional[str], ...] = ()


def parse_info(text: str, skip_bad_rows: bool = False) -> MainTable:
    """Read `npu-smi info` output. Raises NpuSmiParseError, and nothing else, when the output holds
    no main table or (unless `skip_bad_rows`) a row in it is malformed. With `skip_bad_rows` a malformed
    chip or process row is left out and its problem listed in `problems`, and so is a chip cut short."""
    if not isinstance(text, str):
        raise NpuSmiParseError("expected npu-smi output as text, got {}".format(type(text).__name__))
    clean = _read_clean(text)
    if clean is not None:
        return clean
    # Blank lines carry nothing (copies from web pages are often double-spaced); dropping them
    # here means everything below sees table lines and plain-text lines only.
    lines = list(filter(None, map(str.strip, text.splitlines())))
    header_at = _find_chip_header(lines)
    if header_at is None:
        raise NpuSmiParseError("no npu-smi main table in the output: {}".format(_quote(lines)))
    row1, row2 = _chip_layouts(lines, header_at)
    problems: Optional[List[str]] = [] if skip_bad_rows else None
    unreadable: List[Optional[str]] = []
    chips, process_header_at, processes = _read_fast(lines, header_at + 2)
    if chips is None:
        chips, process_header_at = _read_chips(lines, header_at + 2, row1, row2, problems, unreadable)
    if processes is None:
        processes = [] if process_header_at is None else _read_processes(lines, process_header_at, problems)
    tool_version, driver_version = _title_versions(lines[:header_at])
    return MainTable(
        tool_version=tool_version,
        driver_version=driver_version,
        chips=tuple(chips),
        processes=tuple(processes),
        warnings=_warnings(text, lines),
        problems=tuple(problems or ()),
        unreadable_chips=tuple(unreadable),
    )


# --- finding the parts ------------------------------------------------------------------------


def _is_closed_row(line: str) -> bool:
    return len(line) > 1 and line[0] == "|" and line[-1] == "|"


def _is_cut(lines: List[str], index: int) -> bool:
    """True when line `index` is the last table line before end of text or plain text, i.e. where
    a capture was truncated or an excerpt gap begins."""
    following = index + 1
    return following == len(lines) or not lines[following].startswith(("|", "+"))


def _cells(row: str) -> List[str]:
    """'| a | b |' -> [' a ', ' b ']"""
    return row[1:-1].split("|")


def _find_chip_header(lines: List[str]) -> Optional[int]:
    for index, line in enumerate(lines):
        if line.startswith("|") and "Health" in line and _is_chip_header(line):
            return index
    return None


# Cached by line, as the layouts are: a daemon reads the same header and title rows every poll.
@functools.lru_cache(maxsize=64)
def _is_chip_header(line: str) -> bool:
    text = line.replace("|", " ")
    words = text.split()
    # Enough, and quicker than the names: a whole word "Health" is always a name, and so is a whole word
    # "NPU" or the "NPU ID" it starts, unless it starts an "NPU Util(%)".
    if "Health" in words and "NPU" in words and "NPU Util(%)" not in text:
        return True
    names = _HEADER_NAME.findall(text)
    return "Health" in names and ("NPU" in names or "NPU ID" in names)


def _title_versions(lines: List[str]) -> Tuple[Optional[str], Optional[str]]:
    for line in lines:
        if line.startswith("|") and "npu-smi" in line:
            return _title_line_versions(line)
    return None, None


@functools.lru_cache(maxsize=64)
def _title_line_versions(line: str) -> Tuple[Optional[str], Optional[str]]:
    tool = _TITLE_TOOL.search(line)
    driver = _TITLE_DRIVER.search(line)
    return (tool.group(1) if tool else None, driver.group(1) if driver else None)


def _warnings(text: str, lines: List[str]) -> Tuple[str, ...]:
    if "[" not in text or "[WARNING]" not in text:  # the usual case; a lone "[" is found by memchr
        return ()
    return tuple(line for line in lines if line.startswith("[WARNING]"))


def _quote(lines: List[str]) -> str:
    """A short quote of unreadable output for error messages (npu-smi's own error line, usually)."""
    return _shown(" / ".join(lines)) if lines else "it is empty"


def _shown(text: str) -> str:
    """`text` quoted for an error message, clipped so a runaway line cannot flood the logs."""
    return repr(text if len(text) <= 200 else text[:197] + "...")


# --- header rows -> row regexes ---------------------------------------------------------------


class _RowLayout:
    """A header row turned into a regex for its data rows, and per regex group the field it fills
    and the function that converts the matched text."""

    def __init__(self, cell_patterns: List[str], fields: List[str], whole_cells: Tuple[str, ...] = (),
                 fast_cell_patterns: Optional[List[str]] = None):
        self.source = r"\|" + r"\|".join(cell_patterns) + r"\|"
        self.pattern = re.compile(self.source + r"\Z")
        # table_fast.py's row regex: the same, but for a bus id column, which takes only what _bus_id takes
        self.fast_source = self.source if fast_cell_patterns is None else r"\|" + r"\|".join(fast_cell_patterns) + r"\|"
        self.fields = tuple(fields)
        # a field in `whole_cells` is read from a _WHOLE_CELL group, padding and all
        self.converters = tuple(_text if field in whole_cells else _CONVERTERS[field] for field in fields)
        # The builtin int for integer columns: faster than _int, and it raises ValueError on all
        # that _int has to look at (NA, '-', hex, garbage); read() then falls back to _int.
        self.fast_converters = tuple(int if convert is _int else convert for convert in self.converters)

    def read(self, line: str) -> Optional[List[object]]:
        """The row's values in the order of `fields`, or None when the row does not fit this header."""
        match = self.pattern.match(line)
        if match is None:
            return None
        tokens = match.groups()
        try:
            return [convert(token) for convert, token in zip(self.fast_converters, tokens)]
        except ValueError:
            pass  # NA, '-', hex or a bad value: convert again, the careful way
        try:
            return [convert(token) for convert, token in zip(self.converters, tokens)]
        except NpuSmiParseError as error:
            # The shared helpers quote the whole value; clip it like the row.
            message = str(error) if len(str(error)) <= 200 else str(error)[:197] + "..."
            raise NpuSmiParseError("{} in npu-smi row {}".format(message, _shown(line))) from None


def _cell(value_patterns: List[str]) -> str:
    """The pattern of one cell: its values separated by whitespace, padded on both sides."""
    if not value_patterns:
        return r"\s*"  # an empty cell (950's row 2 under "NPU ID" and "Name")
    return r"\s*" + r"\s+".join(value_patterns) + r"\s*"


# Layouts are cached by header text: a daemon parses the same header every poll.
@functools.lru_cache(maxsize=64)
def _chip_layout(header: str) -> _RowLayout:
    cell_patterns, fast_cell_patterns, fields = [], [], []
    for cell in _cells(header):
        value_patterns, fast_value_patterns = [], []
        for name in _HEADER_NAME.findall(cell):
            column_fields = _CHIP_COLUMNS.get(name, ())
            if not column_fields:
                value_patterns.append(_ONE_OR_PAIR_SKIPPED)  # still matched, so the row fits
            else:
                value_patterns.append(_PAIR if len(column_fields) == 2 else _ONE)
            fast_value_patterns.append(_BUS_ID_OR_NULL if column_fields == ("bus_id",) else value_patterns[-1])
            fields.extend(column_fields)
        cell_patterns.append(_cell(value_patterns))
        fast_cell_patterns.append(_cell(fast_value_patterns))
    return _RowLayout(cell_patterns, fields, fast_cell_patterns=fast_cell_patterns)


@functools.lru_cache(maxsize=64)
def _process_layout(header: str) -> _RowLayout:
    first_cell, *other_cells = _cells(header)
    id_patterns, fields, whole_cells = [], [], []
    for name in _HEADER_NAME.findall(first_cell):
        field = _PROCESS_ID_COLUMNS.get(name)
        id_patterns.append(_ONE if field else r"[^\s|]+")
        fields.extend([field] if field else [])
    cell_patterns = [_cell(id_patterns)]
    for cell in other_cells:
        field = _PROCESS_COLUMNS.get(cell.strip())
        if field is None:
            cell_patterns.append(_CELL_SKIPPED)
        else:
            cell_patterns.append(_WHOLE_CELL if field == "name" else _cell([_ONE]))
            fields.append(field)
            whole_cells.extend([field] if field == "name" else [])
    return _RowLayout(cell_patterns, fields, tuple(whole_cells))


def _chip_layouts(lines: List[str], header_at: int) -> Tuple[_RowLayout, _RowLayout]:
    header1 = lines[header_at]
    header2 = lines[header_at + 1] if header_at + 1 < len(lines) else ""
    # Both header rows have the same cells in every layout; fewer means the second was cut short.
    if not (_is_closed_row(header1) and _is_closed_row(header2) and header1.count("|") == header2.count("|")):
        raise NpuSmiParseError("npu-smi main table header is incomplete: {}".format(_shown(header2 or header1)))
    row1, row2 = _chip_layout(header1), _chip_layout(header2)
    if "npu" not in row1.fields:
        raise NpuSmiParseError("npu-smi main table header has no NPU column: {}".format(_shown(header1)))
    return row1, row2


# --- data rows: the fast path (table_fast.py), else line by line ---------------------------------


class _ChipPair:
    """Both chip rows of a header as one block for the fast path: its regexes and how its records are built."""

    def __init__(self, row1: _RowLayout, row2: _RowLayout):
        self.blocks = table_fast.Blocks([row1.fast_source, row2.fast_source])
        # the fast regex has checked the bus ids (_BUS_ID_OR_NULL): what is left is _token_text's
        converters = tuple(_token_text if convert is _bus_id else convert
                           for convert in row1.converters + row2.converters)
        self.records = table_fast.Records(TableChip, _CHIP_DEFAULTS, row1.fields + row2.fields, converters,
                                          _COLUMN_KINDS, ("npu", "chip"), (("aicore_percent", "npu_util_percent"),))


@functools.lru_cache(maxsize=64)
def _chip_pair(header1: str, header2: str) -> _ChipPair:
    return _ChipPair(_chip_layout(header1), _chip_layout(header2))


class _ProcessRows:
    """A process-table header for the fast path: its row regex and how its records are built, or
    `readable` False where the careful reader has an error to raise."""

    def __init__(self, layout: _RowLayout):
        self.readable = "npu" in layout.fields and "pid" in layout.fields
        self.blocks = table_fast.Blocks([layout.source])
        self.idle_blocks = table_fast.Blocks([layout.source], _NO_PROCESSES.pattern)  # for a table with an idle NPU
        required = ("npu", "pid", "chip") if "chip" in layout.fields else ("npu", "pid")
        self.records = table_fast.Records(TableProcess, _PROCESS_DEFAULTS, layout.fields, layout.converters,
                                          _COLUMN_KINDS, required)


@functools.lru_cache(maxsize=64)
def _process_rows(header: str) -> _ProcessRows:
    return _ProcessRows(_process_layout(header))


def _read_fast(lines: List[str], start: int) -> Tuple[Optional[List[TableChip]], Optional[int],
                                                       Optional[List[TableProcess]]]:
    """(chips, process header index, processes) where table_fast.py can read them; None for the chips (and
    then all three) or for the processes where it leaves them to the careful readers below. The header index
    is only worked out for them: where the processes were read it is None."""
    pair = _chip_pair(lines[start - 2], lines[start - 1])
    text = "\n".join(lines[start:])  # the chips and the processes: one text, read at offsets
    chips, header_offset, processes = _read_parts(text, 0, pair, table_fast.spaces_only(text))
    if chips is None:
        return None, None, None
    if processes is None:
        return chips, start + text.count("\n", 0, header_offset), None
    return chips, None, processes


def _read_parts(text: str, start: int, pair: _ChipPair,
                spaces: bool) -> Tuple[Optional[List[TableChip]], int, Optional[List[TableProcess]]]:
    """(chips, offset of the process header's line or -1, processes) from text[start:], a text of lines
    joined by newlines; None for the chips or the processes where table_fast.py leaves them to the careful
    readers."""
    try:
        found = table_fast.chip_blocks(text, pair.blocks, start, spaces)
        if found is None:
            return None, -1, None
        rows, header_offset = found
        chips = pair.records.build(rows)
    except NpuSmiParseError:
        return None, -1, None
    if header_offset < 0:
        return chips, -1, []
    header_end = text.find("\n", header_offset)
    header = text[header_offset:] if header_end < 0 else text[header_offset:header_end]
    process_rows = _process_rows(header) if _is_closed_row(header) else None
    if process_rows is not None and process_rows.readable:
        rows_start = len(text) if header_end < 0 else header_end + 1
        idle = table_fast.find_mark(text, _NO_PROCESSES_TEXT, rows_start) >= 0
        try:
            rows = table_fast.process_blocks(text, process_rows.idle_blocks if idle else process_rows.blocks,
                                             rows_start, spaces)
            if rows is not None:
                return chips, header_offset, process_rows.records.build(rows)
        except NpuSmiParseError:
            pass
    return chips, header_offset, None


def _spaces_and_newlines_only(text: str) -> bool:
    """For an ASCII text: True when its lines are its newline-separated pieces, padded with spaces only
    (splitlines() also splits at \\r, \\x0b, \\x0c and \\x1c-\\x1e; table_fast.spaces_only rules out the tab and
    \\x1f that strip() would take too). One memchr each."""
    return ("\r" not in text and "\x0b" not in text and "\x0c" not in text and "\x1c" not in text
            and "\x1d" not in text and "\x1e" not in text and table_fast.spaces_only(text))


def _read_clean(text: str) -> Optional[MainTable]:
    """parse_info's answer for a clean text, read in place: the lines from the header on already stripped,
    not a blank one among them, the parts all table_fast.py's (no warning line). None for any other text,
    which parse_info reads through its lines. The rows are matched in `text` itself, so a padded row, an
    indented border or a blank line makes them not tile their span and this answers None: where it answers,
    the rows are exactly those of the lines joined by newlines that _read_fast would read (a border's trailing
    spaces, which strip() would take, are read past alike)."""
    if not text.isascii() or not _spaces_and_newlines_only(text):
        return None
    if "[" in text and "[WARNING]" in text:
        return None
    header = _find_clean_header(text)
    if header is None:
        return None
    header_start, header1, header2, chips_start = header
    pair = _clean_chip_pair(header1, header2)
    if pair is None:
        return None  # parse_info raises, with its own message
    chips, _, processes = _read_parts(text, chips_start, pair, True)
    if chips is None or processes is None:
        return None
    tool_version, driver_version = _clean_title_versions(text, header_start)
    return MainTable(tool_version=tool_version, driver_version=driver_version, chips=tuple(chips),
                     processes=tuple(processes), warnings=(), problems=())


def _find_clean_header(text: str) -> Optional[Tuple[int, str, str, int]]:
    """(offset of the chip header's line, both header rows, offset of the line after them) as
    _find_chip_header would find them in `text`'s lines (only a line with "Health" can be the header), or
    None where there is none or either row is padded or blank."""
    position = text.find("Health")
    while position >= 0:
        line_start = text.rfind("\n", 0, position) + 1
        line_end = text.find("\n", position)
        if line_end < 0:
            return None  # no second header row
        line = text[line_start:line_end].strip()
        if line.startswith("|") and _is_chip_header(line):
            second_end = text.find("\n", line_end + 1)
            second = text[line_end + 1:] if second_end < 0 else text[line_end + 1:second_end]
            if len(line) != line_end - line_start or not second or second != second.strip():
                return None  # padded header rows: the rows below will be padded too, and not read in place
            return line_start, line, second, len(text) if second_end < 0 else second_end + 1
        position = text.find("Health", line_end)
    return None


@functools.lru_cache(maxsize=64)
def _clean_chip_pair(header1: str, header2: str) -> Optional[_ChipPair]:
    """_chip_pair for header rows _chip_layouts takes, None for those it raises on."""
    try:
        _chip_layouts([header1, header2], 0)
    except NpuSmiParseError:
        return None
    return _chip_pair(header1, header2)


def _clean_title_versions(text: str, end: int) -> Tuple[Optional[str], Optional[str]]:
    """_title_versions of the lines of text[:end] (which ends at a line's start), found in place."""
    position = text.find("npu-smi", 0, end)
    while position >= 0:
        line_start = text.rfind("\n", 0, position) + 1
        line_end = text.find("\n", position, end)
        line = text[line_start:line_end].strip()
        if line.startswith("|"):
            return _title_line_versions(line)
        position = text.find("npu-smi", line_end, end)
    return None, None


def _read_chips(lines: List[str], start: int, row1: _RowLayout, row2: _RowLayout,
                problems: Optional[List[str]] = None,
                unreadable: Optional[List[Optional[str]]] = None) -> Tuple[List[TableChip], Optional[int]]:
    """The chips from line `start` on, and the index of the process-table header if there is one. With a
    `problems` list a malformed chip is left out and its problem appended (and to `unreadable`, the bus id
    its rows show); without one it raises."""
    chips = []
    fields = row1.fields + row2.fields
    first_row: Optional[List[object]] = None  # a chip's first row, waiting for its second
    first_line = ""
    first_index = start
    skipping = False  # inside a malformed chip: its lines are passed over up to the next border

    def bad(problem: str, line: str, index: int) -> None:
        nonlocal first_row, skipping
        if problems is None:
            raise NpuSmiParseError(problem)
        chip_start = first_index if first_row is not None else index
        problems.append(_chip_problem(problem, first_line if first_row is not None else line))
        if unreadable is not None:
            unreadable.append(_bus_id_in_rows(lines, chip_start))
        first_row, skipping = None, True

    for index in range(start, len(lines)):
        line = lines[index]
        if line.startswith("|"):
            if "Process id" in line and (skipping or first_row is None):
                return chips, index
            if skipping:
                continue
            try:
                values = (row1 if first_row is None else row2).read(line)
            except NpuSmiParseError as error:
                bad(str(error), line, index)
                continue
            if values is None:
                if "Process id" in line:
                    return chips, index
                if _is_cut(lines, index) and problems is None:
                    first_row = None  # truncated: drop this chip, keep the complete ones before it
                    continue
                bad("npu-smi main table row does not fit its header: {}".format(_shown(line)), line, index)
                continue
            if first_row is None:
                first_row, first_line, first_index = values, line, index
                continue
            try:
                chips.append(_chip(fields, first_row + values, line))
            except NpuSmiParseError as error:
                bad(str(error), line, index)
                continue
            first_row = None
        elif line.startswith("+"):
            if first_row is not None:
                bad("npu-smi main table: a chip has no second row before {}".format(_shown(line)), line, index)
            skipping = False
        else:
            if first_row is not None and problems is not None:
                bad("npu-smi main table: a chip's second row is missing, {} in its place".format(_shown(line)),
                    line, index)
            first_row = None  # plain text (elision, excerpt gap) replaced this chip's second row
    if first_row is not None and problems is not None:
        bad("npu-smi main table: the output ends after a chip's first row", first_line, first_index)
    return chips, None


def _bus_id_in_rows(lines: List[str], start: int) -> Optional[str]:
    """The bus id in a chip's rows (its two table lines from `start`), or None where they show none: what
    still tells which chip an unreadable row is."""
    for line in lines[start:start + 2]:
        if not line.startswith("|"):
            break
        match = _BUS_ID_ANYWHERE.search(line)
        if match is not None:
            return match.group(0)
    return None


def _chip_problem(problem: str, first_line: str) -> str:
    """The problem, prefixed with the card id when the chip's first cell still shows one."""
    cells = first_line.split("|")
    words = cells[1].split() if len(cells) > 2 else []
    card = words[0] if words and words[0].isdigit() else None
    return problem if card is None else "npu {}: {}".format(card, problem)


def _chip(fields: Tuple[str, ...], row_values: List[object], line: str) -> TableChip:
    values = dict(_CHIP_DEFAULTS)
    values.update(zip(fields, row_values))
    if values["npu"] is None or values["chip"] is None:
        raise NpuSmiParseError("npu-smi main table chip without NPU or Chip id near {}".format(_shown(line)))
    if "npu_util_percent" in fields:
        values["aicore_percent"] = values["npu_util_percent"]
    return TableChip(**values)


def _read_processes(lines: List[str], header_at: int, problems: Optional[List[str]] = None) -> List[TableProcess]:
    """The process rows; with a `problems` list a malformed row is left out and its problem appended."""
    header = lines[header_at]
    if not _is_closed_row(header):
        return []  # the capture stops inside the process-table header
    layout = _process_layout(header)
    if "npu" not in layout.fields or "pid" not in layout.fields:
        raise NpuSmiParseError("npu-smi process table header lacks NPU or Process id: {}".format(_shown(header)))
    processes = []
    for index in range(header_at + 1, len(lines)):
        line = lines[index]
        if not line.startswith("|"):
            continue
        try:
            values = layout.read(line)
            if values is None:
                if _NO_PROCESSES.match(line) or _is_cut(lines, index):
                    continue  # an idle NPU, or a row cut off by truncation
                raise NpuSmiParseError("npu-smi process row does not fit its header: {}".format(_shown(line)))
            process = _process(layout, values, line)
        except NpuSmiParseError as error:
            if problems is None:
                raise
            problems.append(str(error))
            continue
        processes.append(process)
    return processes


def _process(layout: _RowLayout, row_values: List[object], line: str) -> TableProcess:
    process = dict(_PROCESS_DEFAULTS)
    process.update(zip(layout.fields, row_values))
    if process["npu"] is None or process["pid"] is None or ("chip" in layout.fields and process["chip"] is None):
        raise NpuSmiParseError("npu-smi process row without NPU, Chip or Process id: {}".format(_shown(line)))
    return TableProcess(**process)


# Every field with its default: 950 has no Chip column (one chip per card, index 0), other columns
# exist only in some layouts.
_CHIP_DEFAULTS: Dict[str, object] = dict({field.name: None for field in dataclasses.fields(TableChip)}, chip=0)
_PROCESS_DEFAULTS: Dict[str, object] = {field.name: None for field in dataclasses.fields(TableProcess)}


# --- value converters (tokens come from the row regexes: stripped, except whole-cell text) ------


def _int(token: str) -> Optional[int]:
    if token in NULL_TOKENS:
        return None
    try:
        return int(token)
    except ValueError:
        return to_int(token)  # hex, or raises with the shared wording


def _float(token: str) -> Optional[float]:
    if token in NULL_TOKENS:
        return None
    try:
        value = float(token)
    except ValueError:
        return to_float(token)  # raises with the shared wording
    return value if math.isfinite(value) else to_float(token)  # nan, inf: raises likewise


def _text(token: str) -> Optional[str]:
    """A whole cell (_WHOLE_CELL), padding and all."""
    token = token.strip()
    return None if token in NULL_TOKENS else token


def _token_text(token: str) -> Optional[str]:
    """A `[^\\s|]+` token: no padding to strip."""
    return None if token in NULL_TOKENS else token


def _bus_id(token: str) -> Optional[str]:
    if token in NULL_TOKENS:
        return None
    if not _BUS_ID.match(token):
        raise NpuSmiParseError("expected a PCIe bus id like 0000:C1:00.0, got {}".format(_shown(token)))
    return token


_CONVERTERS: Dict[str, Callable[[str], object]] = {
    "npu": _int,
    "chip": _int,
    "name": _token_text,
    "health": _token_text,
    "device_id": _int,
    "phy_id": _int,
    "bus_id": _bus_id,
    "power_watts": _float,
    "temperature_celsius": _float,
    "hugepages_used": _int,
    "hugepages_total": _int,
    "aicore_percent": _float,
    "npu_util_percent": _float,
    "memory_used_mb": _int,
    "memory_total_mb": _int,
    "hbm_used_mb": _int,
    "hbm_total_mb": _int,
    "pid": _int,
    "memory_mb": _int,
    "container_pid": _int,
}


# How the fast path converts a whole column of each converter (table_fast.py); others: token by token.
_COLUMN_KINDS: Dict[object, Callable] = {_int: table_fast.int_column, _float: table_fast.float_column,
                                         _text: table_fast.text_column, _token_text: table_fast.token_text_column}


def _ratio(percent: Optional[float]) -> Optional[float]:
    return None if percent is None else percent / 100.0


def _bytes(mib: Optional[int]) -> Optional[int]:
    return None if mib is None else mib * MIB
