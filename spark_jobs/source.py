"""Read the events topic through Spark's Kafka source and classify every record.

:func:`parse_records` turns raw Kafka rows into one row per record with the columns in
:data:`PARSED_COLUMNS`: control records are recognised by their ``progress-control`` header (and
only by it), click events are parsed strictly from JSON, and anything else gets an ``error``
explaining why. Nothing here raises on bad data: a malformed record is a row with an error, so a
streaming job keeps running and the error can be written out and counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from progress_control.protocol import CONTROL_HEADER

__all__ = [
    "ERROR_COLUMNS",
    "PARSED_COLUMNS",
    "KafkaSource",
    "MalformedRecord",
    "collect_errors",
    "error_rows",
    "parse_records",
    "read_kafka",
]

PARSED_COLUMNS = (
    "topic",
    "partition",
    "offset",
    "event_time",
    "is_control",
    "user",
    "page",
    "error",
    "key",
    "value",
)
"""Columns of :func:`parse_records`. ``event_time`` is the Kafka record timestamp; ``user`` and
``page`` are set for valid events only; ``error`` is set for malformed records only."""

ERROR_COLUMNS = ("topic", "partition", "offset", "event_time", "error", "key", "value")
"""Columns of the errors output (:func:`error_rows`)."""

# Protocol v1 marker: version u8, sequence u64, source-id length u8, then the source id.
_MARKER_PREFIX_BYTES = 10
_INTEGER_TYPES = ("BIGINT", "INT", "SMALLINT", "TINYINT")


@dataclass(frozen=True, slots=True)
class KafkaSource:
    """Where to read: bootstrap servers, topic(s) (comma list) and extra source options.

    ``options`` holds anything else for Spark's Kafka source, e.g. ``kafka.security.protocol``
    or ``kafka.sasl.jaas.config`` (``kafka.``-prefixed keys go to the consumer), and may override
    the defaults set by :func:`read_kafka` except ``includeHeaders``.
    """

    bootstrap_servers: str
    topic: str
    options: Mapping[str, str] = field(default_factory=dict)


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


def parse_records(raw: DataFrame) -> DataFrame:
    """Classify raw Kafka rows: control record, valid click event, or malformed (with a reason).

    A control record has exactly one ``progress-control`` header holding a well-formed v1 (or
    later) marker, whatever its key and value. A record with a broken marker is not a control
    record (the same rule as :func:`progress_control.protocol.is_control_record`) and is reported
    as malformed. A click event's value is a JSON object with string ``user`` and ``page`` and an
    integer ``ts``; a number where a string belongs is an error, not silently converted.
    """
    markers = F.filter(F.col("headers"), lambda h: h["key"] == F.lit(CONTROL_HEADER))
    staged = raw.select(
        "topic",
        "partition",
        "offset",
        F.col("timestamp").alias("event_time"),
        "key",
        "value",
        F.coalesce(F.size(markers), F.lit(0)).alias("_markers"),
        F.element_at(markers, 1)["value"].alias("_marker"),
        F.try_parse_json(F.col("value").cast("string")).alias("_json"),
    )
    typed = staged.select(
        "*",
        _valid_marker(F.col("_marker")).alias("_marker_ok"),
        F.schema_of_variant("_json").alias("_json_type"),
        *(_field_type(name).alias(f"_{name}_type") for name in ("user", "page", "ts")),
    )
    is_control = (F.col("_markers") == 1) & F.col("_marker_ok")
    error = (
        F.when(is_control, F.lit(None).cast("string"))
        .when(F.col("_markers") > 1, F.lit("more than one progress-control header"))
        .when(F.col("_markers") == 1, F.lit("malformed progress-control header"))
        .when(F.col("value").isNull(), F.lit("null value"))
        .when(~F.is_valid_utf8(F.col("value").cast("string")), F.lit("value is not UTF-8"))
        .when(F.col("_json").isNull(), F.lit("value is not valid JSON"))
        .when(~F.col("_json_type").startswith("OBJECT<"), F.lit("value is not a JSON object"))
        .when(*_type_error("user", ("STRING",), "a string"))
        .when(*_type_error("page", ("STRING",), "a string"))
        .when(*_type_error("ts", _INTEGER_TYPES, "an integer"))
        .when(F.unix_millis("event_time") < 0, F.lit("negative record timestamp"))
    )
    classified = typed.select("*", is_control.alias("is_control"), error.alias("error"))
    # Only valid events carry user and page: a half-parsed malformed record must not look like
    # data to anything downstream.
    is_data = F.col("error").isNull() & ~F.col("is_control")
    return classified.select(
        "topic",
        "partition",
        "offset",
        "event_time",
        "is_control",
        F.when(is_data, F.try_variant_get("_json", "$.user", "string")).alias("user"),
        F.when(is_data, F.try_variant_get("_json", "$.page", "string")).alias("page"),
        "error",
        "key",
        "value",
    )


def error_rows(parsed: DataFrame) -> DataFrame:
    """The malformed records of :func:`parse_records` output, in the errors-output schema."""
    return parsed.where(F.col("error").isNotNull()).select(*ERROR_COLUMNS)


def collect_errors(errors: DataFrame) -> list[MalformedRecord]:
    """Bring error rows (:data:`ERROR_COLUMNS`) to the driver, in topic/partition/offset order."""
    rows = (
        errors.select(
            "topic",
            "partition",
            "offset",
            F.unix_millis("event_time").alias("timestamp_ms"),
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


def _byte_at(binary: Column, position: int) -> Column:
    """The unsigned byte at 1-based ``position`` of a binary column, as an int."""
    return F.conv(F.hex(F.substring(binary, position, 1)), 16, 10).cast("int")


def _valid_marker(marker: Column) -> Column:
    """Whether a ``progress-control`` header value is a well-formed marker (see
    :class:`progress_control.protocol.ControlMarker`): version >= 1, a 1..255-byte UTF-8
    source id, and for version 1 nothing after it (later versions may append fields)."""
    length = F.octet_length(marker)
    version = _byte_at(marker, 1)
    id_length = _byte_at(marker, _MARKER_PREFIX_BYTES)
    source_id = F.substring(marker, _MARKER_PREFIX_BYTES + 1, id_length)
    return F.coalesce(
        (length > _MARKER_PREFIX_BYTES)
        & (version >= 1)
        & (id_length >= 1)
        & (length >= id_length + _MARKER_PREFIX_BYTES)
        & ((version > 1) | (length == id_length + _MARKER_PREFIX_BYTES))
        & F.is_valid_utf8(source_id.cast("string")),
        F.lit(False),
    )


def _field_type(name: str) -> Column:
    """The JSON type of a top-level field (``STRING``, ``BIGINT``, ``VOID`` for null), or null
    when the field is missing or the value is not an object."""
    return F.schema_of_variant(F.try_variant_get("_json", f"$.{name}", "variant"))


def _type_error(name: str, accepted: tuple[str, ...], what: str) -> tuple[Column, Column]:
    """A ``when`` branch: condition and message for a missing, null or mistyped field."""
    found = F.col(f"_{name}_type")
    message = (
        F.when(found.isNull(), F.lit(f"missing field '{name}'"))
        .when(found == "VOID", F.lit(f"field '{name}' is null"))
        .otherwise(F.concat(F.lit(f"field '{name}' must be {what}, got "), found))
    )
    return found.isNull() | ~found.isin(*accepted), message
