"""Pure parsers of the /proc files the processes source reads (proc(5)); no I/O."""

import re
from typing import NamedTuple, Optional

# `/proc/<pid>/fd/<n>` of a process that opened an NPU points here (the chip's logical id, /dev/davinciN).
_DAVINCI = re.compile(r"^/dev/davinci(\d+)$")


class ProcStat(NamedTuple):
    pid: int
    comm: str
    state: str  # one letter: R S D Z T t X I ...
    cpu_ticks: int  # utime + stime, in clock ticks (sysconf CLK_TCK)
    start_ticks: int  # start time after boot, in clock ticks: a pid with another start is another process


class ProcStatError(ValueError):
    """A /proc/<pid>/stat line that does not have the fields proc(5) lists."""


def parse_stat(text: str) -> ProcStat:
    """One /proc/<pid>/stat line. The command name is in parentheses and may itself hold spaces and
    parentheses, so the fields after it are found from the last ')'."""
    open_at, close_at = text.find("("), text.rfind(")")
    if open_at < 0 or close_at < open_at:
        raise ProcStatError("no (comm) field")
    fields = text[close_at + 1:].split()
    # after comm: 3 state, 4 ppid, ... 14 utime, 15 stime, ... 22 starttime (proc(5) numbering)
    if len(fields) < 20:
        raise ProcStatError("{} fields after comm, expected at least 20".format(len(fields)))
    try:
        pid = int(text[:open_at])
        utime, stime, start = int(fields[11]), int(fields[12]), int(fields[19])
    except ValueError:
        raise ProcStatError("a number field is not a number") from None
    state = fields[0]
    if len(state) != 1 or not state.isalpha():
        raise ProcStatError("state {!r} is not one letter".format(state))
    return ProcStat(pid, text[open_at + 1:close_at], state, utime + stime, start)


def davinci_device(link: str) -> Optional[int]:
    """The logical device id of an fd link to /dev/davinciN; None for any other file (davinci_manager too)."""
    match = _DAVINCI.match(link)
    return int(match.group(1)) if match else None
