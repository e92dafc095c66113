"""The key of a windowed aggregation's result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = ["Windowed"]

K = TypeVar("K")


@dataclass(frozen=True, slots=True)
class Windowed(Generic[K]):
    """``key`` within the session ``[start, end]`` (both inclusive, epoch milliseconds)."""

    key: K | None
    start: int
    end: int
