"""Standby replicas: warm in-memory copies of store partitions fed from their changelogs.

What a standby applies: everything up to the end of the changelog, like Kafka Streams'
standbys. Under exactly-once, read_committed only shows records whose transaction (which also
committed the input offsets that caused them) committed, so a standby is never ahead of the
committed input. Under at-least-once the changelog can hold records caused by input that is not
committed yet (the active crashed before committing its offsets); a standby shows them, just as
the active's own store did before the crash. That is what a query should see (the freshest
state the application computed), and it never reaches a restored *active* store: when a
standby's partition becomes active on the same instance, the task starts from the standby's
*committed* copy (records whose input the application committed, see :class:`StandbyReplica`)
and reads the changelog's tail with the crash-safety rules of ``TaskStateManager``. The standby
keeps serving stale queries until that restore is done.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import Message

from progress_control.protocol import is_control_record
from streams_runtime.cluster.membership import LagInfo, StorePartition
from streams_runtime.record import TopicPartitionId
from streams_runtime.state import (
    StoreSpec,
    WarmStore,
    input_committed,
    open_store,
    record_source,
)

__all__ = ["StandbyReplica"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class _PendingRecord:
    source: TopicPartitionId
    source_offset: int
    timestamp: int
    value: bytes | None


class StandbyReplica:
    """A warm in-memory copy of one store partition, fed from its changelog partition.

    ``store`` holds everything read (what stale queries see). For a promotion it also keeps
    what a restore would produce (DESIGN §5): ``committed`` has the latest changelog value per
    key among the records whose input is known to be committed, ``pending`` the newer records
    per key whose input is not (yet). :meth:`fold` moves pending records over as the
    application's committed offsets advance; :meth:`warm_store` hands the result to a task.
    """

    def __init__(self, spec: StoreSpec, sp: StorePartition, topic: str) -> None:
        self.spec = spec
        self.sp = sp
        self.tp = TopicPartitionId(topic, sp.partition)
        self.store = open_store(spec, sp.partition, "memory")
        self.next_offset = -1  # after the last record read (applied or skipped)
        self.eof_offset = -1
        self.end_offset = -1  # the changelog's end as of the last fetch (-1: not known yet)
        self.last_applied_ms = -1
        self.committed: dict[bytes, bytes] = {}
        self.pending: dict[bytes, list[_PendingRecord]] = {}
        self.committed_inputs: dict[TopicPartitionId, int] = {}

    def apply(self, msg: Message) -> None:
        offset = msg.offset() or 0
        self.next_offset = offset + 1
        key = msg.key()
        if key is None or (msg.headers() and is_control_record(msg)):
            return
        value = msg.value()
        try:
            self.store.restore(key, value)
        except ValueError:
            logger.warning(
                "standby %(store)s/%(partition)d: malformed changelog record at %(offset)d",
                {"store": self.sp.store, "partition": self.sp.partition, "offset": offset},
            )
            return
        self.last_applied_ms = msg.timestamp()[1]
        source = record_source(msg)
        if source is None or input_committed(source, self.committed_inputs):
            self._commit(key, value)
            self.pending.pop(key, None)
        else:
            pending = _PendingRecord(source[0], source[1], self.last_applied_ms, value)
            self.pending.setdefault(key, []).append(pending)

    def _commit(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.committed.pop(key, None)
        else:
            self.committed[key] = value

    def fold(self, committed_inputs: Mapping[TopicPartitionId, int]) -> None:
        """Take in the application's committed input offsets (next offset per partition): a
        key's newest pending record whose input is now committed becomes its committed value,
        and the pending records before it are dropped, as restore would."""
        for tp, offset in committed_inputs.items():
            self.committed_inputs[tp] = max(offset, self.committed_inputs.get(tp, offset))
        for key, records in list(self.pending.items()):
            last = max(
                (
                    i
                    for i, r in enumerate(records)
                    if input_committed((r.source, r.source_offset), self.committed_inputs)
                ),
                default=-1,
            )
            if last < 0:
                continue
            self._commit(key, records[last].value)
            if last == len(records) - 1:
                del self.pending[key]
            else:
                self.pending[key] = records[last + 1 :]

    def pending_sources(self) -> set[TopicPartitionId]:
        return {r.source for records in self.pending.values() for r in records}

    def warm_store(self, committed_inputs: Mapping[TopicPartitionId, int]) -> WarmStore:
        """What a restore at ``committed_inputs`` would produce up to :meth:`position`."""
        self.fold(committed_inputs)
        skipped: dict[bytes, dict[TopicPartitionId, int]] = {}
        for key, records in self.pending.items():
            sources = skipped.setdefault(key, {})
            for r in records:
                sources[r.source] = max(sources.get(r.source, 0), r.timestamp)
        return WarmStore(self.position(), dict(self.committed), skipped)

    def position(self) -> int:
        return max(self.next_offset, self.eof_offset)

    def lag(self, now_ms: int) -> LagInfo:
        """The lag as of the replicator's last fetch. Until the replica has read something
        (a record or the end) since it was assigned, it is behind by the whole changelog, or
        by an unknown amount (-1) while the end is not known either: an empty store must
        never look caught up."""
        position, end = self.position(), self.end_offset
        if position < 0:
            return LagInfo(position, end, end if end > 0 else -1, -1)
        if end < 0:
            return LagInfo(position, end, -1, -1)
        offset_lag = max(0, end - position)
        time_lag = 0
        if offset_lag:
            time_lag = max(0, now_ms - self.last_applied_ms) if self.last_applied_ms >= 0 else -1
        return LagInfo(position, end, offset_lag, time_lag)

    def close(self) -> None:
        self.store.engine.close()
