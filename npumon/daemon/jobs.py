"""The daemon's scheduler: one APScheduler job per tier or service job, each counted and guarded.

A job never overlaps itself (max_instances=1), a late run is coalesced into one, and the primary tier and the
watchdog ping have threads of their own, so slow services can never delay them. `stop()` waits for the jobs
still running, up to a deadline, and says which did not end.
"""

import datetime
import logging
import threading
import time
from typing import Callable, Dict, List, Optional

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.base import JobLookupError
from apscheduler.schedulers.background import BackgroundScheduler

log = logging.getLogger("npumon.daemon.daemon")  # the daemon's own log name: journal filters use it

JOB_THREADS = 32  # more than there are jobs, so a job never waits for a thread
EXECUTORS = ("default", "primary", "watchdog")  # primary: the primary tier's job; watchdog: the systemd ping


class _OverlapNoticeFilter(logging.Filter):
    """APScheduler warns each time a run is skipped because the previous one of the same job still runs.
    For npumon that is the design (a job never overlaps itself), not news: the tier's duration and source
    status already show a slow npu-smi, and the warning would repeat every interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "maximum number of running instances reached" not in record.getMessage()


_OVERLAP_NOTICE_FILTER = _OverlapNoticeFilter()


def utc_in(seconds: float) -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(seconds=seconds)


def guarded(what: str, func: Callable, *args):
    """A bug in one job must not kill the scheduler thread or the other jobs: log it, go on."""
    try:
        return func(*args)
    except Exception:  # noqa: BLE001 - the daemon must outlive any single failure
        log.exception("%s job failed", what)
        return None


class Jobs:
    def __init__(self) -> None:
        self.scheduler = BackgroundScheduler(
            timezone="UTC",
            executors={"default": ThreadPoolExecutor(JOB_THREADS), "primary": ThreadPoolExecutor(1),
                       "watchdog": ThreadPoolExecutor(1)},
            job_defaults={"coalesce": True, "max_instances": 1, "misfire_grace_time": None})
        self._lock = threading.Condition()
        self._running: Dict[str, int] = {}
        self._stopping = False

    def add(self, job_id: str, seconds: float, func: Callable, *args, executor: str = "default",
            first: Optional[float] = None) -> None:
        """Run func(*args) every `seconds`, the first time after `first` seconds (None: after one interval)."""
        self.scheduler.add_job(self._run, "interval", args=(job_id, func) + args, seconds=seconds, id=job_id,
                               executor=executor, replace_existing=True,
                               **({} if first is None else {"next_run_time": utc_in(first)}))

    def run_soon(self, job_id: str, seconds: float) -> None:
        """Move a job's next run up; its interval resumes after that run."""
        try:
            self.scheduler.modify_job(job_id, next_run_time=utc_in(seconds))
        except JobLookupError:  # removed by a reload or a stop meanwhile
            pass

    def remove_all(self) -> None:
        self.scheduler.remove_all_jobs()

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
