"""A Hypothesis strategy for the parsers' property tests: a real capture, damaged the ways a real tool's output
gets damaged (cut short, lines dropped, duplicated or swapped, characters replaced or inserted, digits
corrupted), one to four times."""

from hypothesis import strategies as st


def damaged_captures(captures, noise, digit_run: int):
    """Damaged texts drawn from `captures`; `noise`: a strategy of strings to insert or put in place of a
    character; `digit_run`: how long a run a corrupted digit may grow to (overlong numbers)."""

    @st.composite
    def damaged(draw):
        text = draw(st.sampled_from(captures))
        for _ in range(draw(st.integers(min_value=1, max_value=4))):
            kind = draw(st.sampled_from(["truncate", "drop", "duplicate", "swap", "replace", "insert", "digits"]))
            lines = text.split("\n")
            if kind == "truncate":
                text = text[:draw(st.integers(min_value=0, max_value=len(text)))]
            elif kind in ("drop", "duplicate", "swap") and lines:
                i = draw(st.integers(min_value=0, max_value=len(lines) - 1))
                j = draw(st.integers(min_value=0, max_value=len(lines) - 1))
                if kind == "drop":
                    del lines[i]
                elif kind == "duplicate":
                    lines.insert(i, lines[j])
                else:
                    lines[i], lines[j] = lines[j], lines[i]
                text = "\n".join(lines)
            elif kind in ("replace", "insert") and text:
                i = draw(st.integers(min_value=0, max_value=len(text) - 1))
                inserted = draw(st.one_of(noise, st.text(max_size=3)))
                text = text[:i] + inserted + text[i + (1 if kind == "replace" else 0):]
            elif kind == "digits":
                digit = draw(st.sampled_from("0123456789"))
                text = text.replace(digit, draw(st.sampled_from(["", "x", digit * digit_run, "-", " "])))
        return text

    return damaged()
