"""Parsers for npu-smi's key/value outputs (`info -t <type>`, `info -l`, `info -m`) and its error texts.

One module on purpose (over 400 lines): the `-t` parsers share the line reader, the unit conversions and
the error texts they must tell apart from values; each parser is a short function of its own.

Pure text -> values, no I/O. The per-chip parsers return `{chip id: {ChipSample field: value}}` in base
units, so a caller merges a result into a chip with `ChipSample.update`.

How npu-smi prints these outputs (FORMATS.md section 4): every line is `\\t%-30s : %s` (ECC pads keys to
40; copies in blogs and docs indent with spaces or not at all). A card-level query (`-i N`) prints
`NPU ID` and `Chip Count`, then one block per chip separated by blank lines. `-t common`, `-t board` and
card-level `-t health` print `Chip ID` at the start of a chip's block; `-t usages`, `-t power`, `-t temp`
and `-t ecc` print it at the end. The card's MCU gets a block of its own holding `Chip Name : mcu` (or
`MCU`); it is not an NPU chip and never appears in the results. Chip-level queries (`-i N -c C`) and the
Ascend 950 print no `Chip ID`: their values belong to the `chip` the caller names (default 0).

Every parser raises NpuSmiParseError, and nothing else, when it cannot read its input; when npu-smi
printed one of its error messages instead of data, the exception says so and quotes it.
"""

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from ..lines import splitlines_at_most
from ..runner import CommandResult
from .common import NpuSmiParseError, head_and_tail, is_null, mib_to_bytes, percent_to_ratio, to_float, to_int

# No real key/value answer comes near this (a whole card's `-t board` is some 50 lines); more is not an
# answer, and is refused before it is split into lines and fields (some 9 times its size).
MAX_LINES = 4096

# ---------------------------------------------------------------------------------------------------
# Error messages

@dataclass(frozen=True)
class NpuSmiError:
    """One of npu-smi's known error messages, read from its output."""

    kind: str  # see _ERROR_PATTERNS for the kinds
    message: str  # the line as printed, stripped
    code: Optional[int]  # the DCMI/npu-smi return code when printed ("ret is -8005")
    query: Optional[str]  # the query type the message names ("template-info")


# First match wins, so the specific wording of a kind comes before a general pattern that would also match.
_ERROR_PATTERNS = tuple((kind, re.compile(pattern)) for kind, pattern in (
    ("unsupported", r"This device does not support (?:querying|setting) (?P<query>[\w-]+)"),
    ("unsupported", r"This device does not support input parameter of -\w"),
    ("smp_mode", r"NPU is working in SMP mode, does not support querying (?P<query>[\w-]+)"),
    ("device_busy", r"dcmi model initialized failed, because the device is used\. ret is (?P<code>-?\d+)"),
    ("dcmi_init", r"dcmi mod\w* initiali[sz]\w* failed.*\bret is (?P<code>-?\d+)"),
    ("invalid_id", r"Invalid (?:card|chip) id\."),
    ("not_root", r"This command can be executed only by the root user"),
    ("no_card", r"There is no NPU card on this server"),
    ("query_failed", r'Failed to query "(?P<query>[\w-]+)" info'),
    ("query_failed", r"Failed to execute npu-smi .*\bret is (?P<code>-?\d+)"),
    ("query_failed", r"npu get board type failed\. ret is (?P<code>-?\d+)"),
    ("bad_parameter", r"Error parameter of -\w"),
    ("bad_parameter", r"Must input parameter of -\w"),
    ("unknown_command", r"Command or option is not found"),
))
# The literal text each pattern starts with: a line that starts with none of them is no error message, which
# str.startswith tells for every line of an answer at a fraction of trying the patterns on it.
_ERROR_PREFIXES = tuple(sorted({re.match(r"[^\\.^$*+?{}\[\]|()]*", pattern.pattern).group()
                                for _, pattern in _ERROR_PATTERNS}))


