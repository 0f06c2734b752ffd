"""The daemon's scheduler: one APScheduler job per tier or service job, each counted and guarded.

A job never overlaps itself (max_instances=1), a late run is coalesced into one, and the primary tier and the
watchdog ping have threads of their own, so slow services can never delay them. The minute tiers that call
through the npu-smi runner share one thread more than its slots (`calls`), the slower ones a thread of their
own (`background`). The other jobs share a pool with as many
threads as there are such jobs: none waits for a thread, and none is kept for a job that does not exist
(threads start only when jobs run at the same time). `stop()` waits for the jobs still running, up to a
deadline, and says which did not end.
"""

import concurrent.futures
import datetime
import heapq
import logging
import math
import threading
import time
from typing import Callable, Dict, List, Optional

from apscheduler.executors.base import BaseExecutor, run_job
from apscheduler.executors.pool import BasePoolExecutor, ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

from ..logrepeat import Repeats

log = logging.getLogger("npumon.daemon.daemon")  # the daemon's own log name: journal filters use it

# primary: the primary tier's job; watchdog: the systemd ping; calls: the minute tiers whose calls share the
# npu-smi runner's slots (npu-smi's queries, hccn_tool's tiers), one thread more than the slots: a tier that
# started could only wait for a slot, so the others wait for a thread instead and start when one is free, the
# tier polled most often first (_TierThreads).
# background: the slot-sharing tiers polled less often than every minute (sweeps of what hardly changes), one at
# a time on a thread of their own: three sweeps due at once held every `calls` thread for a minute on an A3.
EXECUTORS = ("default", "primary", "watchdog", "calls", "background")


