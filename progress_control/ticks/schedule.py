"""When the n-th control record of an idle period is due: pure arithmetic, no clocks."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["TickSchedule"]


@dataclass(frozen=True, slots=True)
class TickSchedule:
    """Offsets of ticks from the last data ack.

    Tick 0 is due ``start_ms`` after the ack; tick ``n`` follows tick ``n - 1`` by ``backoff_ms``
    (fixed) or ``backoff_ms * multiplier ** (n - 1)`` (exponential). There are at most
    ``max_records`` ticks, none later than ``end_ms`` after the ack.
    """

    start_ms: int
    backoff_ms: int
    exponential: bool = False
    multiplier: float = 2.0
    max_records: int | None = None
    end_ms: int | None = None

    def __post_init__(self) -> None:
        if self.max_records is None and self.end_ms is None:
            raise ValueError("an unbounded schedule: set max_records or end_ms")
        if self.multiplier < 1.0:
            raise ValueError(f"multiplier must be >= 1, got {self.multiplier}")

    def spacing_ms(self, tick: int) -> float:
        """Gap between tick ``tick - 1`` and tick ``tick`` (``tick >= 1``)."""
        if not self.exponential:
            return float(self.backoff_ms)
        return self.backoff_ms * self.multiplier ** (tick - 1)

    def offset_ms(self, tick: int) -> float | None:
        """Time after the last data ack at which tick number ``tick`` (0-based) is due, or
        ``None`` when the schedule has ended."""
        if self.max_records is not None and tick >= self.max_records:
            return None
        if self.exponential and self.multiplier > 1.0:
            grown = (self.multiplier**tick - 1) / (self.multiplier - 1)
            offset = self.start_ms + self.backoff_ms * grown
        else:
            offset = float(self.start_ms + self.backoff_ms * tick)
        if self.end_ms is not None and offset > self.end_ms:
            return None
        return offset

    def ticks_due_by(self, elapsed_ms: float) -> int:
        """How many ticks are due within ``elapsed_ms`` of the last data ack: the schedule
        position of a partition idle that long (all of them once the schedule has ended)."""
        if self.end_ms is not None:
            elapsed_ms = min(elapsed_ms, self.end_ms)  # no tick is ever due after end_ms
        if elapsed_ms < self.start_ms:
            return 0
        # Closed form (an idle of hours must not loop per tick), then corrected for rounding.
        if self.exponential and self.multiplier > 1.0:
            grown = 1 + (elapsed_ms - self.start_ms) * (self.multiplier - 1) / self.backoff_ms
            estimate = int(math.log(grown) / math.log(self.multiplier)) + 1
        else:
            estimate = int((elapsed_ms - self.start_ms) // self.backoff_ms) + 1
        if self.max_records is not None:
            estimate = min(estimate, self.max_records)
        while estimate > 0 and not self._due(estimate - 1, elapsed_ms):
            estimate -= 1
        while self._due(estimate, elapsed_ms):
            estimate += 1
        return estimate

    def _due(self, tick: int, elapsed_ms: float) -> bool:
        offset = self.offset_ms(tick)
        return offset is not None and offset <= elapsed_ms
