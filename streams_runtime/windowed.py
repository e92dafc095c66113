"""The key of a windowed aggregation's result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Windowed"]

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """``key`` within a window, in epoch milliseconds: a session or sliding window ``[start,
    end]`` (both bounds inclusive), or a time window ``[start, end)`` (``end = start + size``,
    exclusive), as Kafka Streams' ``SessionWindow``, ``TimeWindow`` and sliding windows."""

    key: K | None
    start: int
    end: int
