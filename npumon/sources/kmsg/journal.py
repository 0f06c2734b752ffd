"""The kernel log from the systemd journal, where /dev/kmsg cannot be read (a container without
CAP_SYSLOG, dmesg_restrict): `journalctl -k -o json` through the bounded runner, resumed by cursor.

Each poll asks for the kernel messages after the last cursor (`--after-cursor`; the first time, this
boot's, `-b`), at most `limit` of them (`-n`, which keeps the newest: when exactly `limit` come back, the
ones between were not read and count as lost, as /dev/kmsg's overwritten records do). `-o json` prints
one object a line: MESSAGE (a string, or a list of byte values when it is not UTF-8), PRIORITY, __CURSOR,
__MONOTONIC_TIMESTAMP and, for a message about a device, _KERNEL_DEVICE (`+pci:0000:c1:00.0`, as
/dev/kmsg's DEVICE= line). Parsing is pure; the one outside effect is the runner call.
"""

import json
from typing import Any, List, Optional, Tuple

from ..lines import iter_lines
from .reader import ReadError
from .records import MAX_MESSAGE_CHARS, Record

JOURNALCTL = "journalctl"
TIMEOUT_SECONDS = 10.0
MAX_OUTPUT_BYTES = 64 * 1024 * 1024  # 20,000 records of ~1 KiB of JSON each, and then some


def journal_argv(cursor: Optional[str], limit: int) -> List[str]:
    where = ["--after-cursor=" + cursor] if cursor else ["-b"]
    return ["-k", "-o", "json", "--no-pager", "-q", "-n", str(limit)] + where


def parse_journal_json(text: str) -> Tuple[List[Record], Optional[str], int]:
    """journalctl -o json output -> (records, the last cursor, lines that were not a journal entry)."""
    records, cursor, bad = [], None, 0
    for line in iter_lines(text):  # one at a time: up to 64 MiB of JSON, of which a record keeps its message
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            bad += 1
            continue
        if not isinstance(entry, dict) or not isinstance(entry.get("__CURSOR"), str):
            bad += 1
            continue
        cursor = entry["__CURSOR"]
        message = _message(entry.get("MESSAGE"))
        if message is None:
            continue
        fields = {"DEVICE": entry["_KERNEL_DEVICE"]} if isinstance(entry.get("_KERNEL_DEVICE"), str) else {}
        records.append(Record(message=message[:MAX_MESSAGE_CHARS], level=_integer(entry.get("PRIORITY")),
                              usec=_integer(entry.get("__MONOTONIC_TIMESTAMP")), fields=fields))
    return records, cursor, bad


def _message(value: Any) -> Optional[str]:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(byte, int) and 0 <= byte < 256 for byte in value):
        return bytes(value).decode("utf-8", "replace")  # journald's form of a message that is not UTF-8
    return None


def _integer(value: Any) -> Optional[int]:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


class JournalReader:
    """Reads on from a cursor with `runner` (sources/runner.CommandRunner with journalctl as its prefix)."""

    def __init__(self, runner: Any):
        self.runner = runner

    def read(self, cursor: Optional[str], limit: int) -> Tuple[List[Record], Optional[str], int]:
        """(records, the cursor to go on from, records lost). Raises ReadError with a one-line reason."""
        result = self.runner.run(journal_argv(cursor, limit), label="kmsg-journal")
        if result.error or result.timed_out or result.returncode != 0:
            reason = result.error or ("timed out" if result.timed_out else
                                      (result.stderr.strip().splitlines() or ["exit status {}".format(
                                          result.returncode)])[-1])
            raise ReadError("journalctl -k: {}".format(reason))
        records, last, _ = parse_journal_json(result.stdout)
        lost = 1 if cursor and len(records) >= limit else 0  # some were skipped; how many is not known
        return records, last or cursor, lost
