"""Local store access for interactive queries (Kafka Streams' ``StreamThreadStateStoreProvider``).

Queries run on the query server's threads; the stores belong to the stream thread's tasks and
the replicator's standbys. :class:`LocalStoreProvider` is the one place queries reach them
through: which tasks are active or restoring here, a store of either, and a standby copy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from streams_runtime.cluster.membership import StorePartition
from streams_runtime.processing.stream_thread import StreamThread
from streams_runtime.record import TaskId
from streams_runtime.state import KeyValueStore, SessionStore

if TYPE_CHECKING:  # imported by the app only with membership on: not at start-up otherwise
    from streams_runtime.cluster.replicator import Replicator
    from streams_runtime.cluster.standby import StandbyReplica

__all__ = ["LocalStoreProvider", "StoreLookup"]

StoreLookup = Callable[[str], KeyValueStore | SessionStore]
"""A task's stores by name; ``KeyError`` for a store the task does not have."""


class LocalStoreProvider:
    """This instance's local copies of stores: the stream thread's active and restoring tasks,
    and the replicator's standbys (``replicator`` is ``None`` without membership)."""

    def __init__(self, thread: StreamThread, replicator: Replicator | None) -> None:
        self._thread = thread
        self._replicator = replicator

    def active_tasks(self) -> frozenset[TaskId]:
        """The tasks running as active here (restored, processing)."""
        return self._thread.active_tasks

    def active(self, task_id: TaskId) -> StoreLookup | None:
        """The stores of ``task_id`` while it runs as active here; ``None`` otherwise."""
        task = self._thread.tasks.get(task_id) if task_id in self._thread.active_tasks else None
        return None if task is None else task.query_store

    def restoring(self, task_id: TaskId) -> StoreLookup | None:
        """The stores of ``task_id`` while it is restoring here; ``None`` otherwise."""
        task = self._thread.restoring(task_id)
        return None if task is None else task.state.store

    def standby(self, sp: StorePartition) -> StandbyReplica | None:
        """The standby of ``sp`` on this instance, if any."""
        return None if self._replicator is None else self._replicator.standbys.get(sp)
