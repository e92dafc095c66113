"""Which tasks write each topic (:class:`WriterTasks`), their committed bounds as the group's
committed offsets carry them (:class:`CommittedBounds`, read on a thread of its own), and what a
tick on a topic may promise from them (:func:`promise`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection, Mapping, Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition

from progress_control.logging import OncePerKey
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processors import NO_PROGRESS
from streams_runtime.progress.metadata import TaskCommitMetadata, merged_bounds
from streams_runtime.record import TaskId, TopicPartitionId
from streams_runtime.topology import Topology

__all__ = ["CommittedBounds", "WriterTasks", "promise"]

logger = logging.getLogger(__name__)

_READ_TIMEOUT_S = 5.0
_UNREPORTED_GRACE_S = 60.0  # how long tasks may take to commit a first bound before a warning


def promise(
    writers: Collection[TaskId], committed: Mapping[TaskId, Mapping[str, int]], topic: str
) -> int:
    """What a tick on ``topic`` may promise: the least committed bound over every task in
    ``writers``; :data:`~streams_runtime.processors.NO_PROGRESS` while any of them has none."""
    # A missing bound is NO_PROGRESS, below every committed one (those are never negative).
    return min(
        (committed.get(task, {}).get(topic, NO_PROGRESS) for task in writers), default=NO_PROGRESS
    )


class WriterTasks:
    """Which tasks write each output and repartition topic of a topology, and which input
    partitions carry each task's commits."""

    def __init__(self, topology: Topology, partition_counts: Mapping[str, int]) -> None:
        self.of_topic: dict[str, tuple[TaskId, ...]] = {}
        self.inputs: dict[TaskId, tuple[TopicPartitionId, ...]] = {}
        for sub in topology.subtopologies:
            count = max((partition_counts.get(t, 0) for t in sub.source_topics), default=0)
            tasks = [TaskId(sub.id, p) for p in range(count)]
            for task in tasks:
                self.inputs[task] = tuple(
                    TopicPartitionId(t, task.partition) for t in sub.source_topics
                )
            for topic in sub.sink_topics:
                self.of_topic[topic] = tuple(sorted({*self.of_topic.get(topic, ()), *tasks}))

    def ticker_of(self, topic: str, partition: int) -> TaskId | None:
        """The writer task whose owner ticks ``partition`` of ``topic`` (one per partition,
        spread over the writers, so the ticks of a cluster are those of one instance)."""
        writers = self.of_topic.get(topic, ())
        return writers[partition % len(writers)] if writers else None


class CommittedBounds:
    """Every writer task's committed bounds, read back from the application's committed offsets
    on a thread of its own, every ``interval_s`` and whenever this instance committed a new bound
    (:meth:`wake`); :meth:`promise` answers from the latest read.

    Reads go through a consumer in the application's group that never subscribes (so it never
    joins the group), reading committed offsets only: under exactly-once, offsets in an open
    transaction are not returned until it commits, so a bound is read only once the data it
    covers is committed."""

    def __init__(
        self,
        writers: WriterTasks,
        consumer_config: Mapping[str, str],
        *,
        group_id: str,
        interval_s: float,
        metrics: RuntimeMetrics,
    ) -> None:
        self._writers = writers
        self._partitions = [
            TopicPartition(tp.topic, tp.partition)
            for tp in sorted({tp for tps in writers.inputs.values() for tp in tps})
        ]
        self._interval_s = interval_s
        self._metrics = metrics
        self._started = time.monotonic()
        self._unreported_logged = OncePerKey()
        self._consumer = Consumer(
            {
                **consumer_config,
                "group.id": group_id,
                "enable.auto.commit": "false",
                # Committed offsets as they are, not waiting for open transactions to end.
                "isolation.level": "read_uncommitted",
            }
        )
        self._lock = threading.Lock()
        self._committed: dict[TaskId, dict[str, int]] = {}
        self._raised = threading.Event()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="streams-progress", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(_READ_TIMEOUT_S + 5)
        self._consumer.close()

    def wake(self) -> None:
        """Read again now (this instance committed a new bound); never blocks."""
        self._wake.set()

    def raised(self) -> bool:
        """Whether a read raised some task's bound since the last call (ticks may move on)."""
        if self._raised.is_set():
            self._raised.clear()
            return True
        return False

    def promise(self, topic: str) -> int:
        """What a tick on ``topic`` may promise as of the latest read (see :func:`promise`)."""
        with self._lock:
            committed = self._committed
        return promise(self._writers.of_topic.get(topic, ()), committed, topic)

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self.read()
            except (KafkaException, RuntimeError) as exc:
                logger.warning(
                    "committed progress not read (ticks wait): %(error)s", {"error": str(exc)}
                )
            self._wake.wait(self._interval_s)
            self._wake.clear()

    def read(self) -> None:
        """Read every writer task's committed bounds now."""
        found = self._consumer.committed(self._partitions, timeout=_READ_TIMEOUT_S)
        metadata = {
            TopicPartitionId(tp.topic, tp.partition): TaskCommitMetadata.decode(tp.metadata)
            for tp in found
            if tp.error is None and tp.offset >= 0
        }
        committed: dict[TaskId, dict[str, int]] = {}
        for task, inputs in self._writers.inputs.items():
            bounds = merged_bounds(metadata[tp].bounds for tp in inputs if tp in metadata)
            if bounds:
                committed[task] = bounds
        with self._lock:
            # A bound, once read, stands: a commit is never undone (and a stale read must not
            # take a promise back).
            for task, bounds in self._committed.items():
                mine = committed.setdefault(task, {})
                for topic, bound in bounds.items():
                    mine[topic] = max(mine.get(topic, NO_PROGRESS), bound)
            raised = committed != self._committed
            self._committed = committed
        if raised:
            self._raised.set()
        self._report_unreported([task for task in self._writers.inputs if task not in committed])

    def _report_unreported(self, unreported: Sequence[TaskId]) -> None:
        """Tell operators which tasks hold ticks back because they never committed a bound:
        expected for a moment at start-up, a lasting hold when a task's input partitions get
        neither records nor ticks."""
        self._metrics.progress_unreported_tasks.set(len(unreported))
        if time.monotonic() - self._started < _UNREPORTED_GRACE_S:
            return
        for task in unreported:
            if self._unreported_logged.first(task):
                inputs = ", ".join(
                    f"{tp.topic}[{tp.partition}]" for tp in self._writers.inputs[task]
                )
                logger.warning(
                    "task %(task)s has not committed a bound yet (no record or tick on %(inputs)s "
                    "was processed): ticks on the topics it writes wait for it",
                    {"task": str(task), "inputs": inputs},
                )
