"""Pure parsers of `hccn_tool -i <phy id> -<cmd> -g` answers (the NPUs' RoCE ports), no I/O.

Formats: shared/reference/hccn/FORMATS.md (hicann/driver @ ef377e95 hccn_tool sources; mind-cluster's
hccn wrapper) and the real captures in tests/fixtures/hccn/. Each parser returns its record or raises
HccnParseError with one line that says what was missing; nothing else escapes. The answers of several
commands may come concatenated (a "for i ..." loop pasted into a guide): each parser picks its own lines.

`-optical -g` has a module of its own (optical.py); errors printed instead of an answer: classify_error().
"""

import datetime
import re
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ..lines import splitlines_at_most

MAX_LINES = 4096  # no real answer comes near this (the -stat answer is 49 lines); more is not an answer


class HccnParseError(ValueError):
    """An hccn_tool answer that is not in any known format; the message says what was expected."""


def _lines(text: str) -> List[str]:
    if not isinstance(text, str):
        raise HccnParseError("expected text, got {}".format(type(text).__name__))
    lines = splitlines_at_most(text, MAX_LINES)
    if lines is None:
        raise HccnParseError("more than {} lines: more than any hccn_tool answer".format(MAX_LINES))
    return lines


# -- -link -g ------------------------------------------------------------------------------------------

_LINK = re.compile(r"^\s*link status\s*:\s*(UP|DOWN)\s*$")


def parse_link(text: str) -> str:
    """`link status: UP|DOWN` (tool_ops.c:1764-1766; the 950's -link prints the same) -> "UP" or "DOWN"."""
    for line in _lines(text):
        match = _LINK.match(line)
        if match:
            return match.group(1)
    raise HccnParseError("no 'link status: UP|DOWN' line")


# -- -net_health -g ------------------------------------------------------------------------------------

# tool_ops.c:36-47, code -> text as the current source prints it; older drivers printed "Socket failed".
NET_HEALTH_STATES = ("Success", "Socket fail", "Receive timeout", "Unreachable", "Time exceeded", "Fault",
                     "Init", "Thread error", "Detect ip set", "Unknown")
OLD_SPELLINGS = {"Socket failed": "Socket fail"}
# npu-exporter's npu_chip_info_network_status counts these as healthy (1).
HEALTHY_NET_STATES = frozenset(("Success", "Init"))
_NET_HEALTH = re.compile(r"^\s*net health status\s*:\s*(\S.*?)\s*$")


def parse_net_health(text: str) -> str:
    """`net health status: <state>` -> the state as printed (e.g. "Socket failed" on older drivers)."""
    for line in _lines(text):
        match = _NET_HEALTH.match(line)
        if match:
            return match.group(1)
    raise HccnParseError("no 'net health status: ...' line")


def canonical_net_health(printed: Optional[str]) -> Optional[str]:
    """The state in the current source's spelling; None for text outside the source's table."""
    if printed is None:
        return None
    printed = OLD_SPELLINGS.get(printed, printed)
    return printed if printed in NET_HEALTH_STATES else None


# -- -link_stat -g -------------------------------------------------------------------------------------

LINK_UP, LINK_DOWN = "UP", "DOWN"


@dataclass(frozen=True)
class LinkChange:
    time: datetime.datetime  # as the tool printed it (asctime, no zone: the host's local time)
    state: str  # "UP" or "DOWN"


@dataclass(frozen=True)
class LinkStat:
    up_count: int
    down_count: Optional[int] = None  # older drivers print no "link down count" line
    current_time: Optional[datetime.datetime] = None  # the tool's own clock, for reading the records' ages
    changes: Tuple[LinkChange, ...] = ()  # newest first, as printed (at most 10)


