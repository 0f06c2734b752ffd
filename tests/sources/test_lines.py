"""iter_lines and splitlines_at_most: the lines of a text without a list of all of them first."""

import io

from hypothesis import given
from hypothesis import strategies as st

from npumon.sources.lines import iter_lines, splitlines_at_most


@given(st.text(alphabet=st.sampled_from("ab \n\r\x0b\u2028"), max_size=40))
def test_the_lines_are_those_a_text_file_gives(text):
    assert list(iter_lines(text, keepends=True)) == list(io.StringIO(text, newline="\n"))
    assert "".join(iter_lines(text, keepends=True)) == text
    assert list(iter_lines(text)) == [line[:-1] if line.endswith("\n") else line
                                      for line in io.StringIO(text, newline="\n")]


@given(st.text(alphabet=st.sampled_from("ab \n\r\x0b\x1c\x85\u2028"), max_size=40), st.integers(0, 8))
def test_splitlines_at_most_is_splitlines_or_none_past_the_limit(text, limit):
    lines = text.splitlines()
    assert splitlines_at_most(text, limit) == (lines if len(lines) <= limit else None)
