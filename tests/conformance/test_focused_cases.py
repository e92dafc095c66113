"""The divergences the conformance suite was built for, each pinned down on a minimal input that
runs through Kafka Streams and the runtime: the expected output is asserted for both engines."""

from __future__ import annotations

import pytest

from streams_runtime import SessionWindows
from tests.conformance.compare import OutputRecord, differences, final_results
from tests.conformance.conftest import RunBoth
from tests.conformance.inputs import SENTINEL_KEY, InputRecord
from tests.conformance.topologies import CASES

pytestmark = [pytest.mark.broker, pytest.mark.network]


def _data(records: list[OutputRecord]) -> list[tuple[bytes | None, bytes | None, int]]:
    """(key, value, timestamp) of the data records, without Kafka Streams' output for the
    control records (which it reads as records keyed by the sentinel)."""
    return [
        (r.key, r.value, r.timestamp) for r in records if not r.control and r.key != SENTINEL_KEY
    ]


def _sessions(records: list[OutputRecord]) -> list[tuple[bytes, int, int, int, int]]:
    """(key, start, end, count, timestamp) of session counts. A session's timestamp is its end,
    so the window's bounds are shown on the inputs' relative clock too."""
    found = []
    for r in records:
        assert r.key is not None
        key, end, start = r.key[:-16], r.key[-16:-8], r.key[-8:]
        if r.control or key == SENTINEL_KEY:
            continue
        shift = int.from_bytes(end, "big") - r.timestamp
        count = int.from_bytes(r.value or b"", "big")
        found.append((key, int.from_bytes(start, "big") - shift, r.timestamp, count, r.timestamp))
    return found


def test_a_record_late_for_a_final_session_starts_its_own(both_engines: RunBoth) -> None:
    # gap 3000, grace 2000: at stream time 5500, [0,0] is final (0 + 5000 <= 5500) and out of
    # retention, so c@2700 merges only with b's session. Merging it into [0,0] too would give a
    # second result for a session already emitted: [0,5500]=3.
    windows = SessionWindows(gap_ms=3_000, grace_ms=2_000)
    records = [
        InputRecord("in", 0, b"m1", b"a", 0),
        InputRecord("in", 0, b"m1", b"b", 5_500),
        InputRecord("in", 0, b"m1", b"c", 2_700),
        InputRecord("in", 0, SENTINEL_KEY, None, 20_000, control=True),
    ]
    kstreams, runtime = both_engines({"session-count-suppressed": records}, windows)
    for outputs in (kstreams, runtime):
        assert _sessions(outputs["session-count-suppressed"]["out"]) == [
            (b"m1", 0, 0, 1, 0),
            (b"m1", 2_700, 5_500, 2, 5_500),
        ]
    case = CASES["session-count-suppressed"]
    assert differences(case, kstreams[case.name], runtime[case.name]) == []


def test_stream_table_joins_and_null_values_and_keys(both_engines: RunBoth) -> None:
    windows = SessionWindows(gap_ms=1_000)
    records = [
        InputRecord("in2", 0, b"k1", b"4", 100),
        InputRecord("in", 0, b"k1", b"x", 200),
        InputRecord("in", 0, b"k1", None, 300),  # no value: nothing to join, in either join
        InputRecord("in", 0, None, b"y", 400),  # no key: only the left join forwards it (KIP-962)
    ]
    kstreams, runtime = both_engines({"stream-table-join": records}, windows)
    for outputs in (kstreams, runtime):
        joins = outputs["stream-table-join"]
        assert _data(joins["out"]) == [(b"k1", b"x|4", 200)]
        # The null key's record goes to any partition: compare without order.
        left = sorted(_data(joins["out2"]), key=repr)
        assert left == sorted([(b"k1", b"x|4", 200), (None, b"y|null", 400)], key=repr)
        assert _data(joins["out3"]) == [(b"k1", b"x|4", 200)]
    case = CASES["stream-table-join"]
    assert differences(case, kstreams[case.name], runtime[case.name]) == []


def test_an_idempotent_update_is_not_forwarded_but_its_timestamp_is_kept(
    both_engines: RunBoth,
) -> None:
    windows = SessionWindows(gap_ms=1_000)
    records = [
        InputRecord("in", 0, b"r1", b"5", 100),
        InputRecord("in", 0, b"r1", b"5", 200),  # max stays 5, newer: idempotent
        InputRecord("in", 0, b"r1", b"6", 150),  # stamped max(150, 200), as Kafka Streams does
    ]
    kstreams, runtime = both_engines({"table-reduce": records}, windows)
    assert _data(kstreams["table-reduce"]["out"]) == [
        (b"r1", b"5", 100),
        (b"r1", b"5", 200),
        (b"r1", b"6", 200),
    ]
    assert _data(runtime["table-reduce"]["out"]) == [(b"r1", b"5", 100), (b"r1", b"6", 200)]
    case = CASES["table-reduce"]
    assert differences(case, kstreams[case.name], runtime[case.name]) == []


