"""The drained commit against the real broker: a backlog found at start-up is committed as soon
as the runtime has processed it, long before a 60 s commit interval, at-least-once and
exactly-once; the results are the ones the interval commit gives; an idle input then commits
nothing more."""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, unique_name, wait_for

pytestmark = pytest.mark.broker

PARTITIONS = 2
RECORDS = 3000
KEYS = 50


def _committed(bootstrap: str, group: str, topic: str) -> list[int]:
    watcher = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        return [tp.offset for tp in watcher.committed(partitions, timeout=10)]
    finally:
        watcher.close()


def _commits(app: App) -> float:
    return app.metrics.registry.get_sample_value("streams_commit_latency_seconds_count") or 0


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once"])
def test_a_drained_backlog_is_committed_long_before_the_commit_interval(
    guarantee: str,
    create_topic: Callable[..., str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    source, sink = create_topic("drained", partitions=PARTITIONS), create_topic("counts")
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    keys = [f"user-{n % KEYS}" for n in range(RECORDS)]
    for n, key in enumerate(keys):
        producer.produce(source, key=key, value=json.dumps({"n": n}), partition=n % PARTITIONS)
    assert producer.flush(30) == 0
    ends = [RECORDS // PARTITIONS] * PARTITIONS
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(source)
        .group_by_key()
        .count()
        .to_stream()
        .map_values(lambda count: {"count": count})
        .to(sink)
    )
    app_id = unique_name("drained")
    app = run_app(
        builder,
        application_id=app_id,
        processing_guarantee=guarantee,
        commit_interval_ms=60_000,
        # Without ticks to send, a quiet task never commits for progress's sake
        # (docs/runtime/windows.md): only the drained commit can come before the interval's.
        progress_propagation=False,
    )
    wait_for(
        lambda: _committed(kafka_bootstrap, app_id, source) == ends,
        timeout_s=20,
        interval_s=0.2,
        message=f"the backlog committed ({ends})",
    )
    reader = reader_for(sink, 1)
    latest: dict[str, int] = {}
    expected = Counter(keys)

    def counted() -> bool:
        for m in reader.read():
            latest[(m.key() or b"").decode()] = json.loads(m.value() or b"{}")["count"]
        return latest == expected

    wait_for(counted, timeout_s=20, message="every key's final count")
    # Drained once: an idle input does not commit again (the next commit is 60 s away).
    commits = _commits(app)
    assert commits >= 1
    time.sleep(1.5)
    assert _commits(app) == commits
