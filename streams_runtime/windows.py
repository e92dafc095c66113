"""Session-window arithmetic (DESIGN §5): pure functions of timestamps, no state.

Sessions are closed intervals ``[start, end]`` in milliseconds. A record at ``t`` merges with every
session where ``start - gap <= t <= end + gap``; the merged session is late (the record is
dropped) when its end is before ``stream_time - grace - gap``; a session's final result is due
once ``end + gap + grace <= stream_time``. These mirror Kafka Streams' ``SessionWindows``,
``KStreamSessionWindowAggregate`` and the session-window ``untilWindowCloses`` suppression.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

__all__ = ["SessionWindow", "SessionWindows", "merge_sessions"]

_ONE_MS = timedelta(milliseconds=1)


def _to_ms(value: int | timedelta, name: str) -> int:
    if isinstance(value, timedelta):
        # Truncate like java.time.Duration.toMillis(); sub-millisecond parts cannot be represented.
        return value // _ONE_MS
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int (milliseconds) or a timedelta, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class SessionWindows:
    """Session-window specification: an inactivity gap and a grace period, in milliseconds.

    ``gap_ms`` must be positive and ``grace_ms`` non-negative (``ValueError`` otherwise).
    """

    gap_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.gap_ms <= 0:
            raise ValueError(f"gap_ms must be > 0, got {self.gap_ms}")
        if self.grace_ms < 0:
            raise ValueError(f"grace_ms must be >= 0, got {self.grace_ms}")

    @classmethod
    def with_inactivity_gap(
        cls, gap: int | timedelta, grace: int | timedelta = 0
    ) -> SessionWindows:
        """Build from an inactivity gap and optional grace period; plain ints are milliseconds."""
        return cls(gap_ms=_to_ms(gap, "gap"), grace_ms=_to_ms(grace, "grace"))

    def close_time(self, stream_time: int) -> int:
        """The earliest merged-session end accepted at ``stream_time``: ``stream_time - grace -
        gap``.

        Merged sessions ending strictly before this are late; ending exactly at it is on time.
        """
        return stream_time - self.grace_ms - self.gap_ms

    def is_late(self, merged_end: int, stream_time: int) -> bool:
        """Whether a record whose merged session ends at ``merged_end`` is late and must be dropped.

        Only the merged session's end matters, as in Kafka Streams: a record far behind stream
        time is still accepted if it merges into a session that ends recently enough.
        """
        return merged_end < self.close_time(stream_time)

    def is_final(self, end: int, stream_time: int) -> bool:
        """Whether a session ending at ``end`` is closed at ``stream_time``: ``end + gap + grace <=
        stream_time`` (the session-window ``untilWindowCloses`` rule of Kafka Streams).

        Monotone in ``stream_time``. A session is final exactly when it leaves retention
        (:attr:`retention_ms`): no later record merges into it, as in Kafka Streams, whose session
        stores no longer return it. A record that would have merged starts a session of its own.
        """
        return end + self.gap_ms + self.grace_ms <= stream_time

    @property
    def retention_ms(self) -> int:
        """How long (in stream time) after its end a session is kept, and can still merge:
        ``gap + grace``, the default retention of Kafka Streams' session stores. A session is
        retained while ``end > stream_time - retention_ms``, that is until it is final."""
        return self.gap_ms + self.grace_ms


@dataclass(frozen=True, slots=True, order=True)
class SessionWindow:
    """One session, the closed interval ``[start, end]`` (``start <= end``, ``ValueError``
    otherwise). Orders by ``(start, end)``."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start > self.end:
            raise ValueError(f"session start {self.start} is after its end {self.end}")

    def can_merge(self, t: int, gap_ms: int) -> bool:
        """Whether a record at ``t`` merges with this session: ``start - gap <= t <= end + gap``."""
        return self.start - gap_ms <= t <= self.end + gap_ms

    def contains(self, t: int) -> bool:
        """Whether ``t`` lies inside the session (bounds included)."""
        return self.start <= t <= self.end


def merge_sessions(timestamp: int, sessions: Iterable[SessionWindow]) -> SessionWindow:
    """The session a record at ``timestamp`` forms with ``sessions`` (those it merges with).

    ``start = min(timestamp, starts)`` and ``end = max(timestamp, ends)``; with no sessions this
    is the single-point session ``[timestamp, timestamp]``. Callers select the sessions with
    :meth:`SessionWindow.can_merge`; this function does not re-check the gap.
    """
    start = end = timestamp
    for session in sessions:
        start = min(start, session.start)
        end = max(end, session.end)
    return SessionWindow(start, end)