_Row = tuple[bytes | None, bytes | None, int]


def test_stream_stream_joins_unjoined_results_and_null_keys(both_engines: RunBoth) -> None:
    # before 500, after 1000, grace 500 (the case derives them from the session gap and grace)
    windows = SessionWindows(gap_ms=1_000, grace_ms=500)
    records = [
        InputRecord("in", 0, b"k1", b"a", 100),
        InputRecord("in2", 0, b"k1", b"x", 600),  # joins a, stamped 600
        InputRecord("in", 0, b"k1", b"a2", 601),  # joins x, stamped 601
        InputRecord("in2", 0, b"k2", b"y", 700),  # never joined (outer join only)
        InputRecord("in", 0, None, b"n", 800),  # KIP-962: left and outer forward it at once
        InputRecord("in", 0, b"k3", b"b", 900),  # never joined
        # The runtime emits y and b here; Kafka Streams at c, the next in-order record.
        InputRecord("in", 0, SENTINEL_KEY, None, 3_000, control=True),
        InputRecord("in", 0, b"k4", b"c", 3_100),
        InputRecord("in2", 0, b"k4", b"z", 1_500),  # taken before the tick: its head is older
        InputRecord("in", 0, SENTINEL_KEY, b"end", 10_000, control=True),  # flushes c
    ]
    kstreams, runtime = both_engines({"stream-stream-join": records}, windows)

    def data(records: list[OutputRecord]) -> list[_Row]:
        # Not _data: Kafka Streams stamps c's result with the headers of the record that made
        # it come out, the final control record, so it reads as one.
        return [(r.key, r.value, r.timestamp) for r in records if r.value and r.key != SENTINEL_KEY]

    joined: list[_Row] = [(b"k1", b"a|x", 600), (b"k1", b"a2|x", 601)]
    left: list[_Row] = [(None, b"n|null", 800), (b"k3", b"b|null", 900), (b"k4", b"c|null", 3_100)]
    outer: list[_Row] = [(b"k2", b"null|y", 700), (b"k4", b"null|z", 1_500)]
    for outputs in (kstreams, runtime):
        joins = outputs["stream-stream-join"]
        assert data(joins["out"]) == joined
        assert sorted(data(joins["out2"]), key=repr) == sorted(joined + left, key=repr)
        assert sorted(data(joins["out3"]), key=repr) == sorted(joined + left + outer, key=repr)
    case = CASES["stream-stream-join"]
    assert differences(case, kstreams[case.name], runtime[case.name]) == []


def _time_windows(records: list[OutputRecord]) -> list[tuple[bytes, int, int, int]]:
    """(key, start, count, timestamp) of time-windowed counts; the inputs are dated from a whole
    minute, so a window's start on their clock is its start modulo a minute."""
    found = []
    for r in records:
        assert r.key is not None
        key, start = r.key[:-8], int.from_bytes(r.key[-8:], "big")
        if not r.control and key != SENTINEL_KEY:
            found.append((key, start % 60_000, int.from_bytes(r.value or b"", "big"), r.timestamp))
    return found


def test_window_boundaries_and_final_results(both_engines: RunBoth) -> None:
    # Size (sliding: time difference) 3000, grace 0.
    windows = SessionWindows(gap_ms=3_000)
    tumbling = [
        InputRecord("in", 0, b"t1", b"a", 2_999),  # [0, 3000)
        InputRecord("in", 0, b"t1", b"b", 3_000),  # [3000, 6000): [0, 3000) is final, at 2999
        InputRecord("in", 0, b"t1", b"c", 2_999),  # late: 3000 + 0 <= 3000
        InputRecord("in", 0, SENTINEL_KEY, None, 20_000, control=True),
    ]
    # A sliding window ending at stream time is final at once (end + grace <= stream time) yet
    # still takes a record at its end (late only once end + grace < stream time): Kafka Streams
    # emits it twice, and so does the runtime.
    sliding = [
        InputRecord("in", 0, b"s1", b"a", 10_000),  # [7000, 10000]
        InputRecord("in", 0, b"s1", b"b", 10_000),
        InputRecord("in", 0, SENTINEL_KEY, None, 20_000, control=True),
    ]
    inputs = {"tumbling-count-suppressed": tumbling, "sliding-count-suppressed": sliding}
    kstreams, runtime = both_engines(inputs, windows)
    for outputs in (kstreams, runtime):
        assert _time_windows(outputs["tumbling-count-suppressed"]["out"]) == [
            (b"t1", 0, 1, 2_999),
            (b"t1", 3_000, 1, 3_000),
        ]
        assert _time_windows(outputs["sliding-count-suppressed"]["out"]) == [
            (b"s1", 7_000, 1, 10_000),
            (b"s1", 7_000, 2, 10_000),
        ]
    for name in inputs:
        assert differences(CASES[name], kstreams[name], runtime[name]) == []


