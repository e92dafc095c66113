"""How the streaming job learns its counts: a Spark query listener collects the observed metrics
of each micro-batch (and the watermark after it) into a :class:`BatchProgress`, from which
:meth:`progress_control_apps.spark.stream.SessionizationStream.metrics` sums
:class:`progress_control_apps.spark.stream_config.StreamMetrics`."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from datetime import datetime

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from progress_control_apps.spark.source import RecordCounts
from progress_control_apps.spark.trust import RejectionLog

__all__ = ["BatchProgress", "ProgressListener", "iso_to_ms"]


@dataclass(slots=True)
class BatchProgress:
    """Per-batch counts of one observation, keyed by batch id: a batch re-run after a failure
    reports again under the same id and must not be counted twice."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    batches: dict[int, RecordCounts] = field(default_factory=dict)
    watermark_ms: int | None = None


class ProgressListener(StreamingQueryListener):
    """Collects the observed metrics named ``name`` from query progress events."""

    def __init__(self, name: str, progress: BatchProgress, rejections: RejectionLog) -> None:
        self._name = name
        self._progress = progress
        self._rejections = rejections

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 (Spark's API)
        """Nothing to record at start."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802 (Spark's API)
        """Record one micro-batch's counts and the watermark after it."""
        progress = event.progress
        row = progress.observedMetrics.get(self._name)
        if row is None:  # another query's progress
            return
        counts = RecordCounts.from_metrics(row)
        self._rejections.report(counts.samples)
        watermark = progress.eventTime.get("watermark")
        with self._progress.lock:
            self._progress.batches[progress.batchId] = counts
            if watermark:
                self._progress.watermark_ms = iso_to_ms(watermark)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802 (Spark's API)
        """Idle triggers carry no metrics."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802 (Spark's API)
        """Failures are read from the queries themselves."""


def iso_to_ms(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)