def classify_error(text: str) -> Optional[NpuSmiError]:
    """The first known npu-smi error message in `text`, or None when there is none.

    Driver log noise such as `DrvMngGetConsoleLogLevel failed.` that npu-smi prints before the real
    message is passed over, so `message` is the line that says what went wrong. Only the head and tail of
    a long output are searched (common.head_and_tail).
    """
    for line in head_and_tail(text).splitlines():
        stripped = line.strip()
        if not stripped.startswith(_ERROR_PREFIXES):
            continue
        for kind, pattern in _ERROR_PATTERNS:
            match = pattern.match(stripped)
            if match:
                groups = match.groupdict()
                code = groups.get("code")
                return NpuSmiError(kind=kind, message=stripped,
                                   code=None if code is None else int(code), query=groups.get("query"))
    return None


# ---------------------------------------------------------------------------------------------------
# Reading `key : value` lines

# The key has no colon of its own; values may (bus ids, error texts), so the first " : " splits.
_KV_LINE = re.compile(r"^\s*(?P<key>[^\s:][^:]*?)\s+:(?:\s+(?P<value>.*?))?\s*$")
# Further `Error Information` strings: `\t<31 spaces>: <text>`.
_CONTINUATION_LINE = re.compile(r"^\s*:(?:\s+(?P<value>.*?))?\s*$")
# `npu-smi info ...`, `/usr/local/bin/npu-smi ...`, `$ npu-smi ...`, `root@host:~# npu-smi ...`
_COMMAND_LINE = re.compile(r"^\s*(?:.*?[$#]\s*)?(?:\S*/)?npu-smi(?:\s.*)?$")


def npu_smi_problem(result: CommandResult) -> Optional[str]:
    """What went wrong with an npu-smi call, from its result alone, or None."""
    if result.timed_out or result.error:
        return result.describe_failure()
    known = classify_error(result.output)
    if known is not None:
        return known.message
    return None


@dataclass
class _Field:
    key: str
    value: str
    line_number: int
    continuations: List[str] = field(default_factory=list)


def _first_output_line(lines: List[str]) -> int:
    """Index of the first line after any leading blank lines and the command line(s) of a capture."""
    for index, line in enumerate(lines):
        if line.strip() and not _COMMAND_LINE.match(line):
            return index
    return len(lines)


def _reject_error_text(text: str, what: str) -> None:
    error = classify_error(text)
    if error is not None:
        raise NpuSmiParseError("{}: npu-smi printed an error instead of data: {}".format(what, error.message))


def _split(text: str, what: str) -> List[str]:
    lines = splitlines_at_most(text, MAX_LINES)
    if lines is None:
        raise NpuSmiParseError("{}: more than {} lines: more than any npu-smi answer".format(what, MAX_LINES))
    return lines


def _read_groups(text: str, what: str) -> List[List[_Field]]:
    """The `key : value` lines of `text`, in groups that blank lines separate.

    A continuation line (`: more text`) belongs to the field before it even across blank lines, the way
    `-t health` prints its list of error information strings.
    """
    _reject_error_text(text, what)
    lines = _split(text, what)
    start = _first_output_line(lines)
    groups: List[List[_Field]] = [[]]
    after_blank = False
    for number, line in enumerate(lines[start:], start + 1):
        if not line.strip():
            after_blank = True
            continue
        continuation = _CONTINUATION_LINE.match(line)
        if continuation:
            if not groups[-1]:
                raise NpuSmiParseError("{}: line {} continues no field: {!r}".format(what, number, line))
            groups[-1][-1].continuations.append(continuation.group("value") or "")
            after_blank = False
            continue
        pair = _KV_LINE.match(line)
        if not pair:
            raise NpuSmiParseError("{}: line {} is not a 'key : value' line: {!r}".format(what, number, line))
        if after_blank and groups[-1]:
            groups.append([])
        groups[-1].append(_Field(pair.group("key"), pair.group("value") or "", number))
        after_blank = False
    if not groups[-1]:
        raise NpuSmiParseError("{}: no 'key : value' lines found".format(what))
    return groups


