"""The main table's fast path: a well-formed table read in a few C-speed passes.

table.py reads the table line by line, each row against the regex of its header row, with a state machine
for the truncated, elided and malformed tables real captures show. A daemon reads the same well-formed
table every few seconds, so this path reads the table's lines joined by newlines with the very same row
regexes (their whitespace and cell classes kept off the newline, which a single line never holds): one
match finds how far the chips (border lines and two rows each) go on, one findall takes every chip's
values, and each column is converted at once (`int`/`float` over the whole column, the careful converter
only for a column they refuse), then the records are built column-wise.

It only answers for a part (chips, processes) that is nothing but border lines and rows that fit and
convert: anything else (a row that does not fit, a bad value, a cut, plain text, a "No running processes"
row) returns None, and table.py reads that part the careful way, so its results, errors and `problems` stay
exactly its own. tests/sources/npusmi/test_table_fast.py checks the two agree on damaged captures.
"""

import math
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .common import NULL_TOKENS, NpuSmiParseError

PROCESS_MARK = "Process id"


# Inside one line of ASCII text (the fast path reads nothing else), `\s` can only be a space, a tab or
# \x1f: str.splitlines() has split at every other whitespace character that `\s` knows. Spelled out, the
# classes match exactly what they match within a line, never a newline, and run on a byte map.
_SINGLE_LINE = ((r"[^\s|/]", r"[^ \t\x1f\n|/]"), (r"[^\s|]", r"[^ \t\x1f\n|]"), (r"\s*", r"[ \t\x1f]*"),
                (r"\s+", r"[ \t\x1f]+"), ("[^|]", "[^|\\n]"))


def single_line(source: str) -> str:
    """A row regex's source, for ASCII lines joined by newlines: every class kept off the newline."""
    for careful, fast in _SINGLE_LINE:
        source = source.replace(careful, fast)
    if r"\s" in source:
        raise ValueError("row regex with a whitespace class the fast path does not know: " + source)
    return source


class Blocks:
    """The regex of one kind of block: its rows (each a whole line), then the border lines after them."""

    def __init__(self, row_sources: Sequence[str]):
        rows = r"\n".join(single_line(source) for source in row_sources)
        # group 1: the whole block, then the rows' groups
        self.block = re.compile(r"(" + rows + r"(?:\n|\Z)(?:\+[^\n]*(?:\n|\Z))*)")

    def read(self, text: str, start: int, end: int) -> Optional[List[tuple]]:
        """Each block's tokens where blocks tile text[start:end] exactly (findall's matches never overlap,
        so their lengths add up to the span only when no text lies between them), else None."""
        found = self.block.findall(text, start, end)
        if sum(len(groups[0]) for groups in found) != end - start:
            return None
        return [groups[1:] for groups in found]


def skip_borders(text: str, position: int) -> int:
    while text.startswith("+", position):
        end = text.find("\n", position)
        position = len(text) if end < 0 else end + 1
    return position


def chip_blocks(text: str, blocks: Blocks) -> Optional[Tuple[List[tuple], Optional[int]]]:
    """(each chip's tokens, index in `text`'s lines of the process header or None at the end of the text),
    or None where the chip part holds anything but chips and borders."""
    if not text.isascii():
        return None  # the careful path's `\s` also knows Unicode spaces
    mark = text.find(PROCESS_MARK)
    end = len(text) if mark < 0 else text.rfind("\n", 0, mark) + 1
    if mark >= 0 and not text.startswith("|", end):
        return None  # "Process id" in plain text or a border: the careful path knows what it is
    rows = blocks.read(text, skip_borders(text, 0), end)
    if rows is None:
        return None
    return rows, (None if mark < 0 else text.count("\n", 0, end))


def process_blocks(text: str, blocks: Blocks) -> Optional[List[tuple]]:
    """Each process row's tokens, or None unless every line of `text` is a process row or a border."""
    if not text.isascii():
        return None
    return blocks.read(text, skip_borders(text, 0), len(text))


# --- column-wise conversion: the careful converters' results, at C speed where they agree -----------------


def int_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    try:
        return list(map(int, tokens))  # refuses every null token, as a careful int would not read them
    except ValueError:
        return [careful(token) for token in tokens]


def float_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    try:
        values = list(map(float, tokens))
        if math.isfinite(sum(values)):  # nan and inf are refused by the careful converter
            return values
    except ValueError:
        pass
    return [careful(token) for token in tokens]


def text_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    return [None if token in NULL_TOKENS else token for token in map(str.strip, tokens)]


def any_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    return [careful(token) for token in tokens]


def records(record_type: type, defaults: Dict[str, object], fields: Sequence[str],
            converters: Sequence[Callable[[str], object]], column_kinds: Dict[object, Callable],
            rows: List[tuple], required: Sequence[str], aliases: Sequence[Tuple[str, str]] = ()) -> list:
    """The rows as records, built column-wise. A field named twice keeps its last column, as a dict update
    would; `aliases` (target, source) copy a column; a None in a `required` column raises
    NpuSmiParseError (the careful path says which row)."""
    if not rows:
        return []
    count = len(rows)
    columns: Dict[str, list] = {}
    for field, convert, tokens in zip(fields, converters, zip(*rows)):
        columns[field] = column_kinds.get(convert, any_column)(tokens, convert)
    for target, source in aliases:
        if source in columns:
            columns[target] = columns[source]
    for field in required:
        if None in columns.get(field, (defaults[field],)):
            raise NpuSmiParseError("a required id is missing")
    ordered = [columns[name] if name in columns else [default] * count for name, default in defaults.items()]
    return list(map(record_type, *ordered))
