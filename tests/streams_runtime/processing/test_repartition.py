"""Repartition topics keep what they are given until it is committed (KIP-284), against a real
broker that enforces time retention every half second: replayed records older than any default
retention all reach the downstream task, and committed ones are purged."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker
from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = [pytest.mark.broker, pytest.mark.network]

RECORDS = 3000
USERS = [f"u{i}" for i in range(10)]
DAY_MS = 24 * 3600 * 1000


@pytest.fixture(scope="module")
def strict_broker() -> Iterator[str]:
    """A broker that deletes records past their topic's retention every 500 ms."""
    settings = BrokerSettings(server_properties={"log.retention.check.interval.ms": "500"})
    with EmbeddedKafkaBroker(settings) as broker:
        yield broker.bootstrap_servers


def _create(admin: AdminClient, name: str, partitions: int, **config: str) -> str:
    topic = NewTopic(name, num_partitions=partitions, replication_factor=1, config=config)
    for future in admin.create_topics([topic]).values():
        future.result(timeout=30)
    return name


def test_replayed_old_records_all_arrive_and_committed_ones_are_purged(
    strict_broker: str, tmp_path: Path
) -> None:
    admin = AdminClient({"bootstrap.servers": strict_broker})
    # The input and output keep old records (as a replay's source would); the repartition topic
    # in between is the runtime's own.
    source = _create(admin, unique_name("replay"), 2, **{"retention.ms": "-1"})
    sink = _create(admin, unique_name("counts"), 1, **{"retention.ms": "-1"})
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(source)
        .select_key(lambda _k, v: v["user"])
        .group_by_key()
        .count()
        .to_stream()
        .to(sink, value_serde=Json())
    )
    app_id = unique_name("replay")
    app = App(
        builder,
        application_id=app_id,
        bootstrap_servers=strict_broker,
        state_dir=tmp_path / "state",
        commit_interval_ms=200,
        repartition_purge_interval_ms=200,
    )
    app.start()
    try:
        assert app.wait_until("RUNNING", 60), app.error
        producer = Producer({"bootstrap.servers": strict_broker, "linger.ms": 5})
        eight_days_ago = int(time.time() * 1000) - 8 * DAY_MS
        for n in range(RECORDS):
            user = USERS[n % len(USERS)]
            producer.produce(
                source,
                json.dumps({"user": user}).encode(),
                partition=n % 2,
                timestamp=eight_days_ago + n,
            )
        assert producer.flush(30) == 0
        reader = TopicReader(strict_broker, sink, 1)
        latest: dict[str, int] = {}

        def counted() -> bool:
            for m in reader.read():
                if m.value() is not None and m.key() is not None:
                    latest[m.key().decode()] = json.loads(m.value())  # type: ignore[union-attr]
            return sum(latest.values()) == RECORDS

        wait_for(counted, timeout_s=60, message=f"all {RECORDS} records counted")
        reader.close()
        assert latest == dict.fromkeys(USERS, RECORDS // len(USERS))
        [repartition] = [
            t
            for t in admin.list_topics(timeout=10).topics
            if t.startswith(f"{app_id}-") and t.endswith("-repartition")
        ]
        resource = ConfigResource(ConfigResource.Type.TOPIC, repartition)
        config = admin.describe_configs([resource])[resource].result(timeout=10)
        assert config["retention.ms"].value == "-1"
        # Committed repartition records are deleted: the log start moves up to the committed
        # offset of every partition.
        consumer = Consumer({"bootstrap.servers": strict_broker, "group.id": app_id})
        try:
            partitions = [TopicPartition(repartition, p) for p in range(2)]

            def purged() -> bool:
                committed = consumer.committed(partitions, timeout=10)
                lows = [consumer.get_watermark_offsets(tp, timeout=10)[0] for tp in partitions]
                return all(
                    c.offset > 0 and low == c.offset for c, low in zip(committed, lows, strict=True)
                )

            wait_for(purged, timeout_s=30, interval_s=0.3, message="committed records purged")
        finally:
            consumer.close()
    finally:
        app.close()
