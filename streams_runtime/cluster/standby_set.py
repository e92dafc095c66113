"""The standby copies one instance keeps (KIP-535, docs/runtime/queries.md): a
:class:`~streams_runtime.cluster.standby.StandbyReplica` per store partition placed here, all kept
warm by one read_committed consumer of their changelog partitions.

:class:`StandbySet` is the replicator's (:mod:`.replicator`): its thread sets which copies are
wanted, reads their changelogs, folds committed input offsets into them and checkpoints them;
queries read the copies and their lags from their own threads.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from streams_runtime.cluster.changelog_lags import GroupOffsets
from streams_runtime.cluster.membership import LagInfo, StorePartition, epoch_ms
from streams_runtime.cluster.standby import StandbyReplica, standby_directory
from streams_runtime.cluster.standby_files import checkpoint_standbys, open_standby
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.record import TaskId, TopicPartitionId
from streams_runtime.settings import RuntimeSettings, StateEngine
from streams_runtime.state import StoreSpec, WarmStore

__all__ = ["LoggedStore", "StandbySet"]

logger = logging.getLogger(__name__)

_BATCH = 1000

LoggedStore = tuple[StoreSpec, int, str, int]
"""A logged store: its spec, sub-topology, changelog topic and partition count."""


class StandbySet:
    """The standby copies of one instance and the consumer that keeps them warm."""

    def __init__(
        self,
        stores: Mapping[str, LoggedStore],
        settings: RuntimeSettings,
        consumer_config: Mapping[str, str],
        offsets: GroupOffsets,
        metrics: RuntimeMetrics,
    ) -> None:
        self._stores = stores
        self._settings = settings
        self._offsets = offsets
        self._metrics = metrics
        self.replicas: dict[StorePartition, StandbyReplica] = {}
        """Read without the lock only for one lookup (a dict read is atomic)."""
        self._lock = threading.Lock()
        # Persistent engines' standbys live on disk (in SQLite files, whichever the engine).
        self._persistent = settings.state_engine != StateEngine.MEMORY
        self._consumer = Consumer(
            {**consumer_config, "isolation.level": "read_committed", "enable.partition.eof": "true"}
        )

    def partitions(self) -> set[StorePartition]:
        """The store partitions with a copy here, as of now."""
        with self._lock:
            return set(self.replicas)

    def snapshot(self) -> dict[StorePartition, StandbyReplica]:
        """The copies by store partition, as of now."""
        with self._lock:
            return dict(self.replicas)

    def lag(self, sp: StorePartition) -> LagInfo | None:
        """The lag of the copy of ``sp`` (``None``: there is none). Never asks the broker:
        queries must not wait on Kafka clients the replicator thread is using."""
        with self._lock:
            replica = self.replicas.get(sp)
        return None if replica is None else replica.lag(epoch_ms())

    def set_wanted(self, wanted: set[StorePartition]) -> None:
        """Drop the copies not ``wanted``, open the missing ones, and point the consumer at
        each copy's changelog partition, from where the copy is."""
        with self._lock:
            current = set(self.replicas)
        # Opened outside the lock: resuming asks the broker, and queries wait on the lock.
        created = {sp: self._open(sp) for sp in sorted(wanted - current)}
        with self._lock:
            for sp in current - wanted:
                logger.info(
                    "standby %(store)s/%(partition)d dropped",
                    {"store": sp.store, "partition": sp.partition},
                )
                self.replicas.pop(sp).close()
                self._metrics.standby_lag(sp.store, str(sp.partition)).set(0)
            for sp, replica in created.items():
                logger.info(
                    "standby %(store)s/%(partition)d created (from offset %(offset)d)",
                    {
                        "store": sp.store,
                        "partition": sp.partition,
                        "offset": max(replica.position(), 0),
                    },
                )
                self.replicas[sp] = replica
            assignment = [
                TopicPartition(
                    r.tp.topic,
                    r.tp.partition,
                    r.next_offset if r.next_offset >= 0 else OFFSET_BEGINNING,
                )
                for r in self.replicas.values()
            ]
        if assignment:
            self._consumer.assign(assignment)
        else:
            self._consumer.unassign()

    def read(self, idle_wait: Callable[[], object]) -> None:
        """Apply one batch of changelog records to the copies (``idle_wait()`` when there are
        none: nothing to read)."""
        with self._lock:
            idle = not self.replicas
        if idle:
            idle_wait()
            return
        messages = self._consumer.consume(_BATCH, 0.05)
        with self._lock:
            by_tp = {r.tp: r for r in self.replicas.values()}
            read: dict[StandbyReplica, int] = {}
            for msg in messages:
                tp = TopicPartitionId(msg.topic() or "", msg.partition() or 0)
                replica = by_tp.get(tp)
                if replica is None:
                    continue
                error = msg.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        replica.eof_offset = msg.offset() or 0
                    else:
                        logger.warning(
                            "standby consumer: %(error)s",
                            {
                                "topic": msg.topic(),
                                "partition": msg.partition(),
                                "error": str(error),
                            },
                        )
                    continue
                replica.apply(msg)
                read[replica] = read.get(replica, 0) + 1
            for replica, count in read.items():
                self._metrics.standby_restored(replica.sp.store, str(replica.sp.partition)).inc(
                    count
                )
            # Cached by the consumer from its fetch responses: no broker round trip.
            for replica in by_tp.values():
                ktp = TopicPartition(replica.tp.topic, replica.tp.partition)
                high = self._consumer.get_watermark_offsets(ktp, cached=True)[1]
                if high >= 0 and replica.position() >= 0:
                    replica.end_offset = int(high)

    def fold(self) -> None:
        """Give the copies the application's committed offsets of the inputs behind their
        pending records (see :class:`StandbyReplica`), so those do not pile up."""
        with self._lock:
            sources = set().union(*(r.pending_sources() for r in self.replicas.values()))
        if not sources:
            return
        try:
            committed = self._offsets.committed(sorted(sources))
        except KafkaException as exc:  # the next interval asks again
            logger.debug("committed offsets not read: %(error)s", {"error": str(exc)})
            return
        with self._lock:
            for replica in self.replicas.values():
                replica.fold(committed)

    def warm_stores(
        self, task: TaskId, committed_inputs: Mapping[TopicPartitionId, int]
    ) -> dict[str, WarmStore]:
        """The committed state of ``task``'s stores that have a copy here, as of
        ``committed_inputs`` (the task's committed input offsets)."""
        warm: dict[str, WarmStore] = {}
        with self._lock:
            for name, (_spec, sub, _topic, _count) in self._stores.items():
                replica = self.replicas.get(StorePartition(name, task.partition))
                if sub == task.subtopology and replica is not None and replica.position() >= 0:
                    warm[name] = replica.warm_store(committed_inputs)
        return warm

    def checkpoint(self) -> None:
        """Checkpoint the copies on disk (persistent engines)."""
        with self._lock:
            checkpoint_standbys(self.replicas.values())

    def close(self) -> None:
        """Close the consumer and every copy."""
        with contextlib.suppress(RuntimeError):
            self._consumer.close()
        with self._lock:
            for replica in self.replicas.values():
                replica.close()
            self.replicas.clear()

    def _open(self, sp: StorePartition) -> StandbyReplica:
        spec, _sub, topic, _count = self._stores[sp.store]
        directory = (
            standby_directory(self._settings.state_dir, self._settings.application_id, sp)
            if self._persistent
            else None
        )
        return open_standby(spec, sp, topic, directory, self._offsets.watermarks)
