"""Schema Registry serdes: Avro, JSON Schema and Protobuf in Confluent's wire format (a magic
byte, the schema id, the payload), on confluent-kafka's serializers (``pip install
'kafka-progress-control[schema-registry]'``; docs/runtime/schema-registry.md).

Each is a :class:`~streams_runtime.serde_context.ContextualSerde`: the runtime tells it the
topic and field of every use, and confluent-kafka's default subject name strategy
(``TopicNameStrategy``) names the subject ``<topic>-key`` or ``<topic>-value``. For the
internal topics that gives Kafka Streams' own subjects: ``<application.id>-<store>-changelog-value``
for a store, ``<application.id>-<name>-repartition-value`` for a repartition topic.

What goes wrong, and who is to blame:

- the record: bytes that are not in the wire format (a wrong magic byte, too short), a schema
  id the registry does not know (HTTP 404, error code 40403), a payload or a value that does
  not match its schema, a ``from_dict``/``to_dict`` hook that raises. That is a
  :class:`~streams_runtime.serdes.SerializationError`, so the bad-record policy applies;
- the registry being out of reach (connection refused, a timeout, HTTP 408, 429 or 5xx): no
  record is to blame, so none is skipped. The call is tried again with backoff for
  ``retry_timeout_ms``, then :class:`SchemaRegistryUnavailableError` stops the application;
- the registry refusing what the serde asks (a schema incompatible with the subject's, one not
  registered when ``auto_register`` is off, an authentication failure):
  :class:`SchemaRegistryRefusedError` stops the application.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, cast
from urllib.parse import urlsplit, urlunsplit

from progress_control.extras import require_extra

require_extra(
    "schema-registry", "streams_runtime.serdes_registry", "attrs", "cachetools", "authlib"
)

from confluent_kafka.schema_registry import SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.error import SchemaRegistryError  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from streams_runtime.errors import StreamsError  # noqa: E402
from streams_runtime.serde_context import ContextualSerde, Field, SerdeContext  # noqa: E402
from streams_runtime.serdes import SerializationError  # noqa: E402

__all__ = [
    "Avro",
    "JsonSchema",
    "Protobuf",
    "RegistryConfig",
    "SchemaRegistryRefusedError",
    "SchemaRegistryUnavailableError",
    "schema_registry_client",
]

logger = logging.getLogger(__name__)

RegistryConfig = SchemaRegistryClient | str | Mapping[str, Any]
"""A registry: a client, its URL, or the client's configuration (``{"url": ...,
"basic.auth.user.info": ...}``, confluent-kafka's ``SchemaRegistryClient`` keys)."""


class SchemaRegistryUnavailableError(StreamsError):
    """The registry stayed out of reach for a serde's whole ``retry_timeout_ms``; no record was
    skipped (the one being processed is not committed)."""


class SchemaRegistryRefusedError(StreamsError):
    """The registry refused a request no record is to blame for (an incompatible or
    unregistered schema, an authentication failure), or a serde was asked to write without a
    schema to write with."""


def _transport_errors() -> tuple[type[BaseException], ...]:
    """What the registry client raises when it cannot reach the registry at all."""
    errors: list[type[BaseException]] = [OSError]  # sockets; requests' ConnectionError too
    for module in ("httpx2", "httpx"):
        try:
            errors.append(__import__(module).TransportError)
        except (ImportError, AttributeError):
            continue
    return tuple(errors)


_TRANSPORT_ERRORS = _transport_errors()
_UNKNOWN_SCHEMA = {40403, 40400}  # schema not found (Confluent's, Apicurio's); the mock's
_REQUEST_TIMEOUT_S = 10.0
_CLIENTS: dict[tuple[tuple[str, str], ...], SchemaRegistryClient] = {}
_CLIENTS_LOCK = threading.Lock()


def schema_registry_client(registry: RegistryConfig) -> SchemaRegistryClient:
    """The client for ``registry``: itself when a client, else one shared by every serde given
    an equal configuration (a URL is ``{"url": url}``; ``mock://`` URLs get confluent-kafka's
    in-memory mock, one per URL). A request times out after 10 s unless the configuration
    says otherwise (``timeout``, seconds)."""
    if isinstance(registry, SchemaRegistryClient):
        return registry
    conf: dict[str, Any] = {"url": registry} if isinstance(registry, str) else dict(registry)
    # Without a timeout a registry that accepts a connection and never answers would hold the
    # stream thread forever; with one it is out of reach, tried again for retry_timeout_ms.
    conf.setdefault("timeout", _REQUEST_TIMEOUT_S)
    key = tuple(sorted((str(name), repr(value)) for name, value in conf.items()))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            new_client = getattr(SchemaRegistryClient, "new_client", SchemaRegistryClient)
            client = _CLIENTS[key] = new_client(conf)
        return client


