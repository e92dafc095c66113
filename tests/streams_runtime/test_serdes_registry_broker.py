"""Schema Registry serdes against the real broker and a real registry (the suite's
``schema_registry_url``: Apicurio serving Confluent's API): each format through a repartition
topic and a changelog, restored by a second instance; bad records (unknown schema id, wrong
magic byte, a payload or value its schema refuses) through the bad-record policy with nothing
else lost; a newer compatible schema mid-stream; a registry out of reach stopping the app
without skipping anything."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from progress_control.protocol import is_control_record
from streams_runtime import App, JoinWindows, StreamsBuilder
from streams_runtime.serdes import String, ValueAndTimestamp
from streams_runtime.serdes_registry import (
    Avro,
    JsonSchema,
    Protobuf,
    SchemaRegistryRefusedError,
    SchemaRegistryUnavailableError,
    schema_registry_client,
)
from tests.helpers import TopicReader, unique_name, wait_for
from tests.streams_runtime.registry_formats import (
    ORDER_AVRO,
    ORDER_AVRO_V2,
    ORDER_JSON_SCHEMA,
    order_message_type,
)

pytestmark = pytest.mark.broker


class Format:
    """One format's serde and its Order values, whatever their type."""

    def __init__(self, name: str, registry: str) -> None:
        self.name = name
        self.serde: Any
        if name == "avro":
            self.serde = Avro(ORDER_AVRO, registry=registry)
        elif name == "json":
            self.serde = JsonSchema(ORDER_JSON_SCHEMA, registry=registry)
        else:
            self.serde = Protobuf(order_message_type(), registry=registry)

    def order(self, user: str, amount: int) -> Any:
        if self.name == "protobuf":
            return order_message_type()(user=user, amount=amount)
        return {"user": user, "amount": amount}

    @staticmethod
    def user(order: Any) -> str:
        return str(order["user"] if isinstance(order, dict) else order.user)

    @staticmethod
    def amount(order: Any) -> int:
        return int(order["amount"] if isinstance(order, dict) else order.amount)


def _data(reader: TopicReader) -> list[Any]:
    return [m for m in reader.read() if not is_control_record(m) and m.value() is not None]


def _latest(reader: TopicReader, fmt: Format, topic: str) -> dict[str, int]:
    """Each key's latest total on ``topic``."""
    bound = fmt.serde.bind(topic, "value")
    return {
        (m.key() or b"").decode(): fmt.amount(bound.deserialize(m.value())) for m in _data(reader)
    }


def _wait_for_totals(
    output: TopicReader, fmt: Format, sink: str, expected: dict[str, int], app: App
) -> None:
    try:
        wait_for(lambda: _latest(output, fmt, sink) == expected or None, timeout_s=120)
    except AssertionError as exc:
        got = _latest(output, fmt, sink)
        raise AssertionError(f"{exc}: {got} != {expected} ({app.state}, {app.error!r})") from None


