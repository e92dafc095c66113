"""The report-mode wire format (progress_control/ticks/activity_report.py): encoding and
splitting reports into datagrams, decoding and rejecting malformed ones, and the sidecar's
``host:port`` address (no broker)."""

from __future__ import annotations

import contextlib
import itertools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from progress_control.ticks import activity_report as report_module
from progress_control.ticks.activity_report import (
    MAX_DATAGRAM_BYTES,
    REPORT_VERSION,
    ActivityReport,
    MalformedReportError,
    PartitionReport,
    UdpAddress,
    UnixAddress,
    decode_report,
    encode_reports,
    parse_address,
    parse_report_address,
)
from tests.hypothesis_profiles import examples

# --- report wire format --------------------------------------------------------------------------


def _report(partitions: int, topic: str = "clicks") -> ActivityReport:
    return ActivityReport(
        "host:1234:ab12cd34",
        1_795_355_816_861,
        tuple(
            PartitionReport(f"{topic}-{i % 7}", i, 1_795_355_816_000 + i, 1_795_355_816_042 + i)
            for i in range(partitions)
        ),
    )


def _check_split(report: ActivityReport, encoded: list[bytes], limit: int) -> None:
    """Every datagram is a complete report within ``limit`` bytes (unless it holds a single
    partition too large on its own), and together they carry the partitions in order."""
    decoded = [decode_report(d) for d in encoded]
    assert {(d.source, d.sent_ms) for d in decoded} == {(report.source, report.sent_ms)}
    assert tuple(p for d in decoded for p in d.partitions) == report.partitions
    for datagram, part in zip(encoded, decoded, strict=True):
        assert len(datagram) <= limit or len(part.partitions) <= 1
    if len(encoded) > 1:
        assert all(d.partitions for d in decoded)  # no empty datagram when splitting


def test_report_round_trip() -> None:
    report = _report(3)
    [datagram] = encode_reports(report)
    assert decode_report(datagram) == report
    raw = json.loads(datagram)
    assert raw["v"] == REPORT_VERSION
    assert raw["source"] == "host:1234:ab12cd34"
    assert raw["sent_ms"] == 1_795_355_816_861
    assert raw["partitions"][0] == {
        "topic": "clicks-0",
        "partition": 0,
        "last_timestamp_ms": 1_795_355_816_000,
        "last_ack_ms": 1_795_355_816_042,
    }


def test_empty_report_is_one_datagram() -> None:
    report = _report(0)
    [datagram] = encode_reports(report)
    assert decode_report(datagram) == report


@pytest.mark.parametrize(
    ("partitions", "topic"),
    [(1, "clicks"), (400, "clicks"), (800, "clicks"), (5_000, "clicks"), (2_000, "t" * 240)],
)
def test_large_reports_are_split_by_size(partitions: int, topic: str) -> None:
    report = _report(partitions, topic)
    encoded = encode_reports(report)
    _check_split(report, encoded, MAX_DATAGRAM_BYTES)
    assert all(len(d) <= MAX_DATAGRAM_BYTES for d in encoded)
    total = sum(len(d) for d in encoded)
    # Greedy packing: only as many datagrams as the bytes need (each at least half full).
    assert len(encoded) <= total // (MAX_DATAGRAM_BYTES // 2) + 1
    if total <= MAX_DATAGRAM_BYTES:
        assert len(encoded) == 1


def test_datagrams_stay_under_the_limit_with_long_topic_names() -> None:
    # Kafka topic names have up to 249 characters: 400 of them exceed one datagram.
    report = _report(400, topic="t" * 240)
    encoded = encode_reports(report)
    assert len(encoded) > 1
    assert all(len(d) <= MAX_DATAGRAM_BYTES for d in encoded)
    _check_split(report, encoded, MAX_DATAGRAM_BYTES)


def test_the_split_is_by_bytes_near_the_limit() -> None:
    [one] = encode_reports(_report(1))
    [two] = encode_reports(_report(2))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "MAX_DATAGRAM_BYTES", len(two) + 1)
        assert encode_reports(_report(2)) == [two]
        patch.setattr(report_module, "MAX_DATAGRAM_BYTES", len(two) - 1)
        assert [len(d) for d in encode_reports(_report(2))] == [len(one), len(one)]
        # A single partition larger than the limit still goes out, alone.
        patch.setattr(report_module, "MAX_DATAGRAM_BYTES", 10)
        assert [len(d) for d in encode_reports(_report(2))] == [len(one), len(one)]