def _counts(records: list[OutputRecord]) -> list[tuple[bytes | None, int, int]]:
    """(key, count, timestamp) of long counts."""
    return [(key, int.from_bytes(value or b"", "big"), ts) for key, value, ts in _data(records)]


def test_table_filters_forward_the_deletes_kafka_streams_forwards(both_engines: RunBoth) -> None:
    # A source table without a store name: its filters send no old values, so every update they
    # reject is a delete, unless a group_by downstream made the filter send them (out4).
    windows = SessionWindows(gap_ms=1_000)
    records = [
        InputRecord("in", 0, b"k0", b"x", 100),
        InputRecord("in", 0, b"k0", b"x", 200),  # idempotent: the runtime's table drops it
        InputRecord("in", 0, b"k3", b"x", 1_399),  # starts rejected
        InputRecord("in", 0, b"k3", b"b0", 1_349),  # older than what k3 holds
        InputRecord("in", 0, b"k3", b"a0", 1_500),  # moves from group b0 to a0
        InputRecord("in", 0, b"k3", None, 1_600),
        InputRecord("in", 0, b"k3", None, 1_700),  # a repeated delete
    ]
    kstreams, runtime = both_engines({"table-filter": records}, windows)
    k3: list[_Row] = [
        (b"k3", None, 1_399),
        (b"k3", b"b0", 1_349),
        (b"k3", b"a0", 1_500),
        (b"k3", None, 1_600),
        (b"k3", None, 1_700),
    ]

    # Kafka Streams: a delete for each x of k0, though k0 was never in the filtered table.
    # Per key in offset order: the two keys may be in different output partitions.
    def by_key(rows: list[_Row]) -> list[_Row]:
        return sorted(rows, key=lambda row: row[0] or b"")

    for filtered in ("out2", "out3"):
        assert by_key(_data(kstreams["table-filter"][filtered])) == [
            (b"k0", None, 100),
            (b"k0", None, 200),
            *k3,
        ]
        assert by_key(_data(runtime["table-filter"][filtered])) == [(b"k0", None, 100), *k3]
    # The filter feeding group_by sends old values: nothing for k0 nor for k3's rejected x
    # and second delete; k3 leaves b0 (subtracted first, stamped with the later timestamp)
    # for a0.
    for outputs in (kstreams, runtime):
        # Per key in offset order (the two keys may be in different output partitions).
        assert sorted(_counts(outputs["table-filter"]["out4"]), key=lambda r: r[0] or b"") == [
            (b"a0", 1, 1_500),
            (b"a0", 0, 1_600),
            (b"b0", 1, 1_349),
            (b"b0", 0, 1_500),
        ]
    case = CASES["table-filter"]
    assert differences(case, kstreams[case.name], runtime[case.name]) == []


@pytest.mark.parametrize("trigger", ["in", "in2"])
def test_an_unjoined_result_comes_out_only_when_a_scan_looks(
    trigger: str, both_engines: RunBoth
) -> None:
    # before 2000, after 1000, grace 1000 (the reversed case: before = gap, after = gap / 2).
    # L's window closed at 53000. A right record at 53001 scans only past minTime + before +
    # grace = 54000, so L is not looked at, and R, out of order but within its own window, joins
    # it: L never comes out alone. A left record at 53001 scans (51000 + after + grace < 53001):
    # L comes out alone, then joined with R, in Kafka Streams as in the runtime.
    # Both engines take the input with the older head first: on the right, R comes after a
    # record later than the trigger, so the trigger is taken first.
    windows = SessionWindows(gap_ms=2_000, grace_ms=1_000)
    records = [
        InputRecord("in", 0, b"x1", b"L", 51_000),
        InputRecord(trigger, 0, b"x2", b"o", 53_001),
        InputRecord("in2", 0, b"x3", b"q", 53_002),
        InputRecord("in2", 0, b"x1", b"R", 51_500),
        InputRecord("in", 0, b"x4", b"p", 60_000),
        InputRecord("in", 0, SENTINEL_KEY, b"end", 90_000, control=True),
    ]
    name = "stream-stream-join-reversed"
    kstreams, runtime = both_engines({name: records}, windows)
    alone = [(b"x1", b"L|null", 51_000)] if trigger == "in" else []
    for outputs in (kstreams, runtime):
        for role in ("out2", "out3"):
            found = [row for row in _data(outputs[name][role]) if row[0] == b"x1"]
            assert sorted(found) == sorted([*alone, (b"x1", b"L|R", 51_500)]), role
    assert differences(CASES[name], kstreams[name], runtime[name]) == []


