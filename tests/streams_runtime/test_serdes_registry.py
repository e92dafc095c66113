"""Schema Registry serdes (streams_runtime.serdes_registry) in pure logic, on confluent-kafka's
in-memory registry (``mock://`` URLs): round trips of each format, subjects named after topic
and field, bad bytes and values as SerializationError, schema evolution, a registry out of
reach tried for a bounded time and then failing the application. The same against a real
registry and broker: test_serdes_registry_broker.py."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient, topic_record_subject_name_strategy

from streams_runtime import StreamsError
from streams_runtime.serdes import SerializationError
from streams_runtime.serdes_registry import (
    Avro,
    JsonSchema,
    Protobuf,
    SchemaRegistryRefusedError,
    SchemaRegistryUnavailableError,
    schema_registry_client,
)
from tests.helpers import unique_name
from tests.streams_runtime.registry_formats import (
    ORDER_AVRO,
    ORDER_AVRO_V2,
    ORDER_JSON_SCHEMA,
    order_message_type,
)


def _mock() -> str:
    return f"mock://{unique_name('registry')}"


def test_clients_are_shared_per_configuration() -> None:
    url = _mock()
    client = schema_registry_client(url)
    assert schema_registry_client(url) is client
    assert schema_registry_client({"url": url}) is client
    assert schema_registry_client(_mock()) is not client
    assert schema_registry_client(client) is client
    assert Avro(ORDER_AVRO, registry=url).client is client


@pytest.mark.parametrize("fmt", ["avro", "json", "protobuf"])
def test_each_format_round_trips_under_topic_named_subjects(fmt: str) -> None:
    url = _mock()
    serde: Any
    if fmt == "avro":
        serde, value = Avro(ORDER_AVRO, registry=url), {"user": "u1", "amount": 3}
    elif fmt == "json":
        serde, value = JsonSchema(ORDER_JSON_SCHEMA, registry=url), {"user": "u1", "amount": 3}
    else:
        order = order_message_type()
        serde, value = Protobuf(order, registry=url), order(user="u1", amount=3)
    for topic, field in [("orders", "value"), ("app-totals-changelog", "value"), ("k", "key")]:
        bound = serde.bind(topic, field)
        data = bound.serialize(value)
        assert data[0] == 0  # Confluent's wire format: magic byte 0, then the schema id
        assert bound.deserialize(data) == value
        assert bound.serialize(None) is None
        assert bound.deserialize(None) is None
    subjects = set(schema_registry_client(url).get_subjects())
    assert {"orders-value", "app-totals-changelog-value", "k-key"} <= subjects


def test_a_subject_name_strategy_is_passed_through() -> None:
    url = _mock()
    serde = Avro(ORDER_AVRO, registry=url, subject_name_strategy=topic_record_subject_name_strategy)
    serde.bind("orders", "value").serialize({"user": "u", "amount": 1})
    assert schema_registry_client(url).get_subjects() == ["orders-test.Order"]


def test_avro_objects_through_hooks() -> None:
    class Order:
        def __init__(self, user: str, amount: int) -> None:
            self.user, self.amount = user, amount

    serde = Avro(
        ORDER_AVRO,
        registry=_mock(),
        to_dict=lambda o: {"user": o.user, "amount": o.amount},
        from_dict=lambda d: Order(**d),
    ).bind("orders", "value")
    back = serde.deserialize(serde.serialize(Order("u", 2)))
    assert isinstance(back, Order)
    assert (back.user, back.amount) == ("u", 2)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda data: b"\x07" + data[1:],  # a wrong magic byte
        lambda data: data[:1] + (999_999).to_bytes(4, "big") + data[5:],  # an unknown id
        lambda data: data[:5] + b"\xff\xff\xff",  # a payload its schema cannot read
        lambda data: data[:3],  # too short for the framing
    ],
    ids=["magic-byte", "unknown-id", "payload", "short"],
)
def test_bytes_it_cannot_read_are_the_records_fault(mangle: Any) -> None:
    serde = Avro(ORDER_AVRO, registry=_mock()).bind("orders", "value")
    data = serde.serialize({"user": "u", "amount": 1})
    assert data is not None
    with pytest.raises(SerializationError, match="Avro value of orders"):
        serde.deserialize(mangle(data))


@pytest.mark.parametrize("fmt", ["avro", "json"])
def test_a_value_that_does_not_match_the_schema_is_the_records_fault(fmt: str) -> None:
    url = _mock()
    serde = (
        Avro(ORDER_AVRO, registry=url)
        if fmt == "avro"
        else JsonSchema(ORDER_JSON_SCHEMA, registry=url)
    ).bind("orders", "value")
    with pytest.raises(SerializationError, match="cannot write"):
        serde.serialize({"user": "u", "amount": "three"})


def test_records_of_a_newer_compatible_schema_read_with_the_readers_or_their_own() -> None:
    url = _mock()
    old = Avro(ORDER_AVRO, registry=url).bind("orders", "value")
    new = Avro(ORDER_AVRO_V2, registry=url).bind("orders", "value")
    v1 = old.serialize({"user": "u", "amount": 1})
    v2 = new.serialize({"user": "u", "amount": 2, "coupon": "X"})
    assert v1 is not None
    assert v2 is not None
    assert v1[1:5] != v2[1:5]  # two schema ids
    assert old.deserialize(v2) == {"user": "u", "amount": 2}  # resolved to the reader's
    assert new.deserialize(v1) == {"user": "u", "amount": 1, "coupon": None}  # its default
    as_written = Avro(registry=url).bind("orders", "value")
    assert as_written.deserialize(v2) == {"user": "u", "amount": 2, "coupon": "X"}
    assert as_written.deserialize(v1) == {"user": "u", "amount": 1}
    with pytest.raises(SchemaRegistryRefusedError, match="reads only"):
        as_written.serialize({"user": "u", "amount": 1})


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("doing", ["write", "read"])
def test_a_registry_out_of_reach_is_tried_for_a_while_then_named(doing: str) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    serde = Avro(ORDER_AVRO, registry={"url": url, "max.retries": 0}, retry_timeout_ms=1000).bind(
        "orders", "value"
    )
    call = (
        (lambda: serde.serialize({"user": "u", "amount": 1}))
        if doing == "write"
        else (lambda: serde.deserialize(b"\x00\x00\x00\x00\x01\x02u\x02"))
    )
    started = time.monotonic()
    with pytest.raises(
        SchemaRegistryUnavailableError, match=f"{url}.*no record was skipped"
    ) as info:
        call()
    assert 1.0 <= time.monotonic() - started < 30
    assert isinstance(info.value, StreamsError)  # not the record's fault: the app stops


def test_a_registry_that_never_answers_is_out_of_reach_too() -> None:
    with socket.socket() as listening:  # connections are accepted (backlog), never answered
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        url = f"http://127.0.0.1:{listening.getsockname()[1]}"
        registry = {"url": url, "max.retries": 0, "timeout": 0.3}
        serde = Avro(ORDER_AVRO, registry=registry, retry_timeout_ms=1000).bind("o", "value")
        with pytest.raises(SchemaRegistryUnavailableError, match=url):
            serde.serialize({"user": "u", "amount": 1})


def test_credentials_stay_out_of_the_message() -> None:
    url = f"http://user:secret@127.0.0.1:{_closed_port()}"
    serde = Avro(ORDER_AVRO, registry={"url": url, "max.retries": 0}, retry_timeout_ms=0)
    with pytest.raises(SchemaRegistryUnavailableError) as info:
        serde.bind("orders", "value").serialize({"user": "u", "amount": 1})
    assert "secret" not in str(info.value)
    assert "127.0.0.1" in str(info.value)


def test_a_client_given_is_used_as_it_is() -> None:
    client = SchemaRegistryClient.new_client({"url": _mock()})
    serde = JsonSchema(ORDER_JSON_SCHEMA, registry=client)
    assert serde.client is client
    data = serde.bind("t", "value").serialize({"user": "u", "amount": 1})
    assert json.loads(data[5:]) == {"user": "u", "amount": 1}  # type: ignore[index]
