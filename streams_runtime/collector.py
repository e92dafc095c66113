"""The runtime's producer: outputs, repartition records, changelog writes, dead letters and
progress ticks, in one producer transaction per commit interval under exactly-once.

Ticks on the runtime's outputs and repartition topics come from one writer only,
:class:`~streams_runtime.progress.TickWriter`, and go through here like any record (inside the
transaction under exactly-once). The producer is a plain one, never the interceptor's, whose
ticks follow another timestamp rule.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from streams_runtime.errors import StreamsError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.murmur2 import partition_for_key
from streams_runtime.record import Headers, TopicPartitionId
from streams_runtime.settings import RuntimeSettings

__all__ = ["RecordCollector"]

logger = logging.getLogger(__name__)

_TRANSACTION_TIMEOUT_S = 60.0


_ProducerHeaders = list[tuple[str, str | bytes | None]]
"""Headers as the producer's signature spells them: ``Headers`` is one, but a list is invariant
(the producer only reads it)."""


class RecordCollector:
    """Sends the runtime's records; raises :class:`StreamsError` on a failed delivery at the next
    flush or commit, so offsets are never committed past output that did not arrive."""

    def __init__(
        self,
        settings: RuntimeSettings,
        instance_id: str,
        metrics: RuntimeMetrics,
        *,
        transactional: bool,
    ) -> None:
        self._metrics = metrics
        self._eos = transactional  # decided by the thread's CommitStrategy
        config: dict[str, object] = {
            # Java clients' partitioner, so keys land where Kafka Streams and Java producers
            # would put them (and where interactive-query routing looks for them).
            "partitioner": "murmur2_random",
            "linger.ms": "5",
            "enable.idempotence": "true",
            "acks": "all",
            **settings.producer_config(),
            "on_delivery": self._on_delivery,
        }
        if self._eos:
            config.setdefault("transactional.id", f"{settings.application_id}-{instance_id}")
            config.setdefault("transaction.timeout.ms", "10000")
        self.producer = Producer(config)
        self._in_transaction = False
        self._error: KafkaError | None = None
        self._sends = 0
        # Highest timestamp acknowledged per output partition (data or tick), for propagation,
        # and the offset after the last acknowledged record (changelog checkpoints).
        self.written: dict[TopicPartitionId, int] = {}
        self.next_offsets: dict[TopicPartitionId, int] = {}
        self._partition_counts: dict[str, int] = {}
        if self._eos:
            self.producer.init_transactions(_TRANSACTION_TIMEOUT_S)

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            if self._error is None:
                self._error = error
            logger.error(
                "delivery to %(topic)s[%(partition)s] failed: %(error)s",
                {
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "error": error.str(),
                    "code": error.name(),
                },
            )
            return
        # Called for every record sent: a plain tuple finds a partition's entry (it equals the
        # TopicPartitionId key, which the dicts keep); a new entry is keyed by a TopicPartitionId.
        topic, partition = msg.topic() or "", msg.partition() or 0
        tp = (topic, partition)
        timestamp = msg.timestamp()[1]
        written = self.written
        if tp in written:
            if timestamp > written[tp]:  # noqa: PLR1730 (no call, no store when not larger)
                written[tp] = timestamp
        elif timestamp > -1:
            written[TopicPartitionId(topic, partition)] = timestamp
        next_offsets = self.next_offsets
        if tp in next_offsets:
            next_offsets[tp] = (msg.offset() or 0) + 1
        else:
            next_offsets[TopicPartitionId(topic, partition)] = (msg.offset() or 0) + 1

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition: int = -1,
    ) -> None:
        """Queue one record (blocking while the local queue is full)."""
        self.send_many(topic, partition, ((key, value, headers),), timestamp)

    def send_many(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
        timestamp: int,
    ) -> None:
        """:meth:`send` for each ``(key, value, headers)`` of ``records``, all to ``partition``
        of ``topic`` at ``timestamp`` (changelog flushes: one call, not one per record)."""
        if self._eos and not self._in_transaction:
            self.producer.begin_transaction()
            self._in_transaction = True
        produce, poll = self.producer.produce, self.producer.poll
        sends = self._sends
        try:
            for key, value, headers in records:
                while True:
                    try:
                        produce(
                            topic,
                            value,
                            key,
                            partition,
                            timestamp=timestamp,
                            headers=cast("_ProducerHeaders | None", headers),
                        )
                        break
                    except BufferError:
                        poll(0.05)  # back-pressure, as in send()
                sends += 1
                if sends & 1023 == 0:
                    poll(0)
        finally:
            self._sends = sends

    def partition_for(self, topic: str, key: bytes) -> int:
        """The partition murmur2 gives ``key`` in ``topic`` (the producer's own partitioner,
        for a key other than the record's)."""
        count = self._partition_counts.get(topic)
        if count is None:
            metadata = self.producer.list_topics(topic, timeout=10).topics.get(topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise StreamsError(f"output topic {topic} has no partitions (does it exist?)")
            count = self._partition_counts[topic] = len(metadata.partitions)
        return partition_for_key(key, count)

    def poll(self) -> None:
        self.producer.poll(0)

    def flush(self) -> None:
        """Wait for every queued record; raise if any delivery failed."""
        remaining = self.producer.flush(30.0)
        self._raise_delivery_error()
        if remaining:
            raise StreamsError(f"{remaining} records not delivered within 30s")

    def commit(self, offsets: Sequence[TopicPartition], group_metadata: object | None) -> None:
        """Exactly-once: commit the transaction with ``offsets`` in it."""
        if not self._in_transaction:
            self.producer.begin_transaction()
            self._in_transaction = True
        if offsets:
            self.producer.send_offsets_to_transaction(
                list(offsets), group_metadata, _TRANSACTION_TIMEOUT_S
            )
        self.producer.commit_transaction(_TRANSACTION_TIMEOUT_S)
        self._in_transaction = False
        self._raise_delivery_error()

    def abort(self) -> None:
        """Exactly-once: abort the open transaction (if any); its records are never read."""
        if self._in_transaction:
            try:
                self.producer.abort_transaction(_TRANSACTION_TIMEOUT_S)
            except KafkaException as exc:
                logger.warning("aborting the transaction failed: %(error)s", {"error": str(exc)})
            self._in_transaction = False
        self._error = None

    def _raise_delivery_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise StreamsError(f"a record could not be delivered: {error}")

    def close(self) -> None:
        try:
            if self._in_transaction:
                self.abort()
            else:
                self.producer.flush(10.0)
        finally:
            self.producer.close()
