"""The main table's fast path: a well-formed table read in a few C-speed passes.

table.py reads the table line by line, each row against the regex of its header row, with a state machine
for the truncated, elided and malformed tables real captures show. A daemon reads a well-formed table every
few seconds, so this path reads the table's lines joined by newlines (one text for the chips and the
processes; table.py hands it npu-smi's answer itself where that already is such a text) with the very same
row regexes (their whitespace and cell classes kept off the newline, which a single line never holds, and
spelled as literal spaces where the text holds no other whitespace): one findall takes every chip's values,
another every process's, and each column is converted at once (`int`/`float` over the whole column, or a
constant table for small whole numbers; the careful converter only for a column they refuse), then the
records are built column-wise.

It only answers for a part (chips, processes) that is nothing but border lines and rows that fit and
convert (and, for the processes, "No running processes found in NPU" rows): anything else (a row that does
not fit, a bad value, a cut, plain text) returns None, and table.py reads that part the careful way, so its
results, errors and `problems` stay exactly its own. tests/sources/npusmi/test_table_fast.py checks they
agree on damaged captures.
"""

import math
import operator
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from .common import NULL_TOKENS, NpuSmiParseError

PROCESS_MARK = "Process id"


# Inside one line of ASCII text (the fast path reads nothing else), `\s` can only be a space, a tab or
# \x1f: str.splitlines() has split at every other whitespace character that `\s` knows. Spelled out, the
# classes match exactly what they match within a line, never a newline, and run on a byte map.
_SINGLE_LINE = ((r"[^\s|/]", r"[^ \t\x1f\n|/]"), (r"[^\s|]", r"[^ \t\x1f\n|]"), (r"\s*", r"[ \t\x1f]*"),
                (r"\s+", r"[ \t\x1f]+"), ("[^|]", "[^|\\n]"))
# In a text that holds no tab and no \x1f (npu-smi pads with spaces only), `\s` within a line is a space:
# a repeated literal is the regex engine's quickest loop, a fifth faster on the whole table than a class.
_SPACES_ONLY = ((r"[^\s|/]", r"[^ \n|/]"), (r"[^\s|]", r"[^ \n|]"), (r"\s*", " *"), (r"\s+", " +"),
                ("[^|]", "[^|\\n]"))


def single_line(source: str, spaces_only: bool = False) -> str:
    """A row regex's source, for ASCII lines joined by newlines: every class kept off the newline; with
    `spaces_only`, for such lines that hold no tab and no \\x1f."""
    for careful, fast in _SPACES_ONLY if spaces_only else _SINGLE_LINE:
        source = source.replace(careful, fast)
    if r"\s" in source:
        raise ValueError("row regex with a whitespace class the fast path does not know: " + source)
    return source


def spaces_only(text: str) -> bool:
    """True when `text`'s only whitespace within a line is the space, so Blocks may read it spaces-only."""
    return "\t" not in text and "\x1f" not in text


class Blocks:
    """The regex of one kind of block: its rows (each a whole line), then the border lines after them; one
    for any ASCII text and one for a text of spaces only (see spaces_only). With `skipped_row`, a line that
    starts so may stand in a block's rows' place and is passed over (the process table's "No running
    processes found in NPU 0"), tried only where the rows do not fit, as the careful reader does."""

    def __init__(self, row_sources: Sequence[str], skipped_row: Optional[str] = None):
        self.skips = skipped_row is not None
        self.any_space, self.space = (self._compile(row_sources, skipped_row, spaces) for spaces in (False, True))

    @staticmethod
    def _compile(row_sources: Sequence[str], skipped_row: Optional[str], spaces: bool):
        rows = r"\n".join(single_line(source, spaces) for source in row_sources)
        if skipped_row is not None:  # its group, the last, marks a line passed over
            rows = r"(?:" + rows + r"|(" + single_line(skipped_row, spaces) + r")[^\n]*)"
        # group 1: the whole block, then the rows' groups
        return re.compile(r"(" + rows + r"(?:\n|\Z)(?:\+[^\n]*(?:\n|\Z))*)")

    def read(self, text: str, start: int, end: int, spaces: bool) -> Optional[List[tuple]]:
        """Each block's groups (the whole block, then its tokens) where blocks tile text[start:end] exactly
        (findall's matches never overlap, so their lengths add up to the span only when no text lies between
        them), else None. Lines passed over are left out."""
        found = (self.space if spaces else self.any_space).findall(text, start, end)
        if sum(map(len, map(_FIRST, found))) != end - start:
            return None
        if self.skips and any(map(_LAST, found)):
            return [groups for groups in found if not groups[-1]]
        return found


_FIRST, _LAST = operator.itemgetter(0), operator.itemgetter(-1)


def skip_borders(text: str, position: int) -> int:
    while text.startswith("+", position):
        end = text.find("\n", position)
        position = len(text) if end < 0 else end + 1
    return position


def find_mark(text: str, mark: str, start: int = 0) -> int:
    """text.find(mark, start), faster for a mark that holds a space and starts with a capital: the table's
    many spaces keep str.find from skipping ahead, while the capital is rare and found by memchr."""
    first = mark[0]
    position = text.find(first, start)
    while position >= 0 and not text.startswith(mark, position):
        position = text.find(first, position + 1)
    return position


