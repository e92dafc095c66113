"""Progress: what the runtime's ticks promise, where each task's bound is kept, and the one place
ticks are written.

A tick on a partition of a repartition or output topic promises its readers that no record
anyone in this application still writes there is older than the tick (on in-order input; input
out of order stays as out of order as without ticks). Readers — the runtime's own repartition
consumers, Kafka Streams, Spark, Flink — take it as a watermark for the whole partition, and
every task of the upstream sub-topology may write every partition, on any instance, before or
after a failover, a pause or a restart. So:

- **A task's bound** per output topic is what its sinks promise (records they still send are at
  least this, :meth:`~streams_runtime.processors.SinkProcessor.progress`), and it is committed
  with the task's input offsets, in their commit metadata (:class:`TaskCommitMetadata`): under
  exactly-once inside the transaction, at-least-once after the outputs were flushed. Whoever
  owns the task next resumes from that commit, so it never writes below the bound; it restores
  the bound as a floor, so a task's committed bound never goes down.
- **A topic's promise** is the least committed bound over *every* task writing it
  (:func:`promise`), wherever the task runs: a task that is unowned, restoring or paused keeps
  its last committed bound, one that never committed one holds the topic back (as Flink's
  ``StatusWatermarkValve`` takes the minimum over input channels, Beam's output watermark the
  minimum over inputs and holds, and Timely Dataflow's frontier waits for every worker).
  :class:`CommittedBounds` reads the bounds back from the group's committed offsets on a thread
  of its own, so the stream thread never waits on the broker for them.
- **The one tick writer** (:class:`TickWriter`) ticks a partition just below its topic's promise
  when nothing this instance wrote there reached it, at most once per progress interval, and
  only the partitions it is responsible for (those whose writer task, chosen by partition number,
  it owns), so a cluster sends as many ticks as a single instance. Ticks are signed with the
  runtime's signing key when it has one (:class:`~progress_control.trust.ControlRecordSource`).

The stream thread holds one :class:`Progress`: these three, and when to tick.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaException, TopicPartition

from progress_control.logging import OncePerKey
from progress_control.trust import ControlRecordSource
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processors import NO_PROGRESS
from streams_runtime.record import Headers, TaskId, TopicPartitionId
from streams_runtime.settings import RuntimeSettings
from streams_runtime.topology import Topology

__all__ = [
    "CommittedBounds",
    "Progress",
    "TaskCommitMetadata",
    "TickWriter",
    "WriterTasks",
    "promise",
]

logger = logging.getLogger(__name__)

_V1 = "pc1:"  # partition time only
_V2 = "pc2:"  # partition time and the task's bounds
_MAX_METADATA = 4000  # the broker's offset.metadata.max.bytes defaults to 4096
_READ_TIMEOUT_S = 5.0
_UNREPORTED_GRACE_S = 60.0  # how long tasks may take to commit a first bound before a warning


@dataclass(frozen=True)
class TaskCommitMetadata:
    """What a task commits beside each input offset: the partition's time (so it survives
    restarts and rebalances) and the task's bound per output topic."""

    partition_time: int = -1
    bounds: Mapping[str, int] = field(default_factory=dict)

    def encode(self) -> str:
        """The commit metadata string; without the bounds when they would not fit (the topic
        is then held back, never promised beyond what was committed before)."""
        bounds = {topic: bound for topic, bound in self.bounds.items() if bound > NO_PROGRESS}
        encoded = _V2 + json.dumps([self.partition_time, bounds], separators=(",", ":"))
        if len(encoded) > _MAX_METADATA:
            logger.warning(
                "task bounds do not fit in commit metadata (%(size)d bytes); the topics it "
                "writes are not ticked beyond earlier commits",
                {"size": len(encoded)},
            )
            return f"{_V1}{self.partition_time}"
        return encoded

    @classmethod
    def decode(cls, metadata: str | None) -> TaskCommitMetadata:
        """The metadata of a commit; empty (time -1, no bounds) when absent or foreign."""
        try:
            if metadata and metadata.startswith(_V2):
                partition_time, bounds = json.loads(metadata[len(_V2) :])
                return cls(int(partition_time), {str(t): int(b) for t, b in dict(bounds).items()})
            if metadata and metadata.startswith(_V1):
                return cls(int(metadata[len(_V1) :]))
        except (ValueError, TypeError):
            pass
        return cls()


