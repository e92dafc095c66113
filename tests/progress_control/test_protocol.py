"""Pure logic of the control-record protocol (no broker)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress_control.protocol import (
    CONTROL_HEADER,
    DEFAULT_SENTINEL_KEY,
    ControlMarker,
    ControlRecord,
    MalformedControlHeaderError,
    extrapolated_timestamp_ms,
    is_control_record,
    malformed_control_headers_seen,
    parse_control_headers,
)


class Record:
    """Just enough of a consumed record for header inspection."""

    def __init__(self, headers: list[tuple[str, bytes | None]] | None) -> None:
        self._headers = headers

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        return self._headers


source_ids = st.text(min_size=1, max_size=60).filter(lambda s: 1 <= len(s.encode()) <= 255)


@given(source_id=source_ids, sequence=st.integers(0, 2**64 - 1))
def test_marker_round_trips(source_id: str, sequence: int) -> None:
    marker = ControlMarker(source_id=source_id, sequence=sequence)
    assert ControlMarker.decode(marker.encode()) == marker


def test_marker_wire_format_is_stable() -> None:
    encoded = ControlMarker(source_id="app-1", sequence=7).encode()
    assert encoded == b"\x01" + (7).to_bytes(8, "big") + b"\x05" + b"app-1"


def test_newer_versions_may_append_fields() -> None:
    signature = b"\x01k" + b"m" * 32
    future = struct.pack(">BQB", 3, 3, 1) + b"x" + signature + b"\x00extra"
    assert ControlMarker.decode(future) == ControlMarker("x", 3, 3, key_id="k", mac=b"m" * 32)
    # A v1 reader's view of the same bytes: the v1 prefix, the rest belongs to a newer version.
    assert ControlMarker.decode(future).source_id == "x"


def test_v2_markers_must_carry_exactly_their_signature() -> None:
    v2 = struct.pack(">BQB", 2, 3, 1) + b"x" + b"\x01k" + b"m" * 32
    assert ControlMarker.decode(v2).key_id == "k"
    for broken in (v2[:-1], v2 + b"\x00", struct.pack(">BQB", 2, 3, 1) + b"x"):
        with pytest.raises(MalformedControlHeaderError):
            ControlMarker.decode(broken)


@pytest.mark.parametrize(
    "value",
    [
        None,
        b"",
        b"garbage",
        b"\x01" + b"\x00" * 8,  # no source id length
        struct.pack(">BQB", 1, 0, 0),  # empty source id
        struct.pack(">BQB", 1, 0, 5) + b"abc",  # source id shorter than its length
        struct.pack(">BQB", 1, 0, 1) + b"ab",  # v1 with trailing bytes
        struct.pack(">BQB", 0, 0, 1) + b"a",  # version 0 does not exist
        struct.pack(">BQB", 1, 0, 2) + b"\xff\xfe",  # not UTF-8
    ],
)
def test_malformed_header_values_are_rejected(value: bytes | None) -> None:
    with pytest.raises(MalformedControlHeaderError):
        ControlMarker.decode(value)


def test_exactly_one_marker_header_is_allowed() -> None:
    value = ControlMarker(source_id="a", sequence=0).encode()
    with pytest.raises(MalformedControlHeaderError, match="exactly one"):
        parse_control_headers([(CONTROL_HEADER, value), (CONTROL_HEADER, value)])


def test_records_without_the_header_are_data() -> None:
    assert parse_control_headers(None) is None
    assert parse_control_headers([("trace-id", b"abc")]) is None
    assert not is_control_record(Record(None))
    assert not is_control_record(Record([("progress", b"x")]))


def test_garbage_header_is_not_control_and_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    before = malformed_control_headers_seen()
    assert not is_control_record(Record([(CONTROL_HEADER, b"\x00garbage")]))
    assert malformed_control_headers_seen() == before + 1
    assert "malformed progress-control header" in caplog.text


def test_valid_marker_makes_a_control_record() -> None:
    marker = ControlMarker(source_id="svc", sequence=1)
    assert is_control_record(Record([("other", b"1"), (CONTROL_HEADER, marker.encode())]))


@pytest.mark.parametrize(
    ("source_id", "sequence"), [("", 0), ("x" * 256, 0), ("ok", -1), ("ok", 2**64)]
)
def test_marker_fields_are_validated(source_id: str, sequence: int) -> None:
    with pytest.raises(ValueError, match=r"source_id|sequence"):
        ControlMarker(source_id=source_id, sequence=sequence)


def test_control_record_follows_the_protocol() -> None:
    marker = ControlMarker(source_id="svc", sequence=4)
    kwargs = ControlRecord("clicks", 3, 1_000, marker).produce_kwargs()
    assert kwargs == {
        "topic": "clicks",
        "partition": 3,
        "key": DEFAULT_SENTINEL_KEY,
        "value": None,
        "timestamp": 1_000,
        "headers": [(CONTROL_HEADER, marker.encode())],
    }
    assert ControlRecord("clicks", 0, 1, marker, key=None).produce_kwargs()["key"] is None
    with pytest.raises(ValueError, match="explicit partition"):
        ControlRecord("clicks", -1, 1, marker)


def test_extrapolation_advances_by_monotonic_time() -> None:
    # acked at monotonic 100.0 with timestamp 5_000; 2.5 s later the clock reads 7_500
    assert extrapolated_timestamp_ms(5_000, 100.0, 102.5, wall_clock_now_ms=10**12) == 7_500


def test_extrapolation_never_exceeds_wall_clock() -> None:
    assert extrapolated_timestamp_ms(5_000, 100.0, 200.0, wall_clock_now_ms=6_000) == 6_000


@given(
    last=st.integers(0, 2**40),
    ack=st.floats(0, 1e6),
    elapsed=st.floats(-10, 1e6),
    wall=st.integers(0, 2**41),
)
def test_extrapolation_bounds(last: int, ack: float, elapsed: float, wall: int) -> None:
    ts = extrapolated_timestamp_ms(last, ack, ack + elapsed, wall)
    assert ts >= last  # never behind the data already written
    assert ts <= max(last, wall)  # never past wall-clock now (unless the data itself is)
