"""Write the metrics for node_exporter's textfile collector.

node_exporter reads every `*.prom` file in its textfile directory on each scrape, so the file must be
replaced atomically: the text goes to a hidden temporary file in the same directory, then os.replace()
swaps it in. prometheus_client.write_to_textfile() does the rename too, but is not used because (a) its
temporary file gets the process umask (a systemd UMask=0077 makes the result unreadable to node_exporter)
and (b) releases older than late 2024 (client_python issue #1044) leave the temporary file behind when
the write fails, e.g. on a full disk; setup.cfg allows prometheus-client 0.17.
"""

import os
import tempfile

from prometheus_client.exposition import generate_latest
from prometheus_client.registry import CollectorRegistry

FILE_MODE = 0o644  # node_exporter usually runs as another user


class TextfileError(Exception):
    """One line: which file could not be written and why."""


def write_textfile(directory: str, registry: CollectorRegistry, filename: str = "npumon.prom") -> str:
    """Render `registry` into `directory/filename` atomically and return the file's path.

    The text format carries no timestamps (node_exporter skips a file that has any). No fsync: the file
    is rewritten every poll, so surviving a power loss would buy nothing.
    """
    if os.path.basename(filename) != filename or not filename.endswith(".prom"):
        raise TextfileError("textfile name {!r} must be a plain file name ending in .prom".format(filename))
    path = os.path.join(directory, filename)
    data = generate_latest(registry)
    try:
        fd, temp_path = tempfile.mkstemp(dir=directory, prefix="." + filename + ".", suffix=".tmp")
    except OSError as exc:
        raise TextfileError("cannot write {}: {}".format(path, exc.strerror or exc)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temp_path, FILE_MODE)
        os.replace(temp_path, path)
    except OSError as exc:
        try:
            os.unlink(temp_path)
        except OSError:
            pass  # it may not exist any more; the original error is the one to report
        raise TextfileError("cannot write {}: {}".format(path, exc.strerror or exc)) from None
    return path
