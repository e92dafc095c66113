"""KIP-695 against the real broker: a stream-table join over two co-partitioned inputs, where
the table input lags behind on the broker (its records are there, not yet fetched)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from streams_runtime import App, JoinWindows, StreamsBuilder
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


# -- KIP-695 on a windowed stream-stream join ------------------------------------------------
#
# A left join of clicks with views (time difference 1 s, no grace). Click j (at BASE + 100j + 50)
# has its view at BASE + 100j + 60; a last click far in the future closes every window. Processed
# in timestamp order, every click joins its view. A click processed before its view is still on
# the broker closes nothing by itself, but the far-future click does: the clicks before it come out
# unjoined, and their views, arriving later, are beyond the buffer's retention and join nothing.

JOIN_WINDOWS = JoinWindows.of_time_difference(1_000)
FAR = 1_000_000


def stream_join_topology(clicks: str, views: str, out: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    joined = builder.stream(clicks).left_join(
        builder.stream(views), lambda c, v: f"{c}|{v}", JOIN_WINDOWS
    )
    joined.to(out)
    return builder


def produce_clicks(bootstrap: str, clicks: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for j in range(ORDERS):
        producer.produce(clicks, key=f"k{j}", value=f"c{j}", timestamp=BASE + 100 * j + 50)
    producer.produce(clicks, key="z", value="far", timestamp=BASE + FAR)
    producer.flush(30)


def produce_views(bootstrap: str, views: str, *, fillers: int = TABLE_UPDATES) -> None:
    """A view per click, among ``fillers`` other views, in timestamp order (small batches: a slow
    input)."""
    producer = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 10})
    records = [("filler", "f", i * ORDERS * 100 // fillers) for i in range(fillers)]
    records += [(f"k{j}", f"v{j}", 100 * j + 60) for j in range(ORDERS)]
    for key, value, at in sorted(records, key=lambda r: r[2]):
        producer.produce(views, key=key, value=value, timestamp=BASE + at)
    producer.flush(30)


def click_results(reader: TopicReader) -> dict[str, str]:
    """Click key -> its result (``c|v`` joined, ``c|None`` unjoined), once every click has one."""
    results = {
        (m.key() or b"").decode(): (m.value() or b"").decode()
        for m in reader.read()
        if m.value() and (m.key() or b"").startswith(b"k")
    }
    return results if len(results) == ORDERS else {}


def test_stream_join_idle_zero_waits_for_the_lagging_input(
    topics: tuple[str, str, str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    clicks, views, out = topics
    produce_views(kafka_bootstrap, views)
    produce_clicks(kafka_bootstrap, clicks)
    run_app(stream_join_topology(clicks, views, out), max_task_idle_ms=0, consumer=SLOW_FETCH)
    result = wait_for(lambda: click_results(reader_for(out, 1)), timeout_s=60)
    assert result == {f"k{j}": f"c{j}|v{j}" for j in range(ORDERS)}


def test_stream_join_idle_disabled_emits_clicks_unjoined(
    topics: tuple[str, str, str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    clicks, views, out = topics
    produce_views(kafka_bootstrap, views)
    produce_clicks(kafka_bootstrap, clicks)
    run_app(stream_join_topology(clicks, views, out), max_task_idle_ms=-1, consumer=SLOW_FETCH)
    reader = reader_for(out, 1)
    result = wait_for(lambda: click_results(reader), timeout_s=60)
    # -1 never waits for the lagging views: the far-future click overtakes them, and the clicks
    # before it come out unjoined although each has its view on the broker.
    unjoined = {k for k, v in result.items() if v.endswith("|None")}
    assert unjoined, f"expected unjoined clicks with max.task.idle.ms=-1, got {result}"


@pytest.mark.parametrize("idle_ms", [0, 3000])
def test_stream_join_positive_idle_waits_for_an_empty_input(
    idle_ms: int,
    topics: tuple[str, str, str],
    kafka_bootstrap: str,
    run_app: Callable[..., App],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    clicks, views, out = topics
    run_app(stream_join_topology(clicks, views, out), max_task_idle_ms=idle_ms)
    reader = reader_for(out, 1)
    produce_clicks(kafka_bootstrap, clicks)  # the views input is empty (caught up, lag 0)
    if idle_ms:
        time.sleep(1.0)
        produce_views(kafka_bootstrap, views, fillers=0)
        result = wait_for(lambda: click_results(reader), timeout_s=60)
        # The task waited up to 3 s on the empty views input; the views came within that time,
        # and every click joined its view.
        assert result == {f"k{j}": f"c{j}|v{j}" for j in range(ORDERS)}
    else:
        # 0 waits only for data known to be on the broker: the clicks went ahead at once, the
        # far-future one closed their windows, and views that come later join nothing (beyond
        # the clicks' buffer retention).
        unjoined = {f"k{j}": f"c{j}|None" for j in range(ORDERS)}
        assert wait_for(lambda: click_results(reader), timeout_s=60) == unjoined
        produce_views(kafka_bootstrap, views, fillers=0)
        time.sleep(1.5)
        assert click_results(reader) == unjoined
