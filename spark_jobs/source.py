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
from pyspark.sql import functions as sf

from progress_control.protocol import CONTROL_HEADER

__all__ = [
    "ERROR_COLUMNS",
    "PARSED_COLUMNS",
    "KafkaSource",
    "MalformedRecord",
    "collect_errors",
    "error_rows",
    "is_control_record",
    "parse_records",
    "read_kafka",
    "record_counts",
    "valid_marker",
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
    markers = _markers(sf.col("headers"))
    staged = raw.select(
        "topic",
        "partition",
        "offset",
        sf.col("timestamp").alias("event_time"),
        "key",
        "value",
        sf.coalesce(sf.size(markers), sf.lit(0)).alias("_markers"),
        sf.element_at(markers, 1)["value"].alias("_marker"),
        sf.try_parse_json(sf.col("value").cast("string")).alias("_json"),
    )
    typed = staged.select(
        "*",
        valid_marker(sf.col("_marker")).alias("_marker_ok"),
        sf.schema_of_variant("_json").alias("_json_type"),
        *(_field_type(name).alias(f"_{name}_type") for name in ("user", "page", "ts")),
    )
    is_control = (sf.col("_markers") == 1) & sf.col("_marker_ok")
    error = (
        sf.when(is_control, sf.lit(None).cast("string"))
        .when(sf.col("_markers") > 1, sf.lit("more than one progress-control header"))
        .when(sf.col("_markers") == 1, sf.lit("malformed progress-control header"))
        .when(sf.col("value").isNull(), sf.lit("null value"))
        .when(~sf.is_valid_utf8(sf.col("value").cast("string")), sf.lit("value is not UTF-8"))
        .when(sf.col("_json").isNull(), sf.lit("value is not valid JSON"))
        .when(~sf.col("_json_type").startswith("OBJECT<"), sf.lit("value is not a JSON object"))
        .when(*_type_error("user", ("STRING",), "a string"))
        .when(*_type_error("page", ("STRING",), "a string"))
        .when(*_type_error("ts", _INTEGER_TYPES, "an integer"))
        .when(sf.unix_millis("event_time") < 0, sf.lit("negative record timestamp"))
    )
    classified = typed.select("*", is_control.alias("is_control"), error.alias("error"))
    # Only valid events carry user and page: a half-parsed malformed record must not look like
    # data to anything downstream.
    is_data = sf.col("error").isNull() & ~sf.col("is_control")
    return classified.select(
        "topic",
        "partition",
        "offset",
        "event_time",
        "is_control",
        sf.when(is_data, sf.try_variant_get("_json", "$.user", "string")).alias("user"),
        sf.when(is_data, sf.try_variant_get("_json", "$.page", "string")).alias("page"),
        "error",
        "key",
        "value",
    )


def record_counts() -> list[Column]:
    """Aggregates over :func:`parse_records` rows: ``data``, ``control`` and ``malformed``
    record counts and ``max_event_time`` (epoch ms, control records included)."""
    return [
        sf.count_if(~sf.col("is_control") & sf.col("error").isNull()).alias("data"),
        sf.count_if(sf.col("is_control")).alias("control"),
        sf.count_if(sf.col("error").isNotNull()).alias("malformed"),
        sf.max(sf.unix_millis("event_time")).alias("max_event_time"),
    ]


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


def _markers(headers: Column) -> Column:
    return sf.filter(headers, lambda h: h["key"] == sf.lit(CONTROL_HEADER))


def _byte_at(binary: Column, position: int) -> Column:
    """The unsigned byte at 1-based ``position`` of a binary column, as an int."""
    return sf.conv(sf.hex(sf.substring(binary, position, 1)), 16, 10).cast("int")


def is_control_record(headers: Column) -> Column:
    """Spark's version of :func:`progress_control.protocol.is_control_record`, over the Kafka
    source's ``headers`` column: exactly one ``progress-control`` header, well formed."""
    markers = _markers(headers)
    return (sf.coalesce(sf.size(markers), sf.lit(0)) == 1) & valid_marker(
        sf.element_at(markers, 1)["value"]
    )


def valid_marker(marker: Column) -> Column:
    """Whether a ``progress-control`` header value is a well-formed marker (see
    :class:`progress_control.protocol.ControlMarker`): version >= 1, a 1..255-byte UTF-8
    source id, and for version 1 nothing after it (later versions may append fields)."""
    length = sf.octet_length(marker)
    version = _byte_at(marker, 1)
    id_length = _byte_at(marker, _MARKER_PREFIX_BYTES)
    source_id = sf.substring(marker, _MARKER_PREFIX_BYTES + 1, id_length)
    return sf.coalesce(
        (length > _MARKER_PREFIX_BYTES)
        & (version >= 1)
        & (id_length >= 1)
        & (length >= id_length + _MARKER_PREFIX_BYTES)
        & ((version > 1) | (length == id_length + _MARKER_PREFIX_BYTES))
        & sf.is_valid_utf8(source_id.cast("string")),
        sf.lit(False),
    )


def _field_type(name: str) -> Column:
    """The JSON type of a top-level field (``STRING``, ``BIGINT``, ``VOID`` for null), or null
    when the field is missing or the value is not an object."""
    return sf.schema_of_variant(sf.try_variant_get("_json", f"$.{name}", "variant"))


def _type_error(name: str, accepted: tuple[str, ...], what: str) -> tuple[Column, Column]:
    """A ``when`` branch: condition and message for a missing, null or mistyped field."""
    found = sf.col(f"_{name}_type")
    message = (
        sf.when(found.isNull(), sf.lit(f"missing field '{name}'"))
        .when(found == "VOID", sf.lit(f"field '{name}' is null"))
        .otherwise(sf.concat(sf.lit(f"field '{name}' must be {what}, got "), found))
    )
    return found.isNull() | ~found.isin(*accepted), message