class _OverlapNoticeFilter(logging.Filter):
    """APScheduler warns each time a run is skipped because the previous one of the same job still runs.
    For npumon that is the design (a job never overlaps itself), not news: the tier's duration and source
    status already show a slow npu-smi, and the warning would repeat every interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in record.getMessage()


_OVERLAP_NOTICE_FILTER = _OverlapNoticeFilter()
_repeats = Repeats(log)  # guarded()'s lines


class _JobThreads(BasePoolExecutor):
    """APScheduler's thread pool, grown to the number of jobs it runs as jobs are added. The jobs already
    running on a pool that was replaced end there; its threads then end too."""

    def __init__(self, name: str) -> None:
        super().__init__(concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=name))
        self.size = 1
        self._name = name

    def fit(self, jobs: int) -> None:
        if jobs > self.size:
            old, self._pool = self._pool, concurrent.futures.ThreadPoolExecutor(jobs, thread_name_prefix=self._name)
            self.size = jobs
            old.shutdown(wait=False)


class _TierThreads(BaseExecutor):
    """The threads of the tiers that share call slots (`calls`, `background`). A tier due while every thread is
    busy waits for one, and when one comes free the waiting tier with the shortest interval runs first: at start,
    on a busy A3, the usages tier (every 30 s) waited half a minute in line behind tiers polled every few
    minutes and went stale. Threads start as jobs wait for them, up to `size`, and stay."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.size = 1
        self._name = name
        self._cond = threading.Condition()
        self._waiting: List[tuple] = []  # heap: (interval, number submitted, job, run_times)
        self._submitted = 0
        self._threads = 0
        self._idle = 0
        self._closed = False

    def fit(self, jobs: int) -> None:
        with self._cond:
            self.size = max(self.size, jobs)

    def _do_submit_job(self, job, run_times) -> None:
        interval = getattr(job.trigger, "interval", None)  # a one-off (date) job has none: after the others
        with self._cond:
            self._submitted += 1
            heapq.heappush(self._waiting, (interval.total_seconds() if interval is not None else math.inf,
                                           self._submitted, job, run_times))
            if not self._idle and self._threads < self.size:
                thread = threading.Thread(target=self._work, name="{}_{}".format(self._name, self._threads),
                                          daemon=True)
                try:
                    thread.start()
                    self._threads += 1
                except RuntimeError as exc:  # can't start new thread: it waits for one of those running
                    log.debug("%s: no thread started (%s); %d running", self._name, exc, self._threads)
            self._cond.notify()

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._waiting:
                    if self._closed:
                        self._threads -= 1
                        return
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                _, _, job, run_times = heapq.heappop(self._waiting)
            try:
                events = run_job(job, job._jobstore_alias, run_times, self._logger.name)
            except BaseException as exc:  # noqa: BLE001 - reported to the scheduler, as its pools do
                self._run_job_error(job.id, exc, exc.__traceback__)
            else:
                self._run_job_success(job.id, events)

    def shutdown(self, wait: bool = True) -> None:
        """The threads end once what waits has run (a job queued before the stop returns at once: Jobs._run)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _one_thread(name: str) -> ThreadPoolExecutor:
    """A one-thread executor whose thread is named (what py-spy, /proc and a thread dump show)."""
    return ThreadPoolExecutor(1, pool_kwargs={"thread_name_prefix": name})


def utc_in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


def guarded(what: str, func: Callable, *args):
    """A bug in one job must not kill the scheduler thread or the other jobs: log it, go on. A job that fails
    the same way every interval logs one line per 10 minutes, with a count; the traceback goes to DEBUG."""
    try:
        return func(*args)
    except Exception as exc:  # noqa: BLE001 - the daemon must outlive any single failure
        _repeats.log(logging.ERROR, "{} {}".format(what, type(exc).__name__), "%s job failed: %s: %s", what,
                     type(exc).__name__, exc, exc=exc)
        return None


class Jobs:
    def __init__(self) -> None:
        self._threads = _JobThreads("npumon-jobs")
        self._call_threads = _TierThreads("npumon-tiers")
        self._sweep_threads = _TierThreads("npumon-background")  # one thread: the sweeps take turns
        self._default_jobs: set = set()  # the ids of the jobs on the shared pool
        self.scheduler = BackgroundScheduler(
            timezone="UTC",
            executors={"default": self._threads, "primary": _one_thread("npumon-primary"),
                       "watchdog": _one_thread("npumon-watchdog"), "calls": self._call_threads,
                       "background": self._sweep_threads},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        self._lock = threading.Condition()
        self._running: Dict[str, int] = {}
        self._stopping = False

    def add(self, job_id: str, seconds: float, func: Callable, *args, executor: str = "default",
            first: Optional[float] = None) -> None:
        """Run func(*args) every `seconds`, the first time after `first` seconds (None: after one interval)."""
        if executor == "default":
            self._default_jobs.add(job_id)
            self._threads.fit(len(self._default_jobs))
        self.scheduler.add_job(self._run, "interval", args=(job_id, func) + args, seconds=seconds, id=job_id,
                               executor=executor, replace_existing=True,
                               **({} if first is None else {"next_run_time": utc_in(first)}))

    @property
    def shared_threads(self) -> int:
        """The most threads the jobs other than the primary tier and the watchdog may run on."""
        return self._threads.size

    def fit_calls(self, slots: int) -> None:
        """Threads for the `calls` jobs: one more than the runner's slots keeps every slot busy while one tier
        ends and the next begins."""
        self._call_threads.fit(slots + 1)

    def run_soon(self, job_id: str, seconds: float) -> None:
        """Move a job's next run to `seconds` from now (sooner or later); its interval resumes after that run."""
        try:
            self.scheduler.modify_job(job_id, next_run_time=utc_in(seconds))
        except JobLookupError:  # removed by a reload or a stop meanwhile
            pass

    def once_soon(self, job_id: str, seconds: float, func: Callable, *args, executor: str = "default") -> None:
        """Run func(*args) once, `seconds` from now, unless that job is already waiting to run: what asks
        for it again meanwhile is served by the same run."""
        if self.scheduler.get_job(job_id) is None:
            self.once_at(job_id, seconds, func, *args, executor=executor)

    def once_at(self, job_id: str, seconds: float, func: Callable, *args, executor: str = "default") -> None:
        """Run func(*args) once, `seconds` from now, in place of the run that job had planned."""
        self.scheduler.add_job(self._run, "date", args=(job_id, func) + args, run_date=utc_in(seconds), id=job_id,
                               executor=executor, replace_existing=True)

    def seconds_to_next_run(self, job_id: str) -> Optional[float]:
        """Seconds until the job's next run (negative: overdue), or None for a job not scheduled."""
        job = self.scheduler.get_job(job_id)
        if job is None or job.next_run_time is None:
            return None
        return (job.next_run_time - datetime.datetime.now(datetime.timezone.utc)).total_seconds()

    def remove_all(self) -> None:
        self.scheduler.remove_all_jobs()
        self._default_jobs.clear()

    def start(self) -> None:
        logging.getLogger("apscheduler.scheduler").addFilter(_OVERLAP_NOTICE_FILTER)  # a no-op the second time
        self.scheduler.start()

    def shutdown(self) -> None:
        """No job starts from now on; the ones running go on (wait_for_running waits for them)."""
        with self._lock:
            self._stopping = True
        self.scheduler.shutdown(wait=False)

    def wait_for_running(self, deadline: float) -> List[str]:
        """Wait until no job runs or the monotonic deadline passes; the jobs still running."""
        with self._lock:
            while self._running and time.monotonic() < deadline:
                self._lock.wait(deadline - time.monotonic())
            return sorted(self._running)

    def _run(self, name: str, func: Callable, *args) -> None:
        """Every scheduled job runs through here: counted (wait_for_running waits for it) and guarded."""
        with self._lock:
            if self._stopping:  # queued before the stop, started after it
                return
            self._running[name] = self._running.get(name, 0) + 1
        try:
            guarded(name, func, *args)
        finally:
            with self._lock:
                self._running[name] -= 1
                if not self._running[name]:
                    del self._running[name]
                self._lock.notify_all()
