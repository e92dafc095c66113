"""Tables on the ``TopologyTestDriver``: a table source's emit-on-change (KIP-557),
filter/map_values/to_stream with and without old values, grouped count/reduce/aggregate (one
after a repartition) with what they drop, and a stream joining a derived table. Their crash
safety (KAFKA-12508) is tests/streams_runtime/processors/test_tables_broker.py, on the broker."""

from __future__ import annotations

from typing import Any

import pytest

from streams_runtime import StreamsBuilder
from streams_runtime.serdes import Integer, Json, Serde, String
from streams_runtime.testing import TestOutputTopic, TopologyTestDriver

SKIPS = "streams_idempotent_update_skip"
DROPPED = "streams_dropped_records"

Update = tuple[str | None, Any, int]  # key, value (None: delete), timestamp


def _builder() -> StreamsBuilder:
    return StreamsBuilder(default_key_serde=String(), default_value_serde=Json())


def _pipe(driver: TopologyTestDriver, topic: str, records: list[Update]) -> None:
    source = driver.create_input_topic(topic, String(), Json())
    for key, value, ts in records:
        source.pipe_input(key, value, timestamp=ts)


def _updates(
    driver: TopologyTestDriver, topic: str, value_serde: Serde[Any] | None = None
) -> list[Update]:
    output: TestOutputTopic[str, Any] = driver.create_output_topic(
        topic, String(), value_serde or Json()
    )
    return [(r.key, r.value, r.timestamp) for r in output.read_records()]


def test_table_source_emits_on_change() -> None:
    builder = _builder()
    builder.table("prices", store_name="prices").to_stream().to("price-updates")
    with TopologyTestDriver(builder) as driver:
        _pipe(
            driver,
            "prices",
            [
                ("k", "A", 1000),
                ("k", "A", 2000),  # same value, newer: dropped
                ("k", "B", 3000),  # changed
                ("k", "B", 3000),  # same value, same time: forwarded
                ("k", "B", 2500),  # same value, older: forwarded (and stored at 2500)
                ("k", "B", 4000),  # same value, newer than 2500: dropped
                (None, "X", 4500),  # null key: dropped and counted
                ("k", None, 5000),  # delete
                ("k", None, 6000),  # delete of an absent key: still forwarded
                ("k", "B", 7000),  # after a delete: new
            ],
        )
        assert _updates(driver, "price-updates") == [
            ("k", "A", 1000),
            ("k", "B", 3000),
            ("k", "B", 3000),
            ("k", "B", 2500),
            ("k", None, 5000),
            ("k", None, 6000),
            ("k", "B", 7000),
        ]
        assert driver.metrics.total(SKIPS, processor="prices") == 2
        assert driver.metrics.total(DROPPED, store="prices", reason="null-key") == 1


@pytest.mark.parametrize("named", [True, False], ids=["queryable", "unnamed"])
def test_table_filter_map_values_and_to_stream(named: bool) -> None:
    builder = _builder()
    table = builder.table("levels", store_name="levels-store" if named else None)
    table.filter(lambda _k, v: v >= 10).map_values(lambda v: v * 2).to_stream().to("high")
    table.filter_not(lambda _k, v: v >= 10).to_stream().to("low")
    with TopologyTestDriver(builder) as driver:
        _pipe(
            driver,
            "levels",
            [("a", 5, 1000), ("a", 12, 2000), ("b", 20, 3000), ("a", 3, 4000), ("b", None, 5000)],
        )
        # A row that stops passing a filter is forwarded as a delete. Over a queryable table
        # the filter sends old values (Kafka Streams' Materialized.as): an update (or delete)
        # of a row that was not in the filtered table before and is not now forwards nothing.
        # Over an unnamed one it does not know, and forwards a delete for every update it
        # rejects.
        high = [("a", 24, 2000), ("b", 40, 3000), ("a", None, 4000), ("b", None, 5000)]
        low = [("a", 5, 1000), ("a", None, 2000), ("a", 3, 4000)]
        if not named:
            high.insert(0, ("a", None, 1000))
            low.insert(2, ("b", None, 3000))
            low.append(("b", None, 5000))
        assert _updates(driver, "high") == high
        assert _updates(driver, "low") == low


def test_grouped_count_reduce_aggregate() -> None:
    builder = _builder()
    stream = builder.stream("scores")
    grouped = stream.group_by_key()
    grouped.count(name="counts").to_stream().to("counts")
    grouped.reduce(max, name="maxima").to_stream().to("maxima")
    grouped.aggregate(list, lambda _k, v, agg: [*agg, v], name="lists").to_stream().to("lists")
    # A key change first: the count runs after a repartition topic.
    stream.select_key(lambda _k, _v: "all").group_by_key().count(name="totals").to_stream().to(
        "totals"
    )
    with TopologyTestDriver(builder) as driver:
        _pipe(
            driver,
            "scores",
            [
                ("a", 3, 1000),
                ("b", 7, 1100),
                ("a", 5, 1200),
                ("a", 4, 1300),  # the maximum stays 5 at a newer time: dropped as idempotent
                (None, 1, 1400),  # null key: dropped by the three grouped-by-key aggregations
                ("a", None, 1500),  # null value: dropped by all four
            ],
        )
        assert _updates(driver, "counts", Integer()) == [
            ("a", 1, 1000),
            ("b", 1, 1100),
            ("a", 2, 1200),
            ("a", 3, 1300),
        ]
        assert _updates(driver, "maxima") == [("a", 3, 1000), ("b", 7, 1100), ("a", 5, 1200)]
        assert _updates(driver, "lists") == [
            ("a", [3], 1000),
            ("b", [7], 1100),
            ("a", [3, 5], 1200),
            ("a", [3, 5, 4], 1300),
        ]
        assert _updates(driver, "totals", Integer()) == [
            ("all", n, ts) for n, ts in enumerate([1000, 1100, 1200, 1300, 1400], start=1)
        ]
        metrics = driver.metrics
        assert metrics.total(SKIPS, processor="maxima") == 1
        assert metrics.total(SKIPS) == 1
        for store in ("counts", "maxima", "lists"):
            assert metrics.total(DROPPED, store=store, reason="null-key") == 1
            assert metrics.total(DROPPED, store=store, reason="null-value") == 1
        assert metrics.total(DROPPED, store="totals", reason="null-value") == 1


def test_stream_joins_a_derived_table() -> None:
    builder = _builder()
    vip_names = (
        builder.table("users").filter(lambda _k, u: u["vip"]).map_values(lambda u: u["name"])
    )
    stream = builder.stream("orders")
    stream.join(vip_names, lambda o, name: [o, name]).to("inner")
    stream.left_join(vip_names, lambda o, name: [o, name]).to("left")
    with TopologyTestDriver(builder) as driver:
        _pipe(
            driver,
            "users",
            [
                ("u1", {"name": "ann", "vip": True}, 1000),
                ("u2", {"name": "bob", "vip": False}, 1000),
            ],
        )
        _pipe(driver, "orders", [(u, f"o-{u}", 2000) for u in ("u1", "u2", "u3")])
        assert _updates(driver, "left") == [
            ("u1", ["o-u1", "ann"], 2000),
            ("u2", ["o-u2", None], 2000),
            ("u3", ["o-u3", None], 2000),
        ]
        assert _updates(driver, "inner") == [("u1", ["o-u1", "ann"], 2000)]
