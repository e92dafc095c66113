"""The background thread that wakes when the earliest idle deadline comes due.

One APScheduler ``BackgroundScheduler`` per producer, whose jobs run in the scheduler's own thread
(APScheduler's inline executor: no worker pool). There is always at most one pending wake-up job,
set for the earliest deadline in :class:`PartitionActivity`; nothing polls on a fixed period.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from apscheduler.executors.debug import DebugExecutor
from apscheduler.schedulers import SchedulerNotRunningError
from apscheduler.schedulers.background import BackgroundScheduler

from progress_control.ticks.activity import DueTick, PartitionActivity

__all__ = ["IdlePartitionScheduler"]

logger = logging.getLogger(__name__)


class IdlePartitionScheduler:
    """Wakes at the earliest deadline, hands due ticks to ``send``, and sleeps again."""

    def __init__(
        self,
        activity: PartitionActivity,
        send: Callable[[list[DueTick]], None],
        *,
        monotonic: Callable[[], float] = time.monotonic,
        before_wake: Callable[[], None] = lambda: None,
    ) -> None:
        self._activity = activity
        self._send = send
        self._before_wake = before_wake
        """Runs right before each deadline is looked at (the native recorder drains its acks)."""
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._earliest_wake: float | None = None
        # "debug" is APScheduler's name for the executor that runs jobs inline, in the
        # scheduler thread: exactly one background thread per producer.
        self._scheduler = BackgroundScheduler(
            executors={"default": DebugExecutor()},
            job_defaults={"coalesce": True, "misfire_grace_time": None, "max_instances": 1},
            timezone=UTC,
            daemon=True,
        )

    def start(self) -> None:
        self._scheduler.start()

    def add_interval_job(self, func: Callable[[], None], seconds: float) -> None:
        """Run ``func`` periodically in the same thread (e.g. serving delivery reports)."""
        self._scheduler.add_job(func, "interval", seconds=seconds)

    def arm(self, deadline: float) -> None:
        """Make sure we wake by ``deadline`` (a monotonic time)."""
        with self._lock:
            if self._earliest_wake is not None and self._earliest_wake <= deadline:
                return
            self._earliest_wake = deadline
        # Outside our lock: APScheduler holds its own lock while it runs _wake, which takes ours.
        self._add_wake_job(deadline)

    def shutdown(self) -> None:
        """Stop the thread; a wake-up in progress finishes first."""
        with contextlib.suppress(Exception):
            # APScheduler's shutdown marks the scheduler stopped before it takes the job-store
            # lock, so a wake-up finishing meanwhile fails to remove its own job and kills the
            # thread with a traceback. Pause (no new runs), then clear the jobs, which waits for
            # the lock an in-flight wake-up holds, and only then shut down.
            self._scheduler.pause()
            self._scheduler.remove_all_jobs()
            self._scheduler.shutdown(wait=True)

    def _wake(self) -> None:
        # A wake-up may be redundant (an earlier arm() superseded a later job); then nothing is
        # due and it only re-arms. Jobs are added only for deadlines earlier than any pending one.
        with self._lock:
            self._earliest_wake = None
        try:
            self._before_wake()
            due = self._activity.take_due()
            if due:
                self._send(due)
        except Exception:
            logger.exception("progress-control wake-up failed; continuing")
        following = self._activity.next_deadline()
        if following is not None:
            self.arm(following)

    def _add_wake_job(self, deadline: float) -> None:
        delay = max(0.0, deadline - self._monotonic())
        run_at = datetime.now(UTC) + timedelta(seconds=delay)
        with contextlib.suppress(SchedulerNotRunningError):
            self._scheduler.add_job(self._wake, "date", run_date=run_at)
