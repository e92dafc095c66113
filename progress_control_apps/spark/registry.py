"""The value schemas of Schema Registry-framed input, fetched once when a job starts.

Confluent's wire format frames a value as magic byte 0, a 4-byte big-endian schema id, then the
payload. The id names the schema the producer wrote with (the *writer* schema); ids are the
registry's, global, not per subject. :func:`fetch_value_schemas` asks the registry's
Confluent-compatible API (confluent-kafka's ``SchemaRegistryClient``, as Kafka Streams' and
Connect's ``KafkaAvroDeserializer`` would) for every version of each topic's value subject,
soft-deleted ones included (records written with them are still in the topic), each with its id.
Every record is then decoded with the schema its id names and read as the subject's latest
version at that moment (the *reader* schema): Avro's schema resolution, so a version that added
a field with a default reads older records with the default.

Nothing is fetched while the job runs: a version registered later has an id the job does not
know (``unknown schema id N``, or a failed query; ``InputSchema.on_unknown_schema_id``), read
once the job is restarted. This module imports no Spark.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from progress_control_apps.spark.input_schema import InputSchema

__all__ = [
    "RegistryError",
    "SubjectSchemas",
    "ValueSchemas",
    "WriterSchema",
    "fetch_value_schemas",
    "redacted_url",
    "registry_client",
]

_REGISTRY_TYPES = {"avro": "AVRO", "json-schema": "JSON"}
_USER_INFO = re.compile(r"^(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@]*@")


class RegistryError(RuntimeError):
    """The value schemas cannot be fetched, or cannot be read by the job (raised at start)."""


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """One registered version of a value subject."""

    subject: str
    version: int
    schema_id: int
    schema: str
    """The schema text as registered (Avro: JSON)."""
    deleted: bool = False
    """Soft-deleted: no longer the subject's, but records written with it still decode."""


@dataclass(frozen=True, slots=True)
class SubjectSchemas:
    """Every version of one subject, and the one records are read as."""

    subject: str
    versions: tuple[WriterSchema, ...]
    reader: WriterSchema
    """The latest version not deleted when the job started."""

    def describe(self) -> str:
        """E.g. ``clicks-value: version 1 (id 3), version 2 (id 5), read as version 2``."""
        listed = ", ".join(
            f"version {w.version} (id {w.schema_id}{', deleted' if w.deleted else ''})"
            for w in self.versions
        )
        return f"{self.subject}: {listed}, read as version {self.reader.version}"


@dataclass(frozen=True, slots=True)
class ValueSchemas:
    """The value subject of each topic read, with its schemas, as fetched when the job started."""

    value_format: str
    subjects: Mapping[str, SubjectSchemas]
    """By topic (several topics may share one subject)."""

    def describe(self) -> str:
        """One line per subject (:meth:`SubjectSchemas.describe`)."""
        unique = {s.subject: s for s in self.subjects.values()}
        return "; ".join(s.describe() for s in unique.values())


def registry_client(url: str) -> Any:
    """confluent-kafka's ``SchemaRegistryClient`` for ``url`` (credentials in the URL are its
    basic auth; ``mock://...`` its in-memory stand-in), or :class:`RegistryError` saying what to
    install."""
    try:
        from confluent_kafka.schema_registry import SchemaRegistryClient
    except ImportError as exc:  # its [schemaregistry] extra: httpx, authlib, attrs, cachetools
        raise RegistryError(
            "reading Schema Registry-framed values needs confluent-kafka's Schema Registry "
            f"client ({exc}): pip install 'confluent-kafka[schemaregistry]'"
        ) from exc
    return SchemaRegistryClient.new_client({"url": url})


def fetch_value_schemas(
    schema: InputSchema, topics: str, client: Any | None = None
) -> ValueSchemas | None:
    """The value schemas of ``topics`` (a comma list) under ``schema``: every version of each
    topic's value subject with its id, and the latest as the reader. ``None`` when the format
    needs none (``json``, or ``json-schema`` without a registry URL).

    Raises :class:`RegistryError` when the registry cannot be reached, a subject has no version,
    a version is of another type than the format (``JSON`` under ``avro``), refers to other
    schemas (references are not resolved), or is not an Avro record.
    """
    if not schema.registry_framed or not schema.schema_registry_url:
        return None
    url = schema.schema_registry_url
    client = client or registry_client(url)
    fetched: dict[str, SubjectSchemas] = {}
    by_topic: dict[str, SubjectSchemas] = {}
    for topic, subject in schema.value_subjects(topics).items():
        if subject not in fetched:
            fetched[subject] = _fetch_subject(client, subject, schema.value_format, url)
        by_topic[topic] = fetched[subject]
    return ValueSchemas(schema.value_format, by_topic)


def _fetch_subject(client: Any, subject: str, value_format: str, url: str) -> SubjectSchemas:
    where = f"subject {subject!r} of the registry at {redacted_url(url)}"
    try:
        live = set(client.get_versions(subject))
        every = sorted(set(client.get_versions(subject, deleted=True)) | live)
        registered = [client.get_version(subject, version, deleted=True) for version in every]
    except Exception as exc:  # SchemaRegistryError (404: no such subject), connection errors
        if getattr(exc, "http_status_code", None) == 404:
            raise RegistryError(
                f"{where} does not exist: register the value schema before the job starts "
                "(records cannot be decoded without it)"
            ) from exc
        raise RegistryError(f"cannot fetch {where}: {exc}") from exc
    if not every:
        raise RegistryError(
            f"{where} has no version: register the value schema before the job starts"
        )
    if not live:
        raise RegistryError(f"{where} has no version that is not deleted: nothing to read as")
    versions = tuple(
        _writer(r, value_format, where, deleted=version not in live)
        for version, r in zip(every, registered, strict=True)
    )
    reader = max((w for w in versions if not w.deleted), key=lambda w: w.version)
    return SubjectSchemas(subject, versions, reader)


def _writer(registered: Any, value_format: str, where: str, *, deleted: bool) -> WriterSchema:
    """One version, checked: of the format's type, without references, an Avro record."""
    version = int(registered.version)
    schema = registered.schema
    kind = schema.schema_type or "AVRO"  # Confluent's API leaves AVRO, its default, out
    what = f"{where}: version {version} (id {registered.schema_id})"
    if kind != _REGISTRY_TYPES[value_format]:
        raise RegistryError(f"{what} is a {kind} schema, not {_REGISTRY_TYPES[value_format]}")
    if schema.references:
        raise RegistryError(f"{what} refers to other schemas, which the job does not resolve")
    if value_format == "avro" and not _is_avro_record(schema.schema_str):
        raise RegistryError(f"{what} is not an Avro record: a click is read from a record")
    return WriterSchema(
        subject=registered.subject,
        version=version,
        schema_id=int(registered.schema_id),
        schema=schema.schema_str,
        deleted=deleted,
    )


def _is_avro_record(text: str) -> bool:
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return isinstance(parsed, dict) and parsed.get("type") == "record"


def redacted_url(url: str) -> str:
    """``url`` without the credentials it may hold (``https://***@host/...``)."""
    return _USER_INFO.sub(r"\g<scheme>***@", url)
