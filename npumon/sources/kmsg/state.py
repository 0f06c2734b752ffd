"""Where the kernel-log source stopped, across restarts: `<state_dir>/kmsg-cursor.json`.

It holds the boot id and the last /dev/kmsg sequence number read (or, for a file, its inode and the byte
offset read up to) and the fault book. A missing or unreadable file means "start from the beginning"; it
is written atomically (temporary file, then rename), so a crash leaves the old or the new one.
"""

import json
import logging
import os
from typing import Any, Dict, Optional

log = logging.getLogger(__name__)

CURSOR_FILE = "kmsg-cursor.json"
BOOT_ID_PATH = "proc/sys/kernel/random/boot_id"  # under the target's root
MAX_STATE_BYTES = 4 * 1024 * 1024


def load_state(state_dir: str) -> Dict[str, Any]:
    path = os.path.join(state_dir, CURSOR_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.loads(handle.read(MAX_STATE_BYTES))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("kmsg: %s unreadable (%s); reading the kernel log from its start", path, exc)
        return {}
    return data if isinstance(data, dict) else {}


def save_state(state_dir: str, data: Dict[str, Any]) -> Optional[str]:
    """Write the state; the one-line problem when it could not be written (None when it was)."""
    path = os.path.join(state_dir, CURSOR_FILE)
    temporary = path + ".tmp"
    try:
        os.makedirs(state_dir, exist_ok=True)
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(data, handle, sort_keys=True)
        os.replace(temporary, path)
    except OSError as exc:
        return "{}: {}".format(path, exc.strerror or exc)
    return None


def read_boot_id(path: str) -> Optional[str]:
    """The kernel's boot id (/proc/sys/kernel/random/boot_id); None where it cannot be read."""
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read(64).strip() or None
    except (OSError, UnicodeDecodeError):
        return None
