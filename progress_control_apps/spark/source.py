"""Read the events topic through Spark's Kafka source and classify every record.

:func:`parse_records` turns raw Kafka rows into one row per record with the columns in
:data:`PARSED_COLUMNS`: control records are recognised by their ``progress-control`` header (and
only by it) and validated (:mod:`progress_control_apps.spark.trust`), click events are parsed
strictly from JSON, and anything else gets an ``error`` explaining why. Nothing here raises on bad
data: a malformed record is a row with an error, a control record that fails validation a row with
the reason, so a streaming job keeps running and both can be counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as sf

from progress_control.protocol import CONTROL_HEADER
from progress_control.trust import TrustPolicy
from progress_control_apps.spark.input_schema import MAX_EPOCH_MS, InputSchema
from progress_control_apps.spark.registry import ValueSchemas
from progress_control_apps.spark.trust import (
    ACCEPTED,
    REJECTION_REASONS,
    RejectionSample,
    control_headers,
    well_formed_marker,
    with_control_verdict,
)
from progress_control_apps.spark.value_format import with_value

__all__ = [
    "ERROR_COLUMNS",
    "MAX_REJECTION_SAMPLES",
    "PARSED_COLUMNS",
    "InputSchema",
    "KafkaSource",
    "MalformedRecord",
    "RecordCounts",
    "collect_errors",
    "error_rows",
    "has_control_header",
    "is_control_record",
    "moves_time",
    "parse_records",
    "read_kafka",
    "record_counts",
    "rejected_column",
    "rejection_metric",
    "valid_marker",
]

PARSED_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "event_time",
    "is_control",
    "control",
    "control_source",
    "user",
    "page",
    "error",
    "key",
    "value",
)
"""Columns of :func:`parse_records`. ``event_time`` is a valid event's time (the Kafka record
timestamp, or the schema's time field), every other record's Kafka record timestamp; ``is_control``
is true for every record carrying a ``progress-control`` header (never data, valid or not);
``control`` is ``accepted`` for a control record that may move time, else the reason it is skipped
(:data:`progress_control_apps.spark.trust.REJECTION_REASONS`), null for other records;
``control_source`` the marker's source id (``?`` when unreadable); ``user`` and ``page`` (the
schema's page field) are set for valid events only; ``error`` is set for malformed data records
only."""

ERROR_COLUMNS = ("topic", "partition", "offset", "event_time", "error", "key", "value")
"""Columns of the errors output (:func:`error_rows`)."""

_INTEGER_TYPES = ("BIGINT", "INT", "SMALLINT", "TINYINT")


@dataclass(frozen=True, slots=True)
class KafkaSource:
    """Where to read: bootstrap servers, topic(s) (comma list), extra source options, and what a
    data record looks like (``schema``, default :class:`InputSchema`: value ``{"user", "page",
    "ts"}``, event time the record timestamp).

    ``options`` holds anything else for Spark's Kafka source, e.g. ``kafka.security.protocol``
    or ``kafka.sasl.jaas.config`` (``kafka.``-prefixed keys go to the consumer), and may override
    the defaults set by :func:`read_kafka` except ``includeHeaders``.
    """

    bootstrap_servers: str
    topic: str
    options: Mapping[str, str] = field(default_factory=dict)
    schema: InputSchema = field(default_factory=InputSchema)


@dataclass(frozen=True, slots=True)
class MalformedRecord:
    """A record that is neither a control record nor a valid click event."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int
    error: str
    key: bytes | None
    value: bytes | None


