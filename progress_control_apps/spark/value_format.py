"""A data record's value as a variant object, whatever its format, or the reason it is none.

:func:`with_value` adds two columns to raw Kafka rows: ``_json``, the value as a Spark variant
(what ``parse_json`` gives for JSON text), and ``_value_error``, the first problem with the value
itself (null, not framed, undecodable, not an object), null when there is none. The field checks
of :func:`progress_control_apps.spark.source.parse_records` then run on ``_json`` alone, so they
are one implementation for every format, with the same reasons.

- ``json``: the value is JSON text.
- ``json-schema``: magic byte 0, a 4-byte schema id, then JSON text (a JSON Schema serializer's
  output; the schema itself is not applied). With a registry URL, an id the subject does not
  know is an error.
- ``avro``: magic byte 0, a 4-byte schema id, then Avro binary. Spark's own ``from_avro``
  decodes it with the writer schema its id names, read as the subject's latest version
  (:mod:`progress_control_apps.spark.registry`): one ``when(id == k, from_avro(payload, schema_k))``
  column per version, so each record is decoded once, each turned into a variant object
  (``to_variant_object``), so versions of different shapes meet in one column. A top-level
  ``timestamp-millis``/``-micros`` field becomes epoch milliseconds, as a JSON time field
  holds them.

``from_avro`` runs in ``PERMISSIVE`` mode, whose failed decode is a row of nulls, not a null: the
reader schema gets one more field, ``_progress_control_decoded`` (boolean, default true), which
schema resolution fills in for every record it decodes and leaves null for one it cannot. Avro
binary has no end marker, so bytes left over after a record are not noticed (nor are they by
Confluent's deserializers).
"""

from __future__ import annotations

import json

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as sf
from pyspark.sql.avro.functions import from_avro
from pyspark.sql.types import StructType, TimestampType

from progress_control_apps.spark.input_schema import InputSchema
from progress_control_apps.spark.registry import SubjectSchemas, ValueSchemas, WriterSchema

__all__ = ["DECODED_FIELD", "HEADER_BYTES", "with_value"]

HEADER_BYTES = 5
"""Magic byte and schema id: what precedes the payload of a Schema Registry-framed value."""

DECODED_FIELD = "_progress_control_decoded"
"""The field added to the reader schema to tell a decoded Avro record from a failed one."""


def with_value(
    frame: DataFrame, schema: InputSchema, value_schemas: ValueSchemas | None = None
) -> DataFrame:
    """``frame`` (Kafka rows with ``topic``, ``value`` and ``control``, the control verdict) with
    ``_json`` and ``_value_error`` (see the module docstring). ``value_schemas`` are those of
    :func:`progress_control_apps.spark.registry.fetch_value_schemas` (required for ``avro``)."""
    value = sf.col("value")
    if not schema.registry_framed:
        return _with_json(frame, value.cast("string"), sf.lit(None).cast("string"))
    short = sf.lit(f"value is shorter than the {HEADER_BYTES}-byte Schema Registry header")
    header = (
        sf.when(value.isNull(), sf.lit("null value"))
        .when(sf.length(value) == 0, short)
        .when(
            sf.substring(value, 1, 1) != sf.lit(b"\x00"),
            sf.concat(
                sf.lit("wrong magic byte 0x"),
                sf.hex(sf.substring(value, 1, 1)),
                sf.lit(" (a Schema Registry-framed value starts with 0x00)"),
            ),
        )
        .when(sf.length(value) < HEADER_BYTES, short)
    )
    # Neither data nor framed: nothing to look up (a tick's null value among them).
    unframed = sf.col("control").isNotNull() | header.isNotNull()
    schema_id = sf.conv(sf.hex(sf.substring(value, 2, 4)), 16, 10).cast("bigint")
    payload = sf.substring(value, HEADER_BYTES + 1, 2**31 - 1)
    policy = schema.on_unknown_schema_id
    versions = [] if value_schemas is None else _versions(schema_id, value_schemas)
    if schema.value_format == "json-schema":
        known = (
            sf.lit(True)
            if value_schemas is None
            else _chain(
                sf.when(unframed, sf.lit(True)),
                [(condition, sf.lit(True)) for condition, _, _ in versions],
                schema_id,
                policy,
            )
        )
        framing = header.when(known.isNull(), _unknown(schema_id))
        return _with_json(frame, payload.cast("string"), framing)
    if value_schemas is None:
        raise ValueError("value_format 'avro' needs the value schemas (fetch_value_schemas)")
    # Each version's from_avro in a column of its own, evaluated for its records only: a record
    # is decoded once, however many of its fields are read below (a plan that repeated the call
    # per field would decode it that many times, in generated code too large to compile).
    records = frame.select(
        "*",
        *(
            sf.when(condition, _from_avro(payload, writer, subject)).alias(f"_avro_{i}")
            for i, (condition, writer, subject) in enumerate(versions)
        ),
    )
    decoded = _chain(
        sf.when(unframed, sf.lit(None)),
        [
            (condition, _as_variant(records, f"_avro_{i}", writer, subject))
            for i, (condition, writer, subject) in enumerate(versions)
        ],
        schema_id,
        policy,
    )
    staged = records.select(*frame.columns, decoded.alias("_decoded"))
    error = (
        header.when(sf.col("_decoded").isNull(), _unknown(schema_id))
        .when(~sf.col("_decoded.ok"), sf.col("_decoded.failure"))
        .when(
            ~sf.schema_of_variant("_decoded.json").startswith("OBJECT<"),
            sf.lit("value is not an Avro record"),
        )
    )
    return staged.select(
        *frame.columns,
        sf.when(sf.col("_decoded.ok"), sf.col("_decoded.json")).alias("_json"),
        error.alias("_value_error"),
    )