partition_reports = st.builds(
    PartitionReport,
    st.text(max_size=30),
    st.integers(0, 100_000),
    st.integers(-(2**63), 2**63 - 1),
    st.integers(-(2**63), 2**63 - 1),
)


@given(
    source=st.text(min_size=1, max_size=50),
    sent_ms=st.integers(0, 2**63 - 1),
    partitions=st.lists(partition_reports, max_size=20),
)
def test_report_round_trip_property(
    source: str, sent_ms: int, partitions: list[PartitionReport]
) -> None:
    report = ActivityReport(source, sent_ms, tuple(partitions))
    [datagram] = encode_reports(report)
    assert decode_report(datagram) == report


@given(
    source=st.text(min_size=1, max_size=50),
    partitions=st.lists(partition_reports, max_size=40),
    limit=st.integers(100, 2_000),
)
def test_split_property(source: str, partitions: list[PartitionReport], limit: int) -> None:
    """Against a small datagram limit: any text (escaped to ASCII) is measured in bytes."""
    report = ActivityReport(source, 1_795_355_816_861, tuple(partitions))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(report_module, "MAX_DATAGRAM_BYTES", limit)
        encoded = encode_reports(report)
    _check_split(report, encoded, limit)
    # Greedy: a datagram is closed only when the next partition would not fit in it.
    for current, following in itertools.pairwise(encoded):
        first_of_following = decode_report(following).partitions[:1]
        merged = ActivityReport(
            source, report.sent_ms, decode_report(current).partitions + first_of_following
        )
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(report_module, "MAX_DATAGRAM_BYTES", 10**9)
            [together] = encode_reports(merged)
        # (The encoder counts one comma too many, so a datagram of exactly ``limit`` bytes is
        # split as well: conservative, never over the limit.)
        assert len(together) >= limit


_MISSING = object()


def _datagram(**changes: Any) -> bytes:
    raw: dict[str, Any] = {
        "v": 1,
        "source": "s",
        "sent_ms": 1,
        "partitions": [{"topic": "t", "partition": 3, "last_timestamp_ms": 5, "last_ack_ms": 2}],
    }
    partition_changes = changes.pop("partition_fields", {})
    raw.update(changes)
    for name, value in partition_changes.items():
        if value is _MISSING:
            del raw["partitions"][0][name]
        else:
            raw["partitions"][0][name] = value
    for name in [k for k, v in raw.items() if v is _MISSING]:
        del raw[name]
    return json.dumps(raw).encode()


def test_the_test_datagram_is_valid() -> None:
    assert decode_report(_datagram()) == ActivityReport("s", 1, (PartitionReport("t", 3, 5, 2),))


def test_unknown_fields_are_ignored() -> None:
    extra = json.loads(_datagram())
    extra["future"] = True
    extra["partitions"][0]["acks"] = 7
    assert decode_report(json.dumps(extra).encode()) == decode_report(_datagram())


