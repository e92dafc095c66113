"""Kafka Streams on a Schema Registry-framed topic (docs/readers/schema-registry.md, "Kafka
Streams"): Kafka Streams 4.1 on the real broker, its serdes Apicurio's Avro serde in Confluent's
wire format (``tests/readers/apicurio.py``) against the embedded registry, the clicks (Avro key
record, Avro value) written by confluent-kafka's ``AvroSerializer`` through the interceptor's
``SerializingProducer``, whose ticks on the topic (``null.key.topics``) have a null key.

- The serde and confluent-kafka's Avro serializers read each other's records (a Kafka Streams app
  copies a topic through the serde; confluent-kafka's deserializers read the copy).
- One JVM runs the example's session count per input key twice on the same ticked topic
  (``RegistryTopologies``): **plain**, Kafka Streams alone, and **controlled**, with the
  companion (``Controlled.keySerde`` gives ticks a tick key of the key type). Asserted: neither
  fails; the controlled app closes every session on ticks alone, with the sessions the clicks
  make; the plain one drops every tick (its ``dropped-records-total`` and its "Skipping record
  due to null key" warnings count them), counts none, and leaves each partition's last session
  open until later data comes, which then closes them with the same results. No result holds
  the tick key or a ``progress-control`` header; no user function of the controlled app saw a
  tick.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import DeserializingConsumer, SerializingProducer
from confluent_kafka.admin import AdminClient
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

from interceptor import SerializingProducer as TickingSerializingProducer
from progress_control.protocol import has_control_header
from streams_runtime.murmur2 import partition_for_key
from tests.helpers import TopicReader, registry_client, unique_name, wait_for
from tests.readers.apicurio import CLICK_SCHEMA, USER_SCHEMA, serde_settings
from tests.readers.clicks import session_clicks, session_windows, users_on_every_partition
from tests.readers.connect_worker import committed_offsets, end_offsets
from tests.readers.kafka_streams_companion import CompanionApps, build_companion

pytestmark = [pytest.mark.broker, pytest.mark.network]

PARTITIONS = 3
GAP_MS = 1_000
GRACE_MS = 1_000
TICK_KEY = {"id": "__progress_control__"}
TICKS = {
    "progress.control.start.ms": 300,
    "progress.control.backoff.ms": 300,
    "progress.control.backoff.exponential": False,
    "progress.control.max.records": 20,  # 6 s of ticks: 2 s (gap and grace) close everything
}
NULL_KEY_WARNING = re.compile(r"Skipping record due to null key\. topic=\[(?P<topic>[^\]]+)\]")


@pytest.fixture(scope="module")
def companion_jars() -> Path:
    return build_companion()


@pytest.fixture
def registry(schema_registry_url: str) -> SchemaRegistryClient:
    return registry_client(schema_registry_url)


def _spec(bootstrap: str, registry_url: str, state_dir: Path, **settings: str) -> dict[str, str]:
    app_id = unique_name(f"registry-{settings['topology']}")
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "state.dir": str(state_dir / app_id),
        "commit.interval.ms": "100",
        "statestore.cache.max.bytes": "0",
        "auto.offset.reset": "earliest",
        **serde_settings(registry_url),
        **settings,
    }


def _avro_producer(bootstrap: str, registry: SchemaRegistryClient) -> SerializingProducer:
    return SerializingProducer(
        {
            "bootstrap.servers": bootstrap,
            "key.serializer": AvroSerializer(registry, USER_SCHEMA),
            "value.serializer": AvroSerializer(registry, CLICK_SCHEMA),
        }
    )


def test_the_apicurio_serde_and_confluent_kafkas_avro_serializers_read_each_other(
    *,
    kafka_bootstrap: str,
    schema_registry_url: str,
    registry: SchemaRegistryClient,
    create_topic: Callable[..., str],
    companion_jars: Path,
    tmp_path: Path,
) -> None:
    source, copy = create_topic("py-avro"), create_topic("streams-avro")
    clicks = [({"id": f"u{i}"}, {"page": f"/p{i}", "ms": 1_000 + i}) for i in range(3)]
    producer = _avro_producer(kafka_bootstrap, registry)
    for key, value in clicks:
        producer.produce(source, key=key, value=value)
    assert producer.flush(10) == 0
    spec = _spec(
        kafka_bootstrap,
        schema_registry_url,
        tmp_path / "state",
        topology="registry-copy",
        input=source,
        output=copy,
    )
    consumer = DeserializingConsumer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "group.id": unique_name("copy-reader"),
            "auto.offset.reset": "earliest",
            "key.deserializer": AvroDeserializer(registry),
            "value.deserializer": AvroDeserializer(registry),
        }
    )
    consumer.subscribe([copy])
    read: list[tuple[Any, Any]] = []
    try:
        with CompanionApps(companion_jars, tmp_path / "jvm", [spec]) as apps:
            apps.wait_started([spec["application.id"]])
            deadline = time.monotonic() + 60
            while len(read) < len(clicks) and time.monotonic() < deadline:
                apps.check()
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    read.append((msg.key(), msg.value()))
    finally:
        consumer.close()
    assert read == clicks


def _as_results(sessions: set[str]) -> set[str]:
    """``user=start,end,count`` as the example writes it: the key record's Avro JSON first."""
    return {f"{json.dumps({'id': s.split('=', 1)[0]})}={s.split('=', 1)[1]}" for s in sessions}


