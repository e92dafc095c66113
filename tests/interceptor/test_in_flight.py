"""A tick is never dated above a record still in flight to its topic: the rule
(:class:`~progress_control.ticks.in_flight.RecordsInFlight`), and both ack paths against a real
broker, where ticks go through a producer of their own and can overtake the host's records."""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from interceptor import Producer, SerializingProducer
from progress_control.protocol import is_control_record
from progress_control.ticks.in_flight import RecordsInFlight
from tests.helpers import TopicReader, wait_for


def test_the_oldest_record_in_flight_holds_its_topic_until_settled() -> None:
    flight = RecordsInFlight()
    flight.sent("a", 100)
    flight.sent("a", 100)
    flight.sent("a", 90)  # out of order
    flight.sent("b", 5)
    assert flight.oldest() == {"a": 90, "b": 5}
    flight.settled("a", 90)
    flight.settled("b", 5)
    assert flight.oldest() == {"a": 100}
    flight.settled("a", 100)
    assert flight.oldest() == {"a": 100}
    flight.settled("a", 100)
    assert flight.oldest() == {}


def test_a_settle_above_every_send_removes_the_greatest_below_it() -> None:
    """produce_batch() registers its records at a clock reading taken before librdkafka dates
    them: the settle of a record dated 12 removes the registration at 10."""
    flight = RecordsInFlight()
    flight.sent("a", 10)
    flight.sent("a", 20)
    flight.settled("a", 12)
    assert flight.oldest() == {"a": 20}
    flight.settled("a", 5)  # never registered: nothing of ours to remove
    assert flight.oldest() == {"a": 20}


def test_a_topic_dated_by_the_broker_is_no_longer_held() -> None:
    flight = RecordsInFlight()
    flight.sent("a", 10)
    flight.settled("a", 99_999, log_append_time=True)
    flight.sent("a", 11)
    assert flight.oldest() == {}


@given(
    st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3)), max_size=60),
    st.randoms(use_true_random=False),
)
def test_what_is_held_is_never_above_what_is_in_flight(
    sends: list[tuple[int, int]], order: random.Random
) -> None:
    """Sends registered at or below their records' timestamps and settled in any order: the
    topic is held at or below its oldest record in flight, and released when none is."""
    flight = RecordsInFlight()
    records = [(registered, registered + late) for registered, late in sends]
    for registered, _ in records:
        flight.sent("t", registered)
    order.shuffle(records)
    while records:
        held = flight.oldest().get("t")
        assert held is not None
        assert held <= min(actual for _, actual in records)
        _, actual = records.pop()
        flight.settled("t", actual)
    assert flight.oldest() == {}


LINGER_MS = 2_500
"""How long the host's records wait in its queue: far longer than the idle time to the first
tick, so ticks are due while a record is still in flight."""


@pytest.mark.broker
@pytest.mark.parametrize(
    "case",
    [
        ("native", Producer, 0),
        ("native", Producer, 1),
        ("python", Producer, 0),
        ("python", SerializingProducer, 1),
    ],
    ids=["native-same-partition", "native-other-partition", "python", "python-serializing"],
)
def test_no_tick_overtakes_a_record_still_in_flight(
    case: tuple[str, type[Producer] | type[SerializingProducer], int],
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    ack_recording, producer_class, lingering_partition = case
    topic = create_topic("in-flight", partitions=2)
    reader = reader_for(topic, 2)
    producer = producer_class(
        {
            "bootstrap.servers": kafka_bootstrap,
            "linger.ms": LINGER_MS,
            "progress.control.ack.recording": ack_recording,
            "progress.control.start.ms": 400,
            "progress.control.backoff.ms": 100,
            "progress.control.backoff.exponential": False,
            "progress.control.max.records": 3,
        }
    )

    def produce(value: bytes, partition: int) -> None:
        if isinstance(producer, SerializingProducer):
            producer.produce(topic, key=b"k", value=value, partition=partition)
        else:
            producer.produce(topic, value, b"k", partition)

    try:
        produce(b"first", 0)
        producer.flush()  # acked: partition 0's idle time counts from here
        # On partition 0 itself, or on another of the topic (where a partitioner might have
        # put a record of partition 0's): in flight for LINGER_MS.
        produce(b"lingering", lingering_partition)
        wait_for(
            lambda: len(reader.ticks()) == 3,
            timeout_s=20,
            message="partition 0's three ticks",
        )
        assert [m.value() for m in reader.records if not is_control_record(m)] == [b"first"]
        producer.flush()
        wait_for(lambda: len(reader.read()) == 5, message="both records")
        records = reader.records
    finally:
        producer.close()
    [lingering] = [m for m in records if m.value() == b"lingering"]
    ticks = [m for m in records if is_control_record(m)]
    # Each tick was sent while the lingering record was in flight: none is dated above it.
    assert max(t.timestamp()[1] for t in ticks) <= lingering.timestamp()[1]
