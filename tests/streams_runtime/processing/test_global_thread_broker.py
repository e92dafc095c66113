"""Global tables against the real broker (Kafka Streams' ``GlobalStreamThread``): every instance
of one application (several ``App`` s on one consumer group) holds every row of every partition,
bootstrapped before its stream thread processes and kept up to date while it runs; queries
answer from the local copy on every instance (never routed, membership on); a restart resumes
from the checkpoint; a bad record under ``fail`` stops the app. The join's semantics are
tests/streams_runtime/topologies/test_global_table_driver.py (the driver)."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from progress_control.protocol import is_control_record
from progress_control.trust import ControlRecordSource
from streams_runtime import App, AppState, BadRecordError, StreamsBuilder, TopologyError
from streams_runtime.queries import QueryError
from streams_runtime.serdes import Json, String
from tests.helpers import (
    TopicReader,
    exposed_metrics,
    undocumented_metrics,
    unique_name,
    wait_for,
)
from tests.streams_runtime.queries.test_queries import TOKEN, http_get

pytestmark = pytest.mark.broker

CUSTOMERS = {f"c{i}": {"name": f"customer {i}"} for i in range(30)}


def _builder(customers: str, orders: str, out: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    table = builder.global_table(customers, store_name="customers")
    builder.stream(orders).join(
        table,
        lambda _order_id, order: order["customer"],
        lambda order, customer: {"order": order["item"], "name": customer["name"]},
    ).to(out)
    return builder


def _produce(bootstrap: str, topic: str, rows: dict[str, Any]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in rows.items():
        raw = None if value is None else json.dumps(value).encode()
        producer.produce(topic, key=key.encode(), value=raw)
    producer.flush(30)


def _local_rows(app: App, keys: list[str]) -> dict[str, Any]:
    """What ``app`` answers for ``keys`` (absent keys left out)."""
    found = {}
    for key in keys:
        result = app.get("customers", key)
        assert (result.served_by, result.instance_id) == ("active", app.instance_id)
        if result.found:
            found[key] = result.value
    return found


def _updated(app: App) -> bool:
    return _local_rows(app, ["c100", "c1"]) == {"c100": {"name": "new"}}


@contextmanager
def _instances(
    bootstrap: str, tmp_path: Path, topics: tuple[str, str, str], count: int, **settings: Any
) -> Iterator[list[App]]:
    options: dict[str, Any] = {
        "application_id": unique_name("global"),
        "bootstrap_servers": bootstrap,
        "commit_interval_ms": 200,
        "consumer": {"session.timeout.ms": "6000"},
        **settings,
    }
    apps = [
        App(_builder(*topics), state_dir=tmp_path / f"state-{n}", **options) for n in range(count)
    ]
    for app in apps:
        app.start()
    try:
        for app in apps:
            assert app.wait_until(AppState.RUNNING, 90), f"not running: {app.error!r}"
        yield apps
    finally:
        for app in apps:
            app.close()


def test_every_instance_holds_every_row_and_joins_without_co_partitioning(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    # Three partitions of customers, two of orders: not co-partitioned, and need not be.
    customers, orders = create_topic("customers", partitions=3), create_topic("orders", 2)
    out = create_topic("enriched", partitions=2)
    _produce(kafka_bootstrap, customers, CUSTOMERS)
    tick = ControlRecordSource("global-test").record(customers, 0, 1_000)  # skipped, unstored
    tick_producer = Producer({"bootstrap.servers": kafka_bootstrap})
    tick_producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
    tick_producer.flush(10)
    # Orders there before the start: the global store is bootstrapped before they are joined.
    orders_before = {f"o{i}": {"item": f"item {i}", "customer": f"c{i}"} for i in range(30)}
    _produce(kafka_bootstrap, orders, orders_before)
    with _instances(
        kafka_bootstrap,
        tmp_path,
        (customers, orders, out),
        2,
        application_server="127.0.0.1:0",
        query_token=TOKEN,
        membership_interval_ms=300,
    ) as apps:
        for app in apps:  # every row on every instance, answered locally
            assert _local_rows(app, list(CUSTOMERS)) == CUSTOMERS
            assert len(app.all("customers").entries) == len(CUSTOMERS)
            status, body = http_get(f"http://{app.query_endpoint}/stores/customers/keys/c7")
            assert (status, body["value"], body["instance_id"]) == (
                200,
                CUSTOMERS["c7"],
                app.instance_id,
            )
            assert app.query_metadata_for_key("customers", "c7").partition == -1
        reader = reader_for(out, 2)
        joined: dict[str, Any] = {}

        def all_joined(expected: int) -> bool:
            for msg in reader.read():
                if not is_control_record(msg):
                    joined[(msg.key() or b"").decode()] = json.loads(msg.value() or b"null")
            return len(joined) >= expected

        wait_for(lambda: all_joined(30), timeout_s=60, message="orders joined")
        assert joined == {
            f"o{i}": {"order": f"item {i}", "name": f"customer {i}"} for i in range(30)
        }
        # Rows written while running reach every instance; deletes remove them everywhere.
        _produce(kafka_bootstrap, customers, {"c100": {"name": "new"}, "c1": None})
        for app in apps:
            wait_for(
                functools.partial(_updated, app), timeout_s=30, message=f"on {app.instance_id}"
            )
        _produce(kafka_bootstrap, orders, {"o100": {"item": "late", "customer": "c100"}})
        wait_for(lambda: all_joined(31), timeout_s=60, message="an order joins a new row")
        assert joined["o100"] == {"order": "late", "name": "new"}
        applied = [
            app.metrics.total("streams_global_records_applied", store="customers") for app in apps
        ]
        assert applied == [len(CUSTOMERS) + 2] * 2  # the tick was not applied
        text = apps[0].metrics.exposition().decode()
        assert 'streams_global_lag_records{partition="2",store="customers"} 0.0' in text
        ours = [name for name in exposed_metrics(text) if name.startswith("streams_global_")]
        assert len(ours) == 2
        assert undocumented_metrics(ours) == []


def test_a_restart_resumes_from_the_checkpoint(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topics = (create_topic("customers", 2), create_topic("orders"), create_topic("enriched"))
    _produce(kafka_bootstrap, topics[0], CUSTOMERS)
    application_id = unique_name("global")
    with _instances(
        kafka_bootstrap, tmp_path, topics, 1, application_id=application_id, state_engine="sqlite"
    ) as [app]:
        assert _local_rows(app, list(CUSTOMERS)) == CUSTOMERS
    checkpoint = json.loads(
        (tmp_path / "state-0" / application_id / "global" / ".checkpoint").read_text()
    )
    assert sum(entry["offset"] for entry in checkpoint["changelog_offsets"]) == len(CUSTOMERS)
    # Written while it was down: read on restart, and nothing before them again.
    _produce(kafka_bootstrap, topics[0], {"c0": None, "c200": {"name": "while down"}})
    with _instances(
        kafka_bootstrap, tmp_path, topics, 1, application_id=application_id, state_engine="sqlite"
    ) as [app]:
        expected = {k: v for k, v in CUSTOMERS.items() if k != "c0"} | {
            "c200": {"name": "while down"}
        }
        assert _local_rows(app, [*CUSTOMERS, "c200"]) == expected
        assert app.metrics.total("streams_global_records_applied", store="customers") == 2


def test_a_bad_record_under_fail_stops_the_app(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topics = (create_topic("customers"), create_topic("orders"), create_topic("enriched"))
    with _instances(kafka_bootstrap, tmp_path, topics, 1) as [app]:
        producer = Producer({"bootstrap.servers": kafka_bootstrap})
        producer.produce(topics[0], key=b"c1", value=b"{not json")
        producer.flush(10)
        assert app.wait_until(AppState.ERROR, 30)
        assert isinstance(app.error, BadRecordError)
        with pytest.raises(QueryError):
            app.get("customers", "c1")


def test_a_missing_global_topic_fails_the_start(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topics = (unique_name("absent"), create_topic("orders"), create_topic("enriched"))
    app = App(
        _builder(*topics),
        application_id=unique_name("global"),
        bootstrap_servers=kafka_bootstrap,
        state_dir=tmp_path,
    )
    app.start()
    try:
        assert app.wait_until(AppState.ERROR, 30)
        assert isinstance(app.error, TopologyError)
        assert "not found" in str(app.error)
    finally:
        app.close()
