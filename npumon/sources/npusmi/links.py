"""Parsers for the interconnect queries: `npu-smi info -t hccs`, `-t hccs-bw` and `-t sio-info` (per chip).

Formats from the driver's npu-smi printer (shared/reference/interconnect-and-compute.md 1.2-1.3):

* `-t hccs -i N -c C`: `\\t%-30s : value` lines; `hccs health status` and `hccs first error lane` hold one value,
  the others one `[...]` list with one entry per link (`%-20u ` each). npu-smi prints no link numbers: 7 entries
  are links 1-7 (910B, A3 900 SuperPoD), 6 entries links 2-7 (Atlas 9000 A3 SuperPoD), any other count 1..n;
  the 300I Duo (310P) prints only the packet, byte, retry and error lines, one entry each: its HCCS index 0.
  `tx/rx bytes` are packets x 20 computed by npu-smi, so they are not kept.
* `-t hccs-bw -i N -c C -time T`: a header row `hccs link  tx_bandwidth(GB/S)  rx_bandwidth(GB/S)`, one row per
  link number, then `total`.
* `-t sio-info -i N -c C`: `TX Error Count : n`, `RX Error Count : n` (the A3's die-to-die CRC errors).

Pure text -> `{chip id: {ChipSample field: value}}` like kv.py; the chip id is the one the call asked for.
"""

import re
from typing import Any, Dict, List, Optional

from .common import NpuSmiParseError, is_null, to_float, to_int

LINK_SLOTS = 7  # HCCS macros 1-7 (DCMI_HCCS_910B_PCS_NUM)
_LINE = re.compile(r"^\s*(?P<key>[A-Za-z][^:]*?)\s*:\s*(?P<value>.*?)\s*$")
# key -> (link field, converter); the list lines of `-t hccs`
_LINK_KEYS = {
    "hccs lane mode": ("lane_mode", to_int),
    "hccs link lane list": ("lanes", None),
    "hccs link speed": ("speed_gbps", to_int),
    "hccs tx packets": ("tx_packets", to_int),
    "hccs rx packets": ("rx_packets", to_int),
    "hccs retry count": ("retries", to_int),
    "hccs error count": ("crc_errors", to_int),
}
HCCS_HEALTH_KEY = "hccs health status"
HCCS_FIRST_ERROR_KEY = "hccs first error lane"


def link_numbers(count: int) -> List[int]:
    """The HCCS link numbers of `count` printed entries (see the module doc)."""
    if count == LINK_SLOTS - 1:
        return list(range(2, LINK_SLOTS + 1))
    return list(range(1, count + 1))


def _key_values(text: str, what: str) -> Dict[str, str]:
    values = {}
    for line in text.splitlines():
        match = _LINE.match(line)
        if match:
            values[match.group("key").strip().lower()] = match.group("value")
    if not values:
        raise NpuSmiParseError("{}: no 'key : value' line in the output".format(what))
    return values


def _entries(key: str, cell: str) -> List[str]:
    cell = cell.strip()
    if not (cell.startswith("[") and cell.endswith("]")):
        raise NpuSmiParseError("hccs: {!r} is not a [..] list: {!r}".format(key, cell[:80]))
    return cell[1:-1].split()


def parse_hccs(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t hccs -i N -c C` -> `hccs` = {"health": "OK"|"NOK"|None, "first_error_lane": int|None,
    "links": [{"link", "lane_mode", "lanes", "speed_gbps", "tx_packets", "rx_packets", "retries",
    "crc_errors"}]} (a field a build does not print is None)."""
    values = _key_values(text, "hccs")
    if HCCS_HEALTH_KEY not in values and not any(key in values for key in _LINK_KEYS):
        raise NpuSmiParseError("hccs: none of the hccs lines in the output")
    columns: Dict[str, List[Any]] = {}
    for key, (field, convert) in _LINK_KEYS.items():
        if key not in values:
            continue
        entries = _entries(key, values[key])
        if convert is None:
            columns[field] = [None if is_null(entry) else _lane_list(entry) for entry in entries]
        else:
            columns[field] = [convert(entry) for entry in entries]
    counts = {len(column) for column in columns.values()}
    if len(counts) > 1:
        raise NpuSmiParseError("hccs: the link lists differ in length ({})".format(
            ", ".join("{} {}".format(field, len(column)) for field, column in sorted(columns.items()))))
    count = counts.pop() if counts else 0
    if count > 16:
        raise NpuSmiParseError("hccs: {} links listed, at most 16 exist".format(count))
    # no health and no lane lines, one entry: the 310P's statistics-only form (index 0)
    statistics_only = HCCS_HEALTH_KEY not in values and "lane_mode" not in columns and count == 1
    links = []
    for index, number in enumerate([0] if statistics_only else link_numbers(count)):
        link: Dict[str, Any] = {"link": number}
        for field, _ in _LINK_KEYS.values():
            link[field] = columns[field][index] if field in columns else None
        links.append(link)
    health = values.get(HCCS_HEALTH_KEY)
    health = None if health is None or is_null(health) else health.strip()
    if health not in (None, "OK", "NOK"):
        raise NpuSmiParseError("hccs: health status {!r} is neither OK nor NOK".format(health))
    first_error = values.get(HCCS_FIRST_ERROR_KEY)
    return {0 if chip is None else chip: {"hccs": {
        "health": health, "first_error_lane": None if first_error is None else to_int(first_error),
        "links": links}}}


def _lane_list(entry: str) -> str:
    if not re.fullmatch(r"[01]{1,8}", entry):
        raise NpuSmiParseError("hccs: lane list entry {!r} is not 0/1 digits".format(entry))
    return entry


_BW_ROW = re.compile(r"^\s*(?P<link>\d+|total)\s+(?P<tx>\S+)\s+(?P<rx>\S+)\s*$")


def parse_hccs_bandwidth(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t hccs-bw -i N -c C -time T` -> `hccs_bandwidth` = {"links": [{"link", "tx_gbps",
    "rx_gbps"}], "total_tx_gbps", "total_rx_gbps"} in GB/s as printed."""
    if "tx_bandwidth" not in text:
        raise NpuSmiParseError("hccs-bw: no 'hccs link tx_bandwidth(GB/S) rx_bandwidth(GB/S)' header")
    links = []
    totals: Dict[str, Optional[float]] = {"total_tx_gbps": None, "total_rx_gbps": None}
    for line in text.splitlines():
        match = _BW_ROW.match(line)
        if not match:
            continue
        tx, rx = to_float(match.group("tx")), to_float(match.group("rx"))
        if match.group("link") == "total":
            totals = {"total_tx_gbps": tx, "total_rx_gbps": rx}
        else:
            links.append({"link": int(match.group("link")), "tx_gbps": tx, "rx_gbps": rx})
    if not links:
        raise NpuSmiParseError("hccs-bw: no link row under the header")
    if len(links) > 16:
        raise NpuSmiParseError("hccs-bw: {} link rows, at most 16 exist".format(len(links)))
    return {0 if chip is None else chip: {"hccs_bandwidth": dict(totals, links=links)}}


def parse_sio(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t sio-info -i N -c C` -> `sio` = {"tx_errors", "rx_errors"} (SIO CRC error counts)."""
    values = _key_values(text, "sio-info")
    if "tx error count" not in values or "rx error count" not in values:
        raise NpuSmiParseError("sio-info: expected 'TX Error Count' and 'RX Error Count' lines")
    return {0 if chip is None else chip: {"sio": {"tx_errors": to_int(values["tx error count"]),
                                                 "rx_errors": to_int(values["rx error count"])}}}
