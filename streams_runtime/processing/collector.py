"""The runtime's producer: outputs, repartition records, changelog writes, dead letters and
progress ticks, in one producer transaction per commit interval under exactly-once.

Ticks on the runtime's outputs and repartition topics come from one writer only,
:class:`~streams_runtime.progress.TickWriter`, and go through here like any record (inside the
transaction under exactly-once). The producer is a plain one, never the interceptor's, whose
ticks follow another timestamp rule.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Protocol, cast

from confluent_kafka import KafkaError, KafkaException, Message, Producer, TopicPartition

from progress_control.logging import client_logger
from streams_runtime.errors import StreamsError, TaskMigratedError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.murmur2 import partition_for_key
from streams_runtime.record import Headers, TopicPartitionId
from streams_runtime.settings import RuntimeSettings

if TYPE_CHECKING:
    from streams_runtime.state import ChangelogWrites

__all__ = ["ChangelogSink", "RecordCollector", "TaskOutput"]

logger = logging.getLogger(__name__)

_TRANSACTION_TIMEOUT_S = 60.0

_PURGED = frozenset({KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
"""Delivery errors of records discarded on purpose: an aborted transaction's, a fenced
producer's."""

_FENCED = frozenset(
    {KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH}
)


_ProducerHeaders = list[tuple[str, str | bytes | None]]
"""Headers as the producer's signature spells them: ``Headers`` is one, but a list is invariant
(the producer only reads it)."""


def _retried(call: Callable[[], object]) -> None:
    """``call`` again while it fails with a retriable error, for up to a transaction timeout: a
    process resumed after a pause finds its requests timed out, and librdkafka asks for the
    same call again then."""
    deadline = time.monotonic() + _TRANSACTION_TIMEOUT_S
    while True:
        try:
            call()
            return
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if not isinstance(error, KafkaError) or not error.retriable():
                raise
            if error.txn_requires_abort() or time.monotonic() > deadline:
                raise
            logger.info("retrying after %(error)s", {"error": error.str()})
            time.sleep(0.1)