@pytest.mark.parametrize(
    "datagram",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\x00\xff garbage", id="garbage"),
        pytest.param(b"\xff\xfe\xfd", id="not-utf8"),
        pytest.param(b"{not json", id="bad-json"),
        pytest.param(b"[]", id="array"),
        pytest.param(b"null", id="null"),
        pytest.param(b'"text"', id="string"),
        pytest.param(b"42", id="number"),
        pytest.param(_datagram(v=2), id="version-2"),
        pytest.param(_datagram(v="1"), id="version-string"),
        pytest.param(_datagram(v=True), id="version-bool"),
        pytest.param(_datagram(v=1.0), id="version-float"),
        pytest.param(_datagram(v=None), id="version-null"),
        pytest.param(_datagram(v=_MISSING), id="no-version"),
        pytest.param(_datagram(source=_MISSING), id="no-source"),
        pytest.param(_datagram(sent_ms=_MISSING), id="no-sent-ms"),
        pytest.param(_datagram(partitions=_MISSING), id="no-partitions"),
        pytest.param(_datagram(partition_fields={"topic": _MISSING}), id="no-topic"),
        pytest.param(_datagram(partition_fields={"last_ack_ms": _MISSING}), id="no-last-ack"),
        pytest.param(
            _datagram(partition_fields={"last_ack_ms": _MISSING, "acks": 2}), id="old-acks-field"
        ),
        pytest.param(_datagram(partition_fields={"partition": "3"}), id="partition-string"),
        pytest.param(_datagram(partition_fields={"last_ack_ms": True}), id="last-ack-bool"),
        pytest.param(_datagram(partition_fields={"last_ack_ms": None}), id="last-ack-null"),
        pytest.param(_datagram(partition_fields={"last_ack_ms": 2.0}), id="last-ack-float"),
        pytest.param(_datagram(partition_fields={"last_timestamp_ms": 1.5}), id="timestamp-float"),
        pytest.param(_datagram(partition_fields={"topic": 7}), id="topic-int"),
        pytest.param(_datagram(source=5), id="source-int"),
        pytest.param(_datagram(sent_ms="now"), id="sent-ms-string"),
        pytest.param(_datagram(sent_ms=False), id="sent-ms-bool"),
        pytest.param(_datagram(partitions=5), id="partitions-int"),
        pytest.param(_datagram(partitions="abc"), id="partitions-string"),
        pytest.param(_datagram(partitions=[5]), id="partition-entry-int"),
        pytest.param(_datagram(partitions={"t": 1}), id="partitions-object"),
        pytest.param(b"[" * 50_000, id="deeply-nested-array"),
        pytest.param(b'{"v":' * 50_000, id="deeply-nested-object"),
    ],
)
def test_malformed_reports_are_rejected(datagram: bytes) -> None:
    with pytest.raises(MalformedReportError):
        decode_report(datagram)


def test_wrong_version_is_named() -> None:
    with pytest.raises(MalformedReportError, match="unsupported report version 2"):
        decode_report(_datagram(v=2))


def test_deeply_nested_garbage_is_malformed() -> None:
    with pytest.raises(MalformedReportError):
        decode_report(b"[" * 50_000 + b"]" * 50_000)


@settings(max_examples=examples(200))
@given(datagram=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_decode_report_raises_only_malformed_report_error(datagram: bytes) -> None:
    with contextlib.suppress(MalformedReportError):
        decode_report(datagram)


# --- parse_address -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        ("127.0.0.1:7071", ("127.0.0.1", 7071)),
        ("localhost:1", ("localhost", 1)),
        ("sidecar.local:65535", ("sidecar.local", 65535)),
        ("[::1]:7071", ("::1", 7071)),
        ("[fe80::1%eth0]:9000", ("fe80::1%eth0", 9000)),
    ],
)
def test_parse_address(address: str, expected: tuple[str, int]) -> None:
    assert parse_address(address) == expected


@pytest.mark.parametrize(
    "address",
    [
        "",
        "localhost",
        "localhost:",
        ":7071",
        "[]:7071",
        "[::1]",
        "localhost:0",
        "localhost:65536",
        "localhost:-1",
        "localhost:+80",
        "localhost:80x",
        "localhost: 80",
        "localhost:http",
    ],
)
def test_parse_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match="host:port"):
        parse_address(address)


# --- parse_report_address ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "expected"),
    [
        (
            "unix:///var/run/progress-control/reports.sock",
            UnixAddress("/var/run/progress-control/reports.sock"),
        ),
        ("unix:/run/r.sock", UnixAddress("/run/r.sock")),
        ("unix:relative.sock", UnixAddress("relative.sock")),
        ("127.0.0.1:7071", UdpAddress("127.0.0.1", 7071)),
        ("[::1]:7071", UdpAddress("::1", 7071)),
    ],
)
def test_parse_report_address(address: str, expected: object) -> None:
    assert parse_report_address(address) == expected


@pytest.mark.parametrize(
    "address", ["unix:", "unix://", "unix://host/path.sock", "unix:///" + "x" * 200, "nohost"]
)
def test_parse_report_address_rejects(address: str) -> None:
    with pytest.raises(ValueError, match=r"expected|longer"):
        parse_report_address(address)


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:1", True),
        ("localhost:1", True),
        ("[::1]:1", True),
        ("0.0.0.0:1", False),
        ("10.0.0.5:1", False),
        ("sidecar.example:1", False),
    ],
)
def test_udp_loopback(address: str, loopback: bool) -> None:
    parsed = parse_report_address(address)
    assert isinstance(parsed, UdpAddress)
    assert parsed.is_loopback is loopback
