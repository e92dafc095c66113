"""The runtime half of the main job: per-user sessions of clicks, final results only, plus the
validated click stream for Spark."""

from __future__ import annotations

from typing import Any

from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Json, Serde, String

__all__ = ["sessionization"]


def _valid(user: str | None, click: Any) -> bool:
    return user is not None and isinstance(click, dict) and isinstance(click.get("ts"), int)


def sessionization(
    clicks: str,
    events: str,
    sessions: str,
    gap_ms: int,
    serdes: tuple[Serde[Any], Serde[Any], Serde[Any]] | None = None,
) -> StreamsBuilder:
    """``clicks`` (key user, value ``{user, page, ts}``) → valid clicks to ``events`` (Spark's
    input, ticked by progress propagation) and closed sessions ``{user, start, end, count}`` to
    ``sessions``. ``serdes``: key, click and session serdes (default string keys, JSON)."""
    key_serde, click_serde, session_serde = serdes or (String(), Json(), Json())
    builder = StreamsBuilder(default_key_serde=key_serde, default_value_serde=click_serde)
    valid = builder.stream(clicks).filter(_valid)
    valid.to(events)
    (
        valid.group_by_key()
        .windowed_by(SessionWindows(gap_ms=gap_ms))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"user": w.key, "start": w.start, "end": w.end, "count": n}))
        .to(sessions, value_serde=session_serde)
    )
    return builder
