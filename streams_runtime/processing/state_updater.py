"""Restoration beside the poll loop (Kafka Streams' ``StateUpdater``).

New tasks' stores catch up from their changelogs on threads of their own, a few tasks at a time
(so a task with a long changelog does not hold up the others), while the stream thread keeps
polling: it processes its other tasks, commits, and answers the next rebalance at once (a
restore inside the rebalance callback stalled all of that, and every rebalance of the group with
it). A task's input partitions stay paused meanwhile; the stream thread starts processing the
task once :meth:`StateUpdater.drain` hands it back.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from streams_runtime.errors import as_exception
from streams_runtime.processing.task import StreamTask
from streams_runtime.record import TaskId
from streams_runtime.state.changelog_readers import ChangelogReaders

__all__ = ["StateUpdater"]

logger = logging.getLogger(__name__)


class StateUpdater:
    """Restores tasks' stores in order of :meth:`add`, ``workers`` at a time; each worker
    reads with the changelog consumers ``readers(worker_name)`` gives it, kept from one task
    to the next."""

    def __init__(
        self, name: str, readers: Callable[[str], ChangelogReaders], workers: int = 4
    ) -> None:
        self._readers = readers
        self._changed = threading.Condition()
        self._queue: deque[StreamTask] = deque()
        self._cancelled: dict[TaskId, threading.Event] = {}
        self._done: list[tuple[StreamTask, BaseException | None]] = []
        self._current: dict[TaskId, StreamTask] = {}
        self._stopping = False
        self._threads = [
            threading.Thread(target=self._run, name=f"{name}-{n}", daemon=True)
            for n in range(workers)
        ]
        for thread in self._threads:
            thread.start()

    def restoring(self, task_id: TaskId) -> StreamTask | None:
        """``task_id`` while its stores restore right now (readable, stale, by queries)."""
        return self._current.get(task_id)

    def add(self, task: StreamTask) -> None:
        """Restore ``task`` (prepared: :meth:`StreamTask.prepare`)."""
        with self._changed:
            self._queue.append(task)
            self._cancelled[task.id] = threading.Event()
            self._changed.notify_all()

    def remove(self, task_id: TaskId) -> StreamTask | None:
        """Stop restoring ``task_id`` (revoked, lost, or the thread stops): its restore is
        given up, waited for if it is running. Returns the task, to be closed by the caller;
        ``None`` when it is not here."""
        with self._changed:
            for task in self._queue:
                if task.id == task_id:
                    self._queue.remove(task)
                    self._cancelled.pop(task_id, None)
                    return task
            event = self._cancelled.get(task_id)
            if event is not None:
                event.set()
            while task_id in self._current:
                self._changed.wait()
            for index, (task, _error) in enumerate(self._done):
                if task.id == task_id:
                    del self._done[index]
                    return task
        return None

    def drain(self) -> list[tuple[StreamTask, BaseException | None]]:
        """The tasks restored since the last call, with the error that ended a restore
        (``None``: restored)."""
        with self._changed:
            done, self._done = self._done, []
        return done

    def stop(self, timeout_s: float = 30.0) -> list[StreamTask]:
        """Give up every restore and end the thread; returns the tasks not handed back (to be
        closed by the caller)."""
        with self._changed:
            self._stopping = True
            for event in self._cancelled.values():
                event.set()
            self._changed.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        with self._changed:
            left = list(self._queue) + [task for task, _error in self._done]
            self._queue.clear()
            self._done.clear()
        return left

    def _run(self) -> None:
        readers = self._readers(threading.current_thread().name)
        try:
            self._restore_until_stopped(readers)
        finally:
            readers.close()

    def _restore_until_stopped(self, readers: ChangelogReaders) -> None:
        while True:
            with self._changed:
                while not self._queue and not self._stopping:
                    self._changed.wait()
                if self._stopping:
                    return
                task = self._queue.popleft()
                self._current[task.id] = task
                cancelled = self._cancelled[task.id]
            error: BaseException | None = None
            try:
                task.restore(cancelled, readers)
            except:  # noqa: E722 - a bare KafkaError escapes every typed clause (see as_exception)
                error = as_exception(sys.exc_info()[1])
            with self._changed:
                del self._current[task.id]
                self._cancelled.pop(task.id, None)
                self._done.append((task, error))
                self._changed.notify_all()
