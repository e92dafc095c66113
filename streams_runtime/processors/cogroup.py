"""The merge of a cogrouped aggregation (Kafka Streams' ``KTablePassThrough`` behind
``CogroupedKStream``, KIP-150).

A cogroup runs one aggregation processor per grouped input, each the one its single-input
aggregation uses (:class:`~streams_runtime.processors.tables.TableAggregateProcessor`, the
session, time and sliding window aggregations), all writing one shared store, and each keeping
its own observed stream time, as Kafka Streams' do. Their updates meet in this merge, which
passes them on: the cogrouped table is what it forwards.
"""

from __future__ import annotations

from streams_runtime.processors.stateless import PassThroughProcessor
from streams_runtime.processors.windowed_aggregate import FinalResults

__all__ = ["CogroupMergeProcessor"]


class CogroupMergeProcessor(PassThroughProcessor):
    """Forwards the updates of every input's aggregation (Kafka Streams' ``KTablePassThrough``).

    Keeps order as a stream merge does: the task takes its inputs' records in timestamp order,
    so the aggregations' outputs are one stream, and their control progress the largest of
    theirs (:meth:`~streams_runtime.processors.base.Processor.parents_progress`).

    Windowed aggregations with the record cache on flush it when their stream time closes a
    window a suppression below still holds
    (:mod:`~streams_runtime.processors.windowed_aggregate`): they find their suppressions among
    their children, and find them through this merge too, which stands for the suppressions
    below it (:class:`~streams_runtime.processors.windowed_aggregate.FinalResults`)."""

    name = "cogroup_merge"

    def _finals(self) -> list[FinalResults]:
        return [child for child in self.children if isinstance(child, FinalResults)]

    def earliest_end(self) -> int | None:
        """The smallest end of the windows the suppressions below still hold."""
        ends = [end for final in self._finals() if (end := final.earliest_end()) is not None]
        return min(ends, default=None)

    @property
    def observed_time(self) -> int:
        """The least stream time a suppression below evaluated at (-1 without one)."""
        return min((final.observed_time for final in self._finals()), default=-1)

    def observe(self, stream_time: int) -> None:
        """An aggregation's stream time: let the suppressions below emit what it closed."""
        for final in self._finals():
            final.observe(stream_time)