def read_kafka(
    spark: SparkSession,
    source: KafkaSource,
    *,
    streaming: bool,
    starting_offsets: str | None = None,
    ending_offsets: str | None = None,
    starting_timestamp_ms: int | None = None,
    ending_timestamp_ms: int | None = None,
    max_offsets_per_trigger: int | None = None,
) -> DataFrame:
    """Raw Kafka rows (Spark's Kafka schema, with headers), as a stream or a batch.

    Offsets are ``earliest``/``latest`` or Spark's per-partition JSON
    (``{"clicks":{"0":42,"1":-2}}``). Timestamps select, per partition, the first record at or
    after the given epoch millisecond (batch end: the records before it); a start after the last
    record reads nothing instead of failing. ``failOnDataLoss`` is off: records deleted by
    retention before the job reads them are skipped, not a crash.
    """
    options: dict[str, str] = {
        "kafka.bootstrap.servers": source.bootstrap_servers,
        "subscribe": source.topic,
        "failOnDataLoss": "false",
    }
    if starting_timestamp_ms is not None:
        options["startingTimestamp"] = str(starting_timestamp_ms)
        options["startingOffsetsByTimestampStrategy"] = "latest"
    elif starting_offsets is not None:
        options["startingOffsets"] = starting_offsets
    else:
        options["startingOffsets"] = "earliest"
    if not streaming:
        if ending_timestamp_ms is not None:
            options["endingTimestamp"] = str(ending_timestamp_ms)
        elif ending_offsets is not None:
            options["endingOffsets"] = ending_offsets
    elif ending_offsets is not None or ending_timestamp_ms is not None:
        raise ValueError("a streaming read has no end: ending offsets are for batch reads")
    if max_offsets_per_trigger is not None:
        if not streaming:
            raise ValueError("maxOffsetsPerTrigger applies to streaming reads only")
        options["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
    options |= dict(source.options)
    options["includeHeaders"] = "true"  # control records are recognised by their header alone
    reader = spark.readStream if streaming else spark.read
    return reader.format("kafka").options(**options).load()


def parse_records(
    raw: DataFrame,
    trust: TrustPolicy | None = None,
    schema: InputSchema | None = None,
    *,
    value_schemas: ValueSchemas | None = None,
) -> DataFrame:
    """Classify raw Kafka rows: control record (validated against ``trust``, default
    :class:`~progress_control.trust.TrustPolicy`), valid click event (under ``schema``, default
    :class:`InputSchema`), or malformed (with a reason).

    A record with a ``progress-control`` header is a control record whatever its key and value,
    and never data: it either moves time (``control == "accepted"``) or is skipped with the
    validator's reason (a broken marker is ``malformed``), never handed to the errors output. A
    click event's value is a JSON object with the schema's fields at their types (by default
    string ``user`` and ``page`` and an integer ``ts``); a number where a string belongs is an
    error, not silently converted. The first problem found is the reason, checked in this order:
    the value (null, not UTF-8, not JSON, not an object; for a registry-framed value first its
    header and schema id, then its payload: :mod:`progress_control_apps.spark.value_format`), the
    user (field or key), the page, the time field, the integer fields, a negative record timestamp
    (when it is the event time).

    ``value_schemas``: the registry's schemas for a registry-framed ``schema`` with a registry
    URL, fetched once by the job: ``fetch_value_schemas(schema, source.topic)``
    (:func:`progress_control_apps.spark.registry.fetch_value_schemas`), so every query of a job
    reads with the same ones.
    """
    schema = schema or InputSchema()
    if value_schemas is None and schema.registry_framed and schema.schema_registry_url:
        raise ValueError(
            f"value_format {schema.value_format!r} with a registry: pass value_schemas "
            "(progress_control_apps.spark.registry.fetch_value_schemas(schema, topic))"
        )
    checked = with_control_verdict(raw, trust or TrustPolicy())
    staged = with_value(
        checked.select(
            "topic",
            "partition",
            "offset",
            sf.col("timestamp").alias("_record_time"),
            "key",
            "value",
            "control",
            "control_source",
        ),
        schema,
        value_schemas,
    )
    # Every field the schema reads or checks, once, by position: names are the user's and may
    # hold anything, column aliases may not.
    names = list(
        dict.fromkeys(
            name
            for name in (
                schema.user_field,
                schema.page_field,
                schema.time_field,
                *schema.integer_fields,
            )
            if name is not None
        )
    )
    typed = staged.select(
        "*", *(_field_type(name).alias(f"_type_{i}") for i, name in enumerate(names))
    )
    found = {name: sf.col(f"_type_{i}") for i, name in enumerate(names)}
    is_control = sf.col("control").isNotNull()
    error = sf.when(is_control, sf.lit(None).cast("string")).when(
        sf.col("_value_error").isNotNull(), sf.col("_value_error")
    )
    if schema.user_field is None:
        error = error.when(sf.col("key").isNull(), sf.lit("null key (the user)")).when(
            ~sf.is_valid_utf8(sf.col("key").cast("string")), sf.lit("key (the user) is not UTF-8")
        )
    else:
        error = error.when(*_type_error(schema.user_field, found, ("STRING",), "a string"))
    if schema.page_field is not None:
        error = error.when(*_type_error(schema.page_field, found, ("STRING",), "a string"))
    if schema.time_field is not None:
        name = schema.time_field
        error = error.when(
            *_type_error(name, found, _INTEGER_TYPES, "an integer (epoch milliseconds)")
        ).when(
            ~_field_long(name).between(0, MAX_EPOCH_MS),
            sf.lit(f"field {_quoted(name)} is not an epoch millisecond from 0 to {MAX_EPOCH_MS}"),
        )
    for name in schema.integer_fields:
        error = error.when(*_type_error(name, found, _INTEGER_TYPES, "an integer"))
    if schema.time_field is None:
        error = error.when(sf.unix_millis("_record_time") < 0, sf.lit("negative record timestamp"))
    classified = typed.select("*", is_control.alias("is_control"), error.alias("error"))
    # Only valid events carry user and page, and only they take their time from a field: a
    # half-parsed malformed record must not look like data to anything downstream.
    is_data = sf.col("error").isNull() & ~sf.col("is_control")
    user = (
        sf.col("key").cast("string")
        if schema.user_field is None
        else sf.try_variant_get("_json", _path(schema.user_field), "string")
    )
    page = (
        sf.lit(None).cast("string")
        if schema.page_field is None
        else sf.try_variant_get("_json", _path(schema.page_field), "string")
    )
    event_time = (
        sf.col("_record_time")
        if schema.time_field is None
        else sf.when(is_data, sf.timestamp_millis(_field_long(schema.time_field))).otherwise(
            sf.col("_record_time")
        )
    )
    columns = {
        "event_time": event_time.alias("event_time"),
        "user": sf.when(is_data, user).alias("user"),
        "page": sf.when(is_data, page).alias("page"),
    }
    parsed = classified.select(*(columns.get(name, name) for name in PARSED_COLUMNS))
    if not schema.registry_framed:
        return parsed
    # A barrier: Spark's optimizer pushes a filter on ``error`` (the errors output, a batch's
    # final watermark) below the projections, substituting each column by its definition, and
    # the decoding of a registry-framed value is referenced many times over: generated code
    # beyond the JVM's 64 KB per method, compiled in vain then interpreted. No filter moves
    # past an ``observe``.
    return parsed.observe("progress_control_parsed_records", sf.count(sf.lit(1)).alias("rows"))


def rejected_column() -> Column:
    """Over :func:`parse_records` rows: a control record that failed validation."""
    return sf.coalesce(sf.col("control") != sf.lit(ACCEPTED), sf.lit(False))


def moves_time() -> Column:
    """Over :func:`parse_records` rows: the rows whose timestamps may move event time (the
    watermark): valid click events and accepted control records. Skipped control records and
    malformed data records are neither data nor time."""
    return sf.coalesce(sf.col("control") == sf.lit(ACCEPTED), sf.col("error").isNull())


MAX_REJECTION_SAMPLES = 100
"""At most this many distinct (reason, source, topic, partition) of skipped control records are
brought to the driver per micro-batch or batch, for its once-per-source log."""


def record_counts() -> list[Column]:
    """Aggregates over :func:`parse_records` rows: ``data``, ``control`` (accepted control
    records) and ``malformed`` record counts, one ``rejected_<reason>`` count per reason a control
    record is skipped (``rejected_future_timestamp``, ...), ``max_event_time`` (epoch ms, over the
    rows that move time) and ``rejected_samples`` (see :data:`MAX_REJECTION_SAMPLES`)."""
    rejected = rejected_column()
    sample = sf.struct(
        sf.col("control").alias("reason"),
        sf.col("control_source").alias("source"),
        sf.col("topic").alias("topic"),
        sf.col("partition").alias("partition"),
    )
    return [
        sf.count_if(~sf.col("is_control") & sf.col("error").isNull()).alias("data"),
        sf.count_if(sf.col("control") == sf.lit(ACCEPTED)).alias("control"),
        sf.count_if(sf.col("error").isNotNull()).alias("malformed"),
        *(
            sf.count_if(sf.col("control") == sf.lit(reason)).alias(rejection_metric(reason))
            for reason in REJECTION_REASONS
        ),
        sf.max(sf.when(moves_time(), sf.unix_millis("event_time"))).alias("max_event_time"),
        sf.slice(
            sf.array_sort(sf.collect_set(sf.when(rejected, sample))), 1, MAX_REJECTION_SAMPLES
        ).alias("rejected_samples"),
    ]


def rejection_metric(reason: str) -> str:
    """The :func:`record_counts` column counting control records skipped for ``reason``."""
    return "rejected_" + reason.replace("-", "_")


@dataclass(frozen=True, slots=True)
class RecordCounts:
    """The values of :func:`record_counts` for one micro-batch or batch."""

    data: int = 0
    control: int = 0
    """Accepted control records."""
    malformed: int = 0
    rejected: Mapping[str, int] = field(default_factory=dict)
    """Skipped control records per reason (only reasons that occurred)."""
    max_event_time_ms: int | None = None
    samples: tuple[RejectionSample, ...] = ()

    @classmethod
    def from_metrics(cls, row: Any) -> RecordCounts:
        """Read the observed metrics (a ``Row`` or a dict) of :func:`record_counts`."""
        rejected = {r: int(row[rejection_metric(r)] or 0) for r in REJECTION_REASONS}
        max_time = row["max_event_time"]
        return cls(
            data=int(row["data"] or 0),
            control=int(row["control"] or 0),
            malformed=int(row["malformed"] or 0),
            rejected={reason: n for reason, n in rejected.items() if n},
            max_event_time_ms=None if max_time is None else int(max_time),
            samples=tuple(
                RejectionSample(s["reason"], s["source"], s["topic"], int(s["partition"]))
                for s in row["rejected_samples"] or ()
            ),
        )


def error_rows(parsed: DataFrame) -> DataFrame:
    """The malformed records of :func:`parse_records` output, in the errors-output schema."""
    return parsed.where(sf.col("error").isNotNull()).select(*ERROR_COLUMNS)


def collect_errors(errors: DataFrame) -> list[MalformedRecord]:
    """Bring error rows (:data:`ERROR_COLUMNS`) to the driver, in topic/partition/offset order."""
    rows = (
        errors.select(
            "topic",
            "partition",
            "offset",
            sf.unix_millis("event_time").alias("timestamp_ms"),
            "error",
            "key",
            "value",
        )
        .orderBy("topic", "partition", "offset")
        .collect()
    )
    return [
        MalformedRecord(
            topic=row["topic"],
            partition=row["partition"],
            offset=row["offset"],
            timestamp_ms=row["timestamp_ms"],
            error=row["error"],
            key=None if row["key"] is None else bytes(row["key"]),
            value=None if row["value"] is None else bytes(row["value"]),
        )
        for row in rows
    ]


def has_control_header(headers: Column) -> Column:
    """Whether a row carries a ``progress-control`` header at all, valid or not (Spark's
    :func:`progress_control.protocol.has_control_header`): such a row is never data."""
    return sf.coalesce(sf.array_contains(headers.getField("key"), CONTROL_HEADER), sf.lit(False))


def is_control_record(headers: Column) -> Column:
    """Spark's version of :func:`progress_control.protocol.is_control_record`, over the Kafka
    source's ``headers`` column: exactly one ``progress-control`` header, well formed. Whether it
    may move time is :func:`progress_control_apps.spark.trust.with_control_verdict`'s decision."""
    count, first = control_headers(headers)
    return (count == 1) & valid_marker(first)


def valid_marker(marker: Column) -> Column:
    """Whether a ``progress-control`` header value is a well-formed marker (see
    :meth:`progress_control.protocol.ControlMarker.decode`): version >= 1, a 1..255-byte UTF-8
    source id, for version 1 nothing after it, for version 2 a UTF-8 key id and a 32-byte mac and
    nothing after them (later versions may append fields)."""
    return well_formed_marker(marker)


def _path(name: str) -> str:
    """A variant path to the top-level field ``name``, whatever characters it holds (the
    schema refuses a name with both quote kinds)."""
    quote = '"' if "'" in name else "'"
    return f"$[{quote}{name}{quote}]"


def _quoted(name: str) -> str:
    return f"'{name}'"


def _field_type(name: str) -> Column:
    """The JSON type of a top-level field (``STRING``, ``BIGINT``, ``VOID`` for null), or null
    when the field is missing or the value is not an object."""
    return sf.schema_of_variant(sf.try_variant_get("_json", _path(name), "variant"))


def _field_long(name: str) -> Column:
    """A top-level integer field as a ``BIGINT`` (null when it is not one)."""
    return sf.try_variant_get("_json", _path(name), "bigint")


def _type_error(
    name: str, found: Mapping[str, Column], accepted: tuple[str, ...], what: str
) -> tuple[Column, Column]:
    """A ``when`` branch: condition and message for a missing, null or mistyped field."""
    kind = found[name]
    field = _quoted(name)
    message = (
        sf.when(kind.isNull(), sf.lit(f"missing field {field}"))
        .when(kind == "VOID", sf.lit(f"field {field} is null"))
        .otherwise(sf.concat(sf.lit(f"field {field} must be {what}, got "), kind))
    )
    return kind.isNull() | ~kind.isin(*accepted), message
