"""What a reboot of the host clears in the event history: the findings of rules marked `reboot_clears`
(device faults: a reboot resets the device), sticky or acknowledged, and nothing else (a hardware fault is
still there after a reboot). The history keeps the host's boot id; a different one at start is a reboot.
"""

from typing import Dict, List, Optional, Sequence, Tuple

from .store import EventStore, FindingRow

BOOT_ID_KEY = "boot_id"
Key = Tuple[str, str]


def clear_after_reboot(store: EventStore, rows: Dict[Key, FindingRow], boot_id: Optional[str],
                       clears: Sequence[str], now: float) -> List[Tuple[Key, FindingRow]]:
    """Record the boot id; after a reboot, record a host_rebooted event and take the rows of the rules that
    a reboot clears out of `rows` and the findings table. Returns what it took out (for their resolved
    events)."""
    if boot_id is None:
        return []
    before = store.get_meta(BOOT_ID_KEY)
    store.set_meta(BOOT_ID_KEY, boot_id)
    if before is None or before == boot_id:
        return []
    cleared = [(key, rows.pop(key)) for key in sorted(rows) if key[0] in set(clears)]
    for key, _ in cleared:
        store.delete_finding(*key)
    store.record("host_rebooted", "host", "the host rebooted (boot id {} -> {}); {} findings that a reboot clears "
                 "resolved".format(before, boot_id, len(cleared)), "info",
                 {"boot_id": boot_id, "previous_boot_id": before}, time=now)
    return cleared
