"""PySpark sessionization jobs over the runtime's output, via Spark's Kafka connector.

Control records (see :mod:`progress_control.protocol`) advance the streaming job's watermark and
are dropped before aggregation, so sessions close after the gap even when no new data arrives.
They are validated first (:mod:`progress_control_apps.spark.trust`, the rules of
:mod:`progress_control.trust`); one that fails is neither data nor time, only counted and logged.
Which ones pass is a :class:`progress_control.trust.TrustPolicy` (``StreamConfig.trust``,
``run_batch(trust=...)``), read from ``PROGRESS_CONTROL_SPARK_*`` env variables by
:func:`load_job_settings`.

Typical use::

    from progress_control_apps.spark import KafkaSource, StreamConfig, run_stream, spark_session

    spark = spark_session("local[2]")
    result = run_stream(
        spark,
        StreamConfig(KafkaSource("localhost:9092", "clicks"), gap_ms=30_000,
                     output_dir="/tmp/out", checkpoint_dir="/tmp/ckpt"),
        duration_s=60,
    )
    for session in result.sessions: ...
"""

from progress_control.extras import require_extra as _require_extra

_require_extra("spark", "progress_control_apps.spark", "pyspark")

from progress_control_apps.spark.batch import BatchRange, BatchResult, batch_sessions, run_batch
from progress_control_apps.spark.durations import (
    format_interval,
    parse_duration_ms,
    parse_instant_ms,
)
from progress_control_apps.spark.input_schema import InputSchema
from progress_control_apps.spark.output import committed_files
from progress_control_apps.spark.reconcile import (
    Difference,
    DifferenceKind,
    ReconciliationReport,
    RuntimeSession,
    read_runtime_sessions,
    reconcile,
    reconcile_topics,
)
from progress_control_apps.spark.session import connector_jars, spark_session
from progress_control_apps.spark.sessionize import (
    Session,
    collect_sessions,
    sessionize,
    sessionize_events,
)
from progress_control_apps.spark.settings import SparkJobSettings, load_job_settings
from progress_control_apps.spark.source import (
    KafkaSource,
    MalformedRecord,
    RecordCounts,
    parse_records,
    read_kafka,
)
from progress_control_apps.spark.stream import (
    SessionizationStream,
    StreamConfig,
    StreamFailedError,
    StreamMetrics,
    StreamResult,
    read_errors,
    read_sessions,
    run_stream,
)

__all__ = [
    "BatchRange",
    "BatchResult",
    "Difference",
    "DifferenceKind",
    "InputSchema",
    "KafkaSource",
    "MalformedRecord",
    "ReconciliationReport",
    "RecordCounts",
    "RuntimeSession",
    "Session",
    "SessionizationStream",
    "SparkJobSettings",
    "StreamConfig",
    "StreamFailedError",
    "StreamMetrics",
    "StreamResult",
    "batch_sessions",
    "collect_sessions",
    "committed_files",
    "connector_jars",
    "format_interval",
    "load_job_settings",
    "parse_duration_ms",
    "parse_instant_ms",
    "parse_records",
    "read_errors",
    "read_kafka",
    "read_runtime_sessions",
    "read_sessions",
    "reconcile",
    "reconcile_topics",
    "run_batch",
    "run_stream",
    "sessionize",
    "sessionize_events",
    "spark_session",
]
