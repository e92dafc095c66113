"""The embedded schema registry (progress_control_apps/dev/schema_registry.py: Apicurio Registry's
Confluent-compatible API) with confluent-kafka's own client and serializers: Avro, JSON Schema
and Protobuf values written and read back through it, and a compatibility rule refusing a
version. Also which Java it picks, with stand-in ``java`` launchers (no JVM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from progress_control_apps.dev.jars import MissingToolError
from progress_control_apps.dev.schema_registry import find_registry_java
from tests.helpers import registry_client, unique_name

registry = pytest.mark.network  # the first run fetches Apicurio from Maven Central

CLICK_FIELDS: list[dict[str, str]] = [
    {"name": "user", "type": "string"},
    {"name": "count", "type": "int"},
]


def _click_schema(fields: list[dict[str, str]]) -> str:
    record = {"type": "record", "name": "Click", "namespace": "progress.control.test"}
    return json.dumps({**record, "fields": fields})


@pytest.fixture
def client(schema_registry_url: str) -> SchemaRegistryClient:
    return registry_client(schema_registry_url)


def _value_context(topic: str) -> SerializationContext:
    return SerializationContext(topic, MessageField.VALUE)


@registry
def test_avro_values_go_through_the_registry(client: SchemaRegistryClient) -> None:
    topic = unique_name("clicks")
    serialize = AvroSerializer(client, _click_schema(CLICK_FIELDS))
    data = serialize({"user": "ada", "count": 3}, _value_context(topic))
    assert data is not None
    registered = client.get_latest_version(f"{topic}-value")
    # Confluent's wire format: magic byte 0, then the schema id the registry gave.
    assert data[0] == 0
    assert int.from_bytes(data[1:5], "big") == registered.schema_id
    assert registered.schema.schema_type == "AVRO"
    # No reader schema: the deserializer fetches the writer's by its id.
    deserialize = AvroDeserializer(client)
    assert deserialize(data, _value_context(topic)) == {"user": "ada", "count": 3}


@registry
def test_backward_compatibility_refuses_a_version_old_readers_cannot_read(
    client: SchemaRegistryClient,
) -> None:
    subject = f"{unique_name('clicks')}-value"
    client.set_compatibility(subject, "BACKWARD")
    assert client.get_compatibility(subject) == "BACKWARD"
    first = client.register_schema(subject, Schema(_click_schema(CLICK_FIELDS), "AVRO"))
    # A new field without a default: readers of the new schema cannot read old records.
    incompatible = Schema(
        _click_schema([*CLICK_FIELDS, {"name": "page", "type": "string"}]), "AVRO"
    )
    assert client.test_compatibility(subject, incompatible) is False
    with pytest.raises(SchemaRegistryError) as refused:
        client.register_schema(subject, incompatible)
    assert refused.value.http_status_code == 409
    # With a default it is backward compatible, and becomes version 2.
    page = {"name": "page", "type": "string", "default": ""}
    compatible = Schema(_click_schema([*CLICK_FIELDS, page]), "AVRO")
    assert client.test_compatibility(subject, compatible) is True
    second = client.register_schema(subject, compatible)
    assert second != first
    assert client.get_versions(subject) == [1, 2]


@registry
def test_json_schema_values_go_through_the_registry(client: SchemaRegistryClient) -> None:
    topic = unique_name("orders")
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "Order",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
        "required": ["id"],
    }
    serialize = JSONSerializer(json.dumps(schema), client)
    data = serialize({"id": 7, "item": "tea"}, _value_context(topic))
    assert data is not None
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "JSON"
    deserialize = JSONDeserializer(json.dumps(schema), schema_registry_client=client)
    assert deserialize(data, _value_context(topic)) == {"id": 7, "item": "tea"}


@registry
def test_protobuf_values_go_through_the_registry(client: SchemaRegistryClient) -> None:
    # A message class made at run time, as protoc's output would define it.
    file = descriptor_pb2.FileDescriptorProto(
        name="progress_control_test/point.proto", package="progress_control_test", syntax="proto3"
    )
    point = file.message_type.add(name="Point")
    field = descriptor_pb2.FieldDescriptorProto
    point.field.add(name="x", number=1, type=field.TYPE_INT64, label=field.LABEL_OPTIONAL)
    point.field.add(name="label", number=2, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    point_class = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("progress_control_test.Point")
    )
    topic = unique_name("points")
    config = {"use.deprecated.format": False}
    serialize = ProtobufSerializer(point_class, client, config)
    data = serialize(point_class(x=5, label="p"), _value_context(topic))
    assert data is not None
    assert client.get_latest_version(f"{topic}-value").schema.schema_type == "PROTOBUF"
    deserialize = ProtobufDeserializer(point_class, config)
    assert deserialize(data, _value_context(topic)) == point_class(x=5, label="p")


# -- which Java: stand-in launchers that print what `java -version` prints ---------------------


def _fake_java(home: Path, major: int) -> Path:
    java = home / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text(f"#!/bin/sh\necho 'openjdk version \"{major}.0.2\" 2024-01-16' >&2\n")
    java.chmod(0o755)
    return java


def test_the_java_home_setting_must_be_java_21_or_newer(tmp_path: Path) -> None:
    home = tmp_path / "jdk-17"
    _fake_java(home, 17)
    with pytest.raises(MissingToolError, match=r"SCHEMA_REGISTRY_JAVA_HOME.*Java 21\+"):
        find_registry_java(home)
    with pytest.raises(MissingToolError, match="no bin/java there"):
        find_registry_java(tmp_path / "nowhere")
    java_21 = _fake_java(tmp_path / "jdk-21", 21)
    assert find_registry_java(tmp_path / "jdk-21") == java_21


def test_an_older_java_home_leads_to_the_newest_installed_java(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm_dir = tmp_path / "jvm"
    monkeypatch.setenv("JAVA_HOME", str(jvm_dir / "java-17"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _fake_java(jvm_dir / "java-17", 17)
    _fake_java(jvm_dir / "java-21", 21)
    newest = _fake_java(jvm_dir / "java-25", 25)
    assert find_registry_java(jvm_dirs=[jvm_dir]) == newest.resolve()


def test_without_java_21_the_error_says_what_was_found(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jvm_dir = tmp_path / "jvm"
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    _fake_java(jvm_dir / "java-17", 17)
    with pytest.raises(MissingToolError) as missing:
        find_registry_java(jvm_dirs=[jvm_dir])
    assert "needs Java 21+" in str(missing.value)
    assert "java-17/bin/java (Java 17)" in str(missing.value)
    assert "PROGRESS_CONTROL_SCHEMA_REGISTRY_JAVA_HOME" in str(missing.value)
