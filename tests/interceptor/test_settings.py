"""Interceptor settings, topic filters and the report-mode wire format (no broker)."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from interceptor.report import ReportSender
from interceptor.settings import InterceptorSettings, Mode, split_config
from progress_control.protocol import DEFAULT_SENTINEL_KEY, TimestampMode
from progress_control.settings import ConfigurationError
from progress_control.ticks import activity_report as report_module
from progress_control.ticks.activity import PartitionActivity
from progress_control.ticks.activity_report import (
    MAX_DATAGRAM_BYTES,
    REPORT_VERSION,
    ActivityReport,
    MalformedReportError,
    PartitionReport,
    decode_report,
    encode_reports,
    parse_address,
)
from progress_control.ticks.metrics import ProgressControlMetrics
from progress_control.ticks.schedule import TickSchedule
from progress_control.ticks.topic_filter import TopicFilter
from progress_control.trust import SigningKey


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No PROGRESS_CONTROL_* variable of the outer environment leaks into these tests."""
    for name in list(os.environ):
        if name.startswith("PROGRESS_CONTROL_"):
            monkeypatch.delenv(name)


# --- InterceptorSettings.from_config -------------------------------------------------------------


def test_defaults() -> None:
    s = InterceptorSettings.from_config({})
    assert s.enabled is True
    assert s.mode is Mode.TICKS
    assert s.start_ms == 10_000
    assert s.backoff_ms == 1_000
    assert s.backoff_exponential is True
    assert s.backoff_multiplier == 2.0
    assert s.max_records == 10
    assert s.end_ms is None
    assert s.key == b"__progress_control__" == DEFAULT_SENTINEL_KEY
    assert s.topics_include == ()
    assert s.topics_exclude == ()
    assert s.timestamp_mode is TimestampMode.EXTRAPOLATED
    assert s.report_address == "127.0.0.1:7071"
    assert s.source_id


def test_dotted_config_keys() -> None:
    s = InterceptorSettings.from_config(
        {
            "progress.control.start.ms": 5_000,
            "progress.control.backoff.ms": "250",
            "progress.control.backoff.exponential": "false",
            "progress.control.backoff.multiplier": 1.5,
            "progress.control.max.records": None,
            "progress.control.end.ms": 60_000,
            "progress.control.mode": "report",
            "progress.control.timestamp.mode": "wall-clock",
            "progress.control.report.address": "localhost:9999",
            "progress.control.source.id": "app-1",
            "bootstrap.servers": "ignored:9092",
            "linger.ms": 5,
        }
    )
    assert s.start_ms == 5_000
    assert s.backoff_ms == 250
    assert s.backoff_exponential is False
    assert s.backoff_multiplier == 1.5
    assert s.max_records is None
    assert s.end_ms == 60_000
    assert s.mode is Mode.REPORT
    assert s.timestamp_mode is TimestampMode.WALL_CLOCK
    assert s.report_address == "localhost:9999"
    assert s.source_id == "app-1"


def test_env_variables_and_config_keys_win_over_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_START_MS", "5000")
    monkeypatch.setenv("PROGRESS_CONTROL_BACKOFF_EXPONENTIAL", "false")
    monkeypatch.setenv("PROGRESS_CONTROL_KEY", "tick")
    from_env = InterceptorSettings.from_config({})
    assert from_env.start_ms == 5_000
    assert from_env.backoff_exponential is False
    assert from_env.key == b"tick"

    config = {"progress.control.start.ms": 7_000, "progress.control.key": "mine"}
    overridden = InterceptorSettings.from_config(config)
    assert overridden.start_ms == 7_000
    assert overridden.key == b"mine"
    assert overridden.backoff_exponential is False  # still from env


