"""Pure logic of control-record validation and signing (no broker)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress_control.protocol import (
    CONTROL_HEADER,
    DEFAULT_SENTINEL_KEY,
    ControlMarker,
    ControlRecord,
    parse_control_headers,
)
from progress_control.trust import (
    ControlRecordSource,
    ControlRecordValidator,
    SigningKey,
    TrustPolicy,
    Verdict,
    allowed_sources,
    parse_keys,
    sign,
)

NOW = 1_800_000_000_000
KEY = SigningKey("k1", b"0123456789abcdef-secret")


def _headers(marker: ControlMarker) -> list[tuple[str, bytes]]:
    return [(CONTROL_HEADER, marker.encode())]


def _validator(**policy: object) -> ControlRecordValidator:
    return ControlRecordValidator(TrustPolicy(**policy), clock_ms=lambda: NOW)  # type: ignore[arg-type]


def test_a_well_formed_tick_in_the_past_or_near_future_is_accepted() -> None:
    validator = _validator()
    headers = _headers(ControlMarker("app", 0))
    assert validator.check("t", 0, 0, headers) is Verdict.ACCEPTED
    assert validator.check("t", 0, NOW + 300_000, headers) is Verdict.ACCEPTED
    assert validator.rejected == {}


@pytest.mark.parametrize(
    ("timestamp", "headers", "verdict"),
    [
        (-1, _headers(ControlMarker("app", 0)), Verdict.NEGATIVE_TIMESTAMP),
        (NOW + 300_001, _headers(ControlMarker("app", 0)), Verdict.FUTURE_TIMESTAMP),
        (NOW + 55 * 60_000, _headers(ControlMarker("app", 0)), Verdict.FUTURE_TIMESTAMP),
        (NOW, [(CONTROL_HEADER, b"garbage")], Verdict.MALFORMED),
        (NOW, [(CONTROL_HEADER, None)], Verdict.MALFORMED),
    ],
)
def test_bad_ticks_are_rejected_and_counted(
    timestamp: int, headers: list[tuple[str, bytes | None]], verdict: Verdict
) -> None:
    validator = _validator()
    assert validator.check("t", 0, timestamp, headers) is verdict
    assert validator.check("t", 0, timestamp, headers) is verdict
    assert validator.rejected == {verdict: 2}


def test_rejections_are_logged_once_per_source_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    validator = _validator()
    for sequence in range(5):
        validator.check("t", 0, -5, _headers(ControlMarker("forger", sequence)))
    validator.check("t", 0, NOW * 2, _headers(ControlMarker("forger", 9)))
    validator.check("t", 0, -5, _headers(ControlMarker("other", 0)))
    assert len(caplog.records) == 3
    assert validator.rejected == {Verdict.NEGATIVE_TIMESTAMP: 6, Verdict.FUTURE_TIMESTAMP: 1}


def test_signed_ticks_verify_and_unsigned_or_tampered_ones_do_not() -> None:
    validator = _validator(verification_keys={"k1": KEY.secret})
    marker = ControlMarker("app", 7)
    signed = sign(marker, "t", 2, NOW, KEY)
    assert signed.version == 2
    assert validator.check("t", 2, NOW, _headers(signed)) is Verdict.ACCEPTED
    assert validator.check("t", 2, NOW, _headers(marker)) is Verdict.UNSIGNED
    # The signature binds partition, topic and timestamp: replayed elsewhere it fails.
    assert validator.check("t", 3, NOW, _headers(signed)) is Verdict.BAD_SIGNATURE
    assert validator.check("u", 2, NOW, _headers(signed)) is Verdict.BAD_SIGNATURE
    assert validator.check("t", 2, NOW + 1, _headers(signed)) is Verdict.BAD_SIGNATURE
    other = sign(marker, "t", 2, NOW, SigningKey("k2", b"another-secret-of-16"))
    assert validator.check("t", 2, NOW, _headers(other)) is Verdict.UNKNOWN_KEY


def test_without_keys_a_signed_tick_is_an_ordinary_one() -> None:
    signed = sign(ControlMarker("app", 7), "t", 0, NOW, KEY)
    assert _validator().check("t", 0, NOW, _headers(signed)) is Verdict.ACCEPTED


def test_source_allow_list() -> None:
    validator = _validator(allowed_sources=allowed_sources("app, sidecar"))
    assert validator.check("t", 0, NOW, _headers(ControlMarker("sidecar", 0))) is Verdict.ACCEPTED
    assert (
        validator.check("t", 0, NOW, _headers(ControlMarker("forger", 0)))
        is Verdict.SOURCE_NOT_ALLOWED
    )
    assert allowed_sources("") is None
    assert allowed_sources(None) is None


@given(
    source=st.text(min_size=1, max_size=60).filter(lambda s: len(s.encode()) <= 255),
    sequence=st.integers(0, 2**64 - 1),
    key_id=st.text(min_size=1, max_size=20),
)
def test_signed_markers_round_trip(source: str, sequence: int, key_id: str) -> None:
    signed = sign(ControlMarker(source, sequence), "topic", 1, 42, SigningKey(key_id, b"s" * 16))
    assert ControlMarker.decode(signed.encode()) == signed


def test_parse_keys() -> None:
    assert parse_keys("a:0123456789abcdef, b:fedcba9876543210") == {
        "a": b"0123456789abcdef",
        "b": b"fedcba9876543210",
    }
    with pytest.raises(ValueError, match="id:secret"):
        parse_keys("nosecret")
    with pytest.raises(ValueError, match="at least 16"):
        parse_keys("a:short")


# --- one control-record source per writer ---------------------------------------------------------


def test_a_source_without_a_key_writes_v1_records_numbered_from_0() -> None:
    source = ControlRecordSource("app-1")
    first, second = source.record("t", 0, NOW), source.record("t", 3, NOW + 5)
    assert first == ControlRecord("t", 0, NOW, ControlMarker("app-1", 0), key=DEFAULT_SENTINEL_KEY)
    assert (second.partition, second.timestamp_ms, second.marker) == (
        3,
        NOW + 5,
        ControlMarker("app-1", 1),
    )
    assert source.next_sequence == 2
    assert _validator().check("t", 0, NOW, first.headers) is Verdict.ACCEPTED
    # v1 is what a keyed reader rejects: the "unsigned" repartition ticks.
    keyed = _validator(verification_keys={"k1": KEY.secret})
    assert keyed.check("t", 0, NOW, first.headers) is Verdict.UNSIGNED


def test_a_source_with_a_key_signs_every_record_for_its_partition_and_time() -> None:
    source = ControlRecordSource("runtime-a", key=None, signing_key=KEY)
    validator = _validator(verification_keys={"k1": KEY.secret})
    for sequence, (topic, partition, at) in enumerate([("t", 0, NOW), ("u", 2, NOW - 9)]):
        record = source.record(topic, partition, at)
        marker = parse_control_headers(record.headers)
        assert marker is not None
        assert (marker.version, marker.key_id, marker.sequence) == (2, "k1", sequence)
        assert record.key is None
        assert validator.check(topic, partition, at, record.headers) is Verdict.ACCEPTED
        assert validator.check(topic, partition + 1, at, record.headers) is Verdict.BAD_SIGNATURE
    assert validator.rejected == {Verdict.BAD_SIGNATURE: 2}
    assert KEY.secret.decode() not in repr(source)
    assert "k1" in repr(source)


def test_emit_uses_a_sequence_number_only_for_records_produce_accepted() -> None:
    source = ControlRecordSource("sender")
    sent: list[ControlRecord] = []

    def full(_record: ControlRecord) -> None:
        raise BufferError("local queue full")

    source.emit("t", 0, NOW, sent.append)
    with pytest.raises(BufferError):
        source.emit("t", 0, NOW + 1, full)
    source.emit("t", 0, NOW + 2, sent.append)
    assert [r.marker.sequence for r in sent] == [0, 1]
    assert source.next_sequence == 2


def test_invalid_records_use_no_sequence_number_and_bad_source_ids_fail_at_once() -> None:
    source = ControlRecordSource("app")
    with pytest.raises(ValueError, match="timestamp"):
        source.record("t", 0, -1)
    with pytest.raises(ValueError, match="partition"):
        source.record("t", -1, NOW)
    assert source.next_sequence == 0
    with pytest.raises(ValueError, match="source_id"):
        ControlRecordSource("")
    with pytest.raises(ValueError, match="source_id"):
        ControlRecordSource("x" * 256)


def test_threads_sharing_a_source_never_reuse_a_sequence_number() -> None:
    source = ControlRecordSource("shared", signing_key=KEY)
    numbers: list[int] = []
    lock = threading.Lock()

    def write() -> None:
        found = [source.record("t", 0, NOW).marker.sequence for _ in range(500)]
        with lock:
            numbers.extend(found)

    threads = [threading.Thread(target=write) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(numbers) == list(range(2000))
