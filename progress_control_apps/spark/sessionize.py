"""Session windows over click events: the aggregation shared by the streaming and batch jobs.

A session is Spark's ``session_window(event_time, gap)`` per user: every event opens a window
``[t, t + gap)`` and overlapping windows merge. Output columns (:data:`SESSION_COLUMNS`):
``session_start``/``session_end`` are the first and last event time, ``window_start``/``window_end``
Spark's window bounds (``window_end = session_end + gap``), ``events`` the count.

Merging matches the streams runtime (Kafka Streams semantics: inclusive ``[start, end]``, an
event at ``t`` joins when ``start - gap <= t <= end + gap``): Spark merges windows that touch
(next window start <= current session's window end), so an event exactly ``gap`` after the last
one joins the session. The one boundary difference is in streaming: a session is emitted and
forgotten once the watermark reaches its window end (``last event + gap``), and a row *at* the
watermark is not late (late is strictly before it). An event at exactly ``last event + gap`` that
arrives after a tick (or any record) moved the watermark there starts a new session, exactly
``gap`` after the emitted one; a batch over the same records merges them. See
:mod:`progress_control_apps.spark.reconcile`, which reports such splits instead of hiding them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as sf

from progress_control_apps.spark.durations import format_interval

__all__ = [
    "SESSION_COLUMNS",
    "Session",
    "collect_sessions",
    "data_rows",
    "sessionize",
    "sessionize_events",
]

SESSION_COLUMNS = ("user", "session_start", "session_end", "window_start", "window_end", "events")


@dataclass(frozen=True, slots=True, order=True)
class Session:
    """One session as Spark computed it, times in epoch milliseconds."""

    user: str
    start_ms: int
    """First event time (``session_start``)."""
    end_ms: int
    """Last event time (``session_end``)."""
    events: int
    window_start_ms: int
    window_end_ms: int
    """``end_ms + gap``: the session closes once the watermark reaches this."""


def data_rows(parsed: DataFrame) -> DataFrame:
    """Valid click events only: control records and malformed records dropped.

    In a streaming query this must come *after* ``withWatermark`` and a barrier that keeps the
    optimizer from pushing the filter below the watermark (see
    :mod:`progress_control_apps.spark.stream`): control records exist to advance the watermark.
    """
    return parsed.where(~sf.col("is_control") & sf.col("error").isNull())


def sessionize(events: DataFrame, gap_ms: int) -> DataFrame:
    """Per-user session windows of ``events`` (columns ``user``, ``event_time``; data only).

    Works on batch and streaming DataFrames alike (a stream needs a watermark on ``event_time``
    for append output).
    """
    if gap_ms <= 0:
        raise ValueError(f"the session gap must be positive, got {gap_ms} ms")
    window = sf.session_window(sf.col("event_time"), format_interval(gap_ms))
    return (
        events.groupBy(window.alias("window"), sf.col("user"))
        .agg(
            sf.min("event_time").alias("session_start"),
            sf.max("event_time").alias("session_end"),
            sf.count(sf.lit(1)).alias("events"),
        )
        .select(
            "user",
            "session_start",
            "session_end",
            sf.col("window.start").alias("window_start"),
            sf.col("window.end").alias("window_end"),
            "events",
        )
    )


def sessionize_events(parsed: DataFrame, gap_ms: int) -> DataFrame:
    """Sessions of parsed records (:func:`progress_control_apps.spark.source.parse_records`
    columns): the job's sessionization, control and malformed records excluded."""
    return sessionize(data_rows(parsed), gap_ms)


def collect_sessions(sessions: DataFrame) -> list[Session]:
    """Bring session rows (:data:`SESSION_COLUMNS`) to the driver, sorted by user and start.

    Times travel as epoch milliseconds: collecting Spark timestamps would turn them into naive
    datetimes in the Python process's local time zone.
    """
    rows = sessions.select(
        "user",
        sf.unix_millis("session_start").alias("start_ms"),
        sf.unix_millis("session_end").alias("end_ms"),
        "events",
        sf.unix_millis("window_start").alias("window_start_ms"),
        sf.unix_millis("window_end").alias("window_end_ms"),
    ).collect()
    return sorted(
        Session(
            user=row["user"],
            start_ms=row["start_ms"],
            end_ms=row["end_ms"],
            events=row["events"],
            window_start_ms=row["window_start_ms"],
            window_end_ms=row["window_end_ms"],
        )
        for row in rows
    )
