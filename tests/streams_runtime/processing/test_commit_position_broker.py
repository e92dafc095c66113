"""A drained input commits the consumer's position, as Kafka Streams does: past the transaction
marker that follows a transactional writer's last record, so consumer lag reaches 0 (issue 51).
Exactly-once, on the real broker: an input written by a transactional producer, and the
runtime's own repartition topic (written in its transactions)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import Json, String
from tests.helpers import unique_name, wait_for

pytestmark = pytest.mark.broker

PARTITIONS = 2


def _lags(bootstrap: str, group: str, topic: str) -> list[int]:
    """End offset minus committed offset, per partition (the end when nothing is committed)."""
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = watcher.committed(partitions, timeout=10)
        ends = [watcher.get_watermark_offsets(tp, timeout=10)[1] for tp in partitions]
        return [end - max(tp.offset, 0) for tp, end in zip(committed, ends, strict=True)]
    finally:
        watcher.close()


def test_drained_inputs_and_repartition_topics_reach_lag_zero_under_exactly_once(
    create_topic: Callable[..., str], kafka_bootstrap: str, run_app: Callable[..., App]
) -> None:
    source, sink = create_topic("txn-in", partitions=PARTITIONS), create_topic("counts")
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "transactional.id": unique_name("txn-writer")}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in range(200):
        value = json.dumps({"user": f"u{n % 7}"})
        producer.produce(source, key=f"page-{n % 5}", value=value, partition=n % PARTITIONS)
    producer.commit_transaction(30)  # each partition ends with a transaction marker
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(source)
        .select_key(lambda _page, click: click["user"])
        .group_by_key()
        .count()
        .to_stream()
        .to(sink)
    )
    app_id = unique_name("lag-zero")
    run_app(builder, application_id=app_id, processing_guarantee="exactly_once")
    topics = AdminClient({"bootstrap.servers": kafka_bootstrap}).list_topics(timeout=10).topics
    [repartition] = [t for t in topics if t.startswith(app_id) and t.endswith("-repartition")]

    def drained() -> bool:
        return (
            _lags(kafka_bootstrap, app_id, source) == [0] * PARTITIONS
            and _lags(kafka_bootstrap, app_id, repartition) == [0] * PARTITIONS
        )

    wait_for(drained, timeout_s=60, interval_s=0.5, message="lag 0 on input and repartition")