def _with_json(frame: DataFrame, text: Column, framing: Column) -> DataFrame:
    """JSON text, after any framing problem (``framing``, null when none): parsed, checked to be
    UTF-8, JSON and an object, in that order."""
    parsed = frame.select("*", sf.try_parse_json(text).alias("_json"))
    error = (
        sf.when(framing.isNotNull(), framing)
        .when(sf.col("value").isNull(), sf.lit("null value"))
        .when(~sf.is_valid_utf8(text), sf.lit("value is not UTF-8"))
        .when(sf.col("_json").isNull(), sf.lit("value is not valid JSON"))
        .when(
            ~sf.schema_of_variant("_json").startswith("OBJECT<"),
            sf.lit("value is not a JSON object"),
        )
    )
    return parsed.select("*", error.alias("_value_error"))


def _versions(
    schema_id: Column, value_schemas: ValueSchemas
) -> list[tuple[Column, WriterSchema, SubjectSchemas]]:
    """(condition, version, its subject) for every version of every subject read: the schema id
    is the version's, and with several subjects the topic is one of the subject's. Ids are the
    registry's, but two topics may read one writer schema as different readers."""
    subjects = {s.subject: s for s in value_schemas.subjects.values()}
    topics: dict[str, list[str]] = {}
    for topic, subject in value_schemas.subjects.items():
        topics.setdefault(subject.subject, []).append(topic)
    found = []
    for name, subject in subjects.items():
        of_subject = sf.lit(True) if len(subjects) == 1 else sf.col("topic").isin(*topics[name])
        for writer in subject.versions:
            found.append((of_subject & (schema_id == sf.lit(writer.schema_id)), writer, subject))
    return found


def _chain(
    chain: Column, branches: list[tuple[Column, Column]], schema_id: Column, policy: str
) -> Column:
    """``chain`` (a ``when`` for the rows with nothing to look up) continued by each
    ``when(condition, value)``; for a schema id none of them has, null (``policy`` ``error``: an
    error row) or a failed query (``fail``)."""
    for condition, value in branches:
        chain = chain.when(condition, value)
    if policy == "error":
        return chain
    return chain.otherwise(
        sf.raise_error(sf.concat(_unknown(schema_id), sf.lit(" (on_unknown_schema_id: fail)")))
    )


def _unknown(schema_id: Column) -> Column:
    return sf.concat(sf.lit("unknown schema id "), schema_id.cast("string"))


def _from_avro(payload: Column, writer: WriterSchema, subject: SubjectSchemas) -> Column:
    """The payload decoded with ``writer`` and read as ``subject``'s reader schema."""
    options = {"mode": "PERMISSIVE", "avroSchema": _reader_schema(subject)}
    return from_avro(payload, writer.schema, options)


def _as_variant(
    records: DataFrame, column: str, writer: WriterSchema, subject: SubjectSchemas
) -> Column:
    """``struct(ok, json, failure)`` of one version's decoded record (``column``): whether it
    decoded, the record as a variant object, and the reason when it did not."""
    record = sf.col(column)
    decoded_type = records.schema[column].dataType
    assert isinstance(decoded_type, StructType)  # a record (fetch_value_schemas checks)
    fields = [
        sf.unix_millis(record.getField(f.name)).alias(f.name)
        if isinstance(f.dataType, TimestampType)
        else record.getField(f.name).alias(f.name)
        for f in decoded_type.fields
        if f.name != DECODED_FIELD
    ]
    reader = subject.reader
    read_as = "" if reader.version == writer.version else f", read as version {reader.version}"
    failure = (
        f"Avro payload does not decode with schema id {writer.schema_id} "
        f"({writer.subject} version {writer.version}{read_as})"
    )
    return sf.struct(
        sf.coalesce(record.getField(DECODED_FIELD), sf.lit(False)).alias("ok"),
        sf.to_variant_object(sf.struct(*fields)).alias("json"),
        sf.lit(failure).alias("failure"),
    )


def _reader_schema(subject: SubjectSchemas) -> str:
    """The subject's reader schema with :data:`DECODED_FIELD` appended."""
    record = json.loads(subject.reader.schema)
    marker = {"name": DECODED_FIELD, "type": "boolean", "default": True}
    return json.dumps({**record, "fields": [*record["fields"], marker]})
