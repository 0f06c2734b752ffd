"""Colour for people at a terminal: ANSI SGR codes by meaning (ok, warning, critical, unknown, info, heading).

On only where a person reads it: the stream is a terminal, NO_COLOR is unset or empty (https://no-color.org)
and TERM is not "dumb". Nagios, pipes and files get plain text, byte for byte what they got before. Pure:
`wanted` reads only the stream and the environment it is given.
"""

from typing import IO, Mapping, Optional

STYLES = {"ok": "32", "warning": "33", "critical": "1;31", "unknown": "35", "info": "36", "heading": "1"}
# npu-smi's health words and npumon's source states, by meaning
HEALTH_MEANINGS = {"OK": "ok", "Warning": "warning", "Alarm": "critical", "Critical": "critical",
                   "UNKNOWN": "unknown"}


def wanted(stream: IO, environ: Mapping[str, str]) -> bool:
    if environ.get("NO_COLOR") or environ.get("TERM") == "dumb":
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or replaced stream
        return False


class Painter:
    """`paint(text, meaning)`: the text in its meaning's colour when on, else the text itself."""

    __slots__ = ("on",)

    def __init__(self, on: bool):
        self.on = on

    def __call__(self, text: str, meaning: Optional[str]) -> str:
        style = STYLES.get(meaning or "")
        if not self.on or style is None or not text:
            return text
        return "\x1b[{}m{}\x1b[0m".format(style, text)


PLAIN = Painter(False)