def _url_of(client: SchemaRegistryClient) -> str:
    """The registry's URL(s) for messages, without credentials."""
    conf = getattr(client, "_rest_client", None)
    urls = getattr(conf, "base_urls", None) or [str(getattr(client, "_conf", {}).get("url", "?"))]
    shown = []
    for url in urls:
        parts = urlsplit(str(url))
        host = parts.hostname or ""
        netloc = f"{host}:{parts.port}" if parts.port else host
        shown.append(urlunsplit(parts._replace(netloc=netloc)) if parts.netloc else str(url))
    return ", ".join(shown)


def _transient(exc: SchemaRegistryError) -> bool:
    status = exc.http_status_code
    return status in (408, 429) or status >= 500


class _RegistrySerde(ContextualSerde[Any]):
    """What the three formats share: the client, a serializer per topic and field (a
    confluent-kafka serializer remembers the schema id it registered last, so it serves one
    subject), one deserializer, and how failures are told apart."""

    format: ClassVar[str]
    registry_framed = True

    def __init__(
        self,
        registry: RegistryConfig,
        *,
        subject_name_strategy: Callable[..., Any] | None,
        auto_register: bool,
        use_latest_version: bool,
        normalize_schemas: bool,
        serializer_conf: Mapping[str, Any] | None,
        deserializer_conf: Mapping[str, Any] | None,
        retry_timeout_ms: int,
    ) -> None:
        self.client = schema_registry_client(registry)
        self.retry_timeout_ms = retry_timeout_ms
        strategy = (
            {}
            if subject_name_strategy is None
            else {"subject.name.strategy": subject_name_strategy}
        )
        self._serializer_conf: dict[str, Any] = {
            "auto.register.schemas": auto_register and not use_latest_version,
            "use.latest.version": use_latest_version,
            "normalize.schemas": normalize_schemas,
            **strategy,
            **(serializer_conf or {}),
        }
        self._deserializer_conf: dict[str, Any] = {**strategy, **(deserializer_conf or {})}
        self._serializers: dict[tuple[str, Field], Callable[[Any, SerializationContext], Any]] = {}
        self._lock = threading.Lock()
        self._deserializer: Callable[[bytes, SerializationContext], Any] | None = None

    # -- per format ---------------------------------------------------------------------------

    def _new_serializer(self) -> Callable[[Any, SerializationContext], Any]:
        raise NotImplementedError

    def _new_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        raise NotImplementedError

    # -- ContextualSerde ----------------------------------------------------------------------

    def serialize_with(self, value: Any, context: SerdeContext) -> bytes | None:
        if value is None:
            return None
        serializer = self._serializers.get((context.topic, context.field))
        if serializer is None:
            with self._lock:
                serializer = self._serializers.get((context.topic, context.field))
                if serializer is None:
                    serializer = self._call(self._new_serializer, "set up to write", context)
                    self._serializers[(context.topic, context.field)] = serializer
        ctx = _confluent(context)
        data: bytes | None = self._call(lambda: serializer(value, ctx), "write", context)
        return data

    def deserialize_with(self, data: bytes | None, context: SerdeContext) -> Any:
        if data is None:
            return None
        deserializer = self._deserializer
        if deserializer is None:
            deserializer = self._deserializer = self._call(
                self._new_deserializer, "set up to read", context
            )
        ctx = _confluent(context)
        return self._call(lambda: deserializer(data, ctx), "read", context)

    def _call(self, attempt: Callable[[], Any], doing: str, context: SerdeContext) -> Any:
        """``attempt()``, telling the record's faults (:class:`SerializationError`) from the
        registry's: out of reach, tried again until ``retry_timeout_ms`` is spent."""
        where = f"{self.format} {context.field} of {context.topic}"
        deadline: float | None = None
        delay = 0.1
        while True:
            try:
                return attempt()
            except SchemaRegistryError as exc:
                if not _transient(exc):
                    if (
                        doing == "read"
                        and exc.http_status_code == 404
                        and (exc.error_code in _UNKNOWN_SCHEMA)
                    ):
                        raise SerializationError(f"{where}: unknown schema: {exc}") from exc
                    raise SchemaRegistryRefusedError(
                        f"schema registry {_url_of(self.client)} refused to {doing} the "
                        f"{where}: {exc}"
                    ) from exc
                failure: BaseException = exc
            except _TRANSPORT_ERRORS as exc:
                failure = exc
            except (StreamsError, SerializationError):
                raise
            except Exception as exc:
                raise SerializationError(f"cannot {doing} the {where}: {exc}") from exc
            now = time.monotonic()
            if deadline is None:
                deadline = now + self.retry_timeout_ms / 1000
                logger.warning(
                    "schema registry %(url)s out of reach (%(error)s); "
                    "trying again for up to %(timeout_ms)d ms",
                    {
                        "url": _url_of(self.client),
                        "error": failure,
                        "timeout_ms": self.retry_timeout_ms,
                    },
                )
            if now >= deadline:
                raise SchemaRegistryUnavailableError(
                    f"schema registry {_url_of(self.client)} out of reach for "
                    f"{self.retry_timeout_ms} ms while trying to {doing} the {where}: {failure} "
                    f"(no record was skipped)"
                ) from failure
            time.sleep(min(delay, max(deadline - now, 0.0)))
            delay = min(delay * 2, 5.0)


