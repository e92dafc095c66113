"""Stream operators of issue 51 on the ``TopologyTestDriver``: ``flat_map`` and
``flat_map_values`` (timestamps and headers kept), ``split`` into branches (first match wins,
default or dropped), ``to_table`` (latest value per key, deletes, null keys counted, a
repartition after a key change) and ``group_by`` (select key, repartition, aggregate); ticks
pass through each of them to the sinks. Their topology (names, repartition topics) is
tests/streams_runtime/dsl/test_stream_operators_build.py; the broker run is
tests/streams_runtime/dsl/test_stream_operators_broker.py."""

from __future__ import annotations

from typing import Any

from streams_runtime import Branched, Stream, StreamsBuilder
from streams_runtime.serdes import Integer, Json, String
from streams_runtime.testing import TestOutputTopic, TopologyTestDriver

DROPPED = "streams_dropped_records"

Out = tuple[Any, Any, int]  # key, value, timestamp


def _builder() -> StreamsBuilder:
    return StreamsBuilder(default_key_serde=String(), default_value_serde=Json())


def _out(
    driver: TopologyTestDriver, topic: str, value_serde: Any = None
) -> TestOutputTopic[Any, Any]:
    return driver.create_output_topic(topic, String(), value_serde or Json())


def _records(output: TestOutputTopic[Any, Any]) -> list[Out]:
    return [(r.key, r.value, r.timestamp) for r in output.read_records()]


def test_flat_map_and_flat_map_values_keep_timestamp_and_headers() -> None:
    builder = _builder()
    lines = builder.stream("lines")
    lines.flat_map(lambda k, v: [(word, k) for word in v.split()]).to("by-word")
    lines.flat_map_values(lambda v: v.split()).to("words")
    with TopologyTestDriver(builder) as driver:
        source = driver.create_input_topic("lines", String(), Json())
        by_word, words = _out(driver, "by-word"), _out(driver, "words")
        source.pipe_input("doc", "to be or", timestamp=1000, headers=[("trace", b"1")])
        source.pipe_input("doc", "", timestamp=2000)  # nothing out
        source.pipe_input("pad", "x", timestamp=3000)
        got = by_word.read_records()
        assert [(r.key, r.value, r.timestamp) for r in got] == [
            ("to", "doc", 1000),
            ("be", "doc", 1000),
            ("or", "doc", 1000),
            ("x", "pad", 3000),
        ]
        assert [r.headers for r in got[:3]] == [[("trace", b"1")]] * 3
        got = words.read_records()
        assert [(r.key, r.value, r.timestamp) for r in got] == [
            ("doc", "to", 1000),
            ("doc", "be", 1000),
            ("doc", "or", 1000),
            ("pad", "x", 3000),
        ]
        assert [r.headers for r in got[:3]] == [[("trace", b"1")]] * 3
        # Both keep order: a tick's time reaches their sinks unchanged.
        source.pipe_tick(5000)
        assert [t.timestamp for t in by_word.read_ticks()][-1:] == [4999]
        assert [t.timestamp for t in words.read_ticks()][-1:] == [4999]


def test_split_sends_each_record_to_the_first_matching_branch() -> None:
    builder = _builder()
    branches = (
        builder.stream("numbers")
        .split(name="n-")
        .branch(lambda _k, v: v % 2 == 0, Branched.with_name("even"))
        .branch(lambda _k, v: v % 3 == 0)  # 6 went to "even" already
        .default_branch()
    )
    assert set(branches) == {"n-even", "n-2", "n-0"}
    branches["n-even"].to("even")
    branches["n-2"].to("threes")
    branches["n-0"].to("rest")
    with TopologyTestDriver(builder) as driver:
        source = driver.create_input_topic("numbers", String(), Json())
        outputs = {name: _out(driver, name) for name in ("even", "threes", "rest")}
        for n in (1, 2, 3, 6, 9, 7):
            source.pipe_input(f"k{n}", n, timestamp=n * 100)
        assert _records(outputs["even"]) == [("k2", 2, 200), ("k6", 6, 600)]
        assert _records(outputs["threes"]) == [("k3", 3, 300), ("k9", 9, 900)]
        assert _records(outputs["rest"]) == [("k1", 1, 100), ("k7", 7, 700)]
        # A tick reaches every branch, whether or not it had data.
        source.pipe_tick(2000)
        for output in outputs.values():
            assert [t.timestamp for t in output.read_ticks()][-1:] == [1999]


