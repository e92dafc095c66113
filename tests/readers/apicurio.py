"""Apicurio Registry's Java serde and Connect converter, set to Confluent's wire format, for the
reader tests on registry-framed topics (Kafka Streams, Kafka Connect).

Confluent's own Java serdes and converters live on packages.confluent.io, not Maven Central, so
the Java side of these tests is Apicurio's, configured to write and read what Confluent's
serializers do: magic byte 0, a 4-byte schema id, the Avro payload, no Apicurio headers. The
registry's Confluent API (``/apis/ccompat/v7``, what confluent-kafka's ``AvroSerializer`` talks
to) hands out *content* ids as Confluent schema ids, so the Java side looks schemas up by content
id. The Java clients talk to the same registry through Apicurio's own API on the same server:

- the Kafka Streams serde (``io.apicurio:apicurio-registry-avro-serde-kafka`` 3.1, a dependency
  of the companion's example app) through the v3 API; 3.x defaults are Confluent's format
  already (``Default4ByteIdHandler``, ``use-id=contentId``), set here anyway;
- the Connect ``AvroConverter`` (``apicurio-registry-utils-converter`` 2.6, the newest whose
  dependencies all resolve from Maven Central) through the v2 API, told ``as-confluent`` (its
  ``Legacy4ByteIdHandler``) and ``use-id=contentId``.
"""

from __future__ import annotations

import pytest

from progress_control_apps.dev.schema_registry import CCOMPAT_PATH

__all__ = [
    "AVRO_CONVERTER",
    "CLICK_SCHEMA",
    "USER_SCHEMA",
    "apicurio_api",
    "avro_converters",
    "serde_settings",
]

USER_SCHEMA = (
    '{"type": "record", "name": "User", "namespace": "test.clicks", '
    '"fields": [{"name": "id", "type": "string"}]}'
)
"""The key schema of the tests' click topics (one line: it also goes into properties files)."""
CLICK_SCHEMA = (
    '{"type": "record", "name": "Click", "namespace": "test.clicks", '
    '"fields": [{"name": "page", "type": "string"}, {"name": "ms", "type": "long"}]}'
)
"""The value schema of the tests' click topics."""

AVRO_CONVERTER = "io.apicurio.registry.utils.converter.AvroConverter"


def apicurio_api(confluent_url: str, version: str) -> str:
    """Apicurio's own API (``v2``, ``v3``) on the server whose Confluent API is
    ``confluent_url`` (the ``schema_registry_url`` fixture)."""
    if not confluent_url.rstrip("/").endswith(CCOMPAT_PATH):
        pytest.fail(
            f"these tests need Apicurio Registry (its own API beside the Confluent one at "
            f"{CCOMPAT_PATH}); SCHEMA_REGISTRY_URL={confluent_url} is not one"
        )
    return confluent_url.rstrip("/").removesuffix(CCOMPAT_PATH) + f"/apis/registry/{version}"


def avro_converters(confluent_url: str) -> dict[str, str]:
    """A connector's key and value converters: Apicurio's ``AvroConverter`` in Confluent's
    wire format (4-byte content id, no headers), registering the schemas it writes."""
    settings = {
        "apicurio.registry.url": apicurio_api(confluent_url, "v2"),
        "apicurio.registry.as-confluent": "true",
        "apicurio.registry.use-id": "contentId",
        "apicurio.registry.headers.enabled": "false",
        "apicurio.registry.auto-register": "true",
    }
    converters = {"key.converter": AVRO_CONVERTER, "value.converter": AVRO_CONVERTER}
    for side in ("key", "value"):
        converters.update({f"{side}.converter.{k}": v for k, v in settings.items()})
    return converters


def serde_settings(confluent_url: str) -> dict[str, str]:
    """Apicurio's Kafka serde (3.x) in Confluent's wire format, as ``registry.*`` entries of the
    example app's properties (it strips the prefix and configures its serdes with the rest)."""
    settings = {
        "apicurio.registry.url": apicurio_api(confluent_url, "v3"),
        "apicurio.registry.id-handler": "io.apicurio.registry.serde.Default4ByteIdHandler",
        "apicurio.registry.use-id": "contentId",
        "apicurio.registry.headers.enabled": "false",
        "apicurio.registry.auto-register": "true",
    }
    return {f"registry.{k}": v for k, v in settings.items()}
