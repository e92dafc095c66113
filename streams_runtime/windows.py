"""Window specifications and their arithmetic (docs/runtime/windows.md): pure functions of
timestamps, no state.

Session windows (:class:`SessionWindows`), time windows (:class:`TimeWindows`, tumbling or
hopping), sliding windows (:class:`SlidingWindows`) and the windows of a stream-stream join
(:class:`JoinWindows`), each as Kafka Streams defines them.


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

__all__ = [
    "JoinWindows",
    "SessionWindow",
    "SessionWindows",
    "SlidingWindows",
    "TimeWindows",
    "WindowSpec",
    "merge_sessions",
]

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
    def output_lag_ms(self) -> int:
        """How far behind the latest time seen an aggregation's output can be stamped:
        ``gap + grace`` (a record can still replace sessions ending that early)."""
        return self.gap_ms + self.grace_ms

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


def _check_grace(grace_ms: int) -> None:
    if grace_ms < 0:
        raise ValueError(f"grace_ms must be >= 0, got {grace_ms}")


@dataclass(frozen=True, slots=True)
class TimeWindows:
    """Fixed-size windows ``[start, start + size)`` starting every ``advance_ms`` from the epoch:
    tumbling when ``advance_ms == size_ms`` (the default), hopping when smaller (Kafka Streams'
    ``TimeWindows``). A window closes once ``end + grace <= stream time``.

    ``size_ms`` must be positive, ``0 < advance_ms <= size_ms``, ``grace_ms >= 0``
    (``ValueError`` otherwise).
    """

    size_ms: int
    advance_ms: int = 0  # 0: tumbling (advance = size)
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.size_ms <= 0:
            raise ValueError(f"size_ms must be > 0, got {self.size_ms}")
        if self.advance_ms == 0:
            object.__setattr__(self, "advance_ms", self.size_ms)
        if not 0 < self.advance_ms <= self.size_ms:
            raise ValueError(
                f"advance_ms must be > 0 and <= size_ms ({self.size_ms}), got {self.advance_ms}"
            )
        _check_grace(self.grace_ms)

    @classmethod
    def of_size(cls, size: int | timedelta, grace: int | timedelta = 0) -> TimeWindows:
        """Tumbling windows of ``size`` with a ``grace`` period (``ofSizeAndGrace``); call
        :meth:`advance_by` for hopping ones. Plain ints are milliseconds."""
        return cls(size_ms=_to_ms(size, "size"), grace_ms=_to_ms(grace, "grace"))

    def advance_by(self, advance: int | timedelta) -> TimeWindows:
        """The same windows, hopping by ``advance`` instead of their size."""
        return TimeWindows(self.size_ms, _to_ms(advance, "advance"), self.grace_ms)

    def is_late(self, end: int, stream_time: int) -> bool:
        """Whether the window ending (exclusively) at ``end`` no longer takes records at
        ``stream_time``: ``end + grace <= stream_time`` (``KStreamWindowAggregate``)."""
        return end + self.grace_ms <= stream_time

    def is_final(self, end: int, stream_time: int) -> bool:
        """Whether the window ending at ``end`` is closed, its final result due:
        ``end + grace <= stream_time`` (``untilWindowCloses``). Same as :meth:`is_late`."""
        return end + self.grace_ms <= stream_time

    def window_starts(self, timestamp: int) -> range:
        """The starts of every window containing ``timestamp`` (``>= 0``), ascending."""
        first = max(0, timestamp - self.size_ms + self.advance_ms)
        first -= first % self.advance_ms
        return range(first, timestamp + 1, self.advance_ms)

    @property
    def output_lag_ms(self) -> int:
        """How far behind the latest time seen an aggregation's output can be stamped: ``size +
        grace`` (an update is stamped no earlier than its window's start)."""
        return self.size_ms + self.grace_ms

    @property
    def retention_ms(self) -> int:
        """How long (in stream time) after its start a window is kept: ``size + grace``, the
        default retention of Kafka Streams' window stores."""
        return self.size_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class SlidingWindows:
    """Windows of ``time_difference_ms`` that slide with the records (Kafka Streams'
    ``SlidingWindows``): two records fall into one window when their timestamps differ by at most
    the time difference. Windows ``[start, end]`` include both bounds and close once
    ``end + grace <= stream time``.

    ``time_difference_ms`` must be positive and ``grace_ms`` non-negative (``ValueError``).
    """

    time_difference_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.time_difference_ms <= 0:
            raise ValueError(f"time_difference_ms must be > 0, got {self.time_difference_ms}")
        _check_grace(self.grace_ms)

    @classmethod
    def of_time_difference(
        cls, difference: int | timedelta, grace: int | timedelta = 0
    ) -> SlidingWindows:
        """``ofTimeDifferenceAndGrace``; plain ints are milliseconds."""
        return cls(_to_ms(difference, "difference"), _to_ms(grace, "grace"))

    def is_late(self, end: int, stream_time: int) -> bool:
        """Whether the window ending (inclusively) at ``end`` no longer takes records at
        ``stream_time``: ``end + grace < stream_time`` (``KStreamSlidingWindowAggregate``)."""
        return end + self.grace_ms < stream_time

    def is_final(self, end: int, stream_time: int) -> bool:
        """Whether the window ending at ``end`` has its final result due: ``end + grace <=
        stream_time``, the ``untilWindowCloses`` rule Kafka Streams applies to every window.

        One millisecond before the aggregation stops taking records (:meth:`is_late`), as in
        Kafka Streams: a record at exactly ``end + grace`` still updates the window, and a
        suppression then emits it a second time."""
        return end + self.grace_ms <= stream_time

    @property
    def output_lag_ms(self) -> int:
        """How far behind the latest time seen an aggregation's output can be stamped: ``time
        difference + grace`` (an update is stamped no earlier than its window's start)."""
        return self.time_difference_ms + self.grace_ms

    @property
    def retention_ms(self) -> int:
        """How long (in stream time) after its start a window is kept: ``2 * time difference +
        grace``, as Kafka Streams' sliding-window stores (a window's end is a time difference
        after its start, and the window after a record reaches another one further)."""
        return 2 * self.time_difference_ms + self.grace_ms


@dataclass(frozen=True, slots=True)
class JoinWindows:
    """The windows of a stream-stream join (Kafka Streams' ``JoinWindows``): a record at ``t``
    joins the other side's records from ``t - before_ms`` to ``t + after_ms`` (bounds included).
    Records are kept for joins until ``t + after + grace`` (left side) or ``t + before +
    grace`` (right side) is below stream time; left and outer joins emit a record that found no
    partner by then.

    ``before_ms + after_ms`` must not be negative, ``grace_ms >= 0`` (``ValueError``).
    """

    before_ms: int
    after_ms: int
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise ValueError(
                f"before_ms + after_ms must be >= 0, got {self.before_ms} + {self.after_ms}"
            )
        _check_grace(self.grace_ms)

    @classmethod
    def of_time_difference(
        cls, difference: int | timedelta, grace: int | timedelta = 0
    ) -> JoinWindows:
        """Symmetric windows: ``before = after = difference`` (``ofTimeDifferenceAndGrace``);
        plain ints are milliseconds."""
        ms = _to_ms(difference, "difference")
        return cls(ms, ms, _to_ms(grace, "grace"))

    def before(self, before: int | timedelta) -> JoinWindows:
        """The same windows reaching ``before`` back in time from a left record."""
        return JoinWindows(_to_ms(before, "before"), self.after_ms, self.grace_ms)

    def after(self, after: int | timedelta) -> JoinWindows:
        """The same windows reaching ``after`` ahead in time from a left record."""
        return JoinWindows(self.before_ms, _to_ms(after, "after"), self.grace_ms)

    @property
    def size_ms(self) -> int:
        """``before + after``."""
        return self.before_ms + self.after_ms

    @property
    def retention_ms(self) -> int:
        """How long (in stream time) each side's buffered records are kept: ``before + after +
        grace``, as Kafka Streams' join stores."""
        return self.size_ms + self.grace_ms


WindowSpec = SessionWindows | TimeWindows | SlidingWindows
"""The windows of a windowed aggregation (what a suppression needs: ``is_final``)."""
