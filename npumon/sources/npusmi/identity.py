"""A chip's identity beyond what the main table prints: logical id (/dev/davinciN), physical id, die id and
model name, and the small file that keeps them between processes.

Why a file: the ids come from `npu-smi info -m` and one `npu-smi info -t board -i N -c C` per chip, which is
2 to 30 s of npu-smi on a real host. The daemon reads them once at start and then hourly (the identity tier),
and writes what it read here; a quick `npumon check`, which has to finish inside NRPE's 10 s, reads this file
instead of asking npu-smi, and takes it only when it describes the same chips with the same bus ids as the
main table it just read. A missing, unreadable or stale file just means no ids from it.
"""

import json
import logging
import os
import tempfile
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

log = logging.getLogger(__name__)

CACHE_FILE = "npu-smi-identity.json"
CACHE_SCHEMA = "npumon.npu-smi-identity/v1"
CACHE_MAX_AGE_SECONDS = 7 * 86400.0  # ids change only with the hardware; the bus-id match guards the rest
IDENTITY_FIELDS = ("device_id", "phy_id", "vdie_id", "model_name")

ChipKey = Tuple[int, int]


def mapping_values(rows: Iterable[Any]) -> Dict[ChipKey, Dict[str, int]]:
    """`npu-smi info -m` rows (kv.MappedChip) -> {(npu, chip): {"device_id", "phy_id"}} for the NPU chips."""
    result: Dict[ChipKey, Dict[str, int]] = {}
    for row in rows:
        if row.is_mcu or row.chip is None:
            continue
        values = {}
        if row.logic_id is not None:
            values["device_id"] = row.logic_id
        if row.phy_id is not None:
            values["phy_id"] = row.phy_id
        if values:
            result[(row.npu, row.chip)] = values
    return result


def read_mapping(runner: Any, label: str) -> Tuple[Dict[ChipKey, Dict[str, int]], Optional[str], bool]:
    """Ask `npu-smi info -m` (runner: the source's CommandRunner): (ids per chip, what went wrong or None,
    whether this npu-smi has no `-m` at all, so that it is not asked again)."""
    from . import kv  # late: kv is large and only this reads it here
    from .common import NpuSmiParseError

    result = runner.run(["info", "-m"], label=label)
    if result.timed_out or result.error or result.killed_by_signal:
        return {}, "info -m " + result.describe_failure(), False
    refusal = kv.classify_error(result.output)
    if refusal is not None and refusal.kind in ("unsupported", "unknown_command"):
        return {}, None, True  # the ids then come from the main table alone
    if refusal is not None:
        return {}, "info -m: " + refusal.message, False
    try:
        rows = kv.parse_mapping(result.output)
    except NpuSmiParseError as exc:
        return {}, "info -m: unreadable output: {}".format(exc), False
    return mapping_values(rows), None, False


def cache_path(context: Any) -> str:
    """The cache's path: in the source's state directory (SourceContext.state_dir)."""
    return os.path.join(context.state_dir, CACHE_FILE)


class CachedIdentity:
    """What a cache file holds: per chip its bus id (to match the table) and its identity fields."""

    def __init__(self, chips: Dict[ChipKey, Dict[str, Any]]) -> None:
        self.chips = chips

    def __bool__(self) -> bool:
        return bool(self.chips)

    def matching(self, table_chips: Sequence[Any]) -> Dict[ChipKey, Dict[str, Any]]:
        """The identity fields per chip, if the table's chips and bus ids are exactly the cached ones; else {}."""
        table = {(row.npu, row.chip): row.bus_id for row in table_chips}
        cached = {key: entry.get("bus_id") for key, entry in self.chips.items()}
        if table != cached:
            return {}
        return {key: {name: entry[name] for name in IDENTITY_FIELDS if entry.get(name) is not None}
                for key, entry in self.chips.items()}


class IdentityCache:
    def __init__(self, path: str) -> None:
        self.path = path

    def load(self, now: Optional[float] = None) -> Optional[CachedIdentity]:
        try:
            with open(self.path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            if not isinstance(exc, FileNotFoundError):
                log.debug("identity cache %s not read: %s", self.path, exc)
            return None
        try:
            if data.get("schema") != CACHE_SCHEMA:
                return None
            if now is not None and now - float(data["time"]) > CACHE_MAX_AGE_SECONDS:
                return None
            chips = {(int(entry["npu"]), int(entry["chip"])): entry for entry in data["chips"]}
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            log.debug("identity cache %s unreadable: %s", self.path, exc)
            return None
        return CachedIdentity(chips)

    def save(self, chips: Sequence[Any], now: float) -> None:
        """Write the chips' identities atomically, world-readable (a monitoring agent's check reads it);
        a state directory npumon cannot write is no failure: the cache is only a shortcut."""
        entries: List[Dict[str, Any]] = [
            dict({"npu": chip.npu, "chip": chip.chip, "bus_id": chip.bus_id},
                 **{name: getattr(chip, name) for name in IDENTITY_FIELDS})
            for chip in chips]
        if not entries:
            return
        directory = os.path.dirname(self.path)
        try:
            os.makedirs(directory, exist_ok=True)
            fd, temporary = tempfile.mkstemp(prefix=".identity-", dir=directory)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as handle:
                    json.dump({"schema": CACHE_SCHEMA, "time": now, "chips": entries}, handle, indent=1)
                os.chmod(temporary, 0o644)
                os.replace(temporary, self.path)
            except BaseException:
                os.unlink(temporary)
                raise
        except OSError as exc:
            log.debug("identity cache %s not written: %s", self.path, exc)
