"""The batch sessionization job: a range of the events topic → the same sessions as the stream.

For backfills (rebuild the sessions of a day) and reconciliation (compare with what the stream
or the streams runtime produced). The range is given as Kafka offsets (``earliest``/``latest`` or
per-partition JSON) or as record timestamps; sessions are computed with the same
:func:`progress_control_apps.spark.sessionize.sessionize_events` as the streaming job, so on the
same records they are the same rows.

Control records are validated with the streaming job's rules
(:mod:`progress_control_apps.spark.trust`; the wall clock of the future-timestamp check is the
query's start): one that fails is neither data nor time, counted per reason
(:attr:`BatchResult.rejected_control_records`) and logged once per source and reason.

A batch sees every session, including those still open at the end of the range. With
``closed_only`` it keeps what the streaming job would have emitted after reading the same
records: sessions whose window end is at or before the final watermark (latest timestamp of a
valid event or accepted control record, minus the watermark delay).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as sf

from progress_control.trust import TrustPolicy
from progress_control_apps.spark.registry import ValueSchemas, fetch_value_schemas
from progress_control_apps.spark.sessionize import sessionize_events
from progress_control_apps.spark.source import (
    KafkaSource,
    RecordCounts,
    error_rows,
    moves_time,
    parse_records,
    read_kafka,
    record_counts,
)
from progress_control_apps.spark.trust import RejectionLog, redact_key_material

__all__ = ["BatchRange", "BatchResult", "batch_sessions", "read_range", "run_batch"]


@dataclass(frozen=True, slots=True)
class BatchRange:
    """Which records of the topic to read: by offsets, or by record timestamps (epoch ms,
    start inclusive, end exclusive), which take precedence when given."""

    starting_offsets: str = "earliest"
    ending_offsets: str = "latest"
    start_time_ms: int | None = None
    end_time_ms: int | None = None

    def __post_init__(self) -> None:
        if (
            self.start_time_ms is not None
            and self.end_time_ms is not None
            and self.end_time_ms <= self.start_time_ms
        ):
            raise ValueError(
                f"empty time range: end {self.end_time_ms} <= start {self.start_time_ms}"
            )


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a batch run wrote and counted."""

    sessions_path: str
    errors_path: str | None
    sessions: int
    data_records: int
    control_records: int
    malformed_records: int
    max_event_time_ms: int | None
    """Latest timestamp of a valid event or an accepted control record."""
    rejected_control_records: Mapping[str, int] = field(default_factory=dict)
    """Control records skipped (neither data nor time) per reason; only reasons that occurred."""
    value_schemas: ValueSchemas | None = None
    """The registry's value schemas the run decoded with (registry-framed values only)."""


def batch_sessions(
    spark: SparkSession,
    source: KafkaSource,
    gap_ms: int,
    records: BatchRange | None = None,
    *,
    closed_only: bool = False,
    watermark_delay_ms: int = 0,
    observation: Observation | None = None,
    trust: TrustPolicy | None = None,
    value_schemas: ValueSchemas | None = None,
) -> DataFrame:
    """Sessions (columns :data:`progress_control_apps.spark.sessionize.SESSION_COLUMNS`) of a range
    of records.

    ``trust`` says which control records count (default: the
    :class:`~progress_control.trust.TrustPolicy` defaults). ``value_schemas``: those of a
    registry-framed ``source.schema``
    (:func:`~progress_control_apps.spark.registry.fetch_value_schemas`), fetched here when not
    given. ``observation``, if given, receives
    :func:`progress_control_apps.spark.source.record_counts` (read them with
    :meth:`progress_control_apps.spark.source.RecordCounts.from_metrics`) once an action on the
    result has run.
    """
    if watermark_delay_ms < 0:
        raise ValueError(f"watermark_delay_ms must be >= 0, got {watermark_delay_ms}")
    if trust is not None and trust.verification_keys:
        redact_key_material(spark)
    if value_schemas is None:
        value_schemas = fetch_value_schemas(source.schema, source.topic)
    parsed = parse_records(
        read_range(spark, source, records or BatchRange()),
        trust,
        source.schema,
        value_schemas=value_schemas,
    )
    counted = parsed if observation is None else parsed.observe(observation, *record_counts())
    sessions = sessionize_events(counted, gap_ms)
    if not closed_only:
        return sessions
    # The watermark the stream would end with: accepted control records count, as in the
    # stream; skipped ones and malformed records do not.
    final = parsed.where(moves_time()).agg(
        (sf.unix_micros(sf.max("event_time")) - sf.lit(watermark_delay_ms * 1000)).alias("_wm")
    )
    return (
        sessions.crossJoin(sf.broadcast(final))
        .where(sf.unix_micros("window_end") <= sf.col("_wm"))
        .drop("_wm")
    )


def run_batch(
    spark: SparkSession,
    source: KafkaSource,
    gap_ms: int,
    sessions_path: str,
    records: BatchRange | None = None,
    *,
    errors_path: str | None = None,
    closed_only: bool = False,
    watermark_delay_ms: int = 0,
    trust: TrustPolicy | None = None,
) -> BatchResult:
    """Compute the sessions of a range of records and write them to Parquet (overwrite);
    malformed records to ``errors_path`` (overwrite) when given. Returns the counts; skipped
    control records are also logged once per source and reason."""
    observation = Observation("batch_records")
    value_schemas = fetch_value_schemas(source.schema, source.topic)
    sessions = batch_sessions(
        spark,
        source,
        gap_ms,
        records,
        closed_only=closed_only,
        watermark_delay_ms=watermark_delay_ms,
        observation=observation,
        trust=trust,
        value_schemas=value_schemas,
    )
    written = Observation("batch_sessions")
    sessions.observe(written, sf.count(sf.lit(1)).alias("rows")).write.mode("overwrite").parquet(
        sessions_path
    )
    if errors_path is not None:
        parsed = parse_records(
            read_range(spark, source, records or BatchRange()),
            trust,
            source.schema,
            value_schemas=value_schemas,
        )
        error_rows(parsed).write.mode("overwrite").parquet(errors_path)
    counts = RecordCounts.from_metrics(observation.get)
    RejectionLog("sessionization batch").report(counts.samples)
    return BatchResult(
        sessions_path=sessions_path,
        errors_path=errors_path,
        sessions=int(written.get["rows"]),
        data_records=counts.data,
        control_records=counts.control,
        malformed_records=counts.malformed,
        max_event_time_ms=counts.max_event_time_ms,
        rejected_control_records=counts.rejected,
        value_schemas=value_schemas,
    )


def read_range(spark: SparkSession, source: KafkaSource, records: BatchRange) -> DataFrame:
    """The raw Kafka rows of ``source`` within ``records`` (a batch read)."""
    return read_kafka(
        spark,
        source,
        streaming=False,
        starting_offsets=records.starting_offsets,
        ending_offsets=records.ending_offsets,
        starting_timestamp_ms=records.start_time_ms,
        ending_timestamp_ms=records.end_time_ms,
    )
