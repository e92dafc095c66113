"""``context.commit()`` against the broker: a user processor's request commits the task on the
poll loop's next turn, long before the commit interval would."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams_runtime import App, Record, StreamsBuilder
from streams_runtime.processor import Processor, ProcessorContext
from streams_runtime.serdes import String
from tests.helpers import TopicReader, wait_for

pytestmark = pytest.mark.broker


class CommitOnRequest(Processor[str, str, str, str]):
    """Forwards every record; a record valued ``commit`` also asks for a commit."""

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record)
        if record.value == "commit":
            self.context.commit()


def test_a_processor_asks_for_a_commit(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    source, sink = create_topic("commit-in"), create_topic("commit-out")
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream(source).process(CommitOnRequest).to(sink)
    # No commit by the interval here, nor for output ticks.
    app = run_app(builder, commit_interval_ms=3_600_000, progress_propagation=False)
    assert app.wait_until("RUNNING", 60), app.error
    consumer = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": app.settings.application_id}
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    reader = reader_for(sink, 1)

    def produce(value: str) -> None:
        producer.produce(source, key=b"k", value=value.encode())
        assert producer.flush(10) == 0

    def processed(count: int) -> bool:
        return len(reader.read()) >= count

    def committed() -> int:
        [tp] = consumer.committed([TopicPartition(source, 0)], timeout=10)
        return int(tp.offset)

    try:
        # The first drained input commits at once (once per interval): then nothing else does.
        produce("a")
        wait_for(lambda: processed(1) and committed() == 1, timeout_s=30, message="a committed")
        produce("b")
        wait_for(lambda: processed(2), timeout_s=30, message="b processed")
        assert committed() == 1  # processed, not committed: the interval is an hour
        produce("commit")
        wait_for(lambda: committed() == 3, timeout_s=30, message="the requested commit")
        assert [m.value() for m in reader.read()] == [b"a", b"b", b"commit"]
    finally:
        consumer.close()
