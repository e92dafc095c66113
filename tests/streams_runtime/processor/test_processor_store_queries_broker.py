"""A user processor's store where users run it: on two instances with one standby per store
partition, the key-value store a user ``Processor`` writes (``builder.add_state_store``) is
logged, replicated to a standby and queried like a DSL store: a point read routed to the key's
active through either instance, every key gathered from both actives in key order, and a
partition read from its standby with its lag (docs/runtime/processor-api.md)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from streams_runtime import App, Record, StreamsBuilder
from streams_runtime.processor import Processor, ProcessorContext, Stores, TypedKeyValueStore
from streams_runtime.queries import QueryError, RangeResult
from streams_runtime.serdes import String
from tests.helpers import unique_name, wait_for
from tests.streams_runtime.queries.test_queries import produce_table, query_settings
from tests.streams_runtime.queries.test_range_queries_broker import caught_up_standby

pytestmark = pytest.mark.broker

STORE = "latest"
ROWS = {f"k{i}": f"v{i}" for i in range(30)}


class LatestPerKey(Processor[str, str, str, str]):
    """Keeps each key's latest value in :data:`STORE`; forwards nothing."""

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.latest: TypedKeyValueStore[str, str] = context.get_state_store(STORE)

    def process(self, record: Record[str, str]) -> None:
        if record.key is not None:
            self.latest.put(record.key, record.value)


def _instance(bootstrap: str, topic: str, application_id: str, state_dir: Path) -> App:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.add_state_store(Stores.key_value_store_builder(STORE, String(), String()))
    builder.stream(topic).process(LatestPerKey, STORE)
    return App(builder, state_dir=state_dir, **query_settings(bootstrap, application_id))


def _from_both_actives(app: App) -> RangeResult | None:
    """Every entry, once both partitions are active on different instances and caught up."""
    try:
        result = app.all(STORE)
    except QueryError:
        return None
    instances = {p.instance_id for p in result.partitions}
    if len(result.entries) != len(ROWS) or len(instances) != 2 or result.stale:
        return None
    return result


def test_a_user_processors_store_is_replicated_and_queried_like_a_dsl_store(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = create_topic("user-store", partitions=2)
    application_id = unique_name("user-store")
    apps = [_instance(kafka_bootstrap, topic, application_id, tmp_path / f"s{n}") for n in (0, 1)]
    for app in apps:
        app.start()
    try:
        for app in apps:
            assert app.wait_until("RUNNING", 60), app.error
        produce_table(kafka_bootstrap, topic, ROWS, String())

        def placed() -> bool:  # each partition held by both: one active, one standby
            lags = [app.all_local_store_partition_lags().get(STORE, {}) for app in apps]
            return all(sum(p in lag for lag in lags) == 2 for p in (0, 1))

        wait_for(placed, timeout_s=60, message="an active and a standby of each partition")
        wait_for(lambda: _from_both_actives(apps[0]), timeout_s=60, message="both actives")
        ordered = sorted(ROWS, key=str.encode)
        for app in apps:
            everything = app.all(STORE)
            assert [e["key"] for e in everything.entries] == ordered
            assert {p.served_by for p in everything.partitions} == {"active"}
            for key in ("k0", "k17", "k29"):
                answer = app.get(STORE, key)
                assert (answer.found, answer.value, answer.served_by) == (True, ROWS[key], "active")
            assert not app.get(STORE, "absent").found
        # The standby copy on apps[0] answers its partition, caught up.
        app = apps[0]
        active_here = {
            p.partition for p in app.all(STORE).partitions if p.instance_id == app.instance_id
        }
        [standby] = {0, 1} - active_here
        from_active = apps[1].range(STORE, partitions=[standby])
        stale = caught_up_standby(app, STORE, standby)
        assert stale.entries == from_active.entries
        assert [(p.served_by, p.offset_lag) for p in stale.partitions] == [("standby", 0)]
    finally:
        for app in apps:
            app.close()
