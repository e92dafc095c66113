"""The engine-neutral gate every reader helper puts in front of an engine: is this record a
control record, and may it move time?

A record carrying the ``progress-control`` header is never data, whatever the checks say: an
accepted tick moves time, a rejected one (malformed, too far ahead, unsigned when keys are
required, ...) is skipped, counted per reason and logged once per source by the
:class:`~progress_control.trust.ControlRecordValidator`, as every consumer we ship does
(docs: concepts/trust.md).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Mapping
from dataclasses import dataclass

from progress_control.protocol import HeaderList, has_control_header
from progress_control.trust import ControlRecordValidator, TrustPolicy, Verdict

__all__ = ["TickDecision", "TickGate", "TickGateStats"]


class TickDecision(enum.Enum):
    """What a reader does with one record."""

    DATA = "data"
    """No control header: an ordinary record, for the user's code."""
    TICK = "tick"
    """A valid control record: move time to its timestamp, show it to no user code."""
    SKIP = "skip"
    """A control header that failed validation: drop the record, move nothing."""


@dataclass(frozen=True, slots=True)
class TickGateStats:
    """Counts since the gate was made."""

    ticks: int
    """Control records accepted (each moved time)."""
    rejected: Mapping[Verdict, int]
    """Control records skipped, per reason."""


class TickGate:
    """Classifies records as data, ticks or skipped ticks; thread-safe."""

    def __init__(
        self, policy: TrustPolicy | None = None, *, validator: ControlRecordValidator | None = None
    ) -> None:
        self.validator = validator or ControlRecordValidator(policy)
        self._lock = threading.Lock()
        self._ticks = 0

    def decide(
        self, topic: str, partition: int, timestamp_ms: int, headers: HeaderList | None
    ) -> TickDecision:
        """Decide about one consumed record."""
        if not has_control_header(headers):
            return TickDecision.DATA
        verdict = self.validator.check(topic, partition, timestamp_ms, headers)
        if verdict is not Verdict.ACCEPTED:
            return TickDecision.SKIP
        with self._lock:
            self._ticks += 1
        return TickDecision.TICK

    @property
    def stats(self) -> TickGateStats:
        with self._lock:
            ticks = self._ticks
        return TickGateStats(ticks=ticks, rejected=self.validator.rejected)