def test_split_without_default_drops_and_functions_and_consumers_take_branches() -> None:
    builder = _builder()
    consumed: list[Stream[Any, Any]] = []

    def upper(stream: Stream[Any, Any]) -> Stream[Any, Any]:
        return stream.map_values(str.upper)

    branches = (
        builder.stream("words")
        .split()
        .branch(lambda _k, v: v.startswith("a"), Branched.with_function(upper))
        .branch(lambda _k, v: v.startswith("b"), Branched.with_consumer(consumed.append, "b"))
        .no_default_branch()
    )
    [(name, a_words)] = branches.items()
    assert name == "KSTREAM-BRANCH-00000000011"  # <split name><position>, as Kafka Streams
    a_words.to("a-words")
    [b_words] = consumed
    b_words.to("b-words")
    with TopologyTestDriver(builder) as driver:
        source = driver.create_input_topic("words", String(), Json())
        a_out, b_out = _out(driver, "a-words"), _out(driver, "b-words")
        for i, word in enumerate(["apple", "cherry", "banana", "avocado"]):
            source.pipe_input(None, word, timestamp=i)
        assert [r.value for r in a_out.read_records()] == ["APPLE", "AVOCADO"]
        assert [r.value for r in b_out.read_records()] == ["banana"]  # cherry: dropped


def test_to_table_keeps_the_latest_value_per_key() -> None:
    builder = _builder()
    builder.stream("prices").to_table(store_name="prices").to_stream().to("updates")
    with TopologyTestDriver(builder) as driver:
        source = driver.create_input_topic("prices", String(), Json())
        updates = _out(driver, "updates")
        source.pipe_input("a", 1, timestamp=100)
        source.pipe_input("b", 2, timestamp=200)
        source.pipe_input("a", 3, timestamp=300)
        source.pipe_input(None, 4, timestamp=400)  # null key: dropped, counted
        source.pipe_input("b", None, timestamp=500)  # delete
        assert _records(updates) == [("a", 1, 100), ("b", 2, 200), ("a", 3, 300), ("b", None, 500)]
        store = driver.get_key_value_store("prices")
        assert store.get("a") == 3
        assert store.get("b") is None
        assert driver.metrics.total(DROPPED, store="prices", reason="null-key") == 1
        source.pipe_tick(1000)
        assert [t.timestamp for t in updates.read_ticks()][-1:] == [999]


def test_to_table_after_a_key_change_repartitions_and_joins() -> None:
    builder = _builder()
    users = (
        builder.stream("profiles")
        .map(lambda _k, v: (v["id"], v["name"]))
        .to_table(name="users", store_name="users")
    )
    builder.stream("orders").join(users, lambda order, name: f"{name}:{order}").to("named")
    with TopologyTestDriver(builder) as driver:
        assert "topology-test-driver-users-repartition" in driver.topology.repartition_topics
        profiles = driver.create_input_topic("profiles", String(), Json())
        orders = driver.create_input_topic("orders", String(), Json())
        named = _out(driver, "named")
        profiles.pipe_input(None, {"id": "u1", "name": "ann"}, timestamp=100)
        orders.pipe_input("u1", "book", timestamp=200)
        orders.pipe_input("u2", "pen", timestamp=300)  # no such user: inner join drops it
        assert _records(named) == [("u1", "ann:book", 200)]
        assert driver.get_key_value_store("users").get("u1") == "ann"


def test_group_by_selects_a_key_and_repartitions() -> None:
    builder = _builder()
    (
        builder.stream("clicks")
        .group_by(lambda _k, v: v["page"], name="by-page")
        .count(name="per-page")
        .to_stream()
        .to("page-counts", value_serde=Integer())
    )
    (
        builder.stream("views", value_serde=Integer())
        .group_by(lambda _k, v: v % 2 == 0, key_serde=Json(), value_serde=Integer())
        .reduce(lambda a, b: a + b)
        .to_stream()
        .to("parity-sums", key_serde=Json(), value_serde=Integer())
    )
    with TopologyTestDriver(builder) as driver:
        assert "topology-test-driver-by-page-repartition" in driver.topology.repartition_topics
        clicks = driver.create_input_topic("clicks", String(), Json())
        views = driver.create_input_topic("views", String(), Integer())
        counts = _out(driver, "page-counts", Integer())
        sums = driver.create_output_topic("parity-sums", Json(), Integer())
        for i, page in enumerate(["home", "cart", "home"]):
            clicks.pipe_input(f"user{i}", {"page": page}, timestamp=i * 100)
        for i, n in enumerate([1, 2, 3, 4]):
            views.pipe_input("v", n, timestamp=i * 100)
        assert _records(counts) == [("home", 1, 0), ("cart", 1, 100), ("home", 2, 200)]
        assert sums.read_key_values() == [(False, 1), (True, 2), (False, 4), (True, 6)]
        assert driver.get_key_value_store("per-page").get("home") == 2
