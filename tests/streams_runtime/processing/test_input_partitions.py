"""``InputPartitions`` against a real consumer on the real broker: a seek librdkafka refuses with
``_STATE`` ("Erroneous state": the partition was just assigned and is not fetching yet, or was
taken away) is deferred, never raised; a deferred seek is taken before any record of its
partition is read, and one of a partition taken away is dropped; records librdkafka fetches
behind a seek (its lost-seek race) are dropped and the partition sought again."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from streams_runtime.processing.input_partitions import InputPartitions
from streams_runtime.record import TopicPartitionId
from tests.helpers import unique_name

pytestmark = pytest.mark.broker

RECORDS = 20
SEEK_TO = 7


@pytest.fixture
def topic(create_topic: Callable[..., str], kafka_bootstrap: str) -> str:
    name = create_topic("input-partitions", partitions=1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for n in range(RECORDS):
        producer.produce(name, value=str(n).encode(), partition=0)
    assert producer.flush(30) == 0
    return name


@pytest.fixture
def consumer(kafka_bootstrap: str) -> Iterator[Consumer]:
    """A group consumer, as the stream thread's (KIP-848), assigned by hand."""
    made = Consumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("input-partitions"),
            "group.protocol": "consumer",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    yield made
    made.close()


def _refuses_seek_now(consumer: Consumer, tp: TopicPartition) -> bool:
    """Whether librdkafka refuses a seek of ``tp`` right now with ``_STATE``."""
    try:
        consumer.seek(TopicPartition(tp.topic, tp.partition, SEEK_TO))
    except KafkaException as exc:
        return bool(exc.args[0].code() == KafkaError._STATE)
    return False


def _read_to_end(
    consumer: Consumer, partitions: InputPartitions, key: TopicPartitionId
) -> list[int]:
    """The offsets the stream thread would process: each batch through ``fetched`` (as the
    record router), the deferred seeks retried every loop turn."""
    offsets: list[int] = []
    for _ in range(100):
        batch = [m.offset() or 0 for m in consumer.consume(10, 0.1) if m.error() is None]
        if batch:
            new_from = partitions.fetched(key, batch[0], batch[-1] + 1)
            offsets += [offset for offset in batch if offset >= new_from]
        partitions.retry_seeks()
        if offsets and offsets[-1] >= RECORDS - 1:
            break
    return offsets


def test_a_seek_right_after_an_incremental_assign_is_deferred_then_taken(
    consumer: Consumer, topic: str
) -> None:
    tp, key = TopicPartition(topic, 0), TopicPartitionId(topic, 0)
    # What the task manager does on an assignment: assign, then (its task restored) start it
    # at the committed offset. Here the start comes before the fetcher has started; on a
    # starved machine librdkafka's thread may start it first (and take the seek), so again
    # (under load, up to 5 times running was seen).
    for _ in range(20):
        partitions = InputPartitions(consumer)
        consumer.incremental_assign([tp])
        partitions.assigned.add(key)
        partitions.start(key, SEEK_TO, seek=True)  # librdkafka: _STATE; must not raise
        if key in partitions.paused:
            break
        consumer.incremental_unassign([tp])
    assert key in partitions.paused, "the seek was not deferred (librdkafka took it at once?)"
    # Nothing read before the seek was taken: every record from SEEK_TO on, once. (Here the seek
    # is taken while librdkafka looks up the beginning for auto.offset.reset: now and then it
    # loses the seek and fetches from the beginning; those records are dropped.)
    assert _read_to_end(consumer, partitions, key) == list(range(SEEK_TO, RECORDS))
    assert key not in partitions.paused


def test_a_seek_of_a_partition_taken_away_is_dropped(consumer: Consumer, topic: str) -> None:
    tp, key = TopicPartition(topic, 0), TopicPartitionId(topic, 0)
    partitions = InputPartitions(consumer)
    consumer.incremental_assign([tp])
    partitions.assigned.add(key)
    # Taken away by a rebalance before the task manager hears of it (the revocation callback
    # comes on the next consume): the consumer refuses the seek.
    consumer.incremental_unassign([tp])
    assert _refuses_seek_now(consumer, tp)
    partitions.start(key, SEEK_TO, seek=True)  # must not raise
    partitions.retry_seeks()  # still refused: kept, not raised
    partitions.forget([key])  # the revocation
    partitions.retry_seeks()  # nothing left to retry
    assert key not in partitions.assigned
    assert key not in partitions.paused
    assert consumer.assignment() == []


def test_a_paused_partition_started_without_a_committed_offset_reads_from_the_beginning(
    consumer: Consumer, topic: str
) -> None:
    """A task restored on a partition read before (a rewind after an abort): resumed and sought
    to the beginning, it reads every record once, none from where the fetcher had got to."""
    tp, key = TopicPartition(topic, 0), TopicPartitionId(topic, 0)
    partitions = InputPartitions(consumer)
    consumer.incremental_assign([tp])
    partitions.assigned.add(key)
    read_before: list[int] = []
    for _ in range(100):
        read_before += [m.offset() or 0 for m in consumer.consume(5, 0.1) if m.error() is None]
        if read_before:
            break
    assert read_before, "nothing fetched before the pause"
    partitions.pause([key])  # restoring
    partitions.start(key, -1, seek=True)  # no committed offset: the beginning
    assert key not in partitions.paused
    assert _read_to_end(consumer, partitions, key) == list(range(RECORDS))


def test_records_fetched_behind_a_seek_are_dropped_and_the_partition_sought_again(
    consumer: Consumer, topic: str
) -> None:
    """librdkafka's lost seek, played on a real consumer: after a seek to SEEK_TO, a batch from
    before it (as librdkafka fetches when an outdated offset lookup restarts) is not processed
    and the partition is sought back; a batch straddling the position keeps its new records.
    Only the first move back after a seek is caught (a real reset after an out-of-range fetch
    then goes through)."""
    tp, key = TopicPartition(topic, 0), TopicPartitionId(topic, 0)
    partitions = InputPartitions(consumer)
    consumer.incremental_assign([tp])
    partitions.assigned.add(key)
    assert _read_to_end(consumer, partitions, key) == list(range(RECORDS))  # fetching
    partitions.start(key, SEEK_TO, seek=True)
    assert key not in partitions.paused
    # Wholly behind the position: nothing new, and the partition sought back to it.
    assert partitions.fetched(key, 0, 5) == 5
    assert _read_to_end(consumer, partitions, key) == list(range(SEEK_TO, RECORDS))
    # Caught once per seek: the next move back is taken as it comes.
    assert partitions.fetched(key, 0, RECORDS) == 0
    # Straddling the position: the records from it on are new, no seek.
    partitions.start(key, SEEK_TO, seek=True)
    assert partitions.fetched(key, 3, 12) == SEEK_TO
    assert partitions.fetched(key, 12, RECORDS) == 12
