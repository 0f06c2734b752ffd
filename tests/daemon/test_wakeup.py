"""The daemon's main thread sleeps until a signal comes, whichever thread the kernel hands it to."""

import os
import signal
import threading
import time

from npumon.daemon.wakeup import SignalWakeup


def test_a_signal_handed_to_another_thread_wakes_the_main_thread():
    handled = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: handled.append(threading.current_thread().name))
    done = threading.Event()
    other = threading.Thread(target=done.wait, name="other")  # started before the block: it takes the signal
    other.start()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    wakeup = SignalWakeup()
    sender = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))  # blocked there too (inherited)
    try:
        sender.start()
        started = time.monotonic()
        wakeup.wait()
        assert time.monotonic() - started < 10
        deadline = time.monotonic() + 5
        while not handled and time.monotonic() < deadline:  # the handler runs on the main thread's next bytecode
            time.sleep(0.01)
        assert handled == ["MainThread"]
    finally:
        sender.cancel()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
        wakeup.close()
        done.set()
        other.join()
        signal.signal(signal.SIGUSR1, previous)


def test_wake_from_any_thread_and_a_wake_before_the_wait_is_not_lost():
    wakeup = SignalWakeup()
    try:
        wakeup.wake()  # before the wait: the wait returns at once
        wakeup.wait()
        threading.Timer(0.1, wakeup.wake).start()
        wakeup.wait()
    finally:
        wakeup.close()
    assert signal.set_wakeup_fd(-1) == -1  # closed: the previous (none) is back
