"""A disk that fails on demand under one directory, for the SQLite stores' tests.

While `broken`, every statement on a connection to a file under `root` raises
sqlite3.OperationalError("disk I/O error") -- what SQLite raises when the kernel fails a read or write
with EIO; with `reads_fail` off, copying the database out (Connection.backup) still works, as it may from a
disk that fails only writes. The connections and files are real SQLite; only the failure is made up, since
a real failing disk cannot be had in a test. `opened` counts connections made to files under `root`."""

import sqlite3


class FailingDisk:
    def __init__(self, root, reads_fail: bool = True):
        self.root = str(root)
        self.reads_fail = reads_fail
        self.broken = False
        self.opened = 0

    def install(self, monkeypatch) -> "FailingDisk":
        real_connect = sqlite3.connect
        disk = self

        class Connection(sqlite3.Connection):
            def execute(self, *args, **kwargs):
                disk.check()
                return super().execute(*args, **kwargs)

            def executemany(self, *args, **kwargs):
                disk.check()
                return super().executemany(*args, **kwargs)

            def executescript(self, *args, **kwargs):
                disk.check()
                return super().executescript(*args, **kwargs)

            def backup(self, *args, **kwargs):
                if disk.reads_fail:
                    disk.check()
                return super().backup(*args, **kwargs)

        def connect(database, *args, **kwargs):
            if isinstance(database, str) and disk.root in database:
                disk.opened += 1
                kwargs["factory"] = Connection
            return real_connect(database, *args, **kwargs)

        monkeypatch.setattr(sqlite3, "connect", connect)
        return self

    def check(self) -> None:
        if self.broken:
            raise sqlite3.OperationalError("disk I/O error")