def _convert(item: _Field, converter: Callable[[str], Any], what: str) -> Any:
    try:
        return converter(item.value)
    except NpuSmiParseError as error:
        raise NpuSmiParseError("{}: line {} {!r}: {}".format(what, item.line_number, item.key, error)) from None


def _text(cell: str) -> Optional[str]:
    return None if is_null(cell) else cell.strip()


def _mib_to_bytes(cell: str) -> Optional[int]:
    return mib_to_bytes(to_int(cell))


# ---------------------------------------------------------------------------------------------------
# Chip blocks

_CARD_KEYS = frozenset(("NPU ID", "Chip Count"))
# Blocks of chips that are not NPUs: the card's management MCU, and the Hi3559 media CPU some Ascend 310
# boards list (FORMATS.md 4.2).
_NON_NPU_CHIP_NAMES = frozenset(("mcu", "3559"))


def _split_at_chip_ids(group: List[_Field], chip_id_first: bool) -> List[List[_Field]]:
    """Split a group that holds several chips without blank lines between them.

    Whether `Chip ID` opens or closes a chip's block depends on the query type, so the caller says.
    """
    parts: List[List[_Field]] = [[]]
    for item in group:
        opens_chip = chip_id_first and item.key == "Chip ID"
        if opens_chip and any(other.key not in _CARD_KEYS for other in parts[-1]):
            parts.append([])
        parts[-1].append(item)
        if item.key == "Chip ID" and not chip_id_first:
            parts.append([])
    return [part for part in parts if part]


def _is_non_npu_block(fields: Iterable[_Field]) -> bool:
    return any(item.key == "Chip Name" and item.value.strip().lower() in _NON_NPU_CHIP_NAMES
               for item in fields)


def _chip_blocks(text: str, what: str, chip_id_first: bool, chip: Optional[int],
                 known_keys: Iterable[str]) -> Dict[int, Dict[str, _Field]]:
    """`{chip id: {key: field}}` for the NPU chips in `text`; MCU blocks and card keys left out."""
    groups = _read_groups(text, what)
    known = frozenset(known_keys)
    if not any(item.key in known for group in groups for item in group):
        raise NpuSmiParseError("{}: none of the expected keys found (is this the output of "
                               "`npu-smi info -t {}`?)".format(what, what))
    default_chip = 0 if chip is None else chip
    blocks: Dict[int, Dict[str, _Field]] = {}
    for group in groups:
        for part in _split_at_chip_ids(group, chip_id_first):
            fields = [item for item in part if item.key not in _CARD_KEYS]
            if not fields or _is_non_npu_block(fields):
                continue
            chip_id = default_chip
            for item in fields:
                if item.key == "Chip ID":
                    chip_id = _convert(item, to_int, what)
                    if chip_id is None:
                        raise NpuSmiParseError("{}: line {}: Chip ID has no value".format(what, item.line_number))
            block = blocks.setdefault(chip_id, {})
            for item in fields:
                if item.key in block:
                    raise NpuSmiParseError("{}: line {}: {!r} printed twice for chip {}".format(
                        what, item.line_number, item.key, chip_id))
                block[item.key] = item
    return blocks


# A per-chip parser for outputs where one key gives one field: key -> (field name, converter).
_KeyTable = Dict[str, Tuple[str, Callable[[str], Any]]]


def _parse_simple(text: str, what: str, chip_id_first: bool, chip: Optional[int], table: _KeyTable,
                  ignored: Iterable[str] = ()) -> Dict[int, Dict[str, Any]]:
    blocks = _chip_blocks(text, what, chip_id_first, chip, list(table) + list(ignored))
    result = {}
    for chip_id, block in blocks.items():
        values = {}
        for key, (name, converter) in table.items():
            if key in block:
                values[name] = _convert(block[key], converter, what)
        result[chip_id] = values
    return result


