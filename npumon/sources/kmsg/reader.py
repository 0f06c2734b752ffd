"""Reading the kernel log: /dev/kmsg as a stream of records, or a file that grows.

/dev/kmsg (Documentation/ABI/testing/dev-kmsg): opened non-blocking, every read() returns one record; a
read fails with EPIPE when the records after the last one read were overwritten in the ring buffer (the
next read returns the oldest record still there), and EAGAIN when there is nothing new. Lost records are
counted from the gaps in the sequence numbers. Every read is bounded: `limit` records a call.
"""

import errno
import os
from typing import Callable, List, Optional, Tuple

from .records import Record, parse_kmsg_record, split_file_records

RECORD_BYTES = 8192  # larger than any record the kernel hands out (1024 + its continuation lines)
MAX_FILE_BYTES_PER_READ = 8 * 1024 * 1024


class ReadError(Exception):
    """A one-line reason the log could not be read; `denied`: for want of permission (the journal may do)."""

    def __init__(self, message: str, denied: bool = False):
        super().__init__(message)
        self.denied = denied


class KmsgDevice:
    """/dev/kmsg, kept open between polls so that its read position is the stream's."""

    def __init__(self, path: str, open_fd: Callable[..., int] = os.open, read_fd: Callable[[int, int], bytes] = os.read,
                 close_fd: Callable[[int], None] = os.close):
        """The os functions are parameters so that a test can stand in for the kernel's ring buffer."""
        self.path = path
        self._open, self._read, self._close = open_fd, read_fd, close_fd
        self._fd: Optional[int] = None

    def read(self, after_seq: Optional[int], limit: int) -> Tuple[List[Record], int, bool]:
        """Records after sequence number `after_seq` (None: all in the buffer); (records, records lost,
        more left). Raises ReadError when the device cannot be opened or read."""
        if self._fd is None:
            try:
                self._fd = self._open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                raise ReadError("{}: {}{}".format(self.path, exc.strerror or exc, _permission_hint(exc)),
                                denied=exc.errno in (errno.EACCES, errno.EPERM)) from None
        records: List[Record] = []
        lost, last = 0, after_seq
        for _ in range(2 * limit):  # an EPIPE costs a read too
            if len(records) >= limit:
                return records, lost, True
            try:
                data = self._read(self._fd, RECORD_BYTES)
            except BlockingIOError:
                return records, lost, False
            except InterruptedError:
                continue
            except BrokenPipeError:
                continue  # overwritten while we were away: the gap in the sequence numbers counts it
            except OSError as exc:
                self.close()
                raise ReadError("{}: {}".format(self.path, exc.strerror or exc)) from None
            if not data:
                return records, lost, False
            record = parse_kmsg_record(data.decode("utf-8", "replace"))
            if record is None or record.seq is None:
                continue
            if last is not None and record.seq <= last:
                continue  # read before the restart
            if last is not None and record.seq > last + 1:
                lost += record.seq - last - 1
            last = record.seq
            records.append(record)
        return records, lost, True

    def close(self) -> None:
        if self._fd is not None:
            self._close(self._fd)
            self._fd = None


def _permission_hint(exc: OSError) -> str:
    if exc.errno in (errno.EACCES, errno.EPERM):
        return " (reading the kernel log needs CAP_SYSLOG where kernel.dmesg_restrict=1, and under the " \
               "systemd unit a drop-in: see docs/faults.md)"
    return ""


class LogFile:
    """A file of kernel log lines (dmesg, /var/log/messages, kmsg records): read on from an offset."""

    def __init__(self, path: str):
        self.path = path

    def read(self, inode: Optional[int], offset: int, limit: int) -> Tuple[List[Record], int, int, bool]:
        """Records from `offset` (0 when the file is another one or shorter): (records, inode, new
        offset, more left). Whole lines only, `limit` lines at most."""
        try:
            with open(self.path, "rb") as handle:
                status = os.fstat(handle.fileno())
                if status.st_ino != inode or status.st_size < offset:
                    offset = 0
                handle.seek(offset)
                lines: List[bytes] = []
                consumed = 0
                while len(lines) < limit and consumed < MAX_FILE_BYTES_PER_READ:
                    line = handle.readline(RECORD_BYTES)
                    if not line:
                        break
                    if not line.endswith(b"\n") and len(line) < RECORD_BYTES and handle.tell() < status.st_size:
                        break  # a line still being written
                    lines.append(line)
                    consumed += len(line)
                more = bool(handle.readline(1))
        except OSError as exc:
            raise ReadError("{}: {}".format(self.path, exc.strerror or exc)) from None
        # Up to MAX_FILE_BYTES_PER_READ: each copy goes as the next is made (lines, bytes, text), at most two at once.
        data = b"".join(lines)
        del lines[:]
        text = data.decode("utf-8", "replace")
        del data
        return list(split_file_records(text)), status.st_ino, offset + consumed, more

    def close(self) -> None:
        pass