# "[devid 0]" (current) or "[device 0]" (oldest) prefix; tool.c:2245-2270.
_PREFIX = r"^\s*(?:\[dev(?:id|ice)\s*\d+\]\s*)?"
_COUNT = re.compile(_PREFIX + r"link (up|down) count\s*:\s*(\d{1,20})\s*$")
_CURRENT = re.compile(_PREFIX + r"current time\s*:\s*(.*?)\s*$")
_RECORD = re.compile(_PREFIX + r"(\w{3} \w{3}\s+\d{1,2} \d\d:\d\d:\d\d \d{4})\s+LINK[ _](UP|DOWN)\s*$")
# The 950's table row: | NPU | UDie | Port | LINK_UP | Mon Feb 9 21:45:51 2026 |
_TABLE_RECORD = re.compile(r"^\s*\|(?:\s*\d+\s*\|){3}\s*LINK_(UP|DOWN)\s*\|\s*(\w{3} \w{3}\s+\d{1,2} "
                           r"\d\d:\d\d:\d\d \d{4})\s*\|\s*$")
_COUNT_LIMIT = 2 ** 64  # the counts are %llu


def parse_asctime(text: str) -> Optional[datetime.datetime]:
    """"Tue Aug  1 14:43:40 2022" -> a naive datetime; None for anything else (e.g. "NA")."""
    try:
        return datetime.datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None


def parse_link_stat(text: str) -> LinkStat:
    """Every layout the captures show: "[devid N]" with and without the down-count line, "[device N]",
    and the 950's counts-then-table form (LINK_UP / LINK_DOWN)."""
    counts: Dict[str, int] = {}
    current = None
    changes: List[LinkChange] = []
    for line in _lines(text):
        match = _COUNT.match(line)
        if match:
            value = int(match.group(2))
            if value >= _COUNT_LIMIT:
                raise HccnParseError("link {} count {} does not fit the tool's counter".format(*match.groups()))
            counts.setdefault(match.group(1), value)
            continue
        match = _CURRENT.match(line)
        if match:
            current = parse_asctime(match.group(1))
            continue
        match = _RECORD.match(line)
        if match:
            when, state = parse_asctime(match.group(1)), match.group(2)
        else:
            match = _TABLE_RECORD.match(line)
            if not match:
                continue
            state, when = match.group(1), parse_asctime(match.group(2))
        if when is None:
            raise HccnParseError("link change record with an unreadable time: {!r}".format(line.strip()[:80]))
        changes.append(LinkChange(when, state))
    if "up" not in counts:
        raise HccnParseError("no 'link up count' line")
    return LinkStat(up_count=counts["up"], down_count=counts.get("down"), current_time=current,
                    changes=tuple(changes))


# -- -speed -g -----------------------------------------------------------------------------------------

_SPEED = re.compile(r"^\s*Speed\s*:\s*(?:(\d{1,9}) Mb/s|(Unknown!))\s*$")
# The 950's table: | NPU | UDie | Port | Speed | ... with "400 G" in the Speed column.
_SPEED_CELL = re.compile(r"^(\d{1,6}) G$")


def parse_speed(text: str) -> Optional[int]:
    """`Speed: 200000 Mb/s` -> 200000 (Mb/s); `Speed: Unknown!` (link down, tool_ext.c:868) -> None."""
    lines = _lines(text)
    for line in lines:
        match = _SPEED.match(line)
        if match:
            return None if match.group(2) else int(match.group(1))
    header = None
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")] if line.strip().startswith("|") else []
        if "Speed" in cells and header is None:
            header = cells.index("Speed")
        elif header is not None and len(cells) > header:
            cell = cells[header]
            match = _SPEED_CELL.match(cell)
            if match:
                return int(match.group(1)) * 1000
            if cell.lower() in ("unknown", "na"):
                return None
    raise HccnParseError("no 'Speed: <n> Mb/s' line")


# -- -bandwidth -g -------------------------------------------------------------------------------------

_BANDWIDTH = re.compile(r"^\s*Bandwidth (TX|RX)\s*:\s*(\d{1,10}\.\d\d) MB/sec\s*$")