_USAGES_KEYS: _KeyTable = {
    "Aicore Usage Rate(%)": ("aicore_ratio", percent_to_ratio),
    "Aivector Usage Rate(%)": ("aivector_ratio", percent_to_ratio),
    "Aicpu Usage Rate(%)": ("aicpu_ratio", percent_to_ratio),
    "Ctrlcpu Usage Rate(%)": ("ctrlcpu_ratio", percent_to_ratio),
    "Aicube Usage Rate(%)": ("aicube_ratio", percent_to_ratio),
    "Vectorcore Usage Rate(%)": ("vectorcore_ratio", percent_to_ratio),
    "NPU Utilization(%)": ("npu_util_ratio", percent_to_ratio),
    "HBM Bandwidth Usage Rate(%)": ("hbm_bandwidth_ratio", percent_to_ratio),
    "DDR Bandwidth Usage Rate(%)": ("ddr_bandwidth_ratio", percent_to_ratio),
    # 310/310B have only DDR, and name its bandwidth this way.
    "Memory Bandwidth Usage Rate(%)": ("ddr_bandwidth_ratio", percent_to_ratio),
}
# Capacities and memory usage come from `-t memory` and the main table; DVPP has no ChipSample field.
_USAGES_IGNORED = (
    "DDR Capacity(MB)", "DDR Usage Rate(%)", "DDR Hugepages Total(page)", "DDR Hugepages Usage Rate(%)",
    "HBM Capacity(MB)", "HBM Usage Rate(%)", "Memory Capacity(MB)", "Memory Usage Rate(%)",
    "Hugepages Total(page)", "Hugepages Usage Rate(%)",
    "DVPP VDEC Usage Rate(%)", "DVPP VPC Usage Rate(%)", "DVPP VENC Usage Rate(%)",
    "DVPP JPEGE Usage Rate(%)", "DVPP JPEGD Usage Rate(%)",
)


