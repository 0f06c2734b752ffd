"""`npumon events` (read the history) and `npumon ack` (acknowledge a finding).

Both find the history through the config's `state_dir`. `events` opens it read-only, so it works while the
daemon writes. `ack` only appends a `finding_acknowledged` event; the running daemon applies it at its next
poll, a stopped one when it starts. Exit codes: 0 done, 2 bad usage, bad config or an unreadable history.
"""

import argparse
import datetime
import getpass
import json
import os
import re
import sys
import time
from typing import List, Optional, Sequence, Tuple

from ..config.errors import ConfigError
from ..outputs.colour import PLAIN, Painter
from ..outputs.colour import wanted as colour_wanted
from ..services.events.store import (ACTIVE, KINDS, Event, EventStore, EventStoreError, FindingRow, events_path,
                                      require_readable)
from ..settings import Config, load_command_config
from ..outputs.report import rfc3339

USAGE_ERROR = 2
MAX_NOTE_CHARS = 1000
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_SUBJECT = re.compile(r"^(host|npu\d+/chip\d+)$")


class _UsageError(Exception):
    """A bad argument or config; printed as one line."""


# --------------------------------------------------------------------------------------------- npumon events

def cmd_events(args: argparse.Namespace) -> int:
    try:
        now = time.time()
        since = parse_when(args.since, now, "--since")
        until = parse_when(args.until, now, "--until")
        if since is not None and until is not None and since > until:
            raise _UsageError("--since {} ({}) is after --until {} ({}): no event can match".format(
                args.since, rfc3339(since), args.until, rfc3339(until)))
        npu = _count(args.npu, "--npu")
        limit = _count(args.limit, "--limit")
        kinds = _kinds(args.kind)
        config = _load(args)
        store = EventStore(events_path(config.state_dir), config.events.retention_days * 86400, readonly=True)
        try:
            events = store.query(since=since, npu=npu, kinds=kinds, limit=limit, until=until)
        finally:
            store.close()
    except (_UsageError, ConfigError, EventStoreError) as exc:
        print("npumon: {}".format(exc), file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        print(json.dumps([event_json(event) for event in events], indent=2))
    else:
        print(render_events(events, Painter(colour_wanted(sys.stdout, os.environ))))
    return 0


def parse_when(text: Optional[str], now: float, option: str) -> Optional[float]:
    """'90s', '15m', '1h', '2d', '1w' back from `now`, or a date and time (RFC 3339; local time without an
    offset) -> unix time."""
    if text is None:
        return None
    match = _DURATION.match(text)
    if match:
        return now - float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
    try:
        moment = datetime.datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise _UsageError("{}: expected a duration like 30m, 1h, 2d or a time like 2024-05-01T08:00:00Z, got {!r}"
                          .format(option, text)) from None
    return moment.timestamp()  # a naive datetime is local time


def _count(text: Optional[str], option: str) -> Optional[int]:
    """Checked here rather than by argparse, so that a bad value is one line like every other mistake."""
    if text is None:
        return None
    if not text.strip().isdigit():
        raise _UsageError("{}: expected a whole number 0 or more, got {!r}".format(option, text))
    return int(text)


def _kinds(kinds: Optional[List[str]]) -> Optional[List[str]]:
    for kind in kinds or ():
        if kind not in KINDS:
            raise _UsageError("--kind: unknown kind {!r} (known: {})".format(kind, ", ".join(KINDS)))
    return kinds


def _load(args: argparse.Namespace) -> Config:
    """The config whose history to read: the simulation's own with --simulate/--sim-state."""
    if args.simulate and not args.sim_state:
        raise _UsageError("--simulate: a simulated host keeps a history only in its --sim-state DIR; give that "
                          "DIR (`npumon run --simulate --sim-state DIR` keeps one)")
    config = load_command_config(args.config)
    if args.sim_state:
        from ..sim.target import simulation_config

        config = simulation_config(config, args.sim_state)
    if not config.events.enabled:
        raise _UsageError("the event history is turned off in {} (events.enabled: false)".format(config.source))
    return config


def event_json(event: Event) -> dict:
    return {"id": event.id, "time": rfc3339(event.time), "timestamp": event.time, "kind": event.kind,
            "subject": event.subject, "severity": event.severity, "message": event.message,
            "details": event.details}


def render_events(events: Sequence[Event], paint: Painter = PLAIN) -> str:
    """The events as a table; `paint` colours the header and each event's severity (a person at a terminal)."""
    if not events:
        return "no events"
    rows = [("TIME", "KIND", "SUBJECT", "SEVERITY", "MESSAGE")]
    rows.extend((rfc3339(event.time), event.kind, event.subject, event.severity or "-", event.message)
                for event in events)
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    lines = []
    for number, row in enumerate(rows):
        cells = [cell.ljust(width) for cell, width in zip(row[:4], widths)] + [row[4]]
        if number == 0:
            cells = [paint(cell, "heading") for cell in cells]
        else:
            cells[3] = paint(cells[3], row[3] if row[3] in ("critical", "warning", "info") else None)
        lines.append("  ".join(cells))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------- npumon ack

def cmd_ack(args: argparse.Namespace) -> int:
    try:
        targets = _ack_targets(args)
        note = (args.note or "").strip()
        if len(note) > MAX_NOTE_CHARS:
            raise _UsageError("--note: at most {} characters".format(MAX_NOTE_CHARS))
        config = _load(args)
        path = events_path(config.state_dir)
        require_readable(path)  # acknowledging must not create an empty history somewhere wrong
        store = EventStore(path, config.events.retention_days * 86400)
        try:
            done = acknowledge(store, targets, note, _user())
        finally:
            store.close()
    except (_UsageError, ConfigError, EventStoreError) as exc:
        print("npumon: {}".format(exc), file=sys.stderr)
        return USAGE_ERROR
    if args.json:
        print(json.dumps([{"rule": row.finding.rule, "subject": row.finding.subject, "summary": row.finding.summary,
                           "already_acknowledged": already} for row, already in done], indent=2))
        return 0
    if not done:
        print("no active findings to acknowledge")
    for finding_row, already in done:
        finding = finding_row.finding
        print("{} {} on {}: {}".format("already acknowledged" if already else "acknowledged", finding.rule,
                                       finding.subject, finding.summary))
    return 0


def _ack_targets(args: argparse.Namespace) -> Optional[Tuple[str, str]]:
    """(rule, subject), or None for --all."""
    if args.all:
        if args.rule or args.subject:
            raise _UsageError("ack: give either RULE SUBJECT or --all, not both")
        return None
    if not args.rule or not args.subject:
        raise _UsageError("ack: give RULE SUBJECT (e.g. `npumon ack ecc-uncorrectable npu2/chip0`) or --all")
    if not _SUBJECT.match(args.subject):
        raise _UsageError("ack: SUBJECT must be 'host' or npu<N>/chip<C> (e.g. npu2/chip0), got {!r}".format(
            args.subject))
    return args.rule, args.subject


def acknowledge(store: EventStore, target: Optional[Tuple[str, str]], note: str, user: str
                ) -> List[Tuple[FindingRow, bool]]:
    """Record an acknowledgement for the target finding (None: every active one), in one transaction.
    Returns (row, already acknowledged) for each; an unknown target is a _UsageError naming the active ones."""
    with store.batch():
        active = {(row.finding.rule, row.finding.subject): row for row in store.finding_rows() if row.state == ACTIVE}
        if target is not None and target not in active:
            listed = ", ".join("{} {}".format(*key) for key in sorted(active)) or "none"
            raise _UsageError("no active finding {} on {} (active: {})".format(target[0], target[1], listed))
        keys = sorted(active) if target is None else [target]
        pending = _pending_acknowledgements(store, active)
        done = []
        for key in keys:
            row = active[key]
            if key in pending:
                done.append((row, True))
                continue
            message = "{} acknowledged by {}{}".format(key[0], user, ": " + note if note else "")
            store.record("finding_acknowledged", key[1], message, "info",
                         {"rule": key[0], "note": note or None, "user": user, "fired_event_id": row.event_id})
            done.append((row, False))
    return done


def _pending_acknowledgements(store: EventStore, active: dict) -> set:
    """Active findings already acknowledged since they fired, which the daemon has not applied yet."""
    oldest = min((row.event_id for row in active.values()), default=None)
    if oldest is None:
        return set()
    pending = set()
    for event in store.query(kinds=("finding_acknowledged",), after_id=oldest):
        key = ((event.details or {}).get("rule"), event.subject)
        if key in active and event.id > active[key].event_id:
            pending.add(key)
    return pending


def _user() -> str:
    """Who acknowledged, for the record: the person behind sudo when there is one."""
    sudo_user = os.environ.get("SUDO_USER")
    if sudo_user:
        return sudo_user
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "uid {}".format(os.getuid())