@pytest.mark.parametrize("name", ["avro", "json", "protobuf"])
def test_each_format_through_a_repartition_and_a_changelog_restored_elsewhere(  # noqa: PLR0917 - fixtures
    name: str,
    schema_registry_url: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    fmt = Format(name, schema_registry_url)
    source, sink = create_topic(f"orders-{name}", partitions=2), create_topic(f"totals-{name}")

    def builder() -> StreamsBuilder:
        b = StreamsBuilder(default_key_serde=String(), default_value_serde=fmt.serde)
        (
            b.stream(source)
            .select_key(lambda _order_id, order: fmt.user(order))  # keyed by order id
            .repartition(name="by-user")
            .group_by_key()
            .aggregate(
                lambda: fmt.order("", 0),
                lambda user, order, total: fmt.order(user, fmt.amount(total) + fmt.amount(order)),
                name="totals",
            )
            .to_stream()
            .to(sink)
        )
        return b

    writer = fmt.serde.bind(source, "value")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    expected: dict[str, int] = {}

    def produce(first: int, count: int) -> None:
        for n in range(first, first + count):
            user, amount = f"u{n % 4}", n + 1
            expected[user] = expected.get(user, 0) + amount
            producer.produce(source, key=f"o{n}", value=writer.serialize(fmt.order(user, amount)))
        producer.flush(10)

    app_id = unique_name(f"registry-{name}")
    output = reader_for(sink, 1)
    produce(0, 20)
    first = run_app(builder(), application_id=app_id)
    _wait_for_totals(output, fmt, sink, expected, first)
    first.close()

    # A second instance with empty state restores the totals from the changelog, through the
    # registry, and adds to them.
    second = run_app(builder(), application_id=app_id)
    produce(20, 20)
    _wait_for_totals(output, fmt, sink, expected, second)
    assert second.metrics.total("streams_restored_records", source="changelog") > 0

    repartition, changelog = f"{app_id}-by-user-repartition", f"{app_id}-totals-changelog"
    subjects = set(schema_registry_client(schema_registry_url).get_subjects())
    assert {f"{source}-value", f"{repartition}-value", f"{changelog}-value"} <= subjects
    assert f"{sink}-value" in subjects
    # The changelog's values are the format's bytes (after the store's timestamp), under the
    # changelog's subject.
    stored = fmt.serde.bind(changelog, "value")
    totals = {
        (m.key() or b"").decode(): fmt.amount(
            stored.deserialize(ValueAndTimestamp.from_bytes(m.value()).value)
        )
        for m in _data(reader_for(changelog, 2))
    }
    assert totals == expected


def _framed(schema_id: int, payload: bytes, magic: int = 0) -> bytes:
    return bytes([magic]) + schema_id.to_bytes(4, "big") + payload


@pytest.mark.parametrize("policy", ["dead-letter", "log-and-skip"])
def test_bad_records_meet_the_policy_and_nothing_else_is_lost(  # noqa: PLR0917 - fixtures
    policy: str,
    schema_registry_url: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("orders-bad"), create_topic("orders-out")
    avro = Avro(ORDER_AVRO, registry=schema_registry_url)
    good = avro.bind(source, "value").serialize({"user": "u", "amount": 1})
    assert good is not None
    schema_id = int.from_bytes(good[1:5], "big")
    bad = {
        "unknown-id": _framed(987_654_321, good[5:]),
        "magic-byte": _framed(schema_id, good[5:], magic=7),
        "payload": _framed(schema_id, b"\x02"),  # a string of one byte, then nothing
    }
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=avro)
    # A negative amount is mapped to a value the output schema refuses: a processing error.
    builder.stream(source).map_values(
        lambda o: o if o["amount"] >= 0 else {"user": o["user"], "amount": "minus"}
    ).to(sink)
    app_id = unique_name("registry-bad")
    app = run_app(builder, application_id=app_id, bad_record_policy=policy)
    writer = avro.bind(source, "value")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    sent = []
    for n in range(8):
        producer.produce(
            source, key=f"good-{n}", value=writer.serialize({"user": "u", "amount": n})
        )
        sent.append(n)
        if n < len(bad):
            kind = list(bad)[n]
            producer.produce(source, key=kind, value=bad[kind])
    producer.produce(source, key="refused", value=writer.serialize({"user": "u", "amount": -1}))
    producer.produce(source, key="good-last", value=writer.serialize({"user": "u", "amount": 99}))
    producer.flush(10)

    output = reader_for(sink, 1)
    reader = avro.bind(sink, "value")
    want = [*sent, 99]
    got = wait_for(
        lambda: (
            [reader.deserialize(m.value())["amount"] for m in _data(output)]
            if len(_data(output)) >= len(want)
            else None
        ),
        timeout_s=60,
    )
    assert got == want  # every good record, in order, and nothing else
    action = "dead-lettered" if policy == "dead-letter" else "skipped"
    assert wait_for(lambda: app.metrics.total("streams_bad_records", action=action) == 4)
    assert app.metrics.total("streams_bad_records", reason="deserialization") == 3
    assert app.metrics.total("streams_bad_records", reason="processing") == 1
    if policy == "dead-letter":
        dlq = reader_for(f"{app_id}-dlq", 1)
        letters = wait_for(lambda: dlq.read() if len(dlq.read()) >= 4 else None)
        by_key = {(m.key() or b"").decode(): dict(m.headers() or []) for m in letters}
        assert set(by_key) == {*bad, "refused"}
        for kind, raw in bad.items():
            assert next(m.value() for m in letters if m.key() == kind.encode()) == raw
            assert by_key[kind]["pc-dlq-reason"] == b"deserialization"
        assert b"unknown schema" in by_key["unknown-id"]["pc-dlq-error"]
        assert by_key["refused"]["pc-dlq-reason"] == b"processing"


def test_a_newer_compatible_schema_mid_stream(
    schema_registry_url: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source = create_topic("orders-evolving")
    fixed_out, as_written_out = create_topic("orders-v1"), create_topic("orders-as-written")
    fixed = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    fixed.stream(source, value_serde=Avro(ORDER_AVRO, registry=schema_registry_url)).map_values(
        lambda o: json.dumps(o, sort_keys=True)
    ).to(fixed_out)
    as_written = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    as_written.stream(source, value_serde=Avro(registry=schema_registry_url)).map_values(
        lambda o: json.dumps(o, sort_keys=True)
    ).to(as_written_out)
    run_app(fixed)
    run_app(as_written)

    v1 = Avro(ORDER_AVRO, registry=schema_registry_url).bind(source, "value")
    v2 = Avro(ORDER_AVRO_V2, registry=schema_registry_url).bind(source, "value")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, key="a", value=v1.serialize({"user": "a", "amount": 1}))
    producer.produce(source, key="b", value=v2.serialize({"user": "b", "amount": 2, "coupon": "X"}))
    producer.produce(source, key="c", value=v1.serialize({"user": "c", "amount": 3}))
    producer.flush(10)
    versions = schema_registry_client(schema_registry_url).get_versions(f"{source}-value")
    assert len(versions) == 2  # v2 registered as a compatible new version of the subject

    def values(reader: TopicReader) -> list[dict[str, Any]] | None:
        found = [json.loads(m.value()) for m in _data(reader)]
        return found if len(found) >= 3 else None

    assert wait_for(lambda: values(reader_for(fixed_out, 1)), timeout_s=60) == [
        {"user": "a", "amount": 1},
        {"user": "b", "amount": 2},  # read with the reader's schema: the coupon is not in it
        {"user": "c", "amount": 3},
    ]
    assert wait_for(lambda: values(reader_for(as_written_out, 1)), timeout_s=60) == [
        {"user": "a", "amount": 1},
        {"user": "b", "amount": 2, "coupon": "X"},  # read with its own schema
        {"user": "c", "amount": 3},
    ]


def test_an_incompatible_schema_stops_the_app(
    schema_registry_url: str,
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    source, sink = create_topic("orders-in"), create_topic("orders-incompatible")
    client = schema_registry_client(schema_registry_url)
    client.set_compatibility(subject_name=f"{sink}-value", level="BACKWARD")
    Avro(ORDER_AVRO, registry=client).bind(sink, "value").serialize({"user": "u", "amount": 1})
    renamed = ORDER_AVRO.replace('"amount"', '"total"')  # no default: not backward compatible
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream(source).map_values(lambda v: {"user": v, "total": 1}).to(
        sink, value_serde=Avro(renamed, registry=client)
    )
    app = run_app(builder, bad_record_policy="log-and-skip")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, key="k", value=b"u")
    producer.flush(10)
    wait_for(lambda: app.state == "ERROR", timeout_s=30)
    assert isinstance(app.error, SchemaRegistryRefusedError)
    assert app.metrics.total("streams_bad_records") == 0  # the schema's fault, no record's


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_registry_out_of_reach_stops_the_app_and_skips_nothing(
    create_topic: Callable[..., str],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    """No registry at all: the bad-record policy (skip) must not take the records."""
    source, sink = create_topic("orders-unreachable"), create_topic("orders-never")
    url = f"http://127.0.0.1:{_closed_port()}"
    avro = Avro(ORDER_AVRO, registry={"url": url, "max.retries": 0}, retry_timeout_ms=2000)
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=avro)
    builder.stream(source).to(sink)
    app_id = unique_name("registry-away")
    app = run_app(builder, application_id=app_id, bad_record_policy="log-and-skip")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    producer.produce(source, key="k", value=_framed(1, b"\x02u\x02"))
    producer.flush(10)
    wait_for(lambda: app.state == "ERROR", timeout_s=60)
    assert isinstance(app.error, SchemaRegistryUnavailableError)
    assert url in str(app.error)
    assert app.metrics.total("streams_bad_records") == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": app_id})
    try:
        [committed] = consumer.committed([TopicPartition(source, 0)], timeout=10)
    finally:
        consumer.close()
    assert committed.offset < 1  # the record is still to be read: nothing was skipped


def test_avro_keys_join_a_table_and_a_stream(
    schema_registry_url: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    run_app: Callable[..., App],
    kafka_bootstrap: str,
) -> None:
    """Keys in Avro too: a join looks a key's bytes up in a store another processor wrote, each
    serialized for its own store's changelog subject (the same schema, so the same id)."""
    users, clicks, carts = create_topic("users"), create_topic("clicks"), create_topic("carts")
    with_table, with_stream = create_topic("clicks-users"), create_topic("clicks-carts")
    keys = Avro('"string"', registry=schema_registry_url)
    values = Avro(ORDER_AVRO, registry=schema_registry_url)
    builder = StreamsBuilder(default_key_serde=keys, default_value_serde=values)
    table = builder.table(users, store_name="users-store")
    stream = builder.stream(clicks)
    stream.join(table, lambda click, user: f"{click['amount']}:{user['user']}").to(
        with_table, value_serde=String()
    )
    stream.join(
        builder.stream(carts),
        lambda click, cart: f"{click['amount']}+{cart['amount']}",
        JoinWindows.of_time_difference(60_000),
    ).to(with_stream, value_serde=String())
    run_app(builder)

    producer = Producer({"bootstrap.servers": kafka_bootstrap})

    def send(topic: str, key: str, user: str, amount: int) -> None:
        producer.produce(
            topic,
            key=keys.bind(topic, "key").serialize(key),
            value=values.bind(topic, "value").serialize({"user": user, "amount": amount}),
        )
        producer.flush(10)

    send(users, "k1", "ann", 0)
    send(carts, "k1", "-", 7)
    send(clicks, "k1", "-", 3)

    def joined(topic: str) -> list[tuple[str, str]] | None:
        found = [
            (keys.bind(topic, "key").deserialize(m.key()), m.value().decode())
            for m in _data(reader_for(topic, 1))
        ]
        return found or None

    assert wait_for(lambda: joined(with_table), timeout_s=60) == [("k1", "3:ann")]
    assert wait_for(lambda: joined(with_stream), timeout_s=60) == [("k1", "3+7")]