def merged_bounds(found: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """A task's bounds from several commits' (its inputs' metadata): per topic the largest (an
    input that did not move since an earlier commit keeps that commit's, lower, bound)."""
    bounds: dict[str, int] = {}
    for item in found:
        for topic, bound in item.items():
            bounds[topic] = max(bounds.get(topic, NO_PROGRESS), bound)
    return bounds


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


Send = Callable[[str, int, bytes | None, int, Headers], None]
"""Queue one control record: topic, partition, key, timestamp, headers."""


class TickWriter:
    """The runtime's only writer of ticks (see the module docstring); runs on the stream
    thread."""

    def __init__(
        self,
        writers: WriterTasks,
        bounds: Callable[[str], int],
        *,
        source: ControlRecordSource,
        send: Send,
        partitions_of: Callable[[str], int],
        metrics: RuntimeMetrics,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._writers = writers
        self._interval_s = interval_s
        self._clock = clock
        self._bounds = bounds
        self._source = source
        self._send = send
        self._partitions_of = partitions_of
        self._metrics = metrics
        self._ticked: dict[TopicPartitionId, tuple[int, float]] = {}  # timestamp, when sent

    def propagate(self, owned: Collection[TaskId], written: Mapping[TopicPartitionId, int]) -> int:
        """Tick the partitions this instance is responsible for (those whose ticker task is in
        ``owned``) where nothing written (``written``: the latest timestamp acknowledged per
        partition) reached their topic's promise yet, at most once per ``interval_s`` each
        (promises rise as often as tasks commit); returns how many ticks were sent."""
        now = self._clock()
        sent = 0
        for topic in self._writers.of_topic:
            # Just below the promise: a reader closes a window when its close time is <= its
            # stream time, so a tick *at* a record still to come could close a window that
            # record would have joined.
            promised = self._bounds(topic)
            self._metrics.progress_promise(topic).set(promised / 1000 if promised >= 0 else -1)
            at = promised - 1
            if at < 0:
                continue
            for partition in range(self._partitions_of(topic)):
                if self._writers.ticker_of(topic, partition) not in owned:
                    continue
                tp = TopicPartitionId(topic, partition)
                ticked, when = self._ticked.get(tp, (-1, -self._interval_s))
                if written.get(tp, -1) >= at or ticked >= at or now - when < self._interval_s:
                    continue
                record = self._source.record(topic, partition, at)
                self._send(topic, partition, record.key, at, record.byte_headers)
                self._ticked[tp] = (at, now)
                sent += 1
        if sent:
            self._metrics.progress_ticks.inc(sent)
        return sent


class Progress:
    """The stream thread's progress, in one place: the writer tasks of each topic, their
    committed bounds (:class:`CommittedBounds`, read on a thread of their own), when to tick,
    and the tick writer (:class:`TickWriter`). The thread calls :meth:`start`, :meth:`due` and
    :meth:`tick` from its loop, :meth:`committed` after each commit, :meth:`stop` at the end."""

    def __init__(
        self,
        topology: Topology,
        settings: RuntimeSettings,
        partition_counts: Mapping[str, int],
        *,
        send: Send,
        partitions_of: Callable[[str], int],
        metrics: RuntimeMetrics,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval_s = settings.progress_interval_ms / 1000
        self._clock = clock
        self._next = clock() + self.interval_s
        writers = WriterTasks(topology, partition_counts)
        self._bounds = CommittedBounds(
            writers,
            settings.consumer_config(),
            group_id=settings.application_id,
            interval_s=self.interval_s,
            metrics=metrics,
        )
        # A source id is at most 255 bytes; application ids have no limit.
        source_id = f"streams:{settings.application_id[:160]}:{socket.gethostname()[:64]}"
        source_id += f":{os.getpid()}"
        self._ticks = TickWriter(
            writers,
            self._bounds.promise,
            source=ControlRecordSource(
                source_id,
                signing_key=settings.signing_key,
                # Registry-framed keys: a reader's key deserializer passes null, not the sentinel.
                null_key_topics=frozenset(
                    t for sub in topology.subtopologies for t in sub.null_key_tick_topics
                ).__contains__,
            ),
            send=send,
            partitions_of=partitions_of,
            metrics=metrics,
            interval_s=self.interval_s,
        )

    def start(self) -> None:
        """Start reading committed bounds; the first tick is due one interval from now."""
        self._next = self._clock() + self.interval_s
        self._bounds.start()

    def due(self, now: float) -> bool:
        """Whether to tick now: every interval, and as soon as a read raised a bound."""
        if now >= self._next or self._bounds.raised():
            self._next = now + self.interval_s
            return True
        return False

    def tick(self, owned: Collection[TaskId], written: Mapping[TopicPartitionId, int]) -> int:
        """Tick what this instance is responsible for (:meth:`TickWriter.propagate`)."""
        return self._ticks.propagate(owned, written)

    def committed(self) -> None:
        """This instance committed new bounds: read them back now (never blocks)."""
        self._bounds.wake()

    def stop(self) -> None:
        self._bounds.stop()
