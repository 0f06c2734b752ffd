"""Kernel log records, as /dev/kmsg hands them out or as dmesg / syslog wrote them to a file. Pure.

/dev/kmsg (Linux Documentation/ABI/testing/dev-kmsg): one read() returns one record,
`<prefix>,<seq>,<usec>,<flags>[,...];<message>\\n` followed by continuation lines ` KEY=value\\n` (the
device the message is about: `DEVICE=+pci:0000:c1:00.0`). prefix = facility * 8 + level; the message
escapes non-printable bytes as \\xNN. A file may hold such records, or plain dmesg lines
(`[ 1197.584409] msg`), or syslog lines (`Aug  1 08:38:31 host kernel: [ 1197.584409] msg`, as in
/var/log/messages), or the driver ring buffer's `[2025-04-16-03:08:13.704312] msg` (host_kernel.log).
"""

import calendar
import re
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional

from ..lines import iter_lines

MAX_MESSAGE_CHARS = 2048  # the driver's own lines are at most 1024 bytes; a longer one is cut, not kept whole

_KMSG_HEAD = re.compile(r"(\d+),(\d+),(\d+),([^,;]*)(?:,[^;]*)?;")
_SYSLOG_HEAD = re.compile(r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ kernel: ")
_DMESG_TIME = re.compile(r"\[\s*(\d+\.\d+)\] ")
_RINGBUF_TIME = re.compile(r"\[(\d{4})-(\d\d)-(\d\d)-(\d\d):(\d\d):(\d\d)(\.\d+)\] ")


@dataclass(frozen=True)
class Record:
    message: str
    seq: Optional[int] = None  # /dev/kmsg's sequence number (None for a plain line)
    level: Optional[int] = None  # 0 emerg .. 7 debug (None: not known)
    usec: Optional[int] = None  # microseconds since boot
    stamp: Optional[float] = None  # the driver ring buffer's own date, in seconds (UTC taken for local time)
    fields: Dict[str, str] = field(default_factory=dict)  # continuation lines KEY=value


def parse_kmsg_record(text: str) -> Optional[Record]:
    """One /dev/kmsg record (with its continuation lines); None when it is not one."""
    head, _, rest = text.partition("\n")
    match = _KMSG_HEAD.match(head)
    if match is None:
        return None
    fields = {}
    for line in rest.split("\n"):
        if line.startswith(" ") and "=" in line:
            key, _, value = line[1:].partition("=")
            fields[key] = value
    prefix = int(match.group(1))
    return Record(message=head[match.end():][:MAX_MESSAGE_CHARS], seq=int(match.group(2)), level=prefix & 7,
                  usec=int(match.group(3)), fields=fields)


def parse_plain_line(line: str) -> Record:
    """A dmesg, syslog or driver ring-buffer line: its prefixes stripped."""
    text = line.rstrip("\n")
    syslog = _SYSLOG_HEAD.match(text)
    if syslog:
        text = text[syslog.end():]
    usec = None
    dmesg = _DMESG_TIME.match(text)
    if dmesg:
        usec = int(float(dmesg.group(1)) * 1e6)
        text = text[dmesg.end():]
    stamp = None
    if usec is None:
        ring = _RINGBUF_TIME.match(text)
        if ring:
            stamp = _ring_seconds(ring.groups())
            text = text[ring.end():]
    return Record(message=text[:MAX_MESSAGE_CHARS], usec=usec, stamp=stamp)


def _ring_seconds(parts) -> Optional[float]:
    """`2025-04-16-03:08:13.704312` as seconds (None for an impossible date, which is then no time)."""
    try:
        return calendar.timegm(tuple(int(part) for part in parts[:6]) + (0, 0, 0)) + float(parts[6])
    except (ValueError, OverflowError):
        return None


def line_time(record: Record) -> Optional[float]:
    """When the line was logged, in seconds on its own clock (the kernel's since boot, or the ring buffer's
    date); None when the line does not say. Only differences between lines of one log mean anything."""
    return record.usec / 1e6 if record.usec is not None else record.stamp


def split_file_records(text: str) -> Iterator[Record]:
    """The records of a file: kmsg-format records with their continuation lines, or plain lines."""
    pending: List[str] = []
    for line in iter_lines(text):
        if pending and line.startswith(" "):
            pending.append(line)
            continue
        if pending:
            record = parse_kmsg_record("\n".join(pending))
            if record is not None:
                yield record
            pending = []
        if not line.strip() or line.startswith("#"):
            continue
        if _KMSG_HEAD.match(line):
            pending = [line]
        else:
            yield parse_plain_line(line)
    if pending:
        record = parse_kmsg_record("\n".join(pending))
        if record is not None:
            yield record
