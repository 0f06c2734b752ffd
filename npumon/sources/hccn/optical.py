"""Pure parser of `hccn_tool -i <phy id> -optical -g`: the port's optical module, no I/O.

Format: shared/reference/hccn/FORMATS.md section 2.1 (hicann/driver @ ef377e95 tool.c:1425-1599): every key
padded to 21 characters + ": ", lanes 0..3 as "Tx Power0".."Tx Power3" (older drivers or doc edits: one
un-indexed "Tx Power"), "NA" / "not supported" / "get failed" where there is no value. Captures:
tests/fixtures/hccn/optical_*.txt. Units as printed: mW, mA, mV, C.
"""

import math
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .parse import HccnParseError, _lines

MAX_LANES = 8  # an 8-lane module shared by two NPUs prints 4 of them; 8 is the most a module has


@dataclass(frozen=True)
class Optical:
    present: Optional[bool]  # "present" / "not present"; None if the line is missing or unreadable
    temperature_celsius: Optional[float] = None
    vcc_mv: Optional[float] = None
    tx_power_mw: List[Optional[float]] = field(default_factory=list)  # per lane
    rx_power_mw: List[Optional[float]] = field(default_factory=list)
    tx_bias_ma: List[Optional[float]] = field(default_factory=list)
    tx_los: Optional[int] = None  # flag bytes, one bit per lane
    rx_los: Optional[int] = None
    tx_lol: Optional[int] = None
    rx_lol: Optional[int] = None
    # the module's own alarm thresholds: vcc_high_mv, vcc_low_mv, temp_high_celsius, temp_low_celsius,
    # tx_power_high_mw, tx_power_low_mw, rx_power_high_mw, rx_power_low_mw (None where NA)
    thresholds: Dict[str, Optional[float]] = field(default_factory=dict)
    vendor: Optional[str] = None
    part_number: Optional[str] = None
    identifier: Optional[str] = None  # "QSFP28 or later", ...
    media_snr_db: List[Optional[float]] = field(default_factory=list)


_LINE = re.compile(r"^(\S[^:]*?)\s*:\s*(.*?)\s*$")
_NUMBER = re.compile(r"^(-?\d{1,12}(?:\.\d{1,6})?)\s*(mW|mA|mV|C|dB|nm)$")
_FLAG = re.compile(r"^0x([0-9a-fA-F]{1,2})$")
_LANE_KEY = re.compile(r"^(Tx Power|Rx Power|Tx Bias|Media SNR Lane|Host SNR Lane)\s?(\d)?$")
THRESHOLD_KEYS = {
    "Vcc High Thres": "vcc_high_mv", "Vcc Low Thres": "vcc_low_mv",
    "Temp High Thres": "temp_high_celsius", "Temp Low Thres": "temp_low_celsius",
    "TxPower High Thres": "tx_power_high_mw", "TxPower Low Thres": "tx_power_low_mw",
    "RxPower High Thres": "rx_power_high_mw", "RxPower Low Thres": "rx_power_low_mw",
}
_FLAGS = {"Tx Los Flag": "tx_los", "Rx Los Flag": "rx_los", "Tx LoL Flag": "tx_lol", "Rx LoL Flag": "rx_lol"}
_LANE_FIELDS = {"Tx Power": "tx_power_mw", "Rx Power": "rx_power_mw", "Tx Bias": "tx_bias_ma",
                "Media SNR Lane": "media_snr_db"}


def _number(value: str) -> Optional[float]:
    """"4.4035 mW" -> 4.4035; NA, "not supported", "get failed" and anything else -> None."""
    match = _NUMBER.match(value)
    if not match:
        return None
    number = float(match.group(1))
    return number if math.isfinite(number) else None


def parse_optical(text: str) -> Optical:
    lines = _lines(text)
    if not any(line.strip() == "optical info:" for line in lines):
        raise HccnParseError("no 'optical info:' line")
    present: Optional[bool] = None
    values: Dict[str, object] = {"thresholds": {}}
    lanes: Dict[str, Dict[int, Optional[float]]] = {name: {} for name in _LANE_FIELDS.values()}
    for line in lines:
        match = _LINE.match(line)
        if not match or line.count(":") != 1:  # npu-exporter drops these too (vendor ids hold no colon)
            continue
        key, value = match.group(1), match.group(2)
        if key == "present":
            present = {"present": True, "not present": False}.get(value)
        elif key == "temperature":
            values["temperature_celsius"] = _number(value)
        elif key == "Vcc":
            values["vcc_mv"] = _number(value)
        elif key in THRESHOLD_KEYS:
            values["thresholds"][THRESHOLD_KEYS[key]] = _number(value)  # type: ignore[index]
        elif key in _FLAGS:
            flag = _FLAG.match(value)
            values[_FLAGS[key]] = int(flag.group(1), 16) if flag else None
        elif key == "vendor name":
            values["vendor"] = value or None
        elif key == "vendor part number":
            values["part_number"] = value or None
        elif key == "xsfp identifier":
            values["identifier"] = value or None
        else:
            lane = _LANE_KEY.match(key)
            if lane and lane.group(1) in _LANE_FIELDS:
                index = int(lane.group(2) or 0)
                if index < MAX_LANES:
                    lanes[_LANE_FIELDS[lane.group(1)]].setdefault(index, _number(value))
    for name, by_lane in lanes.items():
        if by_lane:
            values[name] = [by_lane.get(index) for index in range(max(by_lane) + 1)]
    return Optical(present=present, **values)  # type: ignore[arg-type]


def lanes_outside(values: List[Optional[float]], low: Optional[float], high: Optional[float]) -> List[int]:
    """The lanes whose value is below `low` or above `high` (the module's own thresholds; None: unknown)."""
    outside = []
    for lane, value in enumerate(values):
        if value is None:
            continue
        if (low is not None and value < low) or (high is not None and value > high):
            outside.append(lane)
    return outside