def parse_bandwidth(text: str) -> Tuple[float, float]:
    """`Bandwidth TX:  12.34 MB/sec` / `Bandwidth RX: ...` (tool_ops_ext.c:1003-1006) -> (tx, rx) in MB/s."""
    found: Dict[str, float] = {}
    for line in _lines(text):
        match = _BANDWIDTH.match(line)
        if match:
            found.setdefault(match.group(1), float(match.group(2)))
    if set(found) != {"TX", "RX"}:
        raise HccnParseError("expected 'Bandwidth TX: <n> MB/sec' and 'Bandwidth RX: <n> MB/sec' lines")
    return found["TX"], found["RX"]


# -- -stat -g ------------------------------------------------------------------------------------------

_STAT = re.compile(r"^\s*([a-z][a-z0-9_]*)\s*:\s*(\d{1,20})\s*$")


def parse_stat(text: str) -> Dict[str, int]:
    """`packet statistics:` then `name:value` lines (tool.c:1693-1758) -> {name: value}. Counters the answer
    leaves out are absent (npu-exporter exports them as 0; here they are unknown)."""
    lines = _lines(text)
    counters: Dict[str, int] = {}
    header = False
    for line in lines:
        if line.strip() == "packet statistics:":
            header = True
            continue
        match = _STAT.match(line)
        if match:
            value = int(match.group(2))
            if value >= _COUNT_LIMIT:
                raise HccnParseError("counter {} = {} does not fit the tool's counter".format(match.group(1), value))
            counters.setdefault(match.group(1), value)
    if not header and not counters:
        raise HccnParseError("no 'packet statistics:' header and no counter lines")
    return counters


# -- -ip -g / -gateway -g / -netdetect -g --------------------------------------------------------------

@dataclass(frozen=True)
class IpAddress:
    address: str
    netmask: Optional[str] = None


_IP = re.compile(r"^\s*ipaddr\s*:\s*(\S+)\s*$")
_MASK = re.compile(r"^\s*netmask\s*:\s*(\S+)\s*$")


def parse_ip(text: str) -> List[IpAddress]:
    """`ipaddr:%s` / `netmask:%s` per port (tool_ops_ext.c:1337-1338) -> the addresses. Empty stdout is what
    a chip with no IP preset prints (its error goes to stderr): no addresses."""
    addresses: List[IpAddress] = []
    lines = _lines(text)
    for line in lines:
        match = _IP.match(line)
        if match:
            addresses.append(IpAddress(match.group(1)))
            continue
        match = _MASK.match(line)
        if match and addresses and addresses[-1].netmask is None:
            addresses[-1] = IpAddress(addresses[-1].address, match.group(1))
    if not addresses and any(line.strip() for line in lines):
        raise HccnParseError("no 'ipaddr:' line")
    return addresses


_GATEWAY = re.compile(r"^\s*default gateway\s*:\s*([^,\s]+)\s*(?:,\s*Iface\s*:\s*(\S+))?\s*$")


def parse_gateway(text: str) -> str:
    """`default gateway:%s, Iface:eth%d` (tool_ops_ext.c:856) -> the gateway address."""
    for line in _lines(text):
        match = _GATEWAY.match(line)
        if match:
            return match.group(1)
    raise HccnParseError("no 'default gateway:' line")


_NETDETECT = re.compile(r"^\s*netdetect addr\s*:\s*(\S+)\s*$")
_UNSET_ADDRESSES = frozenset(("0.0.0.0", "0:0:0:0:0:0:0:0", "::"))


def parse_netdetect(text: str) -> Optional[str]:
    """`netdetect addr: %s` (tool_ops.c:1149) -> the address; None where it is the unset default."""
    for line in _lines(text):
        match = _NETDETECT.match(line)
        if match:
            address = match.group(1)
            return None if address in _UNSET_ADDRESSES else address
    raise HccnParseError("no 'netdetect addr:' line")


# -- -fec -g, -tls -g, the 950's -dev_info (read by tests and tools, not polled) -----------------------

_FEC = re.compile(r"^\s*fec mode\s*:\s*(\S.*?)\s*$")