class Output:
    """An output topic's results (``<key record>=start,end,count``), checking each one."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._reader = TopicReader(bootstrap, topic, 1)

    def read(self) -> set[str]:
        found = set()
        for msg in self._reader.read(quiet_s=0.2, max_s=1.0):
            key = (msg.key() or b"").decode()
            assert key != json.dumps(TICK_KEY), "a window of the tick key"
            assert not has_control_header(msg.headers()), f"a result marked as a tick: {key}"
            found.add(f"{key}={(msg.value() or b'').decode()}")
        return found

    def close(self) -> None:
        self._reader.close()


@pytest.fixture
def outputs(kafka_bootstrap: str) -> Iterator[Callable[[str], Output]]:
    opened: list[Output] = []

    def make(topic: str) -> Output:
        opened.append(Output(kafka_bootstrap, topic))
        return opened[-1]

    yield make
    for output in opened:
        output.close()


def test_kafka_streams_sessions_on_a_registry_keyed_topic_with_and_without_the_companion(  # noqa: PLR0915 - one scenario, told in order
    *,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    schema_registry_url: str,
    registry: SchemaRegistryClient,
    create_topic: Callable[..., str],
    outputs: Callable[[str], Output],
    reader_for: Callable[[str, int], TopicReader],
    companion_jars: Path,
    tmp_path: Path,
) -> None:
    topic = create_topic("registry-clicks", partitions=PARTITIONS)
    common = {"input": topic, "gap.ms": str(GAP_MS), "grace.ms": str(GRACE_MS)}
    specs = {
        mode: _spec(
            kafka_bootstrap,
            schema_registry_url,
            tmp_path / "state",
            topology=topology,
            output=create_topic(f"registry-sessions-{mode}"),
            **{"metrics.file": str(tmp_path / f"{mode}.metrics")},
            **common,
        )
        for mode, topology in (
            ("plain", "registry-sessions"),
            ("controlled", "registry-sessions-controlled"),
        )
    }
    specs["controlled"].update({"key.schema": USER_SCHEMA, "tick.key": json.dumps(TICK_KEY)})
    users = users_on_every_partition(PARTITIONS)
    # In the past (the interceptor's ticks extrapolate from the last click, up to wall-clock now).
    clicks = session_clicks(
        7,
        int(time.time() * 1000) - 30_000,
        users,
        start_spread_ms=1500,
        click_gap_ms=(100, 250),
        session_gap_ms=(1500, 2500),
    )
    expected = _as_results(session_windows(clicks, GAP_MS))
    out = {mode: outputs(spec["output"]) for mode, spec in specs.items()}
    ticking = TickingSerializingProducer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "key.serializer": AvroSerializer(registry, USER_SCHEMA),
            "value.serializer": AvroSerializer(registry, CLICK_SCHEMA),
            "progress.control.null.key.topics": topic,
            **TICKS,
        }
    )
    seen: dict[str, set[str]] = {}
    with CompanionApps(companion_jars, tmp_path / "jvm", list(specs.values())) as apps:
        try:
            apps.wait_started([spec["application.id"] for spec in specs.values()])
            for i, (user, ts) in enumerate(clicks):
                ticking.produce(
                    topic,
                    key={"id": user},
                    value={"page": f"/{user}/{i}", "ms": ts},
                    partition=partition_for_key(user.encode(), PARTITIONS),
                    timestamp=ts,
                )
            assert ticking.flush(30) == 0

            def closed_by_ticks() -> bool:
                apps.check()
                seen["controlled"] = out["controlled"].read()
                return seen["controlled"] >= expected

            wait_for(closed_by_ticks, timeout_s=90, interval_s=0.2, message="sessions by ticks")
        finally:
            ticking.close()  # its last ticks sent: no more come
        ticks = [m for m in reader_for(topic, PARTITIONS).read() if m.key() is None]
        assert {m.partition() for m in ticks} == set(range(PARTITIONS)), "every partition ticked"

        # Kafka Streams alone has read every tick now, and closed only what data closes: never
        # the last session of a partition, whose stream time only data moves.
        ends = end_offsets(kafka_admin, topic, PARTITIONS)
        plain_id = specs["plain"]["application.id"]
        wait_for(
            lambda: committed_offsets(kafka_admin, plain_id, topic, PARTITIONS) == ends,
            timeout_s=60,
            message="the plain app to commit every tick",
        )
        apps.check()
        before_data = out["plain"].read()
        assert before_data <= expected, "the plain app counted a tick"
        lasts = {_session_ending(expected, *_last_click(clicks, p)) for p in range(PARTITIONS)}
        assert not lasts & before_data, "a partition's last session closed without later data"

        # Later data closes them: one click per partition, 10 s after the last one.
        plain = _avro_producer(kafka_bootstrap, registry)
        later = clicks[-1][1] + 10_000
        for p in range(PARTITIONS):
            user = next(f"later-{i}" for i in range(1000) if _partition_of(f"later-{i}") == p)
            value = {"page": "/", "ms": later}
            plain.produce(topic, key={"id": user}, value=value, partition=p, timestamp=later)
        assert plain.flush(10) == 0

        def closed_by_data() -> bool:
            apps.check()
            seen["plain"] = {r for r in out["plain"].read() if "later-" not in r}
            return seen["plain"] >= expected

        wait_for(closed_by_data, timeout_s=60, interval_s=0.2, message="sessions by later data")
        seen["controlled"] = {r for r in out["controlled"].read() if "later-" not in r}
        apps.check()

    assert seen["controlled"] == expected
    assert seen["plain"] == seen["controlled"]
    metrics = {mode: (tmp_path / f"{mode}.metrics").read_text().strip() for mode in specs}
    assert metrics == {
        "plain": f"dropped-records-total={len(ticks)}",
        "controlled": "dropped-records-total=0",
    }
    log = apps.log_path.read_text()
    assert [m["topic"] for m in NULL_KEY_WARNING.finditer(log)] == [topic] * len(ticks)
    assert "reached ticksIntoWindows" not in log, "the controlled app saw a null-key tick"


def _partition_of(user: str) -> int:
    return partition_for_key(user.encode(), PARTITIONS)


def _last_click(clicks: list[tuple[str, int]], partition: int) -> tuple[str, int]:
    return max(((u, t) for u, t in clicks if _partition_of(u) == partition), key=lambda c: c[1])


def _session_ending(results: set[str], user: str, end_ms: int) -> str:
    """The one result of ``user``'s session that ends at ``end_ms``."""
    prefix = f"{json.dumps({'id': user})}="
    (found,) = (r for r in results if r.startswith(prefix) and r.split(",")[-2] == str(end_ms))
    return found