def test_an_update_dropped_by_emit_on_change_keeps_an_aggregate_s_older_timestamp(
    both_engines: RunBoth,
) -> None:
    # The documented consequence of emit-on-change (README, difference 2): k1's second a0 is
    # idempotent, so the runtime's table does not forward it and the group's count never sees
    # it. Kafka Streams subtracts and adds it, and the count takes its timestamp (300); k2's
    # out-of-order a0 then counts 2 at 300 there and at 200 in the runtime. Same values.
    windows = SessionWindows(gap_ms=1_000)
    records = [
        InputRecord("in", 0, b"k1", b"a0", 100),
        InputRecord("in", 0, b"k1", b"a0", 300),
        InputRecord("in", 0, b"k2", b"a0", 200),
    ]
    kstreams, runtime = both_engines({"table-filter": records}, windows)
    assert _counts(kstreams["table-filter"]["out4"]) == [
        (b"a0", 1, 100),
        (b"a0", 1, 300),
        (b"a0", 2, 300),
    ]
    assert _counts(runtime["table-filter"]["out4"]) == [(b"a0", 1, 100), (b"a0", 2, 200)]


CACHED_CASES = (
    "table-count",
    "repartition-count",
    "session-count-suppressed",
    "session-aggregate-suppressed",
    "tumbling-count-suppressed",
    "hopping-aggregate-suppressed",
    "sliding-count-suppressed",
)
# Suppressed windowed results Kafka Streams emits once each whatever the cache merged: the whole
# output is compared. (A sliding window can be emitted twice, Kafka Streams' own edge at
# exactly end + grace, and which update the first emission carries depends on the cache.)
WHOLE_OUTPUT_CASES = CACHED_CASES[2:6]


def test_with_equal_record_caches_final_results_agree(both_engines: RunBoth) -> None:
    # The same 10 MiB cache on both sides: which intermediate updates are merged depends on
    # commit timing, so only each key's final result (value and timestamp) is compared, and
    # the whole suppressed output of windowed aggregations (each final result once). Two
    # bursts per key, far apart: a session each, the second one closed by the sentinel.
    windows = SessionWindows(gap_ms=1_000)
    records = [
        InputRecord("in", i % 2, f"k{i % 6}".encode(), str(i).encode(), start + 100 * i)
        for start in (0, 60_000)
        for i in range(60)
    ]
    records.append(InputRecord("in", 0, SENTINEL_KEY, None, 200_000, control=True))
    records.append(InputRecord("in", 1, SENTINEL_KEY, None, 200_000, control=True))
    inputs = dict.fromkeys(CACHED_CASES, records)
    kstreams, runtime = both_engines(inputs, windows, cache_max_bytes=10 * 1024 * 1024)
    for name in CACHED_CASES:
        case = CASES[name]
        want = final_results(case, kstreams[name]["out"])
        assert want, name
        assert final_results(case, runtime[name]["out"]) == want, name
        if name in WHOLE_OUTPUT_CASES:
            expected = sorted(_data(kstreams[name]["out"]))
            assert sorted(_data(runtime[name]["out"])) == expected, name


def test_with_a_record_cache_kafka_streams_merges_into_a_final_session_and_the_runtime_does_not(
    both_engines: RunBoth,
) -> None:
    # The input of test_a_record_late_for_a_final_session_starts_its_own, with a 10 MiB record
    # cache and no commit while it is processed. Kafka Streams' CachingSessionStore finds
    # sessions in its cache without the retention cutoff its persistent store applies, so
    # c@2700 merges [0,0] (final since stream time 5000, still cached) too: its answer then
    # depends on whether a commit flushed the cache in between. The runtime gives Kafka
    # Streams' cache-off answer whatever the commit timing (a documented difference).
    windows = SessionWindows(gap_ms=3_000, grace_ms=2_000)
    records = [
        InputRecord("in", 0, b"m1", b"a", 0),
        InputRecord("in", 0, b"m1", b"b", 5_500),
        InputRecord("in", 0, b"m1", b"c", 2_700),
        InputRecord("in", 0, SENTINEL_KEY, None, 20_000, control=True),
    ]
    kstreams, runtime = both_engines(
        {"session-count-suppressed": records},
        windows,
        cache_max_bytes=10 * 1024 * 1024,
        commit_interval_ms=5_000,  # none while the four records are processed
    )
    assert _sessions(runtime["session-count-suppressed"]["out"]) == [
        (b"m1", 0, 0, 1, 0),
        (b"m1", 2_700, 5_500, 2, 5_500),
    ]
    assert _sessions(kstreams["session-count-suppressed"]["out"]) == [(b"m1", 0, 5_500, 3, 5_500)]