def _confluent(context: SerdeContext) -> SerializationContext:
    """``context`` as confluent-kafka's serializers take it (the same headers list, so what a
    serializer adds to it is sent)."""
    field = MessageField.KEY if context.field == "key" else MessageField.VALUE
    return SerializationContext(context.topic, field, cast(Any, context.headers))


def _with_context(hook: Callable[[Any], Any] | None) -> Callable[[Any, Any], Any] | None:
    """A one-argument hook as confluent-kafka calls it, ``hook(obj, ctx)``."""
    return None if hook is None else (lambda obj, _ctx: hook(obj))


class Avro(_RegistrySerde):
    """Avro in Confluent's wire format. Values are what fastavro writes and reads: dicts for
    records (``to_dict``/``from_dict`` turn your objects into them and back).

    ``schema_str`` is the schema it writes with, registered under the subject of each topic it
    writes (unless ``auto_register=False``: then it must be registered already; or
    ``use_latest_version=True``: the subject's latest is used), and the schema it reads with:
    a record written with another schema (an older or newer version) is resolved to it by
    Avro's schema resolution. Without ``schema_str`` it reads each record with the schema it
    was written with, and cannot write (unless ``use_latest_version``)."""

    format = "Avro"

    def __init__(
        self,
        schema_str: str | None = None,
        *,
        registry: RegistryConfig,
        to_dict: Callable[[Any], Any] | None = None,
        from_dict: Callable[[Any], Any] | None = None,
        subject_name_strategy: Callable[..., Any] | None = None,
        auto_register: bool = True,
        use_latest_version: bool = False,
        normalize_schemas: bool = False,
        serializer_conf: Mapping[str, Any] | None = None,
        deserializer_conf: Mapping[str, Any] | None = None,
        retry_timeout_ms: int = 60_000,
    ) -> None:
        require_extra("schema-registry", "the Avro serde", "fastavro")
        super().__init__(
            registry,
            subject_name_strategy=subject_name_strategy,
            auto_register=auto_register,
            use_latest_version=use_latest_version,
            normalize_schemas=normalize_schemas,
            serializer_conf=serializer_conf,
            deserializer_conf=deserializer_conf,
            retry_timeout_ms=retry_timeout_ms,
        )
        self.schema_str = schema_str
        self._to_dict = _with_context(to_dict)
        self._from_dict = _with_context(from_dict)
        self._writes = schema_str is not None or use_latest_version

    def _new_serializer(self) -> Callable[[Any, SerializationContext], Any]:
        if not self._writes:
            raise SchemaRegistryRefusedError(
                "Avro() without schema_str reads only: give it the schema to write with"
            )
        from confluent_kafka.schema_registry.avro import AvroSerializer

        serializer: Callable[[Any, SerializationContext], Any] = AvroSerializer(
            self.client, self.schema_str, self._to_dict, self._serializer_conf
        )
        return serializer

    def _new_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        from confluent_kafka.schema_registry.avro import AvroDeserializer

        deserializer: Callable[[bytes, SerializationContext], Any] = AvroDeserializer(
            self.client, self.schema_str, self._from_dict, conf=self._deserializer_conf
        )
        return deserializer


