"""How a table's updates are suppressed (Kafka Streams' ``Suppressed`` and
``Suppressed.BufferConfig``): until a window closes, or until a time limit."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

__all__ = ["BufferConfig", "Suppressed", "until_time_limit", "until_window_closes"]


@dataclass(frozen=True)
class BufferConfig:
    """The bounds of a suppression's buffer (Kafka Streams' ``Suppressed.BufferConfig``) and
    what happens past them. Make one with :meth:`max_records`, :meth:`max_bytes` or
    :meth:`unbounded`, then refine it::

        BufferConfig.max_records(1_000).with_max_bytes(1 << 20).shut_down_when_full()

    ``record_limit`` and ``byte_limit`` (``None``: no bound) bound how many keys it holds and
    Kafka Streams' estimate of their bytes (serialized keys, values, timestamps and headers).
    ``emit_early``: past a bound, forward the keys buffered longest early (Kafka Streams'
    ``emitEarlyWhenFull``, the default of a bounded buffer); otherwise stop the application
    (``shutDownWhenFull``, the default of an unbounded one). ``logged``: the buffer's store has
    a changelog (the default), so a restart neither loses nor repeats what it held."""

    record_limit: int | None = None
    byte_limit: int | None = None
    emit_early: bool = False
    logged: bool = True

    def __post_init__(self) -> None:
        for name in ("record_limit", "byte_limit"):
            limit = getattr(self, name)
            if limit is not None and limit < 0:
                raise ValueError(f"{name} must be >= 0, got {limit}")

    @staticmethod
    def max_records(records: int) -> BufferConfig:
        """At most ``records`` keys, emitting early when full (``BufferConfig.maxRecords``)."""
        return BufferConfig(record_limit=records, emit_early=True)

    @staticmethod
    def max_bytes(byte_limit: int) -> BufferConfig:
        """At most ``byte_limit`` bytes, emitting early when full (``BufferConfig.maxBytes``)."""
        return BufferConfig(byte_limit=byte_limit, emit_early=True)

    @staticmethod
    def unbounded() -> BufferConfig:
        """No bound (``BufferConfig.unbounded``): memory is the limit."""
        return BufferConfig()

    def with_max_records(self, records: int) -> BufferConfig:
        return dataclasses.replace(self, record_limit=records)

    def with_max_bytes(self, byte_limit: int) -> BufferConfig:
        return dataclasses.replace(self, byte_limit=byte_limit)

    def with_no_bound(self) -> BufferConfig:
        """Neither bound (``withNoBound``)."""
        return dataclasses.replace(self, record_limit=None, byte_limit=None)

    def emit_early_when_full(self) -> BufferConfig:
        """Past a bound, forward the keys buffered longest, before their time limit."""
        return dataclasses.replace(self, emit_early=True)

    def shut_down_when_full(self) -> BufferConfig:
        """Past a bound, stop the application with a
        :class:`~streams_runtime.errors.StreamsError`, rather than emit anything early."""
        return dataclasses.replace(self, emit_early=False)

    def with_logging_disabled(self) -> BufferConfig:
        """No changelog: a restart loses what the buffer held."""
        return dataclasses.replace(self, logged=False)


@dataclass(frozen=True)
class Suppressed:
    """How a table's updates are held back: :func:`until_window_closes` (final results of a
    windowed table, unbounded buffer) or :func:`until_time_limit` (the latest update per key,
    some stream time after the key's first one)."""

    until_window_closes: bool = True
    time_to_wait_ms: int | None = None
    """For :func:`until_time_limit`: how long, in stream time, a key's updates are held."""
    buffer_config: BufferConfig = BufferConfig()


def until_window_closes() -> Suppressed:
    """Emit one final result per window: a session once ``end + gap + grace <= stream time``,
    a time or sliding window once ``end + grace <= stream time``."""
    return Suppressed(until_window_closes=True)


def until_time_limit(time_to_wait_ms: int, buffer_config: BufferConfig) -> Suppressed:
    """Hold each key's updates until ``time_to_wait_ms`` of stream time passed since its first
    held update, then emit its latest (Kafka Streams' ``Suppressed.untilTimeLimit``); the
    buffer is bounded by ``buffer_config``. Control records move stream time, so held updates
    come out on idle inputs too."""
    if time_to_wait_ms < 0:
        raise ValueError(f"time_to_wait_ms must be >= 0, got {time_to_wait_ms}")
    return Suppressed(
        until_window_closes=False, time_to_wait_ms=time_to_wait_ms, buffer_config=buffer_config
    )
