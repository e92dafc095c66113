"""The streaming sessionization job: Kafka → session windows → Parquet (and optionally Kafka).

Plan of the sessions query::

    Kafka source (includeHeaders) → parse_records (control records validated)
      → observe(counts)       ← metrics over every row, skipped control records included
      → keep data and accepted control records → withWatermark(event_time)
      → observe(barrier)      ← keeps the optimizer from moving the next filter below the watermark
      → drop control rows → session_window(event_time, gap) per user
      → Parquet, append mode, checkpointed

Accepted control records' timestamps advance the watermark because they pass through
``withWatermark`` before being dropped. A control record that fails validation
(:mod:`progress_control_apps.spark.trust`: malformed, negative or too far in the future, not from an
allowed source, not signed by a configured key) is dropped *before* the watermark: it is neither
data nor time, only counted per reason and logged once per source and reason on the driver.
Malformed data records are dropped there too (they go to the errors output and are counted; a broken
record does not move time).

The order matters and Spark's optimizer would otherwise undo it: it pushes filters that do not
reference the event-time column *below* ``EventTimeWatermark``, so a plain ``where(not
is_control)`` after the watermark would drop the ticks before the watermark saw them. ``observe``
nodes are barriers (their metrics must see every row, so no filter moves past them): one before
the validation filter counts every record, one after the watermark holds the data filter above
it. With no-data micro-batches on, a watermark moved by ticks alone evicts (emits) the closed
sessions.

Malformed records go to a second query writing Parquet to the errors path; all counts come from
the observed metrics, collected per batch by a query listener
(:meth:`SessionizationStream.metrics`).
The optional Kafka sink is a third, stateless query that streams the committed Parquet output to a
topic, each session as JSON in the streams runtime's format ``{"user", "start", "end", "count"}``.

The job's settings and results are :mod:`progress_control_apps.spark.stream_config` (re-exported
here); the listener is :mod:`progress_control_apps.spark.stream_progress`.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from types import TracebackType

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from progress_control_apps.spark.durations import format_interval
from progress_control_apps.spark.registry import ValueSchemas, fetch_value_schemas
from progress_control_apps.spark.sessionize import Session, collect_sessions, sessionize_events
from progress_control_apps.spark.source import (
    KafkaSource,
    MalformedRecord,
    collect_errors,
    error_rows,
    moves_time,
    parse_records,
    read_kafka,
    record_counts,
)
from progress_control_apps.spark.stream_config import (
    StreamConfig,
    StreamFailedError,
    StreamMetrics,
    StreamResult,
)
from progress_control_apps.spark.stream_progress import BatchProgress, ProgressListener
from progress_control_apps.spark.trust import RejectionLog, redact_key_material

__all__ = [
    "ERRORS_SCHEMA",
    "SESSIONS_SCHEMA",
    "SessionizationStream",
    "StreamConfig",
    "StreamFailedError",
    "StreamMetrics",
    "StreamResult",
    "read_errors",
    "read_sessions",
    "run_stream",
    "sessions_to_kafka",
]

SESSIONS_SCHEMA = StructType(
    [
        StructField("user", StringType()),
        StructField("session_start", TimestampType()),
        StructField("session_end", TimestampType()),
        StructField("window_start", TimestampType()),
        StructField("window_end", TimestampType()),
        StructField("events", LongType()),
    ]
)
"""Schema of the sessions output (batch and streaming)."""

ERRORS_SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("event_time", TimestampType()),
        StructField("error", StringType()),
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
    ]
)
"""Schema of the errors output (batch and streaming)."""


class SessionizationStream:
    """The streaming sessionization job: start it, watch its outputs, stop it.

    >>> with SessionizationStream(spark, config) as job:   # doctest: +SKIP
    ...     sessions = job.wait_for_sessions(lambda s: len(s) >= 2, timeout_s=60)
    """

    def __init__(self, spark: SparkSession, config: StreamConfig) -> None:
        self.spark = spark
        self.config = config
        self._id = uuid.uuid4().hex[:8]
        self._metrics_name = f"sessionization_{self._id}"
        self._progress = BatchProgress()
        self._rejections = RejectionLog(f"sessionization stream {self._id}")
        self._listener: ProgressListener | None = None
        self._queries: dict[str, StreamingQuery] = {}
        self._value_schemas: ValueSchemas | None = None

    def __enter__(self) -> SessionizationStream:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> SessionizationStream:
        """Start the sessions, errors and (if configured) Kafka queries; returns ``self``."""
        if self._queries:
            raise RuntimeError("the stream is already started")
        config = self.config
        # Once, before any query: the sessions and errors queries decode with the same schemas.
        self._value_schemas = fetch_value_schemas(config.source.schema, config.source.topic)
        # Without no-data micro-batches, a watermark moved by control records alone would never
        # be acted on: sessions would wait for the next data record, the very problem we solve.
        self.spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "true")
        if config.trust.verification_keys:
            redact_key_material(self.spark)
        self._listener = ProgressListener(self._metrics_name, self._progress, self._rejections)
        self.spark.streams.addListener(self._listener)
        trigger = format_interval(config.trigger_interval_ms)
        try:
            sessions = self.sessions_frame()
            self._queries["sessions"] = (
                sessions.writeStream.format("parquet")
                .outputMode("append")
                .option("path", config.sessions_location)
                .option("checkpointLocation", config.checkpoint("sessions"))
                .trigger(processingTime=trigger)
                .queryName(f"sessions-{self._id}")
                .start()
            )
            self._queries["errors"] = (
                error_rows(self._parse(self._read()))
                .writeStream.format("parquet")
                .outputMode("append")
                .option("path", config.errors_location)
                .option("checkpointLocation", config.checkpoint("errors"))
                .trigger(processingTime=trigger)
                .queryName(f"errors-{self._id}")
                .start()
            )
            if config.output_topic:
                # Mirrors the committed Parquet output (the sink's metadata log lists only
                # committed files) rather than aggregating a second time: one stateful
                # computation, and the topic holds exactly the rows the Parquet output does.
                committed = self.spark.readStream.schema(SESSIONS_SCHEMA).parquet(
                    config.sessions_location
                )
                self._queries["kafka"] = (
                    sessions_to_kafka(committed)
                    .writeStream.format("kafka")
                    .outputMode("append")
                    .option("kafka.bootstrap.servers", config.source.bootstrap_servers)
                    .options(**_kafka_client_options(config.source))
                    .option("topic", config.output_topic)
                    .option("checkpointLocation", config.checkpoint("kafka"))
                    .trigger(processingTime=trigger)
                    .queryName(f"sessions-kafka-{self._id}")
                    .start()
                )
        except BaseException:
            self.stop()
            raise
        return self

    def sessions_frame(self) -> DataFrame:
        """The sessions query's streaming DataFrame (columns :data:`SESSIONS_SCHEMA`), with the
        record counts observed for :meth:`metrics`."""
        config = self.config
        counted = self._parse(self._read()).observe(self._metrics_name, *record_counts())
        # Skipped control records (and malformed data) never reach the watermark.
        timed = counted.where(moves_time()).withWatermark(
            "event_time", format_interval(config.watermark_delay_ms)
        )
        barrier = timed.observe(f"{self._metrics_name}_barrier", sf.count(sf.lit(1)).alias("rows"))
        return sessionize_events(barrier, config.gap_ms)

    @property
    def value_schemas(self) -> ValueSchemas | None:
        """The registry's value schemas the job decodes with, fetched by :meth:`start` (None
        for JSON values): a version registered later is not among them (see
        :mod:`progress_control_apps.spark.registry`)."""
        return self._value_schemas

    @property
    def queries(self) -> dict[str, StreamingQuery]:
        """The running queries by role: ``sessions``, ``errors``, optionally ``kafka``."""
        return dict(self._queries)

    @property
    def is_active(self) -> bool:
        """Whether every query of the job is running."""
        return bool(self._queries) and all(q.isActive for q in self._queries.values())

    def raise_if_failed(self) -> None:
        """Raise :class:`StreamFailedError` if any query terminated with an exception."""
        for role, query in self._queries.items():
            failure = query.exception()
            if failure is not None:
                raise StreamFailedError(f"the {role} query failed: {failure}")

    def process_all_available(self) -> None:
        """Block until every query has processed all data available in Kafka right now.

        Sessions closed by that data appear one micro-batch later at most: eviction by an
        advanced watermark happens in the batch after the one that saw the timestamps.
        """
        for query in self._queries.values():
            query.processAllAvailable()

    def sessions(self) -> list[Session]:
        """Sessions committed to the Parquet output so far."""
        self.raise_if_failed()
        return read_sessions(self.spark, self.config.sessions_location)

    def errors(self) -> list[MalformedRecord]:
        """Malformed records committed to the errors output so far."""
        self.raise_if_failed()
        return read_errors(self.spark, self.config.errors_location)

    def metrics(self) -> StreamMetrics:
        """Record counts of the sessions query in this run, from its observed metrics."""
        with self._progress.lock:
            batches = list(self._progress.batches.values())
            watermark = self._progress.watermark_ms
        times = [b.max_event_time_ms for b in batches if b.max_event_time_ms is not None]
        rejected: dict[str, int] = {}
        for batch in batches:
            for reason, count in batch.rejected.items():
                rejected[reason] = rejected.get(reason, 0) + count
        return StreamMetrics(
            batches=len(batches),
            data_records=sum(b.data for b in batches),
            control_records=sum(b.control for b in batches),
            malformed_records=sum(b.malformed for b in batches),
            rejected_control_records=rejected,
            max_event_time_ms=max(times) if times else None,
            watermark_ms=watermark,
        )

    def wait_for_sessions(
        self,
        condition: Callable[[list[Session]], bool],
        timeout_s: float,
        poll_s: float = 0.25,
    ) -> list[Session]:
        """Poll the output until ``condition(sessions)`` holds and return those sessions.

        Raises :class:`TimeoutError` after ``timeout_s`` and :class:`StreamFailedError` as
        soon as a query fails.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            found = self.sessions()
            if condition(found):
                return found
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"no matching sessions after {timeout_s}s; output has {len(found)}: {found}"
                )
            time.sleep(poll_s)

    def await_termination(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for a query to stop (normally: never); ``True`` if one did.
        A failed query raises :class:`StreamFailedError`."""
        deadline = time.monotonic() + timeout_s
        while True:
            self.raise_if_failed()
            if not self.is_active:
                return True
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(remaining, 0.2))

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop every query and the listener, each query between two micro-batches.

        Spark's ``stop()`` interrupts a micro-batch in flight: its tasks are killed, its files
        left half-written (see :mod:`progress_control_apps.spark.output`) and the driver logs
        ``InterruptedException`` traces for a normal stop. So each query is stopped once its
        current trigger is over, waiting up to ``timeout_s`` in all; past that, as Spark does.
        """
        queries, self._queries = self._queries, {}
        deadline = time.monotonic() + timeout_s
        for query in queries.values():
            _await_trigger_end(query, deadline)
            query.stop()
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None

    def _parse(self, raw: DataFrame) -> DataFrame:
        source = self.config.source
        if self._value_schemas is None:  # sessions_frame() before start()
            self._value_schemas = fetch_value_schemas(source.schema, source.topic)
        return parse_records(
            raw, self.config.trust, source.schema, value_schemas=self._value_schemas
        )

    def _read(self) -> DataFrame:
        return read_kafka(
            self.spark,
            self.config.source,
            streaming=True,
            starting_offsets=self.config.starting_offsets,
            max_offsets_per_trigger=self.config.max_offsets_per_trigger,
        )


def _await_trigger_end(query: StreamingQuery, deadline: float) -> None:
    """Wait until ``query`` is between triggers (or stopped), or until ``deadline``."""
    while time.monotonic() < deadline:
        try:
            if not query.isActive or not query.status["isTriggerActive"]:
                return
        except Exception:  # a query failing meanwhile: stop() reports nothing either
            return
        time.sleep(0.05)


def run_stream(spark: SparkSession, config: StreamConfig, duration_s: float) -> StreamResult:
    """Run the streaming job for ``duration_s`` seconds, stop it, and return its outputs.

    Raises :class:`StreamFailedError` if a query fails meanwhile.
    """
    job = SessionizationStream(spark, config).start()
    try:
        job.await_termination(duration_s)
        metrics = job.metrics()
    finally:
        job.stop()
    return StreamResult(
        sessions=read_sessions(spark, config.sessions_location),
        errors=read_errors(spark, config.errors_location),
        metrics=metrics,
    )


def sessions_to_kafka(sessions: DataFrame) -> DataFrame:
    """Session rows as Kafka records: key = user, value = JSON in the streams runtime's format
    ``{"user", "start", "end", "count"}`` (first/last event time in epoch ms)."""
    return sessions.select(
        sf.col("user").alias("key"),
        sf.to_json(
            sf.struct(
                sf.col("user"),
                sf.unix_millis("session_start").alias("start"),
                sf.unix_millis("session_end").alias("end"),
                sf.col("events").alias("count"),
            )
        ).alias("value"),
    )


def read_sessions(spark: SparkSession, path: str) -> list[Session]:
    """Sessions in a Parquet output (streaming or batch); none while it does not exist yet."""
    frame = _read_parquet(spark, path, SESSIONS_SCHEMA)
    return [] if frame is None else collect_sessions(frame)


def read_errors(spark: SparkSession, path: str) -> list[MalformedRecord]:
    """Malformed records in an errors output; none while it does not exist yet."""
    frame = _read_parquet(spark, path, ERRORS_SCHEMA)
    return [] if frame is None else collect_errors(frame)


def _read_parquet(spark: SparkSession, path: str, schema: StructType) -> DataFrame | None:
    # A streaming file sink's directory holds a _spark_metadata log; Spark's reader lists only
    # the files committed there, never a half-written one.
    try:
        return spark.read.schema(schema).parquet(path)
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            return None
        raise


def _kafka_client_options(source: KafkaSource) -> dict[str, str]:
    """The source's ``kafka.*`` client settings (security, ...), for the Kafka sink."""
    return {key: value for key, value in source.options.items() if key.startswith("kafka.")}