def _close(producer: Producer) -> None:
    """Close ``producer``; a fenced one fails to abort its transaction while closing (a
    warning from the client) or raises its fatal error, and is closed all the same."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            producer.close()
    except KafkaException as exc:
        logger.info("producer closed after %(error)s", {"error": str(exc)})


class TaskOutput(Protocol):
    """What a task sends its records through: the broker's :class:`RecordCollector`, or the
    test driver's in-memory one (:mod:`streams_runtime.testing`)."""

    @property
    def next_offsets(self) -> Mapping[TopicPartitionId, int]:
        """The offset after the last record acknowledged per partition written."""
        ...

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
        """Queue one record; ``partition`` -1: the key's (murmur2), ``timestamp`` 0: now."""
        ...

    def send_many(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
        timestamp: int,
    ) -> None:
        """:meth:`send` for each ``(key, value, headers)`` of ``records``."""
        ...

    def partition_for(self, topic: str, key: bytes) -> int:
        """The partition murmur2 gives ``key`` in ``topic``."""
        ...


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
            # Keeps a fatal error's cause (a fence), which produce() later reports only as
            # _FATAL (see _fenced_or).
            "error_cb": self._on_client_error,
            # librdkafka's log lines into our logs (not raw to stderr), minus those repeating an
            # error error_cb logs: each error once.
            "logger": client_logger("streams_runtime.librdkafka"),
        }
        if self._eos:
            config.setdefault("transactional.id", f"{settings.application_id}-{instance_id}")
            # A killed instance's open transaction holds back every read_committed reader of
            # what it wrote (its tasks' new owners read committed offsets, changelogs, inputs)
            # until it times out: aborted well before the group notices the death (half the
            # session timeout), its successors never wait (docs/runtime/scaling.md).
            session_ms = int(settings.consumer_config().get("session.timeout.ms", "20000"))
            config.setdefault("transaction.timeout.ms", str(min(10_000, session_ms // 2)))
        self._config = config
        self.producer = Producer(config)
        self._in_transaction = False
        self._error: KafkaError | None = None
        self._sends = 0
        self._purged = 0
        self._fatal: KafkaError | None = None
        # Highest timestamp acknowledged per output partition (data or tick), for propagation,
        # and the offset after the last acknowledged record (changelog checkpoints).
        self.written: dict[TopicPartitionId, int] = {}
        self.next_offsets: dict[TopicPartitionId, int] = {}
        self._partition_counts: dict[str, int] = {}
        if self._eos:
            self.producer.init_transactions(_TRANSACTION_TIMEOUT_S)

    def reset_producer(self) -> None:
        """After :class:`TaskMigratedError`: drop the fenced producer and its unsent records,
        start a new one under the same transactional id (fencing any older holder)."""
        # Its unsent records' reports served before close(): a fenced producer's close raises
        # its fatal error, and serving callbacks after that fails in the client.
        self.producer.purge()
        self._serve_reports()
        _close(self.producer)
        self._report_purged("the fenced producer")
        self._in_transaction = False
        self._error = self._fatal = None
        self.producer = Producer(self._config)
        if self._eos:
            self.producer.init_transactions(_TRANSACTION_TIMEOUT_S)

    def _on_client_error(self, error: KafkaError) -> None:
        if error.fatal():
            self._fatal = error
        logger.warning(
            "producer: %(error)s",
            {"error": error.str(), "code": error.name(), "fatal": error.fatal()},
        )

    def _fenced_or(self, exc: KafkaException) -> Exception:
        """:class:`TaskMigratedError` when ``exc`` comes of the producer being fenced (itself,
        or the fatal state a fence left it in), else ``exc``."""
        error = exc.args[0] if exc.args else None
        if isinstance(error, KafkaError) and error.code() == KafkaError._FATAL:
            if self._fatal is None:
                try:  # the fatal error's own event, not served yet: error_cb, or raised here
                    self.producer.poll(0)
                except KafkaException as raised:
                    error = raised.args[0] if raised.args else None
            error = self._fatal or error
        if isinstance(error, KafkaError) and error.code() in _FENCED:
            return TaskMigratedError(f"the producer was fenced: {error.str()}")
        return exc

    def _failed(self, exc: KafkaException) -> StreamsError:
        migrated = self._fenced_or(exc)
        if isinstance(migrated, StreamsError):
            return migrated
        return StreamsError(f"the producer failed: {exc}")

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            if error.code() in _PURGED:
                self._purged += 1  # an abort or a fenced producer's reset: one line for all
                return
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
        produce, poll = self.producer.produce, self.producer.poll
        sends = self._sends
        try:
            if self._eos and not self._in_transaction:
                self.producer.begin_transaction()
                self._in_transaction = True
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
        except KafkaException as exc:
            raise self._failed(exc) from exc
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
        try:
            self.producer.poll(0)
        except KafkaException as exc:  # a fatal error: raised here too
            raise self._failed(exc) from exc

    def flush(self) -> None:
        """Wait for every queued record; raise if any delivery failed."""
        try:
            remaining = self.producer.flush(30.0)
        except KafkaException as exc:
            raise self._failed(exc) from exc
        self._raise_delivery_error()
        if remaining:
            raise StreamsError(f"{remaining} records not delivered within 30s")

    def commit(self, offsets: Sequence[tuple[Sequence[TopicPartition], object]]) -> None:
        """Exactly-once: commit the transaction with ``offsets`` in it, each group of them with
        the group metadata of the consumer (lane) that owns them."""
        try:
            if not self._in_transaction:
                self.producer.begin_transaction()
                self._in_transaction = True
            for group_offsets, group_metadata in offsets:
                if group_offsets:
                    _retried(partial(self._send_offsets, list(group_offsets), group_metadata))
            _retried(lambda: self.producer.commit_transaction(_TRANSACTION_TIMEOUT_S))
        except KafkaException as exc:
            raise self._fenced_or(exc) from exc
        self._in_transaction = False
        self._raise_delivery_error()

    def _send_offsets(self, offsets: list[TopicPartition], group_metadata: object) -> None:
        self.producer.send_offsets_to_transaction(offsets, group_metadata, _TRANSACTION_TIMEOUT_S)

    def abort(self) -> None:
        """Exactly-once: abort the open transaction (if any); its records are never read."""
        if self._in_transaction:
            try:
                self.producer.abort_transaction(_TRANSACTION_TIMEOUT_S)
            except KafkaException as exc:
                logger.warning("aborting the transaction failed: %(error)s", {"error": str(exc)})
            self._in_transaction = False
            self._serve_reports()
            self._report_purged("the aborted transaction")
        self._error = None

    def _serve_reports(self) -> None:
        """The delivery reports of purged records (a fatal producer raises its error too)."""
        for _ in range(2):  # a fatal producer raises its error once, then serves the reports
            try:
                self.producer.poll(0)
                return
            except KafkaException:
                continue

    def _report_purged(self, whose: str) -> None:
        if self._purged:
            logger.warning(
                "%(records)d records of %(whose)s were discarded (processed again from the "
                "last commit)",
                {"records": self._purged, "whose": whose},
            )
            self._purged = 0

    def _raise_delivery_error(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            if error.code() in _FENCED:
                raise TaskMigratedError(f"the producer was fenced: {error.str()}")
            raise StreamsError(f"a record could not be delivered: {error}")

    def close(self) -> None:
        try:
            if self._in_transaction:
                self.abort()
            else:
                self.producer.flush(10.0)
        except KafkaException as exc:
            # A fenced or otherwise failed producer: nothing more can be sent; what was not
            # committed is processed again by the next owner.
            logger.warning("closing the producer: %(error)s", {"error": str(exc)})
        finally:
            _close(self.producer)


class ChangelogSink:
    """Adapts the collector to the state layer's ``RecordSink``."""

    def __init__(self, collector: TaskOutput) -> None:
        self._collector = collector

    def send(  # noqa: PLR0917 - the state layer's RecordSink signature
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> None:
        # Wall-clock time (0 lets the producer stamp it), not event time: the broker's
        # min.compaction.lag.ms acts on record timestamps, and replayed old data must not make
        # the changelog compactable at once.
        self._collector.send(topic, key, value, 0, headers, partition=partition)

    def send_many(self, topic: str, partition: int, writes: ChangelogWrites) -> None:
        # As send(), for a buffered writer's flush: one call for all of them.
        self._collector.send_many(
            topic, partition, ((key, value, headers) for key, (value, _, headers) in writes), 0
        )
