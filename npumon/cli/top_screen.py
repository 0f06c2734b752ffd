"""The live screen of `npumon top`, with curses from the standard library: read keys, draw the frame.

What is on the screen comes from npumon/tui (pure); this module maps keys to their names, styles to
attributes, and redraws on new data, a key, a resize, or once a second (the ages move). curses.wrapper gives
the terminal back on every way out: `q`, Ctrl-C, SIGTERM, an error.
"""

import curses
import os
import time
from typing import Dict, Optional

from ..tui.frame import render_frame, shown_chips
from ..tui.history import History
from ..tui.keys import ViewState, handle_key

KEY_POLL_MS = 100  # how often the loop looks for a key and new data
REDRAW_SECONDS = 1.0

NAMED_KEYS = {
    10: "ENTER", 13: "ENTER", curses.KEY_ENTER: "ENTER", 27: "ESC",
    curses.KEY_UP: "UP", curses.KEY_DOWN: "DOWN", curses.KEY_PPAGE: "PGUP", curses.KEY_NPAGE: "PGDN",
    curses.KEY_HOME: "HOME", curses.KEY_END: "END",
    curses.KEY_BACKSPACE: "BACKSPACE", 127: "BACKSPACE", 8: "BACKSPACE",
}


def key_name(code: int) -> Optional[str]:
    """A curses key code as handle_key's name; None for what has no meaning here."""
    if code in NAMED_KEYS:
        return NAMED_KEYS[code]
    if 32 <= code < 127:
        return chr(code)
    return None


def run_screen(feed, state: ViewState, history: History, origin: str, unicode: bool) -> None:
    os.environ.setdefault("ESCDELAY", "25")  # Esc alone must not wait a second for a key sequence
    # LINES/COLUMNS inherited from a parent (a test runner, a script) would pin curses to that size and make it
    # miss every resize: the terminal itself says how big it is.
    for name in ("LINES", "COLUMNS"):
        os.environ.pop(name, None)
    feed.start()
    curses.wrapper(_loop, feed, state, history, origin, unicode)


def _loop(screen, feed, state: ViewState, history: History, origin: str, unicode: bool) -> None:
    styles = _styles()
    try:
        curses.curs_set(0)
    except curses.error:  # a terminal without an invisible cursor
        pass
    screen.timeout(KEY_POLL_MS)
    shown_document, shown_error, drawn_at, dirty = None, None, 0.0, True
    while not state.quit:
        document, error = feed.latest()
        if document is not shown_document or error != shown_error:
            if document is not None:
                history.record(document)
            shown_document, shown_error, dirty = document, error, True
        if dirty or time.monotonic() - drawn_at >= REDRAW_SECONDS:
            _draw(screen, styles, render_frame(document, state, history, *_size(screen)[::-1], origin=origin,
                                               error=error, unicode=unicode))
            drawn_at, dirty = time.monotonic(), False
        code = screen.getch()
        if code == -1:
            continue
        if code == curses.KEY_RESIZE:
            curses.update_lines_cols()
            dirty = True
            continue
        name = key_name(code)
        if name is not None:
            shown = [(chip.get("npu"), chip.get("chip")) for chip in shown_chips(document, state)]
            state = handle_key(state, name, shown)
            dirty = True


def _size(screen):
    height, width = screen.getmaxyx()
    return max(1, height), max(1, width)


def _draw(screen, styles: Dict[str, int], lines) -> None:
    height, width = _size(screen)
    screen.erase()
    for row, (text, style) in enumerate(lines[:height]):
        try:  # the bottom-right cell cannot be written without moving the cursor off the screen
            screen.addnstr(row, 0, text, width - 1 if row == height - 1 else width, styles.get(style, 0))
        except curses.error:
            pass
    screen.refresh()


def _styles() -> Dict[str, int]:
    styles = {"title": curses.A_BOLD, "header": curses.A_BOLD, "dim": curses.A_DIM, "selected": curses.A_REVERSE,
              "critical": curses.A_BOLD, "warning": 0}
    if curses.has_colors():
        try:
            curses.start_color()
            curses.use_default_colors()
            curses.init_pair(1, curses.COLOR_RED, -1)
            curses.init_pair(2, curses.COLOR_YELLOW, -1)
            styles["critical"] = curses.color_pair(1) | curses.A_BOLD
            styles["warning"] = curses.color_pair(2)
        except curses.error:  # a terminal that cannot do it keeps the plain attributes
            pass
    return styles
