"""The main job's wire formats: JSON (the default) or Avro through a Schema Registry.

In Avro every topic of the pipeline is registry-framed, keys and values: the producer writes
clicks with confluent-kafka's ``AvroSerializer`` through the interceptor, whose ticks on the
clicks topic have a null key (``progress.control.null.key.topics``); the runtime reads and writes
with :mod:`streams_runtime.serdes_registry` (its own ticks on the events topic get a null key
because the key serde is a registry one); Spark decodes the events with ``from_avro`` and the
schemas it fetches from the registry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from streams_runtime.serdes import Json, Serde, String

if TYPE_CHECKING:  # the Spark package needs pyspark, which the demo without Spark does not
    from progress_control_apps.spark.input_schema import InputSchema

__all__ = ["CLICK_SCHEMA", "KEY_SCHEMA", "SESSION_SCHEMA", "DemoFormat"]

KEY_SCHEMA = '"string"'
"""The user, as an Avro string: a framed key, which a sentinel tick key would break."""

CLICK_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Click",
        "namespace": "progress_control_apps.demo",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "page", "type": "string"},
            {"name": "ts", "type": "long"},
        ],
    }
)

SESSION_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Session",
        "namespace": "progress_control_apps.demo",
        "fields": [
            {"name": "user", "type": "string"},
            {"name": "start", "type": "long"},
            {"name": "end", "type": "long"},
            {"name": "count", "type": "long"},
        ],
    }
)


@dataclass(frozen=True)
class DemoFormat:
    """How the pipeline's records look on the wire; ``registry_url`` for ``avro``."""

    name: Literal["json", "avro"] = "json"
    registry_url: str | None = None

    def __post_init__(self) -> None:
        if self.name == "avro" and not self.registry_url:
            raise ValueError("the avro format needs a schema registry URL")

    @property
    def avro(self) -> bool:
        return self.name == "avro"

    def producer_config(self, clicks_topic: str) -> dict[str, Any]:
        """The click producer's serializers (Avro: a ``SerializingProducer``'s) and the
        interceptor settings the format needs."""
        if not self.avro:
            return {}
        from confluent_kafka.schema_registry.avro import AvroSerializer

        registry = self._client()
        return {
            "key.serializer": AvroSerializer(registry, KEY_SCHEMA),
            "value.serializer": AvroSerializer(registry, CLICK_SCHEMA),
            "progress.control.null.key.topics": clicks_topic,
        }

    def click(self, user: str, page: str, ts: int) -> Any:
        """A click's value as the producer hands it over."""
        click = {"user": user, "page": page, "ts": ts}
        return click if self.avro else json.dumps(click)

    def serdes(self) -> tuple[Serde[Any], Serde[Any], Serde[Any]]:
        """The runtime's key, click and session serdes."""
        if not self.avro:
            return String(), Json(), Json()
        from streams_runtime.serdes_registry import Avro

        registry = self._client()
        return (
            Avro(KEY_SCHEMA, registry=registry),
            Avro(CLICK_SCHEMA, registry=registry),
            Avro(SESSION_SCHEMA, registry=registry),
        )

    def session_reader(self, topic: str) -> Any:
        """A function from a sessions record's value bytes to the session dict."""
        if not self.avro:
            return json.loads
        from confluent_kafka.schema_registry.avro import AvroDeserializer
        from confluent_kafka.serialization import MessageField, SerializationContext

        deserialize = AvroDeserializer(self._client())
        context = SerializationContext(topic, MessageField.VALUE)
        return lambda value: deserialize(value, context)

    def register_events_schema(self, events_topic: str) -> None:
        """Avro: register the clicks' schema for the events topic now, as the runtime will on
        its first write; the Spark job reads the subject's schemas when it starts."""
        if self.avro:
            from confluent_kafka.schema_registry import Schema

            self._client().register_schema(f"{events_topic}-value", Schema(CLICK_SCHEMA, "AVRO"))

    def spark_input_schema(self) -> InputSchema:
        """What Spark's jobs read on the events topic: the clicks, in this format."""
        from progress_control_apps.spark.input_schema import InputSchema

        if not self.avro:
            return InputSchema()
        return InputSchema(value_format="avro", schema_registry_url=self.registry_url)

    def _client(self) -> Any:
        from streams_runtime.serdes_registry import schema_registry_client

        assert self.registry_url is not None
        return schema_registry_client(self.registry_url)
