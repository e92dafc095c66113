"""How the stream thread's consumer joins its group (streams_runtime/processing/group_protocol.py):
the config per protocol, the group timeouts KIP-848 keeps on the broker, the fall back to the
classic protocol on a broker without KIP-848, and a static member that waits for its killed
predecessor's session to time out instead of failing."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType
from pydantic import ValidationError

from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker
from streams_runtime import App, StreamsBuilder
from streams_runtime.processing.group_protocol import (
    JoinFailure,
    classify_join_error,
    consumer_group_config,
    set_group_timeouts,
)
from streams_runtime.serdes import String
from streams_runtime.settings import GroupProtocol, RuntimeSettings
from tests.helpers import TopicReader, unique_name, wait_for


def _settings(**overrides: object) -> RuntimeSettings:
    return RuntimeSettings(application_id="app", bootstrap_servers="localhost:9092", **overrides)


def test_kip_848_takes_the_range_assignor_and_leaves_timeouts_to_the_group() -> None:
    settings = _settings(consumer={"session.timeout.ms": "6000", "fetch.min.bytes": "2"})
    config = consumer_group_config(settings, GroupProtocol.CONSUMER, "i-1")
    assert config["group.protocol"] == "consumer"
    assert config["group.remote.assignor"] == "range"
    assert "session.timeout.ms" not in config  # librdkafka refuses it under KIP-848
    assert config["fetch.min.bytes"] == "2"  # the rest passes through
    assert "group.instance.id" not in config


def test_classic_takes_the_range_assignor_and_keeps_timeouts() -> None:
    settings = _settings(consumer={"session.timeout.ms": "6000"}, static_membership=True)
    config = consumer_group_config(settings, GroupProtocol.CLASSIC, "i-1")
    assert config["partition.assignment.strategy"] == "range"
    assert config["session.timeout.ms"] == "6000"
    assert config["group.instance.id"] == "i-1"


def test_a_group_instance_id_of_the_users_makes_a_static_member() -> None:
    settings = _settings(consumer={"group.instance.id": "pod-0"})
    assert consumer_group_config(settings, GroupProtocol.CONSUMER, "i-1")["group.instance.id"] == (
        "pod-0"
    )
    assert settings.group_instance_id == "pod-0"


@pytest.mark.parametrize("key", ["group.protocol", "partition.assignment.strategy"])
def test_assignment_settings_are_the_runtimes(key: str) -> None:
    with pytest.raises(ValidationError, match=f"{key}: set by the runtime"):
        _settings(consumer={key: "x"})


def test_join_failures_are_told_apart() -> None:
    in_use = KafkaError(
        KafkaError._FATAL,
        "Fatal error: Broker: The instance ID is still used by another member in the consumer "
        "group: ConsumerGroupHeartbeat fatal error",
    )
    unsupported = KafkaError(KafkaError._FATAL, "Fatal error: Broker: Unsupported version")
    assert classify_join_error(in_use) == JoinFailure.INSTANCE_ID_IN_USE
    assert classify_join_error(unsupported) == JoinFailure.UNSUPPORTED
    assert classify_join_error(KafkaError(KafkaError._FATAL, "authorization failed")) is None
    assert classify_join_error(KafkaError(KafkaError._TRANSPORT, "unsupported")) is None


@pytest.mark.broker
def test_the_consumer_session_timeout_becomes_the_groups(kafka_bootstrap: str) -> None:
    app_id = unique_name("timeouts")
    settings = RuntimeSettings(
        application_id=app_id,
        bootstrap_servers=kafka_bootstrap,
        consumer={"session.timeout.ms": "6000"},
    )
    set_group_timeouts(settings)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    resource = ConfigResource(ResourceType.GROUP, app_id)
    configs = admin.describe_configs([resource])[resource].result(30)
    assert configs["consumer.session.timeout.ms"].value == "6000"
    assert configs["consumer.heartbeat.interval.ms"].value == "2000"


def _copy_app(source: str, sink: str) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.stream(source).map_values(str.upper).to(sink)
    return builder


def _produce(bootstrap: str, topic: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for n in range(count):
        producer.produce(topic, key=f"k{n}", value=f"v{n}")
    assert producer.flush(30) == 0


def _topics(bootstrap: str, *names: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, 2, 1) for n in names]).values():
        future.result(30)


@pytest.fixture(scope="module")
def classic_only_broker() -> Iterator[str]:
    """A broker of today's version with KIP-848 groups turned off, as before Apache Kafka 4.0."""
    settings = BrokerSettings(
        server_properties={"group.coordinator.rebalance.protocols": "classic"}
    )
    with EmbeddedKafkaBroker(settings) as broker:
        yield broker.bootstrap_servers


