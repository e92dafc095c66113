"""Durations and instants as people type them on a command line: ``30s``, ``500ms``, ``2m``,
``2024-05-01T10:00:00Z``.

Pure functions (no Spark), so the CLI can validate its options before starting a JVM.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

__all__ = ["format_interval", "parse_duration_ms", "parse_instant_ms"]

_UNIT_MS: dict[str, int] = {
    "ms": 1,
    "millisecond": 1,
    "milliseconds": 1,
    "s": 1_000,
    "sec": 1_000,
    "secs": 1_000,
    "second": 1_000,
    "seconds": 1_000,
    "m": 60_000,
    "min": 60_000,
    "mins": 60_000,
    "minute": 60_000,
    "minutes": 60_000,
    "h": 3_600_000,
    "hr": 3_600_000,
    "hour": 3_600_000,
    "hours": 3_600_000,
    "d": 86_400_000,
    "day": 86_400_000,
    "days": 86_400_000,
}
_DURATION = re.compile(r"^\s*(?P<number>\d+(?:\.\d+)?)\s*(?P<unit>[a-z]+)\s*$")


def parse_duration_ms(text: str) -> int:
    """Parse ``30s``, ``500ms``, ``1.5s``, ``2m``, ``1h``, ``1d`` (or ``0``) into milliseconds.

    A unit is required (a bare ``30`` could mean seconds or milliseconds); fractions must come
    out as whole milliseconds. Raises :class:`ValueError` with the accepted forms.
    """
    if text.strip() == "0":
        return 0
    match = _DURATION.match(text.lower())
    if match is None or match["unit"] not in _UNIT_MS:
        raise ValueError(
            f"not a duration: {text!r} (expected a number and a unit, e.g. 30s, 500ms, 2m, 1h)"
        )
    try:
        millis = Decimal(match["number"]) * _UNIT_MS[match["unit"]]
    except InvalidOperation as exc:  # pragma: no cover - the regex only admits decimals
        raise ValueError(f"not a duration: {text!r}") from exc
    if millis != millis.to_integral_value():
        raise ValueError(f"duration {text!r} is not a whole number of milliseconds")
    return int(millis)


def format_interval(millis: int) -> str:
    """A Spark interval string (``'30000 milliseconds'``) for a duration in milliseconds."""
    if millis < 0:
        raise ValueError(f"a Spark interval must not be negative: {millis} ms")
    return f"{millis} milliseconds"


def parse_instant_ms(text: str) -> int:
    """Parse epoch milliseconds (``1714557600000``) or ISO-8601 (``2024-05-01T10:00:00Z``;
    without an offset, UTC) into epoch milliseconds."""
    stripped = text.strip()
    if re.fullmatch(r"-?\d+", stripped):
        return int(stripped)
    try:
        parsed = datetime.fromisoformat(stripped)
    except ValueError as exc:
        raise ValueError(
            f"not a point in time: {text!r} (expected epoch milliseconds or ISO-8601, "
            "e.g. 2024-05-01T10:00:00Z)"
        ) from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return round(parsed.timestamp() * 1000)
