"""`npumon top`: a live view of the host in the terminal, refreshed every --interval seconds.

It reads a running daemon's /status (the local one by default, or --url) or collects by itself (--local on
this host, --simulate on a simulated one) through the same sources as `npumon check`. The screen is built by
the pure functions of npumon/tui; this module only reads keys and draws lines. Without a terminal (or with
--plain) it prints the same frame as plain text every interval; --once prints one frame and exits.
"""

import argparse
import contextlib
import locale
import shutil
import signal
import sys
import time
from typing import Iterator, Optional

from ..config.errors import ConfigError
from ..settings import load_command_config
from ..sources.target import NpuSmiMissing
from ..tui.frame import render_frame
from ..tui.history import History
from ..tui.keys import ViewState
from .common import USAGE_ERROR, UserError, open_target, setup_logging
from .top_feeds import DaemonFeed, LocalFeed, default_url

PLAIN_WIDTH = 160  # the plain table's width when stdout is no terminal
ONCE_WITHIN_SECONDS = 8.0  # --once collecting: no npu-smi call past this, as `npumon check` within its 9 s


def cmd_top(args: argparse.Namespace) -> int:
    if args.url and (args.local or args.simulate is not None):
        return _fail("--url reads a daemon; --local and --simulate collect here: give one of them")
    if args.sim_product and args.simulate is None:
        return _fail("--sim-product needs --simulate")
    if args.probe and not (args.local or args.simulate is not None):
        return _fail("--probe needs --local or --simulate (a daemon probes by its own config)")
    live = not args.once and not args.plain and sys.stdout.isatty() and sys.stdin.isatty()
    previous = signal.signal(signal.SIGTERM, _exit_cleanly)  # curses.wrapper restores the terminal on the way out
    try:
        config = load_command_config(args.config)
        # in the live view a log line would scribble over the screen: only what the user asked for
        setup_logging(args.log_level or ("critical" if live else "error"))
        with _feed(args, config) as (feed, origin):
            state = ViewState(sort=args.sort, filter=args.filter)
            if args.once:
                return _print_once(feed, state, origin, args.probe)
            if live:
                from .top_screen import run_screen

                run_screen(feed, state, History(), origin, _unicode())
                return 0
            return _print_plain(feed, state, origin, args.interval, args.count)
    except (ConfigError, UserError, NpuSmiMissing) as exc:
        return _fail(str(exc))
    except KeyboardInterrupt:  # Ctrl-C is how a live view ends
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)


def _exit_cleanly(signum, frame) -> None:
    raise SystemExit(0)


@contextlib.contextmanager
def _feed(args: argparse.Namespace, config) -> Iterator:
    """(feed, origin): the daemon's /status, or a collection of our own with the rules judged as the daemon
    judges them (as `check` does for --once)."""
    if not args.local and args.simulate is None:
        url = args.url or default_url(config)
        feed = DaemonFeed(url, args.interval)
        try:
            yield feed, url
        finally:
            feed.close()
        return
    from .check import load_rule_engine

    engine, _ = load_rule_engine(config, one_shot=args.once)
    with open_target(args, config) as (target, config_for):
        config = config_for(config)  # a simulated host's state stays with the simulation
        feed = LocalFeed(config, target, engine, args.interval, probe=args.probe, one_pass=args.once)
        origin = "simulated {}".format(args.simulate) if args.simulate is not None else "local collection"
        try:
            yield feed, origin
        finally:
            feed.close()


def _print_once(feed, state: ViewState, origin: str, probe: bool) -> int:
    if isinstance(feed, LocalFeed):
        document, error = feed.read_complete(ONCE_WITHIN_SECONDS, probe)
    else:
        document, error = feed.read_now()
    if document is None:
        return _fail(error or "no reading")
    history = History()
    history.record(document)
    _print_frame(document, state, history, origin, error)
    return 0


def _print_plain(feed, state: ViewState, origin: str, interval: float, count: Optional[int]) -> int:
    """Without a terminal: the frame as text every interval, a blank line between frames."""
    history = History()
    shown = 0
    while True:
        started = time.monotonic()
        document, error = feed.read_now()
        if document is not None:
            history.record(document)
        _print_frame(document, state, history, origin, error)
        shown += 1
        if count is not None and shown >= count:
            return 0
        print(flush=True)
        time.sleep(max(0.0, interval - (time.monotonic() - started)))


def _print_frame(document, state: ViewState, history: History, origin: str, error: Optional[str]) -> None:
    width = shutil.get_terminal_size((PLAIN_WIDTH, 50)).columns if sys.stdout.isatty() else PLAIN_WIDTH
    state = ViewState(sort=state.sort, reverse=state.reverse, filter=state.filter, selected=-1)
    lines = render_frame(document, state, history, width, None, origin, error, unicode=_unicode())
    print("\n".join(text for text, _ in lines[:-1]), flush=True)  # the key line means nothing on paper


def _unicode() -> bool:
    return "utf" in (locale.getpreferredencoding(False) or "").lower()


def _fail(message: str) -> int:
    print("npumon top: " + message, file=sys.stderr)
    return USAGE_ERROR