def parse_fec(text: str) -> Optional[str]:
    """`fec mode: rs FEC mode` -> "rs FEC mode"; 910B/A3 builds print that they cannot switch it -> None."""
    for line in _lines(text):
        match = _FEC.match(line)
        if match:
            return match.group(1)
        if "does not support switching fec mode" in line:
            return None
    raise HccnParseError("no 'fec mode:' line")


_TLS = re.compile(r"dev_id:(\d{1,10}), tls switch\[(\d{1,10})\].*tls preconfigured\[(\d{1,10})\].*"
                  r"tls alarm time threshold\[(\d{1,10})\]days")


def parse_tls_switch(text: str) -> Dict[str, int]:
    """The first `-tls -g` line (tool_tls.c:170-171) -> {dev_id, switch, preconfigured, alarm_days}."""
    for line in _lines(text):
        match = _TLS.search(line)
        if match:
            return dict(zip(("dev_id", "switch", "preconfigured", "alarm_days"), map(int, match.groups())))
    raise HccnParseError("no 'dev_id:N, tls switch[...]' line")


@dataclass(frozen=True)
class UbPort:
    udie: int
    port: int
    speed_gbps: Optional[int]
    port_type: str  # UB | ETH
    link: str
    media: str


def parse_dev_info_ports(text: str) -> List[UbPort]:
    """The 950's `-g -dev_info` first table (the one npu-exporter reads to find the ports)."""
    ports: List[UbPort] = []
    in_table = False
    for line in _lines(text):
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[:2] == ["UDie ID", "Port ID"]:
            in_table = True
            continue
        if in_table and line.strip().startswith("+") and ports:
            break
        if in_table and len(cells) == 6 and all(cell.isdigit() and len(cell) <= 10 for cell in cells[:2]):
            speed = int(cells[2]) if cells[2].isdigit() and len(cells[2]) <= 10 else None
            ports.append(UbPort(int(cells[0]), int(cells[1]), speed, cells[3], cells[4], cells[5]))
    if not ports:
        raise HccnParseError("no UDie/Port table")
    return ports


# -- errors ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HccnError:
    kind: str  # see ERROR_TEXTS
    message: str  # the line as printed


# FORMATS.md section 3: the texts, matched on text since exit codes collide (13 is both "not supported" and
# "no IP preset").
ERROR_TEXTS = (
    ("The command is not supported on this product.", "unsupported"),
    ("This device does not support bonding!", "unsupported"),
    ("Get ipconf failed, because no ip was preset there!", "no_ip"),
    ("Get gateway failed, because no gateway was preset there!", "no_gateway"),
    ("Get device health status failed!", "not_ready"),
    ("The device is not exist!", "no_device"),
    ("Get invalid device id.", "invalid_device"),
    ("Optical module is not present.", "optical_absent"),
    ("The system is in optical module initializing, please try again later.", "busy"),
    ("I2c is busy. Please try again.", "busy"),
    ("hccn_tool is busy, please try again.", "busy"),
    ("Get lock failed. Please try again.", "busy"),
    ("Execute failed: Link status is down.", "link_down"),
    ("permission denied: pls check this cmd run permission.", "permission"),
    ("The VM does not support this command.", "unsupported"),
    ("Control link unreachable.", "failed"),
    ("Command execute failed!", "failed"),
    ("Cmd execute failed!", "failed"),
    ("Get invalid major cmd.", "usage"),
    ("Get unknown option!", "usage"),
    ("The total count of input parameters is wrong!", "usage"),
)


ERROR_LINES = 64  # an error is printed alone, or after a few lines of the tool's own
ERROR_HEAD_CHARS = ERROR_LINES * 128  # the part of an answer looked at: its lines are not all split


def classify_error(stdout: str, stderr: str = "") -> Optional[HccnError]:
    """The error hccn_tool printed (on stdout or stderr), or None; never raises."""
    for stream in (stderr, stdout):
        if not isinstance(stream, str):
            continue
        for line in stream[:ERROR_HEAD_CHARS].splitlines()[:ERROR_LINES]:
            text = line.strip()
            for known, kind in ERROR_TEXTS:
                if text == known:
                    return HccnError(kind, known)
    return None
