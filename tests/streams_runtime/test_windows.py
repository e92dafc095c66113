"""Session-window arithmetic (streams_runtime.windows) against docs/runtime/windows.md: examples at
every boundary and hypothesis properties against a brute-force reference."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams_runtime.windows import SessionWindow, SessionWindows, merge_sessions

# -- SessionWindows construction ------------------------------------------------------------------


def test_defaults_and_fields() -> None:
    w = SessionWindows(gap_ms=10)
    assert (w.gap_ms, w.grace_ms) == (10, 0)


@pytest.mark.parametrize("gap", [0, -1])
def test_gap_must_be_positive(gap: int) -> None:
    with pytest.raises(ValueError, match="gap_ms"):
        SessionWindows(gap_ms=gap)


def test_grace_must_be_non_negative() -> None:
    with pytest.raises(ValueError, match="grace_ms"):
        SessionWindows(gap_ms=1, grace_ms=-1)
    assert SessionWindows(gap_ms=1, grace_ms=0).grace_ms == 0


def test_with_inactivity_gap_accepts_ms_and_timedelta() -> None:
    assert SessionWindows.with_inactivity_gap(5000) == SessionWindows(5000, 0)
    assert SessionWindows.with_inactivity_gap(5000, 200) == SessionWindows(5000, 200)
    assert SessionWindows.with_inactivity_gap(
        timedelta(seconds=5), timedelta(milliseconds=200)
    ) == SessionWindows(5000, 200)
    assert SessionWindows.with_inactivity_gap(timedelta(minutes=1), 7) == SessionWindows(60_000, 7)


def test_with_inactivity_gap_validates() -> None:
    with pytest.raises(ValueError, match="gap_ms"):
        SessionWindows.with_inactivity_gap(timedelta(0))
    with pytest.raises(ValueError, match="grace_ms"):
        SessionWindows.with_inactivity_gap(10, timedelta(milliseconds=-1))
    with pytest.raises(TypeError, match="gap"):
        SessionWindows.with_inactivity_gap(1.5)  # type: ignore[arg-type]


def test_session_windows_is_frozen() -> None:
    w = SessionWindows(10)
    with pytest.raises(AttributeError):
        w.gap_ms = 5  # type: ignore[misc]


def test_retention() -> None:
    assert SessionWindows(gap_ms=10, grace_ms=3).retention_ms == 13
    assert SessionWindows(gap_ms=10).retention_ms == 10


# -- close time, late and final rules -------------------------------------------------------------


def test_close_time() -> None:
    assert SessionWindows(gap_ms=10, grace_ms=5).close_time(100) == 85


def test_late_boundary() -> None:
    w = SessionWindows(gap_ms=10, grace_ms=5)
    close = w.close_time(100)  # 85
    assert not w.is_late(close, 100)  # merged end == close time: on time
    assert w.is_late(close - 1, 100)
    assert not w.is_late(close + 1, 100)


def test_late_uses_merged_end_only() -> None:
    # A record far behind stream time is kept when it merges into a session that ends recently.
    w = SessionWindows(gap_ms=10)
    t = 50
    merged = merge_sessions(t, [SessionWindow(55, 95)])
    assert w.is_late(t, 100)  # alone it would be late
    assert not w.is_late(merged.end, 100)


def test_final_boundary() -> None:
    w = SessionWindows(gap_ms=10, grace_ms=5)
    end = 70
    assert w.is_final(end, end + 10 + 5)  # end + gap + grace == stream time: final
    assert not w.is_final(end, end + 10 + 5 - 1)
    assert w.is_final(end, end + 10 + 5 + 1)


def test_final_without_grace() -> None:
    w = SessionWindows(gap_ms=10)
    assert not w.is_final(0, 9)
    assert w.is_final(0, 10)


def test_unknown_stream_time_nothing_final() -> None:
    w = SessionWindows(gap_ms=1)
    assert not w.is_final(0, -1)


def test_a_session_is_final_exactly_when_it_leaves_retention() -> None:
    # As in Kafka Streams: its session store keeps a session while end > stream time - retention,
    # and suppression emits it once end + gap + grace <= stream time. The two rules meet, so no
    # record can merge into a session whose final result is out (two overlapping results).
    w = SessionWindows(gap_ms=10, grace_ms=5)
    for end in range(40):
        for stream_time in range(80):
            retained = end > stream_time - w.retention_ms
            assert w.is_final(end, stream_time) == (not retained)


# -- SessionWindow and merging --------------------------------------------------------------------


def test_session_window_validates_and_orders() -> None:
    with pytest.raises(ValueError, match="after its end"):
        SessionWindow(5, 4)
    assert SessionWindow(3, 3).start == 3
    assert sorted([SessionWindow(5, 9), SessionWindow(1, 9), SessionWindow(1, 2)]) == [
        SessionWindow(1, 2),
        SessionWindow(1, 9),
        SessionWindow(5, 9),
    ]
    assert hash(SessionWindow(1, 2)) == hash(SessionWindow(1, 2))


def test_contains_is_inclusive() -> None:
    s = SessionWindow(10, 20)
    assert s.contains(10)
    assert s.contains(20)
    assert not s.contains(9)
    assert not s.contains(21)


def test_can_merge_inclusive_bounds() -> None:
    s = SessionWindow(100, 200)
    gap = 30
    assert s.can_merge(200 + gap, gap)  # t == end + gap merges
    assert not s.can_merge(200 + gap + 1, gap)
    assert s.can_merge(100 - gap, gap)  # t == start - gap merges
    assert not s.can_merge(100 - gap - 1, gap)
    assert s.can_merge(150, gap)


def test_merge_sessions_examples() -> None:
    assert merge_sessions(7, []) == SessionWindow(7, 7)
    assert merge_sessions(7, [SessionWindow(0, 3)]) == SessionWindow(0, 7)
    assert merge_sessions(7, [SessionWindow(9, 12)]) == SessionWindow(7, 12)
    assert merge_sessions(7, [SessionWindow(5, 8)]) == SessionWindow(5, 8)
    # A record bridging two sessions joins them.
    assert merge_sessions(15, [SessionWindow(0, 10), SessionWindow(20, 30)]) == SessionWindow(0, 30)
    # Works on any iterable, e.g. a generator.
    assert merge_sessions(1, (s for s in [SessionWindow(2, 3)])) == SessionWindow(1, 3)


# -- properties -----------------------------------------------------------------------------------

timestamps = st.integers(min_value=0, max_value=10_000)
gaps = st.integers(min_value=1, max_value=500)


def aggregate(ts: list[int], gap: int) -> list[SessionWindow]:
    """Sessions of one key after feeding ``ts`` in order, as a session aggregate does (nothing
    late): merge the record with every session it can merge with, replace them by the result."""
    sessions: list[SessionWindow] = []
    for t in ts:
        hits = [s for s in sessions if s.can_merge(t, gap)]
        merged = merge_sessions(t, hits)
        sessions = [s for s in sessions if s not in hits]
        sessions.append(merged)
    return sorted(sessions)


def reference(ts: list[int], gap: int) -> list[SessionWindow]:
    """Brute force: sort the timestamps and split wherever consecutive ones differ by > gap."""
    out: list[SessionWindow] = []
    ordered = sorted(ts)
    start = prev = ordered[0]
    for t in ordered[1:]:
        if t - prev > gap:
            out.append(SessionWindow(start, prev))
            start = t
        prev = t
    out.append(SessionWindow(start, prev))
    return out


@given(st.lists(timestamps, min_size=1, max_size=60).flatmap(st.permutations), gaps)
def test_sessions_match_reference_in_any_order(ts: list[int], gap: int) -> None:
    result = aggregate(ts, gap)
    assert result == reference(ts, gap)
    # No two sessions of one key are within gap of each other: they could have merged.
    for a, b in itertools.pairwise(result):
        assert b.start - a.end > gap
    # Every record lies in exactly one session.
    for t in ts:
        assert sum(s.contains(t) for s in result) == 1


@given(st.lists(timestamps, min_size=1, max_size=40), gaps)
def test_order_does_not_matter(ts: list[int], gap: int) -> None:
    assert aggregate(ts, gap) == aggregate(list(reversed(ts)), gap) == aggregate(sorted(ts), gap)


@st.composite
def sessions_and_ts(draw: st.DrawFn) -> tuple[int, list[SessionWindow]]:
    pairs = draw(st.lists(st.tuples(timestamps, timestamps), max_size=10))
    return draw(timestamps), [SessionWindow(min(p), max(p)) for p in pairs]


@given(sessions_and_ts())
def test_merge_contains_every_input(case: tuple[int, list[SessionWindow]]) -> None:
    t, sessions = case
    merged = merge_sessions(t, sessions)
    assert merged.contains(t)
    for s in sessions:
        assert merged.start <= s.start
        assert s.end <= merged.end
    # ... and nothing more: its bounds are attained.
    assert merged.start in {t, *(s.start for s in sessions)}
    assert merged.end in {t, *(s.end for s in sessions)}


@given(sessions_and_ts())
def test_merge_is_order_independent(case: tuple[int, list[SessionWindow]]) -> None:
    t, sessions = case
    assert merge_sessions(t, sessions) == merge_sessions(t, list(reversed(sessions)))


@given(timestamps, timestamps, timestamps, gaps, st.integers(min_value=0, max_value=1_000))
def test_final_is_monotone_in_stream_time(end: int, t1: int, t2: int, gap: int, grace: int) -> None:
    w = SessionWindows(gap, grace)
    lo, hi = sorted((t1, t2))
    if w.is_final(end, lo):
        assert w.is_final(end, hi)
    if w.is_late(end, lo):
        assert w.is_late(end, hi)


@given(timestamps, timestamps, gaps, st.integers(min_value=0, max_value=1_000))
def test_rules_match_design_formulas(end: int, stream_time: int, gap: int, grace: int) -> None:
    w = SessionWindows(gap, grace)
    assert w.is_final(end, stream_time) == (end + gap + grace <= stream_time)
    assert w.is_late(end, stream_time) == (end < stream_time - grace - gap)
    # A session ending where a late record's merged session ends is already final.
    if w.is_late(end, stream_time):
        assert w.is_final(end, stream_time)


@given(timestamps, timestamps, timestamps, gaps)
def test_can_merge_matches_formula(start: int, length: int, t: int, gap: int) -> None:
    s = SessionWindow(start, start + length)
    assert s.can_merge(t, gap) == (s.start - gap <= t <= s.end + gap)
    if s.contains(t):
        assert s.can_merge(t, gap)
