"""The runtime's producer under exactly-once, against the real broker: an abort is one warning
line, and a fenced producer is reported as a task migration and replaced."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer

from streams_runtime.errors import TaskMigratedError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.settings import RuntimeSettings
from tests.helpers import TopicReader, unique_name

pytestmark = pytest.mark.broker


@pytest.fixture
def collector_for(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Callable[..., RecordCollector]]:
    made: list[RecordCollector] = []

    def make(**producer: str) -> RecordCollector:
        settings = RuntimeSettings(
            application_id=unique_name("collector"),
            bootstrap_servers=kafka_bootstrap,
            state_dir=tmp_path,
            processing_guarantee="exactly_once",
            producer=producer,
        )
        collector = RecordCollector(
            settings, "test", RuntimeMetrics(settings.application_id), transactional=True
        )
        made.append(collector)
        return collector

    yield make
    for collector in made:
        collector.close()


def test_an_aborted_transaction_is_one_warning_line(
    collector_for: Callable[..., RecordCollector],
    create_topic: Callable[..., str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = create_topic("out")
    collector = collector_for(**{"linger.ms": "5000"})  # every record still queued
    for i in range(200):
        collector.send(topic, b"k", str(i).encode(), 1_000 + i, None)
    with caplog.at_level(logging.INFO, logger="streams_runtime.processing.collector"):
        collector.abort()
    lines = [r for r in caplog.records if r.name == "streams_runtime.processing.collector"]
    assert [(r.levelno, r.getMessage()) for r in lines] == [
        (
            logging.WARNING,
            "200 records of the aborted transaction were discarded (processed again from the "
            "last commit)",
        )
    ]


def test_a_fenced_producer_is_a_task_migration_and_is_replaced(
    collector_for: Callable[..., RecordCollector],
    create_topic: Callable[..., str],
    kafka_bootstrap: str,
) -> None:
    topic = create_topic("out")
    collector = collector_for()
    collector.send(topic, b"k", b"lost", 1_000, None)
    collector.flush()
    transactional_id = str(collector._config["transactional.id"])
    usurper = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": transactional_id})
    usurper.init_transactions(30)
    usurper.close()
    collector.send(topic, b"k", b"more", 1_001, None)
    with pytest.raises(TaskMigratedError, match="fenced"):
        collector.commit([])
    collector.reset_producer()
    collector.send(topic, b"k", b"kept", 1_002, None)
    collector.commit([])
    reader = TopicReader(kafka_bootstrap, topic, 1)
    try:
        assert [m.value() for m in reader.read(max_s=5)] == [b"kept"]
    finally:
        reader.close()
