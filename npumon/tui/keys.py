"""The view's state and what each key does to it: a pure function, so every key is tested without a terminal.

Keys arrive as names: a printable character as itself, and "ENTER", "ESC", "UP", "DOWN", "PGUP", "PGDN",
"HOME", "END", "BACKSPACE" for the others (the terminal layer maps curses codes to these).
"""

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence, Tuple

from .rows import SORTS

HELP = (
    ("q", "quit (Ctrl-C too)"),
    ("?", "this help; any key closes it"),
    ("s", "next sort column (NPU, temperature, power, AI Core, HBM used, health)"),
    ("t / p / u / m", "sort by temperature / power / AI Core utilisation / HBM used; again flips the order"),
    ("n", "sort by NPU id"),
    ("r", "reverse the order"),
    ("/ or f", "filter: a card id (3), a chip (3/1), or text in the name, bus id, health or a process name;"
               " Enter applies, Esc cancels, an empty filter shows every chip"),
    ("Up / Down, j / k", "select a chip"),
    ("Enter", "the selected chip's detail: processes, error codes, network, probe, history; Esc goes back"),
)

DIRECT_SORTS = {"t": "temp", "p": "power", "u": "util", "m": "hbm", "n": "npu"}


@dataclass(frozen=True)
class ViewState:
    sort: str = "npu"
    reverse: bool = False
    filter: str = ""  # the applied chip filter
    editing: Optional[str] = None  # the filter being typed, while the prompt is open
    selected: int = 0  # index into the shown (sorted, filtered) chips
    detail: Optional[Tuple[int, int]] = None  # (npu, chip) whose detail is shown
    help: bool = False
    quit: bool = False


def handle_key(state: ViewState, key: str, shown: Sequence[Tuple[int, int]]) -> ViewState:
    """The state after `key`; `shown`: (npu, chip) of the rows on screen now, in their order."""
    replace = dataclasses.replace
    if state.editing is not None:
        return _edit_filter(state, key)
    if key == "q":
        return replace(state, quit=True)
    if state.help:
        return replace(state, help=False)
    if key == "?":
        return replace(state, help=True)
    if state.detail is not None:
        if key in ("ESC", "ENTER", "BACKSPACE", "h"):
            return replace(state, detail=None)
        return state
    if key == "s":
        following = SORTS[(SORTS.index(state.sort) + 1) % len(SORTS)] if state.sort in SORTS else SORTS[0]
        return replace(state, sort=following, reverse=False)
    if key in DIRECT_SORTS:
        sort = DIRECT_SORTS[key]
        return replace(state, sort=sort, reverse=(not state.reverse) if sort == state.sort else False)
    if key == "r":
        return replace(state, reverse=not state.reverse)
    if key in ("/", "f"):
        return replace(state, editing=state.filter)
    if key in ("UP", "k"):
        return replace(state, selected=max(0, min(state.selected, len(shown) - 1) - 1))
    if key in ("DOWN", "j"):
        return replace(state, selected=max(0, min(state.selected + 1, len(shown) - 1)))
    if key in ("HOME", "g"):
        return replace(state, selected=0)
    if key in ("END", "G"):
        return replace(state, selected=max(0, len(shown) - 1))
    if key == "ENTER" and shown:
        return replace(state, detail=shown[max(0, min(state.selected, len(shown) - 1))])
    if key == "ESC" and state.filter:
        return replace(state, filter="", selected=0)
    return state


def _edit_filter(state: ViewState, key: str) -> ViewState:
    replace = dataclasses.replace
    text = state.editing or ""
    if key == "ENTER":
        return replace(state, filter=text.strip(), editing=None, selected=0)
    if key == "ESC":
        return replace(state, editing=None)
    if key == "BACKSPACE":
        return replace(state, editing=text[:-1])
    if len(key) == 1 and key.isprintable() and len(text) < 40:
        return replace(state, editing=text + key)
    return state
