"""Wake the daemon's main thread on a signal, whichever thread the kernel hands it to.

Python runs a signal's handler only on the main thread, when that thread next runs bytecode; the kernel may
deliver a process signal to any thread, and a main thread blocked in a wait would then not see it until the
wait ends. `signal.set_wakeup_fd` makes the C-level handler, on whatever thread it runs, also write a byte to
a socket: the main thread blocks on that socket alone, with no timeout, and wakes the moment a signal comes
(the handler then runs) -- without waking every so often to look.
"""

import select
import signal
import socket


class SignalWakeup:
    """Made and used on the main thread: `wait()` returns after a signal or `wake()` (from any thread)."""

    def __init__(self) -> None:
        self._reader, self._writer = socket.socketpair()
        for end in (self._reader, self._writer):
            end.setblocking(False)
        self._previous = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)

    def wait(self) -> None:
        select.select([self._reader], [], [])
        try:
            while self._reader.recv(4096):  # what came so far: the flags tell what to do
                pass
        except BlockingIOError:
            pass

    def wake(self) -> None:
        try:
            self._writer.send(b"\0")
        except (BlockingIOError, OSError):  # full (a wake is pending anyway) or closed (stopping)
            pass

    def close(self) -> None:
        signal.set_wakeup_fd(self._previous)
        self._reader.close()
        self._writer.close()
