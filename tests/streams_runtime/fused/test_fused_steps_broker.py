"""Steps on values fused with a session aggregate, against the broker: issue 53's realistic
shape (``filter -> select_key`` and its repartition ``-> join(table) -> map_values ->
aggregate(initializer, adder, merger) -> suppress``), with a table row that changes mid-stream,
orders whose user has no row (the inner join drops them), a value the source refuses and one a
mapper raises on (skipped by policy). The native path, whose task takes the repartition topic's
records in batches between the table's, gives the chain's results, key for key and in order."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer

from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Json, String
from tests.helpers import unique_name
from tests.streams_runtime.fused.test_fused_windows import (
    BASE_MS,
    PARTITIONS,
    _ends,
    _results,
    _wait_committed,
)

pytestmark = pytest.mark.broker

USERS = 12  # the last two have no row
GRACE_MS = 3_600_000  # the repartition topic interleaves two tasks: nothing is late
RAISING_AMOUNT = 13


def _orders(seed: int) -> list[tuple[int, bytes, bytes, int]]:
    """``(partition, key, value, timestamp)``: orders keyed by id, each user's on one partition
    in time order, bursts and pauses longer than the gap; then one order per user two hours on,
    which closes every session before it."""
    rng = random.Random(seed)  # noqa: S311 - test data
    orders = []
    t = BASE_MS
    for i in range(600):
        t += rng.choice([5, 50, 400, 3_000])
        user = rng.randrange(USERS)
        value: bytes = json.dumps(
            {
                "user": f"u{user}",
                "amount": rng.randrange(1, 20),
                "status": "cancelled" if i % 7 == 3 else "paid",
            }
        ).encode()
        if i % 151 == 9:
            value = b"{not json"
        orders.append((user % PARTITIONS, b"order-%d" % i, value, t))
    for user in range(USERS):
        late = json.dumps({"user": f"u{user}", "amount": 1, "status": "paid"}).encode()
        orders.append((user % PARTITIONS, b"close-%d" % user, late, t + 7_200_000))
    return orders


def _users(orders: list[tuple[int, bytes, bytes, int]]) -> list[tuple[bytes, bytes, int]]:
    """Rows of every user but the last two, stamped before the first order; user 3's row
    changes halfway through the orders."""
    rows = [
        (b"u%d" % user, json.dumps({"bonus": user}).encode(), BASE_MS - 1)
        for user in range(USERS - 2)
    ]
    halfway = orders[len(orders) // 2][3]
    return [*rows, (b"u3", json.dumps({"bonus": 100}).encode(), halfway)]


def _amount(sale: dict[str, int]) -> dict[str, int]:
    if sale["amount"] == RAISING_AMOUNT:
        raise ValueError("unlucky")
    return {**sale, "net": sale["amount"] * 2}


def _builder(orders: str, users: str, sink: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    rows = builder.table(users)
    (
        builder.stream(orders)
        .filter(lambda _id, order: order["status"] == "paid")
        .select_key(lambda _id, order: order["user"])
        .join(rows, lambda order, row: {"amount": order["amount"] + row["bonus"]})
        .map_values(_amount)
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=1_000, grace_ms=GRACE_MS))
        .aggregate(
            lambda: {"n": 0, "total": 0},
            lambda _u, sale, agg: {"n": agg["n"] + 1, "total": agg["total"] + sale["net"]},
            lambda _u, a, b: {"n": a["n"] + b["n"], "total": a["total"] + b["total"]},
        )
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, agg: (w.key, {"start": w.start, "end": w.end, **agg}))
        .to(sink)
    )
    return builder


def test_a_joined_mapped_session_aggregate_gives_the_chain_s_results(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
) -> None:
    pytest.importorskip("streams_runtime._native", reason="the native core is not built")
    orders_topic = create_topic("orders", partitions=PARTITIONS)
    users_topic = create_topic("users", partitions=PARTITIONS)
    orders = _orders(seed=11)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "partitioner": "murmur2_random"})
    for key, value, ts in _users(orders):
        producer.produce(users_topic, key=key, value=value, timestamp=ts)
    for partition, key, value, ts in orders:
        producer.produce(orders_topic, key=key, value=value, timestamp=ts, partition=partition)
    assert producer.flush(30) == 0
    ends = _ends(kafka_bootstrap, orders_topic)
    results: dict[str, Any] = {}
    for path in ("native", "chain"):
        sink = create_topic("sales", partitions=PARTITIONS)
        app_id = unique_name(f"steps-{path}")
        app = run_app(
            _builder(orders_topic, users_topic, sink),
            application_id=app_id,
            bad_record_policy="log-and-skip",
            statestore_cache_max_bytes=10 << 20,
            commit_interval_ms=300,
            native_core=path == "native",
        )
        fused = [n for sub in app.topology.subtopologies for n in sub.nodes if n.fuses]
        assert bool(fused) == (path == "native")
        _wait_committed(kafka_bootstrap, app_id, orders_topic, ends)
        # Every order is in the repartition topic now (written before its input's commit);
        # once that is committed too, every session the closing orders close is out.
        (repartition,) = app.topology.repartition_topics
        _wait_committed(kafka_bootstrap, app_id, repartition, _ends(kafka_bootstrap, repartition))
        results[path] = _results(kafka_bootstrap, sink)
        app.close()
    sessions = [s for found in results["chain"].values() for s, _ in found]
    assert len(sessions) > 50
    assert {s["total"] for s in sessions if s["n"] == 1} - {0}  # bonus and net in the totals
    assert results["native"] == results["chain"]
