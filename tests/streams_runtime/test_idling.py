"""KIP-695 against the real broker: a stream-table join over two co-partitioned inputs, where
the table input lags behind on the broker (its records are there, not yet fetched)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from streams_runtime import App, StreamsBuilder
from streams_runtime.serdes import Json, String
from tests.helpers import TopicReader, wait_for

pytestmark = pytest.mark.broker

BASE = 1_700_000_000_000
TABLE_UPDATES = 3000
ORDERS = 30

# Small fetches: the table partition arrives in many small pieces, so it is often empty locally
# while the rest of it is still on the broker.
SLOW_FETCH = {"max.partition.fetch.bytes": "1024"}


def join_topology(orders: str, users: str, out: str, *, left: bool = False) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    table = builder.table(users)
    stream = builder.stream(orders)
    joined = (
        stream.left_join(table, lambda o, u: {"order": o["o"], "user": u and u["v"]})
        if left
        else stream.join(table, lambda o, u: {"order": o["o"], "user": u["v"]})
    )
    joined.to(out)
    return builder


def produce_inputs(bootstrap: str, orders: str, users: str, *, table: bool = True) -> None:
    # Small batches: a fetch returns at least one whole batch, however small the fetch size.
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 10})
    if table:
        for i in range(TABLE_UPDATES):
            producer.produce(users, key="u", value=json.dumps({"v": i}), timestamp=BASE + i)
    for j in range(ORDERS):
        producer.produce(orders, key="u", value=json.dumps({"o": j}), timestamp=BASE + 100 * j + 50)
    producer.flush(30)


def all_joined(reader: TopicReader) -> dict[int, Any] | None:
    """Order -> joined user value, once every order was joined."""
    values = (json.loads(m.value()) for m in reader.read() if m.value())
    result = {value["order"]: value["user"] for value in values}
    return result if len(result) == ORDERS else None


# Ground truth: processing in timestamp order, order j (at BASE + 100j + 50) sees update 100j + 50.
TRUTH = {j: 100 * j + 50 for j in range(ORDERS)}


@pytest.fixture
def topics(create_topic: Callable[..., str]) -> tuple[str, str, str]:
    return create_topic("orders"), create_topic("users"), create_topic("joined")


def test_idle_zero_joins_in_timestamp_order(
    topics: tuple[str, str, str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    orders, users, out = topics
    produce_inputs(kafka_bootstrap, orders, users)
    run_app(join_topology(orders, users, out), max_task_idle_ms=0, consumer=SLOW_FETCH)
    reader = reader_for(out, 1)
    result = wait_for(lambda: all_joined(reader), timeout_s=60)
    assert result == TRUTH


def test_idle_disabled_may_join_out_of_order(
    topics: tuple[str, str, str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    orders, users, out = topics
    produce_inputs(kafka_bootstrap, orders, users)
    run_app(join_topology(orders, users, out), max_task_idle_ms=-1, consumer=SLOW_FETCH)
    reader = reader_for(out, 1)
    result = wait_for(lambda: all_joined(reader), timeout_s=60)
    # -1 never waits for the lagging table input: orders overtake the table updates that
    # precede them in event time and join stale values.
    stale = {j: v for j, v in result.items() if v < TRUTH[j]}
    assert stale, f"expected stale joins with max.task.idle.ms=-1, got {result}"


def test_positive_idle_waits_on_empty_input_then_enforces(
    topics: tuple[str, str, str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    orders, users, out = topics
    idle_ms = 2000
    app = run_app(join_topology(orders, users, out, left=True), max_task_idle_ms=idle_ms)
    produced = time.monotonic()
    produce_inputs(kafka_bootstrap, orders, users, table=False)  # the table stays empty
    reader = reader_for(out, 1)
    result = wait_for(lambda: all_joined(reader), timeout_s=60)
    # The empty table partition is caught up (lag 0): the task waited max.task.idle.ms
    # before processing without it, and counted it.
    assert time.monotonic() - produced >= idle_ms / 1000
    assert result == dict.fromkeys(range(ORDERS))
    assert app.metrics.total("streams_enforced_processing") > 0
