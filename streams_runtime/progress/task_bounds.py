"""One task's bounds per output topic (:class:`TaskBounds`): what its sinks promise now, never
below the bound restored from the last commit, and what its own last commit promised."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from streams_runtime.processors import NO_PROGRESS, SinkProcessor
from streams_runtime.progress.metadata import merged_bounds

__all__ = ["TaskBounds"]


class TaskBounds:
    """A task's bounds, from its sinks (:meth:`~streams_runtime.processors.SinkProcessor.progress`)
    and its commits. Whoever committed last promised the restored bounds, and resuming from that
    commit keeps the promise: they are the floor, so a task's committed bound never goes down."""

    def __init__(self) -> None:
        self._sinks: Sequence[SinkProcessor] = ()
        self._floor: dict[str, int] = {}
        self.committed: dict[str, int] = {}
        """The bounds this task's commits carried, merged (missing: none yet)."""

    def attach(self, sinks: Sequence[SinkProcessor]) -> None:
        """The task's sinks, once its processors exist."""
        self._sinks = sinks

    def restore(self, restored: Iterable[Mapping[str, int]]) -> None:
        """The bounds in the commit metadata of the task's inputs (their last commits)."""
        self._floor = self.committed = merged_bounds(restored)

    def current(self) -> dict[str, int]:
        """Per output topic, the bound the task promises: records its sinks still send are at
        least this (the least over its sinks to the topic, and never below the floor)."""
        live: dict[str, int] = {}
        for sink in self._sinks:
            bound = sink.progress()
            live[sink.topic] = min(live.get(sink.topic, bound), bound)
        bounds = dict(self._floor)
        for topic, bound in live.items():
            if bound > bounds.get(topic, NO_PROGRESS):
                bounds[topic] = bound
        return bounds

    def uncommitted(self) -> bool:
        """Whether a current bound is past the committed one (a commit would let ticks move)."""
        committed = self.committed
        return any(b > committed.get(t, NO_PROGRESS) for t, b in self.current().items())

    def commit(self, found: Iterable[Mapping[str, int]]) -> bool:
        """After a commit whose metadata carried ``found``: whether the committed bounds moved."""
        before = self.committed
        self.committed = merged_bounds([before, *found])
        return self.committed != before