def chip_blocks(text: str, blocks: Blocks, start: int = 0,
                spaces: Optional[bool] = None) -> Optional[Tuple[List[tuple], int]]:
    """(each chip's tokens, offset in `text` of the process header's line or -1 where there is none) for the
    chips from `start` on, or None where the chip part holds anything but chips and borders."""
    if not text.isascii():
        return None  # the careful path's `\s` also knows Unicode spaces
    mark = find_mark(text, PROCESS_MARK, start)
    end = len(text) if mark < 0 else max(start, text.rfind("\n", start, mark) + 1)
    if mark >= 0 and not text.startswith("|", end):
        return None  # "Process id" in plain text or a border: the careful path knows what it is
    rows = blocks.read(text, skip_borders(text, start), end, spaces_only(text) if spaces is None else spaces)
    if rows is None:
        return None
    return rows, (end if mark >= 0 else -1)


def process_blocks(text: str, blocks: Blocks, start: int = 0,
                   spaces: Optional[bool] = None) -> Optional[List[tuple]]:
    """Each process row's tokens from `start` on, or None unless every line there is a process row or a
    border."""
    if not text.isascii():
        return None
    return blocks.read(text, skip_borders(text, start), len(text), spaces_only(text) if spaces is None else spaces)


# --- column-wise conversion: the careful converters' results, at C speed where they agree -----------------

# Ids, die indexes, temperatures and percentages are small whole numbers: a dict lookup is twice as quick as
# int() or float() on a fresh string. Constant tables (not caches of what was read): int() or float() of each
# key is its value.
SMALL_INTS = {str(number): number for number in range(256)}
SMALL_FLOATS = {str(number): float(number) for number in range(256)}


def int_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    first = tokens[0]
    if tokens.count(first) == len(tokens):  # totals, "0 / 0": one conversion for the column
        return [careful(first)] * len(tokens)
    if first in SMALL_INTS:
        try:
            return list(map(SMALL_INTS.__getitem__, tokens))
        except KeyError:
            pass
    try:
        return list(map(int, tokens))  # refuses every null token, as a careful int would not read them
    except ValueError:
        return [careful(token) for token in tokens]


def float_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    if tokens[0] in SMALL_FLOATS:
        try:
            return list(map(SMALL_FLOATS.__getitem__, tokens))
        except KeyError:
            pass
    try:
        if NULL_TOKENS.isdisjoint(tokens):
            values = list(map(float, tokens))
        else:  # a null token among numbers (the A3's second die prints '-' for power): the others still float()
            values = [None if token in NULL_TOKENS else float(token) for token in tokens]
        if math.isfinite(sum(filter(None, values))):  # nan and inf are refused by the careful converter
            return values  # (None and 0.0 add nothing to the sum)
    except ValueError:
        pass
    return [careful(token) for token in tokens]


def token_text_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    """Text tokens a `[^\\s|]+` group took: nothing to strip."""
    if NULL_TOKENS.isdisjoint(tokens):
        return list(tokens)
    return [None if token in NULL_TOKENS else token for token in tokens]


def text_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    """Whole cells, padding and all."""
    stripped = list(map(str.strip, tokens))
    if NULL_TOKENS.isdisjoint(stripped):
        return stripped
    return [None if token in NULL_TOKENS else token for token in stripped]


def any_column(tokens: Sequence[str], careful: Callable[[str], object]) -> list:
    return [careful(token) for token in tokens]


class Records:
    """How a row layout's tokens become records, worked out once per layout: each token column's converter,
    and for each record field the column that fills it or its default. A field named twice keeps its last
    column, as a dict update would; `aliases` (target, source) copy a column; a None in a `required` column
    raises NpuSmiParseError (the careful path says which row)."""

    def __init__(self, record_type: type, defaults: Dict[str, object], fields: Sequence[str],
                 converters: Sequence[Callable[[str], object]], column_kinds: Dict[object, Callable],
                 required: Sequence[str], aliases: Sequence[Tuple[str, str]] = ()):
        self.record_type = record_type
        # every column is converted, even one a later column overrides: a bad value there is still an error
        self.converters = tuple((column_kinds.get(convert, any_column), convert) for convert in converters)
        column_of = {field: index for index, field in enumerate(fields)}  # the last one wins
        for target, source in aliases:
            if source in column_of:
                column_of[target] = column_of[source]
        # the record's arguments in order: a converted column, or a column of a default (added after them)
        default_values = list(dict.fromkeys(default for name, default in defaults.items() if name not in column_of))
        self.default_values = tuple(default_values)
        indexes = [column_of[name] if name in column_of else len(converters) + default_values.index(default)
                   for name, default in defaults.items()]
        self.arguments = operator.itemgetter(*indexes) if len(indexes) > 1 else lambda columns: (columns[indexes[0]],)
        self.required = tuple(column_of[field] for field in required if field in column_of)
        # a required field no column fills and whose default is None: no record can be built
        self.unbuildable = any(field not in column_of and defaults[field] is None for field in required)

    def build(self, rows: List[tuple]) -> list:
        """The records of Blocks.read's rows."""
        if not rows:
            return []
        if self.unbuildable:
            raise NpuSmiParseError("a required id is missing")
        token_columns = zip(*rows)
        next(token_columns)  # the whole blocks (Blocks.read)
        columns = [convert(tokens, careful) for (convert, careful), tokens in zip(self.converters, token_columns)]
        for index in self.required:
            if None in columns[index]:
                raise NpuSmiParseError("a required id is missing")
        count = len(rows)
        columns.extend([default] * count for default in self.default_values)
        return list(map(self.record_type, *self.arguments(columns)))
