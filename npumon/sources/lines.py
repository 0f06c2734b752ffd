"""Lines of a large text without a list of all of them first.

str.splitlines() and str.split("\n") build a list of every line: each line a str of its own, some 50 bytes
beside its text, so a 4 MiB answer of short lines costs more than twice its size again before the first line
is looked at. iter_lines() gives one line at a time; splitlines_at_most() counts the lines before it splits,
for parsers that need the list but know how many lines a real answer has.
"""

import itertools
import re
from typing import Iterator, List, Optional

# Where str.splitlines() splits ("\r\n" counts once).
_LINE_BREAK = re.compile(r"\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def iter_lines(text: str, keepends: bool = False) -> Iterator[str]:
    """Each line of `text`, with its "\n" when `keepends`; a last line without one is yielded as it is."""
    start, size = 0, len(text)
    while start < size:
        end = text.find("\n", start)
        if end < 0:
            end = size
        yield text[start:end + 1 if keepends else end]
        start = end + 1


def splitlines_at_most(text: str, limit: int) -> Optional[List[str]]:
    """text.splitlines(), or None when the text has more than `limit` lines: counted first, so a huge text is
    refused without a list of its lines."""
    breaks = sum(1 for _ in itertools.islice(_LINE_BREAK.finditer(text), limit + 1))
    if breaks > limit:
        return None
    lines = text.splitlines()  # at most one line more than `limit`: the text after the last break
    return lines if len(lines) <= limit else None
