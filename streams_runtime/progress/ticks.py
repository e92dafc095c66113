"""The runtime's one writer of ticks (:class:`TickWriter`), and the stream thread's
:class:`Progress`: the writer tasks of each topic, their committed bounds, when to tick, and the
tick writer."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Collection, Mapping

from progress_control.trust import ControlRecordSource
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.progress.committed import CommittedBounds, WriterTasks
from streams_runtime.record import Headers, TaskId, TopicPartitionId
from streams_runtime.settings import RuntimeSettings
from streams_runtime.topology import Topology

__all__ = ["Progress", "Send", "TickWriter"]

Send = Callable[[str, int, bytes | None, int, Headers], None]
"""Queue one control record: topic, partition, key, timestamp, headers."""


class TickWriter:
    """The runtime's only writer of ticks (see :mod:`streams_runtime.progress`); runs on the stream
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