@pytest.mark.broker
def test_a_broker_without_kip_848_gets_the_classic_protocol(
    classic_only_broker: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, sink = unique_name("in"), unique_name("out")
    _topics(classic_only_broker, source, sink)
    _produce(classic_only_broker, source, 20)
    app = App(
        _copy_app(source, sink),
        application_id=unique_name("fallback"),
        bootstrap_servers=classic_only_broker,
        state_dir=tmp_path,
        commit_interval_ms=200,
    )
    app.start()
    try:
        assert app.wait_until("RUNNING", 60), f"app did not start: {app.error!r}"
        reader = TopicReader(classic_only_broker, sink, 2)
        wait_for(lambda: len(reader.read()) >= 20, timeout_s=60, message="20 outputs")
        reader.close()
    finally:
        app.close()
    assert app.error is None
    assert "does not support KIP-848" in caplog.text


_PREDECESSOR = """
import sys
from confluent_kafka import Consumer
consumer = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                     "group.protocol": "consumer", "group.remote.assignor": "range",
                     "group.instance.id": sys.argv[3]})
consumer.subscribe([sys.argv[4]])
while not consumer.assignment():
    consumer.poll(0.1)
print("joined", flush=True)
while True:
    consumer.poll(0.1)
"""


@pytest.mark.broker
def test_a_static_member_waits_out_its_killed_predecessor(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> None:
    source, sink = create_topic("in", partitions=2), create_topic("out", partitions=2)
    app_id, instance_id = unique_name("static"), "instance-a"
    # The instance's id lives in its state dir (App.instance_id): its killed predecessor's too.
    (tmp_path / app_id).mkdir()
    (tmp_path / app_id / "instance.id").write_text(instance_id)
    settings = RuntimeSettings(
        application_id=app_id,
        bootstrap_servers=kafka_bootstrap,
        consumer={"session.timeout.ms": "3000"},
    )
    set_group_timeouts(settings)
    predecessor = subprocess.Popen(
        [sys.executable, "-c", _PREDECESSOR, kafka_bootstrap, app_id, instance_id, source],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert predecessor.stdout is not None
    assert predecessor.stdout.readline().strip() == "joined"
    predecessor.kill()  # no leave: the broker keeps it a member until its session times out
    predecessor.wait()
    killed = time.monotonic()
    _produce(kafka_bootstrap, source, 10)
    app = App(
        _copy_app(source, sink),
        application_id=app_id,
        bootstrap_servers=kafka_bootstrap,
        state_dir=tmp_path,
        commit_interval_ms=200,
        static_membership=True,
        consumer={"session.timeout.ms": "3000"},
    )
    app.start()
    try:
        assert app.wait_until("RUNNING", 60), f"app did not start: {app.error!r}"
        joined_after = time.monotonic() - killed
        reader = TopicReader(kafka_bootstrap, sink, 2)
        wait_for(lambda: len(reader.read()) >= 10, timeout_s=60, message="10 outputs")
        reader.close()
    finally:
        app.close()
    assert app.error is None
    assert joined_after >= 2.0, f"joined {joined_after:.1f}s after the kill, before the session"