class JsonSchema(_RegistrySerde):
    """JSON in Confluent's wire format, checked against a JSON Schema: what it writes against
    ``schema_str`` (registered as for :class:`Avro`), what it reads against the schema it was
    written with. Values are what ``json`` makes (``to_dict``/``from_dict`` for your
    objects)."""

    format = "JSON Schema"

    def __init__(
        self,
        schema_str: str,
        *,
        registry: RegistryConfig,
        to_dict: Callable[[Any], Any] | None = None,
        from_dict: Callable[[Any], Any] | None = None,
        subject_name_strategy: Callable[..., Any] | None = None,
        auto_register: bool = True,
        use_latest_version: bool = False,
        normalize_schemas: bool = False,
        serializer_conf: Mapping[str, Any] | None = None,
        deserializer_conf: Mapping[str, Any] | None = None,
        retry_timeout_ms: int = 60_000,
    ) -> None:
        require_extra("schema-registry", "the JSON Schema serde", "jsonschema", "referencing")
        super().__init__(
            registry,
            subject_name_strategy=subject_name_strategy,
            auto_register=auto_register,
            use_latest_version=use_latest_version,
            normalize_schemas=normalize_schemas,
            serializer_conf=serializer_conf,
            deserializer_conf=deserializer_conf,
            retry_timeout_ms=retry_timeout_ms,
        )
        self.schema_str = schema_str
        self._to_dict = _with_context(to_dict)
        self._from_dict = _with_context(from_dict)

    def _new_serializer(self) -> Callable[[Any, SerializationContext], Any]:
        from confluent_kafka.schema_registry.json_schema import JSONSerializer

        serializer: Callable[[Any, SerializationContext], Any] = JSONSerializer(
            self.schema_str, self.client, self._to_dict, self._serializer_conf
        )
        return serializer

    def _new_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        from confluent_kafka.schema_registry.json_schema import JSONDeserializer

        # No reader schema: each record is checked against the schema it was written with.
        deserializer: Callable[[bytes, SerializationContext], Any] = JSONDeserializer(
            None,
            self._from_dict,
            schema_registry_client=self.client,
            conf=self._deserializer_conf,
        )
        return deserializer


class Protobuf(_RegistrySerde):
    """Protocol Buffers in Confluent's wire format (the message indexes after the schema id):
    it writes and reads instances of ``message_type``, a generated message class; its file's
    schema is registered as for :class:`Avro` (imports under their own subjects, confluent-
    kafka's ``reference.subject.name.strategy``)."""

    format = "Protobuf"

    def __init__(
        self,
        message_type: type[Any],
        *,
        registry: RegistryConfig,
        subject_name_strategy: Callable[..., Any] | None = None,
        auto_register: bool = True,
        use_latest_version: bool = False,
        normalize_schemas: bool = False,
        serializer_conf: Mapping[str, Any] | None = None,
        deserializer_conf: Mapping[str, Any] | None = None,
        retry_timeout_ms: int = 60_000,
    ) -> None:
        require_extra("schema-registry", "the Protobuf serde", "google.protobuf")
        super().__init__(
            registry,
            subject_name_strategy=subject_name_strategy,
            auto_register=auto_register,
            use_latest_version=use_latest_version,
            normalize_schemas=normalize_schemas,
            serializer_conf=serializer_conf,
            deserializer_conf=deserializer_conf,
            retry_timeout_ms=retry_timeout_ms,
        )
        self.message_type = message_type

    def _new_serializer(self) -> Callable[[Any, SerializationContext], Any]:
        from confluent_kafka.schema_registry.protobuf import ProtobufSerializer

        serializer: Callable[[Any, SerializationContext], Any] = ProtobufSerializer(
            self.message_type, self.client, self._serializer_conf
        )
        return serializer

    def _new_deserializer(self) -> Callable[[bytes, SerializationContext], Any]:
        from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer

        deserializer: Callable[[bytes, SerializationContext], Any] = ProtobufDeserializer(
            self.message_type, self._deserializer_conf, schema_registry_client=self.client
        )
        return deserializer