def parse_usages(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t usages -i N [-c C]`: the utilisation ratios the output prints."""
    return _parse_simple(text, "usages", False, chip, _USAGES_KEYS, _USAGES_IGNORED)


# The 310's "Rated Power Dissipation(W)" is the card's rated figure, a constant, not a reading; reporting
# it as power_watts would show a flat line at the rating, so it is recognised and left out.
_RATED_POWER_KEYS = ("Rated Power Dissipation(W)", "Power Dissipation(W)")

_COMMON_KEYS: _KeyTable = {
    "Aicore Usage Rate(%)": ("aicore_ratio", percent_to_ratio),
    "Temperature(C)": ("temperature_celsius", to_float),
    "NPU Real-time Power(W)": ("power_watts", to_float),
}
_COMMON_IGNORED = ("Memory Usage Rate(%)", "HBM Usage Rate(%)", "Aicore Freq(MHZ)", "Aicore curFreq(MHZ)",
                   "Aicore Count") + _RATED_POWER_KEYS


def parse_common(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t common -i N`: AI core usage, temperature and real-time power per chip.

    On 310P cards the MCU block carries the card's power; it is left out with the MCU, because it is not
    the power of any one chip.
    """
    return _parse_simple(text, "common", True, chip, _COMMON_KEYS, _COMMON_IGNORED)


_POWER_KEYS: _KeyTable = {"NPU Real-time Power(W)": ("power_watts", to_float)}


def parse_power(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t power -i N [-c C]`: real-time power in watts (310 rated power is left out)."""
    return _parse_simple(text, "power", False, chip, _POWER_KEYS, _RATED_POWER_KEYS)


# Note the space before "(C)", unlike "Temperature(C)" in `-t common`.
_TEMP_KEYS: _KeyTable = {
    "NPU Temperature (C)": ("temperature_celsius", to_float),
    "Temperature (C)": ("temperature_celsius", to_float),
}


def parse_temp(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t temp -i N [-c C]`: chip temperature (the MCU's board sensors are left out)."""
    return _parse_simple(text, "temp", False, chip, _TEMP_KEYS)


_BOARD_KEYS: _KeyTable = {
    "Firmware Version": ("firmware_version", _text),
    "Software Version": ("driver_version", _text),  # npu-smi calls the driver "software"
    "Compatibility": ("compatibility", _text),
}


def parse_board(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t board -i N [-c C]`: firmware and driver versions and their compatibility.

    The card-level output has no `Chip ID`; its values describe the whole card and come back under
    `chip` (default 0).
    """
    return _parse_simple(text, "board", True, chip, _BOARD_KEYS)


_MEMORY_KEYS: _KeyTable = {
    "HBM Capacity(MB)": ("hbm_total_bytes", _mib_to_bytes),
    "DDR Capacity(MB)": ("memory_total_bytes", _mib_to_bytes),
}
_MEMORY_IGNORED = ("DDR Clock Speed(MHz)", "HBM Clock Speed(MHz)", "HBM Temperature(C)", "HBM Manufacturer ID")


def parse_memory(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t memory -i N [-c C]`: HBM and DDR capacities in bytes.

    No card-level capture with several chips is known; `Chip ID` is taken to close a block as in
    `-t usages`, which matters only if npu-smi ever prints chips without blank lines between them.
    """
    return _parse_simple(text, "memory", False, chip, _MEMORY_KEYS, _MEMORY_IGNORED)


def _ecc_key_table() -> Dict[str, Tuple[str, str]]:
    """ECC key -> (memory, counter), counter one of single, double, isolated_single, isolated_double."""
    table = {}
    for memory in ("DDR", "HBM"):
        for bit in ("Single", "Double"):
            table["{} {} Bit Error Count".format(memory, bit)] = (memory.lower(), bit.lower())
            table["{} {} Bit Isolated Pages Count".format(memory, bit)] = (memory.lower(), "isolated_" + bit.lower())
    # 310/310B print one unprefixed pair for their only memory, DDR.
    table["Single-bit Error Count"] = ("ddr", "single")
    table["Double-bit Error Count"] = ("ddr", "double")
    return table


_ECC_KEYS = _ecc_key_table()
_ECC_IGNORED = tuple("{} {} Bit {}".format(memory, bit, counter)
                     for memory in ("DDR", "HBM") for bit in ("Single", "Double")
                     for counter in ("Aggregate Total Err Cnt", "Next-Isolated Pages Count"))


def _sum_known(values: Iterable[Optional[int]]) -> Optional[int]:
    """Sum of the printed values; None only when none was printed.

    With some counters NA the sum is a lower bound, which still shows errors that were reported.
    """
    known = [value for value in values if value is not None]
    return sum(known) if known else None


def parse_ecc(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t ecc -i N`: ECC counters per memory plus their totals over memories.

    `ecc` is `{"hbm"|"ddr": {"single", "double", "isolated_pages"}}` (isolated pages = single-bit +
    double-bit isolated pages); a memory appears only when the output prints it. Saturated counters
    (4294967295) are kept as printed.
    """
    blocks = _chip_blocks(text, "ecc", False, chip, list(_ECC_KEYS) + list(_ECC_IGNORED))
    result = {}
    for chip_id, block in blocks.items():
        counters: Dict[str, Dict[str, Optional[int]]] = {}
        for key, (memory, counter) in _ECC_KEYS.items():
            if key in block:
                counters.setdefault(memory, {})[counter] = _convert(block[key], to_int, "ecc")
        ecc = {
            memory: {
                "single": counts.get("single"),
                "double": counts.get("double"),
                "isolated_pages": _sum_known((counts.get("isolated_single"), counts.get("isolated_double"))),
            }
            for memory, counts in counters.items()
        }
        if not ecc:
            result[chip_id] = {}
            continue
        result[chip_id] = {
            "ecc": ecc,
            "ecc_single_bit_errors": _sum_known(counts["single"] for counts in ecc.values()),
            "ecc_double_bit_errors": _sum_known(counts["double"] for counts in ecc.values()),
            "ecc_isolated_pages": _sum_known(counts["isolated_pages"] for counts in ecc.values()),
        }
    return result


_HEALTH_KEYS = ("Health Status", "Health")  # chip-level before 950 / card-level and 950
_ERROR_CODE = re.compile(r"^[0-9A-Fa-f]+$")


def _error_codes(item: _Field) -> List[str]:
    if is_null(item.value):
        return []
    codes = item.value.split()
    for code in codes:
        if not _ERROR_CODE.match(code):
            raise NpuSmiParseError("health: line {} 'Error Code': {!r} is not a hex code".format(
                item.line_number, code))
    return [code.upper() for code in codes]


def _error_information(item: _Field) -> List[str]:
    texts = [item.value] + item.continuations
    return [text.strip() for text in texts if not is_null(text)]


def parse_health(text: str, chip: Optional[int] = None) -> Dict[int, Dict[str, Any]]:
    """`npu-smi info -t health -i N [-c C]`: health as printed, error codes and their descriptions.

    Card-level output prints only `Health` per chip; the chip-level output adds `Error Code` (hex codes
    on one line) and `Error Information` (one string per line).
    """
    blocks = _chip_blocks(text, "health", True, chip, _HEALTH_KEYS + ("Error Code", "Error Information"))
    result = {}
    for chip_id, block in blocks.items():
        values: Dict[str, Any] = {}
        for key in _HEALTH_KEYS:
            if key in block:
                values["health"] = _text(block[key].value)
        if "Error Code" in block:
            values["error_codes"] = _error_codes(block["Error Code"])
        if "Error Information" in block:
            values["error_information"] = _error_information(block["Error Information"])
        result[chip_id] = values
    return result


# ---------------------------------------------------------------------------------------------------
# -l, -m and single-value outputs

@dataclass(frozen=True)
class ListedNpu:
    """One NPU of `npu-smi info -l`."""

    npu: int
    chip_count: Optional[int]
    product_name: Optional[str]  # 950 prints product name and serial instead of the chip count
    serial_number: Optional[str]


_LIST_COUNT_KEYS = ("Total Count", "Card Count")
_LIST_FIELDS = {
    "Chip Count": ("chip_count", to_int),
    "Product Name": ("product_name", _text),
    "Serial Number": ("serial_number", _text),
}


def parse_list(text: str) -> List[ListedNpu]:
    """`npu-smi info -l`: the NPUs (cards) in the order printed.

    The output must open with its count line (`Total Count`, 310/310B `Card Count`), which tells it
    from other outputs that also print `NPU ID`. The count is not checked against the NPUs listed, so a
    cut-off output still yields the NPUs it shows.
    """
    what = "npu-smi info -l"
    fields = [item for group in _read_groups(text, what) for item in group]
    if fields[0].key not in _LIST_COUNT_KEYS:
        raise NpuSmiParseError("{}: line {}: expected 'Total Count' first, got {!r}".format(
            what, fields[0].line_number, fields[0].key))
    npus: List[Dict[str, Any]] = []
    for item in fields[1:]:
        if item.key == "NPU ID":
            npu = _convert(item, to_int, what)
            if npu is None:
                raise NpuSmiParseError("{}: line {}: NPU ID has no value".format(what, item.line_number))
            npus.append({"npu": npu})
        elif item.key in _LIST_FIELDS:
            if not npus:
                raise NpuSmiParseError("{}: line {}: {!r} before any NPU ID".format(
                    what, item.line_number, item.key))
            name, converter = _LIST_FIELDS[item.key]
            if name in npus[-1]:
                raise NpuSmiParseError("{}: line {}: {!r} printed twice for NPU {}".format(
                    what, item.line_number, item.key, npus[-1]["npu"]))
            npus[-1][name] = _convert(item, converter, what)
    if not npus:
        raise NpuSmiParseError("{}: no NPU ID lines found".format(what))
    return [ListedNpu(npu=entry["npu"], chip_count=entry.get("chip_count"),
                      product_name=entry.get("product_name"), serial_number=entry.get("serial_number"))
            for entry in npus]


@dataclass(frozen=True)
class MappedChip:
    """One row of `npu-smi info -m`."""

    npu: int
    chip: Optional[int]
    logic_id: Optional[int]  # /dev/davinciN; None for MCU rows and on 950 (no such column)
    phy_id: Optional[int]  # A3 and 950 only
    name: str  # as printed: "Ascend 910B3", "Ascend910", "Mcu"
    is_mcu: bool


# Header column -> MappedChip field; other columns (950's "Slot ID") are read past.
_MAPPING_COLUMNS = {
    "NPU ID": "npu",
    "Chip ID": "chip",
    "Chip Logic ID": "logic_id",
    "Chip Phy-ID": "phy_id",
    "Chip Name": "name",
}


def _mapping_header(line: str, what: str) -> List[str]:
    # Columns are `%-30s ` wide, and column names have single spaces inside, so two spaces separate them.
    columns = re.split(r"\s{2,}", line.strip())
    if "NPU ID" not in columns or columns[-1] != "Chip Name":
        raise NpuSmiParseError("{}: expected a header with 'NPU ID' ... 'Chip Name', got {!r}".format(what, line))
    return columns


def parse_mapping(text: str) -> List[MappedChip]:
    """`npu-smi info -m`: every chip of every NPU with its logical / physical ids, MCU rows included."""
    what = "npu-smi info -m"
    _reject_error_text(text, what)
    lines = _split(text, what)
    start = _first_output_line(lines)
    if start == len(lines):
        raise NpuSmiParseError("{}: no output".format(what))
    columns = _mapping_header(lines[start], what)
    rows = []
    for number, line in enumerate(lines[start + 1:], start + 2):
        if not line.strip():
            continue
        # Every cell but the last is one token; the chip name may hold a space ("Ascend 910A").
        cells = line.split(None, len(columns) - 1)
        if len(cells) != len(columns):
            raise NpuSmiParseError("{}: line {} has {} cells, the header {}: {!r}".format(
                what, number, len(cells), len(columns), line))
        row: Dict[str, Any] = {}
        for column, cell in zip(columns, cells):
            name = _MAPPING_COLUMNS.get(column)
            if name == "name":
                row[name] = cell.strip()
            elif name is not None:
                try:
                    row[name] = to_int(cell)
                except NpuSmiParseError as error:
                    raise NpuSmiParseError("{}: line {} column {!r}: {}".format(what, number, column, error)) from None
        if row["npu"] is None:
            raise NpuSmiParseError("{}: line {}: no NPU ID: {!r}".format(what, number, line))
        rows.append(MappedChip(npu=row["npu"], chip=row.get("chip"), logic_id=row.get("logic_id"),
                               phy_id=row.get("phy_id"), name=row["name"], is_mcu=row["name"].lower() == "mcu"))
    if not rows:
        raise NpuSmiParseError("{}: header but no rows".format(what))
    return rows


def parse_kv_value(text: str, key: str) -> Optional[str]:
    """The value of `key` in a single-value output (`-t pwm-mode`, `-t pwm-duty-ratio`, `-t nve-level`).

    Returns None when npu-smi printed NA; raises NpuSmiParseError when the key is not printed.
    """
    wanted = key.strip()
    what = "value of {!r}".format(wanted)
    matches = [item for group in _read_groups(text, what) for item in group if item.key == wanted]
    if not matches:
        raise NpuSmiParseError("{}: key not printed".format(what))
    if len(matches) > 1:
        raise NpuSmiParseError("{}: printed {} times".format(what, len(matches)))
    return _text(matches[0].value)
