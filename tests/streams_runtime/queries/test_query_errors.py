"""What a query answers when it cannot give a value (docs/runtime/queries.md#errors): an absent
key is an answer (found false; HTTP 200), an unknown store an error naming the stores there are
(HTTP 404, ``unknown-store``); every error body carries a code. An app without membership
answers from its own copies."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from confluent_kafka import Producer

from streams_runtime import App, StreamsBuilder
from streams_runtime.queries.client import ForwardError
from streams_runtime.queries.results import (
    InvalidKeyError,
    NoReplicaWithinBoundError,
    NotAvailableError,
    QueryError,
    QueryResult,
    UnknownStoreError,
)
from streams_runtime.serdes import String
from tests.helpers import wait_for
from tests.streams_runtime.queries.test_query_forwarding import _forwarder, serving

ABSENT = {
    "store": "strings",
    "key": "nope",
    "found": False,
    "value": None,
    "timestamp": None,
    "served_by": "active",
    "instance_id": "member",
    "host": "h:1",
    "partition": 0,
    "offset_lag": 0,
    "time_lag_ms": 0,
}


def test_every_error_has_its_code_and_status() -> None:
    errors: list[tuple[QueryError, int, str]] = [
        (UnknownStoreError("counts", ["b", "a"]), 404, "unknown-store"),
        (InvalidKeyError("bad"), 400, "invalid-key"),
        (NotAvailableError("down"), 503, "not-available"),
        (NoReplicaWithinBoundError("far", []), 503, "no-replica-within-bound"),
        (QueryError("boom"), 500, "query-failed"),
    ]
    for error, status, code in errors:
        assert (error.status, error.code, error.to_json()["error"]) == (status, code, code)
        assert error.to_json()["message"] == str(error)


def test_unknown_store_names_the_stores_there_are_and_how_to_name_one() -> None:
    error = UnknownStoreError("counts", ["views", "KSTREAM-AGGREGATE-STATE-STORE-0000000005"])
    assert isinstance(error, KeyError)
    assert error.queryable == ["KSTREAM-AGGREGATE-STATE-STORE-0000000005", "views"]
    text = str(error)
    assert text.startswith("unknown store 'counts'; queryable: ['KSTREAM-")
    assert "count/reduce/aggregate" in text
    assert "store_name=" in text
    assert error.to_json()["store"] == "counts"


def test_results_ignore_fields_they_do_not_know() -> None:
    result = QueryResult.from_json({**ABSENT, "stale": False, "error": "key-not-found"})
    assert (result.found, result.value, result.stale) == (False, None, False)


@pytest.mark.parametrize("status", [200, 404])  # 404: instances before the error codes
def test_an_absent_key_forwarded_is_an_answer(status: int) -> None:
    body = json.dumps(ABSENT).encode()
    with serving(lambda path: (status, {}, body)) as member:
        forwarder = _forwarder()
        try:
            result = forwarder.forward(member.endpoint, "strings", "nope", False, None)
        finally:
            forwarder.close()
    assert (result.found, result.value) == (False, None)


def test_an_unknown_store_forwarded_is_no_answer() -> None:
    body = json.dumps(UnknownStoreError("nope").to_json()).encode()
    with serving(lambda path: (404, {}, body)) as member:
        forwarder = _forwarder()
        try:
            with pytest.raises(ForwardError, match="unknown store 'nope'"):
                forwarder.forward(member.endpoint, "nope", "k", False, None)
        finally:
            forwarder.close()


@pytest.mark.broker
def test_an_app_without_membership_answers_from_its_own_copies(
    kafka_bootstrap: str, create_topic: Callable[..., str], run_app: Callable[..., App]
) -> None:
    topic = create_topic("views")
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream(topic).group_by_key().count(name="views")
    builder.table(create_topic("pages"))  # an unnamed store, queryable by its generated name
    app = run_app(builder)  # no application_server, no standbys
    with pytest.raises(NotAvailableError):
        App(builder, application_id="never", bootstrap_servers=kafka_bootstrap).get("views", "k")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for page in ("home", "home", "pricing"):
        producer.produce(topic, key=page, value="v")
    producer.flush(30)
    wait_for(lambda: app.get("views", "home").value == 2, timeout_s=30, message="home twice")
    absent = app.get("views", "contact")
    assert (absent.found, absent.value, absent.served_by) == (False, None, "active")
    with pytest.raises(UnknownStoreError) as unknown:
        app.get("counts", "home")
    assert unknown.value.queryable == ["KTABLE-SOURCE-STORE-0000000003", "views"]
    assert app.query_metadata_for_key("views", "home").active_host is None


def test_a_query_before_start_says_what_to_call() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream("clicks").to("out")
    app = App(builder, application_id="not-started", bootstrap_servers="127.0.0.1:1")
    with pytest.raises(NotAvailableError, match=r"call app.start\(\) and app.wait_until"):
        app.get("counts", "alice")
