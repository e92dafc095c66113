"""What the streaming sessionization job (:mod:`progress_control_apps.spark.stream`) is given and
gives back: its settings (:class:`StreamConfig`), its counts (:class:`StreamMetrics`), the outputs
of a timed run (:class:`StreamResult`) and the error a failed query raises."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from progress_control.trust import TrustPolicy
from progress_control_apps.spark.sessionize import Session
from progress_control_apps.spark.source import KafkaSource, MalformedRecord

__all__ = ["StreamConfig", "StreamFailedError", "StreamMetrics", "StreamResult"]


class StreamFailedError(RuntimeError):
    """A query of the streaming job terminated with an exception."""


@dataclass(frozen=True, slots=True)
class StreamConfig:
    """Settings of one streaming sessionization job.

    Outputs go to ``{output_dir}/sessions`` and ``{output_dir}/errors`` unless ``sessions_path``
    / ``errors_path`` say otherwise; checkpoints to ``{checkpoint_dir}/sessions``, ``/errors``
    and ``/kafka``. Paths may be any Hadoop URI (``s3a://``, ``hdfs://``) on a cluster. Restarting
    with the same checkpoints resumes where the job stopped; a checkpoint fixes the number of
    state partitions (``spark.sql.shuffle.partitions`` at its creation).
    """

    source: KafkaSource
    gap_ms: int
    output_dir: str
    checkpoint_dir: str
    watermark_delay_ms: int = 0
    """How far behind the latest timestamp (data or control) the watermark trails: the allowed
    lateness. Rows older than the watermark are dropped as late."""
    trigger_interval_ms: int = 1000
    starting_offsets: str = "earliest"
    max_offsets_per_trigger: int | None = None
    output_topic: str | None = None
    """Also write sessions to this Kafka topic (same cluster), as JSON."""
    sessions_path: str | None = None
    errors_path: str | None = None
    trust: TrustPolicy = field(default_factory=TrustPolicy)
    """Which control records move the watermark (:class:`progress_control.trust.TrustPolicy`;
    :meth:`progress_control_apps.spark.settings.SparkJobSettings.trust_policy` reads it from the
    environment)."""

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise ValueError(f"gap_ms must be positive, got {self.gap_ms}")
        if self.watermark_delay_ms < 0:
            raise ValueError(f"watermark_delay_ms must be >= 0, got {self.watermark_delay_ms}")
        if self.trigger_interval_ms <= 0:
            raise ValueError(
                f"trigger_interval_ms must be positive, got {self.trigger_interval_ms}"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger <= 0:
            raise ValueError("max_offsets_per_trigger must be positive")

    @property
    def sessions_location(self) -> str:
        return self.sessions_path or _join(self.output_dir, "sessions")

    @property
    def errors_location(self) -> str:
        return self.errors_path or _join(self.output_dir, "errors")

    def checkpoint(self, query: str) -> str:
        """Checkpoint location of one of the job's queries."""
        return _join(self.checkpoint_dir, query)


@dataclass(frozen=True, slots=True)
class StreamMetrics:
    """Counts over the records the sessions query processed in this run (all micro-batches)."""

    batches: int = 0
    data_records: int = 0
    control_records: int = 0
    malformed_records: int = 0
    rejected_control_records: Mapping[str, int] = field(default_factory=dict)
    """Control records skipped (neither data nor time) per reason, e.g. ``future-timestamp``;
    only reasons that occurred."""
    max_event_time_ms: int | None = None
    """Latest timestamp that moved time: data and accepted control records."""
    watermark_ms: int | None = None
    """The watermark after the latest micro-batch."""

    @property
    def control_records_skipped(self) -> int:
        """All skipped control records, whatever the reason."""
        return sum(self.rejected_control_records.values())


@dataclass(frozen=True, slots=True)
class StreamResult:
    """What :func:`run_stream` saw when it stopped the job."""

    sessions: list[Session]
    errors: list[MalformedRecord]
    metrics: StreamMetrics


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"
