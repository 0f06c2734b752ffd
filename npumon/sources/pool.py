"""The threads a runner's calls run on: a bounded pool, as many threads as the runner has call slots.

A source that asks many chips or cards at once (the npu-smi query tiers, every hccn_tool tier, the probe)
hands its calls to its runner's pool rather than starting threads of its own: a thread that waits for a call
slot adds nothing but a task towards the unit's TasksMax, and 16 chips on 5 tiers would be 80 of them. The
pool's threads start when first needed and stay (at most `workers`); work beyond them waits without a thread.

Each `map` is a batch with the deadline of the poll it serves, and a thread takes its next item from the batch
whose deadline comes first: a minute tier's calls go before a sweep's that has minutes left (the runner's slots
are taken in the same order). Batches with the same deadline (or none) take turns, one item from each in turn,
so a tier that asks 16 chips does not make a tier that came after it wait for all 16 (first come, first served
would leave the later tier's calls out at its deadline). Whatever waits is still bounded by its own deadline:
the runner refuses a call whose caller's time ran out.

A task must not wait for work it hands to the same pool (a full pool would wait for itself): `map` called
from one of the pool's own threads, after `close`, or when no thread can be started (the task limit is
reached), runs the work in the caller's thread instead.
"""

import collections
import logging
import math
import threading
from typing import Callable, Deque, Generic, List, Optional, Sequence, Tuple, TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")
R = TypeVar("R")


class _Batch(Generic[T, R]):
    """The items of one `map`, their results, and the first error."""

    def __init__(self, func: Callable[[T], R], items: List[T], deadline: Optional[float]):
        self.func, self.items = func, items
        self.deadline = math.inf if deadline is None else deadline
        self.results: List[Optional[R]] = [None] * len(items)
        self.error: Optional[BaseException] = None
        self.taken = 0  # items handed to a thread so far (under the pool's lock)
        self._left = len(items)
        self._lock = threading.Lock()
        self.done = threading.Event()

    def run(self, index: int) -> None:
        try:
            self.results[index] = self.func(self.items[index])
        except BaseException as exc:  # noqa: BLE001 - handed to the caller of map
            with self._lock:
                self.error = self.error or exc
        finally:
            with self._lock:
                self._left -= 1
                if not self._left:
                    self.done.set()


class CallPool:
    def __init__(self, workers: int, name: str = "npumon-calls"):
        self.workers = max(1, workers)
        self._name = name
        self._cond = threading.Condition()
        self._waiting: Deque[_Batch] = collections.deque()  # batches with items not yet taken, in turn
        self._threads = 0
        self._idle = 0  # threads waiting for work
        self._fresh = 0  # threads started that have not looked for work yet
        self._closed = False
        self._inside = threading.local()  # set in the pool's own threads

    def map(self, func: Callable[[T], R], items: Sequence[T], deadline: Optional[float] = None) -> List[R]:
        """func(item) for every item, at most `workers` at a time; the results in the items' order. An
        exception of func is raised here once the other items are done. `deadline` (time.monotonic()) is when
        the caller's poll must end: the batches with the earliest go first."""
        items = list(items)
        if len(items) <= 1 or getattr(self._inside, "yes", False):
            return [func(item) for item in items]
        batch = _Batch(func, items, deadline)
        with self._cond:
            inline = self._closed
            if not inline:
                self._waiting.append(batch)
                inline = not self._start_threads(len(items))
                if inline:
                    self._waiting.remove(batch)
                else:
                    self._cond.notify(len(items))
        if inline:
            for index in range(len(items)):
                batch.run(index)
        batch.done.wait()
        if batch.error is not None:
            raise batch.error
        return batch.results  # type: ignore[return-value]

    def close(self) -> None:
        """No new work goes to the threads; they end once the work they have is done (calls the runner ended)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def _start_threads(self, wanted: int) -> bool:
        """Threads for `wanted` more items, within the bound (called with the lock held); False when there is
        no thread at all to run them."""
        while self._idle + self._fresh < wanted and self._threads < self.workers:
            thread = threading.Thread(target=self._work, name="{}-{}".format(self._name, self._threads),
                                      daemon=True)
            try:
                thread.start()
            except RuntimeError as exc:  # can't start new thread: the ones there are will do
                log.debug("%s: no thread started (%s); %d running", self._name, exc, self._threads)
                break
            self._threads += 1
            self._fresh += 1
        return self._threads > 0

    def _work(self) -> None:
        self._inside.yes = True
        first = True
        while True:
            task = self._next(first)
            first = False
            if task is None:
                return
            batch, index = task
            batch.run(index)

    def _next(self, first: bool) -> Optional[Tuple[_Batch, int]]:
        with self._cond:
            if first:
                self._fresh -= 1
            while not self._waiting:
                if self._closed:
                    self._threads -= 1
                    return None
                self._idle += 1
                self._cond.wait()
                self._idle -= 1
            batch = min(self._waiting, key=lambda waiting: waiting.deadline)  # the first of the earliest
            self._waiting.remove(batch)
            index = batch.taken
            batch.taken += 1
            if batch.taken < len(batch.items):
                self._waiting.append(batch)  # its next item after one of every other batch with its deadline
            return batch, index
