"""The diag workloads' pure parts: comparing what came back with what was written."""

from hypothesis import given, settings
from hypothesis import strategies as st

from npumon.diag.workloads import CHUNK, byte_differences, pattern


@settings(max_examples=300)
@given(st.binary(min_size=1, max_size=600), st.data())
def test_byte_differences_counts_and_finds_the_first_as_a_byte_loop_does(want, data):
    flips = data.draw(st.lists(st.tuples(st.integers(0, len(want) - 1), st.integers(1, 255)), max_size=8))
    got = bytearray(want)
    for index, mask in flips:
        got[index] ^= mask
    bad = [index for index in range(len(want)) if got[index] != want[index]]
    assert byte_differences(bytes(got), want) == (len(bad), bad[0] if bad else None)


def test_a_whole_chunk_with_a_flipped_bit_at_each_end_is_compared():
    want = pattern(CHUNK, 3)
    got = bytearray(want)
    got[0] ^= 0x04
    got[-1] ^= 0x80
    assert byte_differences(bytes(got), want) == (2, 0)
    assert byte_differences(want, want) == (0, None)
