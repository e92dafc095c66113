"""The batch sessionization job: a range of the events topic → the same sessions as the stream.

For backfills (rebuild the sessions of a day) and reconciliation (compare with what the stream
or the streams runtime produced). The range is given as Kafka offsets (``earliest``/``latest`` or
per-partition JSON) or as record timestamps; sessions are computed with the same
:func:`spark_jobs.sessionize.sessionize_events` as the streaming job, so on the same records they
are the same rows.

A batch sees every session, including those still open at the end of the range. With
``closed_only`` it keeps what the streaming job would have emitted after reading the same
records: sessions whose window end is at or before the final watermark (latest record timestamp,
control records included, minus the watermark delay).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as sf

from spark_jobs.sessionize import sessionize_events
from spark_jobs.source import KafkaSource, error_rows, parse_records, read_kafka, record_counts

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


def batch_sessions(
    spark: SparkSession,
    source: KafkaSource,
    gap_ms: int,
    records: BatchRange | None = None,
    *,
    closed_only: bool = False,
    watermark_delay_ms: int = 0,
    observation: Observation | None = None,
) -> DataFrame:
    """Sessions (columns :data:`spark_jobs.sessionize.SESSION_COLUMNS`) of a range of records.

    ``observation``, if given, receives the counts ``data``, ``control``, ``malformed`` and
    ``max_event_time`` (epoch ms) once an action on the result has run.
    """
    if watermark_delay_ms < 0:
        raise ValueError(f"watermark_delay_ms must be >= 0, got {watermark_delay_ms}")
    parsed = parse_records(read_range(spark, source, records or BatchRange()))
    counted = parsed if observation is None else parsed.observe(observation, *record_counts())
    sessions = sessionize_events(counted, gap_ms)
    if not closed_only:
        return sessions
    # The watermark the stream would end with: control records count, as in the stream.
    final = parsed.agg(
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
) -> BatchResult:
    """Compute the sessions of a range of records and write them to Parquet (overwrite);
    malformed records to ``errors_path`` (overwrite) when given. Returns the counts."""
    observation = Observation("batch_records")
    sessions = batch_sessions(
        spark,
        source,
        gap_ms,
        records,
        closed_only=closed_only,
        watermark_delay_ms=watermark_delay_ms,
        observation=observation,
    )
    written = Observation("batch_sessions")
    sessions.observe(written, sf.count(sf.lit(1)).alias("rows")).write.mode("overwrite").parquet(
        sessions_path
    )
    if errors_path is not None:
        parsed = parse_records(read_range(spark, source, records or BatchRange()))
        error_rows(parsed).write.mode("overwrite").parquet(errors_path)
    counts: dict[str, Any] = observation.get
    max_time = counts.get("max_event_time")
    return BatchResult(
        sessions_path=sessions_path,
        errors_path=errors_path,
        sessions=int(written.get["rows"]),
        data_records=int(counts.get("data") or 0),
        control_records=int(counts.get("control") or 0),
        malformed_records=int(counts.get("malformed") or 0),
        max_event_time_ms=None if max_time is None else int(max_time),
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
