"""<state_dir>/mindcluster-faults.json: the public faults ClusterD holds from this npumon, so that a restarted
npumon recovers those that ended while it was down (the gRPC route has no read-back). The file is a message's
`faults` list of `occur` entries, read back as publicfault.held_faults reads the ConfigMap's message."""

import json
import logging
import os
import tempfile
from typing import Any, Dict, Optional

from .publicfault import held_faults

HELD_FILE = "mindcluster-faults.json"
MAX_BYTES = 4 * 1024 * 1024  # a few dozen faults in practice; a file past this is not npumon's

log = logging.getLogger(__name__)


def load_held(path: str) -> Dict[str, Dict[str, Any]]:
    """The faults the file lists (by faultId); none when it is missing or unreadable (said once)."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("mindcluster hand-off: cannot read %s (%s): faults an earlier run left open are not "
                    "recovered", path, exc.strerror or exc)
        return {}
    if len(text) > MAX_BYTES:
        log.warning("mindcluster hand-off: %s is larger than %d bytes: ignored", path, MAX_BYTES)
        return {}
    return held_faults(text)


def save_held(path: str, held: Dict[str, Dict[str, Any]]) -> Optional[str]:
    """Replace the file atomically; the reason when it could not be written, else None."""
    faults = [dict(entry, assertion="occur") for _, entry in sorted(held.items())]
    directory = os.path.dirname(path) or "."
    try:
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".mindcluster-")
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump({"faults": faults}, out, separators=(",", ":"))
        os.replace(temporary, path)
    except OSError as exc:
        return str(exc.strerror or exc)
    return None
