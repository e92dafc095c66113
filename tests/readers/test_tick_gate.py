"""The engine-neutral gate of the reader helpers (progress_control/readers/tick_gate.py)."""

from __future__ import annotations

from progress_control.protocol import CONTROL_HEADER, ControlMarker
from progress_control.readers.tick_gate import TickDecision, TickGate
from progress_control.trust import (
    ControlRecordSource,
    ControlRecordValidator,
    SigningKey,
    TrustPolicy,
    Verdict,
)

NOW = 1_000_000
KEY = SigningKey("k1", b"0123456789abcdef")


def _gate(policy: TrustPolicy | None = None) -> TickGate:
    return TickGate(validator=ControlRecordValidator(policy, clock_ms=lambda: NOW))


def _tick_headers(source: ControlRecordSource, timestamp_ms: int) -> list[tuple[str, bytes]]:
    record = source.record("t", 0, timestamp_ms)
    return [(CONTROL_HEADER, record.marker.encode())]


def test_records_without_the_header_are_data_and_counted_nowhere() -> None:
    gate = _gate()
    assert gate.decide("t", 0, NOW, None) is TickDecision.DATA
    assert gate.decide("t", 0, NOW, [("other", b"x")]) is TickDecision.DATA
    assert gate.stats.ticks == 0
    assert gate.stats.rejected == {}


def test_valid_ticks_move_time_and_are_counted() -> None:
    gate = _gate()
    headers = _tick_headers(ControlRecordSource("s"), NOW - 10)
    assert gate.decide("t", 0, NOW - 10, headers) is TickDecision.TICK
    assert gate.stats.ticks == 1


def test_a_header_that_fails_validation_is_skipped_never_data() -> None:
    gate = _gate()
    too_far = NOW + 300_001
    skip = TickDecision.SKIP
    assert gate.decide("t", 0, too_far, _tick_headers(ControlRecordSource("s"), too_far)) is skip
    assert gate.decide("t", 0, NOW, [(CONTROL_HEADER, b"\x01")]) is skip
    assert gate.decide("t", 0, -1, _tick_headers(ControlRecordSource("s"), 0)) is skip
    assert gate.stats.ticks == 0
    assert gate.stats.rejected == {
        Verdict.FUTURE_TIMESTAMP: 1,
        Verdict.MALFORMED: 1,
        Verdict.NEGATIVE_TIMESTAMP: 1,
    }


def test_with_keys_only_ticks_signed_for_this_partition_and_time_pass() -> None:
    gate = _gate(TrustPolicy(verification_keys={KEY.key_id: KEY.secret}))
    signed = ControlRecordSource("s", signing_key=KEY)
    assert gate.decide("t", 0, NOW, _tick_headers(signed, NOW)) is TickDecision.TICK
    # re-dated, or unsigned: skipped
    assert gate.decide("t", 0, NOW - 1, _tick_headers(signed, NOW)) is TickDecision.SKIP
    unsigned = [(CONTROL_HEADER, ControlMarker("s", 0).encode())]
    assert gate.decide("t", 0, NOW, unsigned) is TickDecision.SKIP
    assert gate.stats.rejected == {Verdict.BAD_SIGNATURE: 1, Verdict.UNSIGNED: 1}