def test_unrelated_progress_control_env_variables_are_ignored(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PROGRESS_CONTROL_BROKER_PORT", "19092")
    assert InterceptorSettings.from_config({}).start_ms == 10_000


def test_topic_lists_are_comma_separated_regexes() -> None:
    s = InterceptorSettings.from_config(
        {
            "progress.control.topics.include": " clicks , orders\\..* ,,",
            "progress.control.topics.exclude": "orders\\.internal",
        }
    )
    assert s.topics_include == ("clicks", "orders\\..*")
    assert s.topics_exclude == ("orders\\.internal",)
    accept = TopicFilter(s.topics_include, s.topics_exclude)
    assert accept("clicks")
    assert accept("orders.eu")
    assert not accept("orders.internal")
    assert not accept("payments")


def test_topic_lists_also_accept_sequences() -> None:
    s = InterceptorSettings.from_config({"progress.control.topics.exclude": ["a", "b.*"]})
    assert s.topics_exclude == ("a", "b.*")


def test_topic_filter_full_match_exclude_wins_empty_include_is_all() -> None:
    everything = TopicFilter((), ())
    assert everything("anything")
    assert everything("")

    exact = TopicFilter(("click",), ())
    assert exact("click")
    assert not exact("clicks")  # full match, not a prefix
    assert not exact("a-click")

    exclude_wins = TopicFilter(("events\\..*",), ("events\\.debug",))
    assert exclude_wins("events.prod")
    assert not exclude_wins("events.debug")
    assert exclude_wins("events.debug.more")  # only the full name is excluded

    only_exclude = TopicFilter((), ("_.*",))
    assert only_exclude("clicks")
    assert not only_exclude("_schemas")

    # Decisions are cached per topic name and stay the same.
    assert [exclude_wins("events.debug") for _ in range(3)] == [False] * 3


@pytest.mark.parametrize("value", ["", None, b"", "null"])
def test_empty_or_null_key_means_a_null_key(value: object) -> None:
    assert InterceptorSettings.from_config({"progress.control.key": value}).key is None


def test_empty_key_from_env_means_a_null_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_KEY", "")
    assert InterceptorSettings.from_config({}).key is None


def test_string_key_is_utf8_encoded() -> None:
    assert InterceptorSettings.from_config({"progress.control.key": "tick€"}).key == (
        "tick€".encode()
    )


def test_max_records_may_be_unset_when_end_ms_is_set() -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.max.records": None, "progress.control.end.ms": 30_000}
    )
    assert s.max_records is None
    assert s.end_ms == 30_000


def _error(config: dict[str, Any]) -> str:
    with pytest.raises(ConfigurationError) as excinfo:
        InterceptorSettings.from_config(config)
    return str(excinfo.value)


@pytest.mark.parametrize(
    ("config", "key", "env"),
    [
        (
            {"progress.control.start.ms": "soon"},
            "progress.control.start.ms",
            "PROGRESS_CONTROL_START_MS",
        ),
        (
            {"progress.control.start.ms": 1.5},
            "progress.control.start.ms",
            "PROGRESS_CONTROL_START_MS",
        ),
        (
            {"progress.control.start.ms": 0},
            "progress.control.start.ms",
            "PROGRESS_CONTROL_START_MS",
        ),
        (
            {"progress.control.backoff.ms": -1},
            "progress.control.backoff.ms",
            "PROGRESS_CONTROL_BACKOFF_MS",
        ),
        (
            {"progress.control.backoff.multiplier": 0.5},
            "progress.control.backoff.multiplier",
            "PROGRESS_CONTROL_BACKOFF_MULTIPLIER",
        ),
        (
            {"progress.control.max.records": 0},
            "progress.control.max.records",
            "PROGRESS_CONTROL_MAX_RECORDS",
        ),
        (
            {"progress.control.topics.include": "clicks,(unclosed"},
            "progress.control.topics.include",
            "PROGRESS_CONTROL_TOPICS_INCLUDE",
        ),
        (
            {"progress.control.topics.exclude": "*bad"},
            "progress.control.topics.exclude",
            "PROGRESS_CONTROL_TOPICS_EXCLUDE",
        ),
        (
            {"progress.control.timestamp.mode": "event-time"},
            "progress.control.timestamp.mode",
            "PROGRESS_CONTROL_TIMESTAMP_MODE",
        ),
        (
            {"progress.control.mode": "both"},
            "progress.control.mode",
            "PROGRESS_CONTROL_MODE",
        ),
        (
            {"progress.control.report.address": "localhost"},
            "progress.control.report.address",
            "PROGRESS_CONTROL_REPORT_ADDRESS",
        ),
        (
            {"progress.control.report.address": "localhost:70000"},
            "progress.control.report.address",
            "PROGRESS_CONTROL_REPORT_ADDRESS",
        ),
        (
            {"progress.control.report.address": ":7071"},
            "progress.control.report.address",
            "PROGRESS_CONTROL_REPORT_ADDRESS",
        ),
        (
            {"progress.control.key": 42},
            "progress.control.key",
            "PROGRESS_CONTROL_KEY",
        ),
        (
            {"progress.control.strat.ms": 5_000},
            "progress.control.strat.ms",
            "PROGRESS_CONTROL_STRAT_MS",
        ),
    ],
)
def test_invalid_values_name_the_key_and_the_env_variable(
    config: dict[str, Any], key: str, env: str
) -> None:
    message = _error(config)
    assert key in message
    assert env in message


def test_invalid_env_value_names_the_key_and_the_env_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_START_MS", "ten")
    message = _error({})
    assert "progress.control.start.ms" in message
    assert "PROGRESS_CONTROL_START_MS" in message
    assert "'ten'" in message


def test_every_problem_is_reported_at_once() -> None:
    message = _error({"progress.control.start.ms": "x", "progress.control.backoff.ms": "y"})
    assert "progress.control.start.ms" in message
    assert "progress.control.backoff.ms" in message


def test_unbounded_schedule_is_rejected() -> None:
    message = _error({"progress.control.max.records": None})
    assert "max.records" in message
    assert "end.ms" in message


def test_unbounded_schedule_error_names_the_keys_and_env_variables() -> None:
    message = _error({"progress.control.max.records": None})
    assert "progress.control.max.records" in message
    assert "PROGRESS_CONTROL_MAX_RECORDS" in message
    assert "progress.control.end.ms" in message
    assert "PROGRESS_CONTROL_END_MS" in message


def test_unbounded_schedule_from_env_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_MAX_RECORDS", "")
    message = _error({})
    assert "progress.control.max.records" in message
    assert "PROGRESS_CONTROL_MAX_RECORDS" in message


def test_end_ms_before_start_ms_is_rejected() -> None:
    message = _error({"progress.control.start.ms": 10_000, "progress.control.end.ms": 5_000})
    assert "progress.control.end.ms" in message
    assert "PROGRESS_CONTROL_END_MS" in message
    assert "progress.control.start.ms" in message
    assert "PROGRESS_CONTROL_START_MS" in message


def test_end_ms_before_start_ms_from_env_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "5000")
    message = _error({})  # start.ms defaults to 10 s
    assert "PROGRESS_CONTROL_END_MS" in message
    assert "PROGRESS_CONTROL_START_MS" in message


def test_end_ms_equal_to_start_ms_is_accepted() -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.start.ms": 5_000, "progress.control.end.ms": 5_000}
    )
    assert s.end_ms == s.start_ms == 5_000


@pytest.mark.parametrize("unset", ["", "none", "null", "None", " NULL "])
def test_max_records_and_end_ms_can_be_unset_by_strings(unset: str) -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.max.records": unset, "progress.control.end.ms": 60_000}
    )
    assert s.max_records is None
    assert s.end_ms == 60_000
    s = InterceptorSettings.from_config({"progress.control.end.ms": unset})
    assert s.end_ms is None
    assert s.max_records == 10


@pytest.mark.parametrize("unset", ["", "none", "null"])
def test_env_can_unset_max_records_when_end_ms_is_set(
    monkeypatch: pytest.MonkeyPatch, unset: str
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_MAX_RECORDS", unset)
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "60000")
    s = InterceptorSettings.from_config({})
    assert s.max_records is None
    assert s.end_ms == 60_000
    # A config key still wins over the env variable.
    assert InterceptorSettings.from_config({"progress.control.max.records": 3}).max_records == 3


def test_env_none_leaves_end_ms_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_END_MS", "none")
    assert InterceptorSettings.from_config({}).end_ms is None


@pytest.mark.parametrize("value", ["never", "0", "-5"])
def test_other_strings_for_optional_bounds_are_still_invalid(value: str) -> None:
    message = _error({"progress.control.max.records": value})
    assert "progress.control.max.records" in message
    message = _error({"progress.control.end.ms": value})
    assert "progress.control.end.ms" in message


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("clicks,orders", ("clicks", "orders")),
        (" clicks , orders\\..* ,,", ("clicks", "orders\\..*")),
        ("clicks", ("clicks",)),
        ("", ()),
        (",", ()),
    ],
)
def test_topic_lists_from_env_are_comma_separated(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: tuple[str, ...]
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_INCLUDE", value)
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_EXCLUDE", value)
    s = InterceptorSettings.from_config({})
    assert s.topics_include == expected
    assert s.topics_exclude == expected


def test_topic_list_env_is_overridden_by_the_config_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_EXCLUDE", "a,b")
    s = InterceptorSettings.from_config({"progress.control.topics.exclude": "c"})
    assert s.topics_exclude == ("c",)


def test_invalid_regex_in_topic_list_env_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_TOPICS_EXCLUDE", "ok,(unclosed")
    message = _error({})
    assert "progress.control.topics.exclude" in message
    assert "PROGRESS_CONTROL_TOPICS_EXCLUDE" in message


def test_tick_schedule_follows_the_settings() -> None:
    s = InterceptorSettings.from_config(
        {
            "progress.control.start.ms": 5_000,
            "progress.control.backoff.ms": 250,
            "progress.control.backoff.multiplier": 3,
            "progress.control.max.records": "none",
            "progress.control.end.ms": 60_000,
        }
    )
    assert s.tick_schedule() == TickSchedule(5_000, 250, True, 3.0, None, 60_000)
    defaults = InterceptorSettings.from_config({}).tick_schedule()
    assert [defaults.offset_ms(n) for n in range(3)] == [10_000, 11_000, 13_000]
    assert defaults.offset_ms(10) is None


def test_split_config() -> None:
    ours, theirs = split_config(
        {
            "bootstrap.servers": "localhost:9092",
            "progress.control.start.ms": 5_000,
            "linger.ms": 5,
            "progress.control.topics.include": "clicks",
            "progress.controlled": "not ours",
        }
    )
    assert ours == {"progress.control.start.ms": 5_000, "progress.control.topics.include": "clicks"}
    assert theirs == {
        "bootstrap.servers": "localhost:9092",
        "linger.ms": 5,
        "progress.controlled": "not ours",
    }
    assert split_config({}) == ({}, {})


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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=100, deadline=None)
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


@settings(max_examples=200, deadline=None)
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


def test_ipv6_report_address_is_accepted_by_the_settings() -> None:
    s = InterceptorSettings.from_config({"progress.control.report.address": "[::1]:7071"})
    assert s.report_address == "[::1]:7071"


# --- ReportSender over a real UDP socket ---------------------------------------------------------


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def sidecar() -> Iterator[socket.socket]:
    """A UDP socket on an ephemeral localhost port, standing in for the sidecar."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        sock.settimeout(5.0)
        yield sock


def _receive(sidecar: socket.socket) -> ActivityReport:
    return decode_report(sidecar.recv(65_536))


def _nothing_waiting(sidecar: socket.socket) -> bool:
    sidecar.settimeout(0.05)
    try:
        sidecar.recv(65_536)
    except TimeoutError:
        return True
    finally:
        sidecar.settimeout(5.0)
    return False


def test_report_sender_sends_partitions_acked_since_the_last_report(
    sidecar: socket.socket,
) -> None:
    monotonic = _Clock(100.0)
    to_wall = 1_699_999_900.0  # wall clock = monotonic clock + to_wall
    activity = PartitionActivity(
        TickSchedule(10_000, 1_000, max_records=3),
        clock=monotonic,
        wall_clock=lambda: monotonic.now + to_wall,
    )
    metrics = ProgressControlMetrics(lambda: 0)
    host, port = sidecar.getsockname()
    sender = ReportSender(
        activity,
        f"{host}:{port}",
        "app:42:cafe",
        metrics,
        include_topic=lambda topic: not topic.startswith("_"),
        monotonic=monotonic,
        wall_clock=lambda: monotonic.now + to_wall,
    )
    try:
        sender.send()  # nothing acked yet: nothing sent
        assert metrics.snapshot().reports_sent == 0

        activity.record_data_ack("clicks", 0, 1_111)
        activity.record_data_ack("_internal", 0, 2_222)
        monotonic.now = 100.5
        activity.record_data_ack("clicks", 1, 3_333)
        monotonic.now = 101.0
        sender.send()
        report = _receive(sidecar)
        assert report.source == "app:42:cafe"
        assert report.sent_ms == 1_700_000_001_000
        assert sorted(report.partitions, key=lambda p: p.partition) == [
            PartitionReport("clicks", 0, 1_111, 1_700_000_000_000),
            PartitionReport("clicks", 1, 3_333, 1_700_000_000_500),
        ]
        assert metrics.snapshot().reports_sent == 1

        monotonic.now = 102.0
        sender.send()  # no new ack: nothing sent
        assert _nothing_waiting(sidecar)
        assert metrics.snapshot().reports_sent == 1

        monotonic.now = 102.25
        activity.record_data_ack("clicks", 0, 4_444)  # only this partition changed
        activity.record_data_ack("_internal", 0, 5_555)
        monotonic.now = 103.0
        sender.send()
        report = _receive(sidecar)
        assert report.sent_ms == 1_700_000_003_000
        assert report.partitions == (PartitionReport("clicks", 0, 4_444, 1_700_000_002_250),)
        assert metrics.snapshot().reports_sent == 2
    finally:
        sender.close()


def test_report_sender_splits_large_reports(sidecar: socket.socket) -> None:
    monotonic = _Clock(10.0)
    activity = PartitionActivity(TickSchedule(10_000, 1_000, max_records=3), clock=monotonic)
    metrics = ProgressControlMetrics(lambda: 0)
    topic = "t" * 240
    for partition in range(500):
        activity.record_data_ack(topic, partition, partition)
    host, port = sidecar.getsockname()
    sender = ReportSender(
        activity, f"{host}:{port}", "src", metrics, monotonic=monotonic, wall_clock=lambda: 1e9
    )
    try:
        sender.send()
        sent = metrics.snapshot().reports_sent
        assert sent > 1
        reports = [_receive(sidecar) for _ in range(sent)]
        assert sorted(p.partition for r in reports for p in r.partitions) == list(range(500))
        assert all(p.last_ack_ms == 1_000_000_000_000 for r in reports for p in r.partitions)
    finally:
        sender.close()


def test_report_sender_without_a_listener_does_not_raise() -> None:
    # Find a free port, then close it: datagrams to it are refused (or dropped) silently.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monotonic = _Clock(1.0)
    activity = PartitionActivity(TickSchedule(10_000, 1_000, max_records=3), clock=monotonic)
    metrics = ProgressControlMetrics(lambda: 0)
    sender = ReportSender(activity, f"127.0.0.1:{port}", "src", metrics, monotonic=monotonic)
    try:
        for n in range(3):
            activity.record_data_ack("clicks", 0, n)
            monotonic.now += 1.0
            sender.send()
    finally:
        sender.close()


# --- signing key ---------------------------------------------------------------------------------

SECRET = "s3cret-of-at-least-16-bytes"  # noqa: S105 - a test value


def test_no_signing_key_by_default() -> None:
    assert InterceptorSettings.from_config({}).signing_key is None


def test_signing_key_from_config_keys() -> None:
    s = InterceptorSettings.from_config(
        {"progress.control.signing.key.id": "k1", "progress.control.signing.key.secret": SECRET}
    )
    assert s.signing_key == SigningKey("k1", SECRET.encode())
    assert SECRET not in repr(s)
    assert SECRET not in repr(s.signing_key)
    assert SECRET not in str(s.model_dump())


def test_signing_key_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROGRESS_CONTROL_SIGNING_KEY_ID", "k2")
    monkeypatch.setenv("PROGRESS_CONTROL_SIGNING_KEY_SECRET", SECRET)
    assert InterceptorSettings.from_config({}).signing_key == SigningKey("k2", SECRET.encode())


def test_signing_secret_from_a_file_without_its_newline(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret_file = tmp_path / "signing-secret"
    secret_file.write_text(SECRET + "\n")
    monkeypatch.setenv("PROGRESS_CONTROL_SIGNING_KEY_FILE", str(secret_file))
    s = InterceptorSettings.from_config({"progress.control.signing.key.id": "k3"})
    assert s.signing_key == SigningKey("k3", SECRET.encode())


@pytest.mark.parametrize(
    ("config", "names"),
    [
        (
            {
                "progress.control.signing.key.id": "k",
                "progress.control.signing.key.secret": "x" * 15,
            },
            ["progress.control.signing.key.secret", "at least 16 bytes"],
        ),
        (
            {"progress.control.signing.key.secret": SECRET},
            ["progress.control.signing.key.id", "PROGRESS_CONTROL_SIGNING_KEY_ID"],
        ),
        (
            {"progress.control.signing.key.id": "k"},
            ["progress.control.signing.key.secret", "progress.control.signing.key.file"],
        ),
        (
            {"progress.control.signing.key.id": "k", "progress.control.signing.key.file": "/nope"},
            ["progress.control.signing.key.file", "PROGRESS_CONTROL_SIGNING_KEY_FILE", "/nope"],
        ),
        (
            {
                "progress.control.signing.key.id": "k" * 256,
                "progress.control.signing.key.secret": SECRET,
            },
            ["progress.control.signing.key.id", "PROGRESS_CONTROL_SIGNING_KEY_ID"],
        ),
    ],
)
def test_invalid_signing_settings_fail_naming_the_setting_never_the_secret(
    config: dict[str, Any], names: list[str]
) -> None:
    message = _error(config)
    for name in names:
        assert name in message
    assert SECRET not in message
    assert "x" * 15 not in message


def test_a_secret_and_a_secret_file_are_ambiguous(tmp_path: Path) -> None:
    (tmp_path / "s").write_text(SECRET)
    message = _error(
        {
            "progress.control.signing.key.id": "k",
            "progress.control.signing.key.secret": SECRET,
            "progress.control.signing.key.file": str(tmp_path / "s"),
        }
    )
    assert "not both" in message
    assert SECRET not in message


# --- internal topics -----------------------------------------------------------------------------

INTERNAL = [
    "__consumer_offsets",
    "__transaction_state",
    "_schemas",
    "_confluent-metrics",
    "_confluent-ksql-default__command_topic",
    "connect-offsets",
    "connect-configs",
    "connect-status",
    "connect-cluster-offsets",
    "docker-connect-status",
    "mm2-offsets.source.internal",
    "source.checkpoints.internal",
    "orders-app-counts-store-changelog",
    "orders-app-KSTREAM-AGGREGATE-0000000003-repartition",
    "orders-app-KTABLE-FK-JOIN-SUBSCRIPTION-REGISTRATION-0000000006-topic",
    "orders-app-KTABLE-FK-JOIN-SUBSCRIPTION-RESPONSE-0000000008-topic",
    "changelog__group--topic--store",
    "repartition__group--topic--op",
    "default_ksql_processing_log",
    "sessions-app-membership",
    "sessions-app-dlq",
]
DATA = ["clicks", "orders", "connect-events", "changelogs", "schemas", "payments.internal.v2"]


def test_internal_and_system_topics_are_excluded_by_default() -> None:
    accept = InterceptorSettings.from_config({}).topic_filter()
    assert [t for t in INTERNAL if accept(t)] == []
    assert [t for t in DATA if accept(t)] == DATA


def test_the_internal_list_can_be_replaced_but_kafka_topics_stay_excluded() -> None:
    s = InterceptorSettings.from_config({"progress.control.topics.internal": "orders"})
    accept = s.topic_filter()
    assert not accept("orders")
    assert accept("orders-app-counts-store-changelog")
    assert not accept("__consumer_offsets")
    everything = InterceptorSettings.from_config({"progress.control.topics.internal": ""})
    assert everything.topics_internal == ()
    assert everything.topic_filter()("_schemas")
    assert not everything.topic_filter()("__transaction_state")


def test_include_cannot_reopen_an_internal_topic() -> None:
    s = InterceptorSettings.from_config({"progress.control.topics.include": ".*-changelog"})
    assert not s.topic_filter()("app-store-changelog")


def test_topic_filter_cache_is_bounded() -> None:
    accept = TopicFilter((), ("x.*",))
    for n in range(100_100):
        accept(f"t{n}")
    assert len(accept._decided) <= 100_000
    assert accept("t100099")
