"""RecordQueue and PartitionGroup (streams_runtime.processing.partition_group): record choice,
stream and partition time, and KIP-695 lag-gated idling, with a fake clock and fake lags
(docs/design.md §5)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from streams_runtime.processing.partition_group import (
    PartitionGroup,
    ReadyReason,
    RecordQueue,
)
from streams_runtime.record import SourceRecord, TopicPartitionId

A = TopicPartitionId("left", 0)
B = TopicPartitionId("right", 0)
C = TopicPartitionId("third", 0)


class FakeClock:
    """Manually advanced millisecond clock."""

    def __init__(self, now: int = 1_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


class FakeLag:
    """Lag per partition, settable by tests; missing = unknown. Counts calls."""

    def __init__(self) -> None:
        self.lags: dict[TopicPartitionId, int | None] = {}
        self.calls = 0

    def __call__(self, tp: TopicPartitionId) -> int | None:
        self.calls += 1
        return self.lags.get(tp)


def rec(tp: TopicPartitionId, ts: int, offset: int = 0) -> SourceRecord:
    return SourceRecord(tp.topic, tp.partition, offset, ts, b"k", b"v", None)


def recs(tp: TopicPartitionId, *tss: int, first_offset: int = 0) -> list[SourceRecord]:
    return [rec(tp, ts, first_offset + i) for i, ts in enumerate(tss)]


def group(
    max_idle: int,
    lag: FakeLag | None = None,
    clock: FakeClock | None = None,
    partitions: Sequence[TopicPartitionId] = (A, B),
) -> tuple[PartitionGroup, FakeLag, FakeClock]:
    lag = lag or FakeLag()
    clock = clock or FakeClock()
    return PartitionGroup(partitions, max_task_idle_ms=max_idle, lag=lag, clock=clock), lag, clock


def drain(g: PartitionGroup) -> list[tuple[TopicPartitionId, int]]:
    out = []
    while (r := g.next_record()) is not None:
        out.append((r.tp, r.timestamp))
    return out


# -- RecordQueue ----------------------------------------------------------------------------------


def test_queue_fifo_and_partition_time() -> None:
    q = RecordQueue(A)
    assert q.tp == A
    assert len(q) == 0
    assert q.head() is None
    assert q.poll() is None
    assert q.partition_time == -1
    q.add(recs(A, 5, 3, 9))
    assert len(q) == 3
    head = q.head()
    assert head is not None
    assert head.timestamp == 5
    assert q.partition_time == -1  # only polling advances it
    taken = [q.poll(), q.poll()]
    assert [r.timestamp for r in taken if r is not None] == [5, 3]
    assert q.partition_time == 5  # never decreases on the out-of-order 3
    assert q.poll() is not None
    assert q.partition_time == 9
    assert len(q) == 0


def test_queue_clear_keeps_partition_time() -> None:
    q = RecordQueue(A)
    q.add(recs(A, 4, 8))
    q.poll()
    q.clear()
    assert len(q) == 0
    assert q.head() is None
    assert q.partition_time == 4


def test_queue_restore_never_lowers() -> None:
    q = RecordQueue(A)
    q.advance_partition_time(50)
    assert q.partition_time == 50
    q.advance_partition_time(20)
    assert q.partition_time == 50


def test_queue_rejects_foreign_or_negative_records_atomically() -> None:
    q = RecordQueue(A)
    with pytest.raises(ValueError, match="added to queue"):
        q.add([rec(A, 1), rec(B, 2)])
    with pytest.raises(ValueError, match="negative timestamp"):
        q.add([rec(A, 1), rec(A, -1)])
    assert len(q) == 0


# -- construction and bookkeeping -----------------------------------------------------------------


def test_constructor_validation() -> None:
    with pytest.raises(ValueError, match="max_task_idle_ms"):
        group(-2)
    with pytest.raises(ValueError, match="twice"):
        group(0, partitions=(A, A))
    with pytest.raises(ValueError, match="at least one"):
        group(0, partitions=())
    for ok in (-1, 0, 1, 10_000):
        g, _, _ = group(ok)
        assert g.max_task_idle_ms == ok


def test_default_clock_is_usable() -> None:
    g = PartitionGroup([A, B], max_task_idle_ms=60_000, lag=lambda _tp: 0)
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()  # deadline a minute away on the real monotonic clock
    assert g.last_decision.reason is ReadyReason.IDLING


def test_partitions_buffered_and_unknown_partition() -> None:
    g, _, _ = group(0, partitions=(B, A))
    assert g.partitions() == (B, A)
    assert g.add_records(A, recs(A, 1, 2)) == 2
    assert g.add_records(A, recs(A, 3, first_offset=2)) == 3
    assert g.add_records(B, []) == 0
    assert g.buffered(A) == 3
    assert g.buffered(B) == 0
    assert g.buffered() == 3
    head = g.head(A)
    assert head is not None
    assert head.offset == 0
    g.next_record()
    assert g.buffered() == 2
    with pytest.raises(KeyError, match="not in this partition group"):
        g.add_records(C, recs(C, 1))
    with pytest.raises(KeyError):
        g.partition_time(C)
    with pytest.raises(KeyError):
        g.buffered(C)


def test_clear_drops_records_and_deadlines_keeps_times() -> None:
    g, lag, clock = group(100)
    lag.lags[B] = 0
    g.add_records(A, recs(A, 10, 20))
    g.next_record()
    assert not g.ready_to_process()  # B idling, deadline clock + 100
    g.clear()
    assert g.buffered() == 0
    assert g.stream_time == 10
    assert g.partition_time(A) == 10
    assert g.next_record() is None
    # The deadline is gone: a fresh one starts on the next decision.
    clock.now += 100
    g.add_records(A, recs(A, 30))
    assert not g.ready_to_process()
    assert g.last_decision.deadline == clock.now + 100


# -- record choice and time -----------------------------------------------------------------------


def test_next_record_takes_smallest_head() -> None:
    g, _, _ = group(-1)
    g.add_records(A, recs(A, 5, 1, 20))
    g.add_records(B, recs(B, 3, 4, 6))
    # Heads are compared, not whole queues: A's 1 waits behind its head 5.
    assert drain(g) == [(B, 3), (B, 4), (A, 5), (A, 1), (B, 6), (A, 20)]


def test_next_record_ties_go_to_first_listed_partition() -> None:
    g, _, _ = group(-1, partitions=(B, A))
    g.add_records(A, recs(A, 7, 7))
    g.add_records(B, recs(B, 7, 7))
    assert drain(g) == [(B, 7), (B, 7), (A, 7), (A, 7)]


def test_next_record_skips_empty_queues_and_returns_none_when_empty() -> None:
    g, _, _ = group(-1, partitions=(A, B, C))
    assert g.next_record() is None
    g.add_records(C, recs(C, 9))
    r = g.next_record()
    assert r is not None
    assert r.tp == C
    assert g.next_record() is None


def test_stream_time_never_decreases_out_of_order() -> None:
    g, _, _ = group(-1)
    assert g.stream_time == -1
    assert g.partition_time(A) == -1
    g.add_records(A, recs(A, 50, 10, 30))
    g.add_records(B, recs(B, 40))
    seen = []
    while (r := g.next_record()) is not None:
        seen.append((r.timestamp, g.stream_time))
    assert seen == [(40, 40), (50, 50), (10, 50), (30, 50)]
    assert g.partition_time(A) == 50
    assert g.partition_time(B) == 40


def test_set_partition_time_restores_and_raises_stream_time() -> None:
    g, _, _ = group(-1)
    g.set_partition_time(A, 100)
    assert g.partition_time(A) == 100
    assert g.stream_time == 100
    g.set_partition_time(B, 60)
    assert g.partition_time(B) == 60
    assert g.stream_time == 100
    g.add_records(B, recs(B, 70))
    g.next_record()
    assert g.partition_time(B) == 70
    assert g.stream_time == 100
    g.set_partition_time(A, 10)  # older metadata never moves time back
    assert g.partition_time(A) == 100


# -- readiness: common rules ----------------------------------------------------------------------


@pytest.mark.parametrize("max_idle", [-1, 0, 100])
def test_nothing_buffered_is_not_ready(max_idle: int) -> None:
    g, lag, _ = group(max_idle)
    lag.lags = {A: 0, B: 0}
    assert not g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.NOTHING_BUFFERED
    assert g.enforced_processing_total == 0


@pytest.mark.parametrize("max_idle", [-1, 0, 100])
def test_all_buffered_is_ready_without_asking_lag(max_idle: int) -> None:
    g, lag, _ = group(max_idle)
    g.add_records(A, recs(A, 1))
    g.add_records(B, recs(B, 2))
    assert g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.ALL_BUFFERED
    assert lag.calls == 0
    assert g.enforced_processing_total == 0


# -- readiness: -1 never waits --------------------------------------------------------------------


def test_disabled_idling_processes_immediately() -> None:
    g, lag, _ = group(-1)
    g.add_records(A, recs(A, 1))  # B empty, lag unknown
    assert g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.IDLING_DISABLED
    lag.lags[B] = 1_000  # even with data known to be on the broker
    assert g.ready_to_process()
    assert lag.calls == 0
    assert g.enforced_processing_total == 0


# -- readiness: 0 ---------------------------------------------------------------------------------


def test_zero_waits_while_lag_unknown() -> None:
    g, _, clock = group(0)
    g.add_records(A, recs(A, 1))
    for _ in range(3):
        clock.now += 1_000_000  # no timeout on unknown lag
        assert not g.ready_to_process()
    d = g.last_decision
    assert (d.ready, d.reason, d.partition) == (False, ReadyReason.LAG_UNKNOWN, B)
    assert g.idle_partitions() == []


def test_zero_waits_while_data_on_broker() -> None:
    g, lag, clock = group(0)
    lag.lags[B] = 3
    g.add_records(A, recs(A, 1))
    clock.now += 1_000_000
    assert not g.ready_to_process()
    d = g.last_decision
    assert (d.reason, d.partition, d.lag) == (ReadyReason.DATA_ON_BROKER, B, 3)
    assert g.enforced_processing_total == 0


def test_zero_processes_immediately_when_caught_up() -> None:
    g, lag, _ = group(0)
    lag.lags[B] = 0
    g.add_records(A, recs(A, 1, 2))
    assert g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.ENFORCED
    assert g.enforced_processing_total == 1
    assert g.idle_partitions() == [B]
    g.next_record()
    assert g.ready_to_process()
    assert g.enforced_processing_total == 2  # one per enforced decision


def test_an_enforced_batch_counts_each_record_as_one_decision() -> None:
    """ready_batch under enforcement covers the records until the non-empty queue may run
    empty, each counted as ready_to_process would count it."""
    g, lag, _ = group(0)
    lag.lags[B] = 0
    g.add_records(A, recs(A, 1, 2, 3))
    assert g.ready_batch() == 3
    assert g.last_decision.reason is ReadyReason.ENFORCED
    assert g.enforced_processing_total == 3
    per_record, lag, _ = group(0)
    lag.lags[B] = 0
    per_record.add_records(A, recs(A, 1, 2, 3))
    while per_record.ready_to_process():
        per_record.next_record()
    assert per_record.enforced_processing_total == 3


def test_negative_lag_counts_as_caught_up() -> None:
    g, lag, _ = group(0)
    lag.lags[B] = -1
    g.add_records(A, recs(A, 1))
    assert g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.ENFORCED


# -- readiness: positive idle time ----------------------------------------------------------------


def test_positive_waits_exactly_until_deadline() -> None:
    g, lag, clock = group(100)
    lag.lags[B] = 0
    start = clock.now
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()
    d = g.last_decision
    assert (d.reason, d.partition, d.lag, d.deadline) == (ReadyReason.IDLING, B, 0, start + 100)
    assert g.idle_partitions() == []
    clock.now = start + 99  # deadline - 1
    assert not g.ready_to_process()
    assert g.enforced_processing_total == 0
    clock.now = start + 100  # deadline
    assert g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.ENFORCED
    assert g.enforced_processing_total == 1
    assert g.idle_partitions() == [B]


def test_deadline_is_set_once_not_pushed_by_repeated_calls() -> None:
    g, lag, clock = group(100)
    lag.lags[B] = 0
    start = clock.now
    g.add_records(A, recs(A, 1))
    for step in range(0, 100, 10):
        clock.now = start + step
        assert not g.ready_to_process()
        assert g.last_decision.deadline == start + 100
    clock.now = start + 100
    assert g.ready_to_process()


def test_deadline_not_started_while_nothing_buffered() -> None:
    g, lag, clock = group(100)
    lag.lags[B] = 0
    assert not g.ready_to_process()
    clock.now += 500
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()
    assert g.last_decision.deadline == clock.now + 100


def test_data_arriving_clears_deadline() -> None:
    g, lag, clock = group(100)
    lag.lags[B] = 0
    g.add_records(A, recs(A, 1, 2, 3))
    assert not g.ready_to_process()
    clock.now += 60
    g.add_records(B, recs(B, 5))  # B got data: its idle spell is over
    assert g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.ALL_BUFFERED
    drained = [g.next_record() for _ in range(2)]
    assert [r.timestamp for r in drained if r is not None] == [1, 2]
    g.next_record()  # 3 from A; then B's 5 is left, A empty
    lag.lags[A] = 0
    assert not g.ready_to_process()
    assert g.last_decision.partition == A
    assert g.last_decision.deadline == clock.now + 100  # fresh deadline, not the old one


def test_empty_add_does_not_clear_deadline() -> None:
    g, lag, clock = group(100)
    lag.lags[B] = 0
    start = clock.now
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()
    clock.now = start + 100
    g.add_records(B, [])
    assert g.ready_to_process()


def test_lag_turning_positive_drops_deadline() -> None:
    g, lag, clock = group(100)
    start = clock.now
    lag.lags[B] = 0
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()  # deadline start + 100
    clock.now = start + 50
    lag.lags[B] = 2
    assert not g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.DATA_ON_BROKER
    clock.now = start + 150
    lag.lags[B] = 0  # caught up again without data (e.g. only markers): a new full wait
    assert not g.ready_to_process()
    assert g.last_decision.deadline == start + 250
    clock.now = start + 250
    assert g.ready_to_process()


def test_lag_turning_unknown_drops_deadline() -> None:
    g, lag, clock = group(100)
    start = clock.now
    lag.lags[B] = 0
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()
    del lag.lags[B]
    clock.now = start + 100
    assert not g.ready_to_process()
    assert g.last_decision.reason is ReadyReason.LAG_UNKNOWN
    lag.lags[B] = 0
    assert not g.ready_to_process()
    assert g.last_decision.deadline == start + 200


def test_all_empty_partitions_must_be_past_deadline() -> None:
    g, lag, clock = group(100, partitions=(A, B, C))
    start = clock.now
    lag.lags[B] = 0
    lag.lags[C] = 5
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()  # B idling
    clock.now = start + 100
    assert not g.ready_to_process()  # B past deadline, but C has data on the broker
    assert g.last_decision.partition == C
    lag.lags[C] = 0
    assert not g.ready_to_process()  # C's deadline only starts now
    assert g.last_decision.deadline == start + 200
    assert g.idle_partitions() == [B]
    clock.now = start + 200
    assert g.ready_to_process()
    assert sorted(g.idle_partitions()) == sorted([B, C])
    assert g.enforced_processing_total == 1


def test_all_buffered_clears_deadlines() -> None:
    g, lag, clock = group(100)
    start = clock.now
    lag.lags = {A: 0, B: 0}
    g.add_records(A, recs(A, 1))
    assert not g.ready_to_process()  # deadline for B
    g.add_records(B, recs(B, 2))
    assert g.ready_to_process()
    g.next_record()  # A's 1; A empty now
    clock.now = start + 100
    assert not g.ready_to_process()
    assert g.last_decision.partition == A
    assert g.last_decision.deadline == start + 200


# -- properties -----------------------------------------------------------------------------------

PARTS = (A, B, C)

# An operation: ("add", partition index, timestamps) or ("take",).
ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.integers(min_value=0, max_value=2),
            st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=4),
        ),
        st.tuples(st.just("take")),
    ),
    max_size=60,
)


@given(ops, st.sampled_from([-1, 0, 100]))
def test_taken_record_always_has_minimal_head(
    operations: list[tuple[str] | tuple[str, int, list[int]]], max_idle: int
) -> None:
    """Whenever every queue is non-empty the group is ready, and for any interleaving of adds
    and takes each taken record is a minimal head (ties: first listed); stream and partition
    times are the running maxima of what was taken."""
    lag = FakeLag()  # unknown lags: only ALL_BUFFERED (or -1) ever makes the group ready
    g, _, _ = group(max_idle, lag=lag, partitions=PARTS)
    model: dict[TopicPartitionId, list[int]] = {tp: [] for tp in PARTS}
    offsets = dict.fromkeys(PARTS, 0)
    taken: dict[TopicPartitionId, list[int]] = {tp: [] for tp in PARTS}
    stream_times = [g.stream_time]
    for op in operations:
        if op[0] == "add":
            _, i, tss = op  # type: ignore[misc]
            tp = PARTS[i]
            size = g.add_records(tp, recs(tp, *tss, first_offset=offsets[tp]))
            offsets[tp] += len(tss)
            model[tp].extend(tss)
            assert size == len(model[tp])
            continue
        all_buffered = all(model.values())
        ready = g.ready_to_process()
        if all_buffered:
            assert ready
        if not ready:
            continue
        heads = [(model[tp][0], i) for i, tp in enumerate(PARTS) if model[tp]]
        want_ts, want_i = min(heads)
        r = g.next_record()
        assert r is not None
        assert (r.tp, r.timestamp) == (PARTS[want_i], want_ts)
        assert r.offset == offsets[r.tp] - len(model[r.tp])  # FIFO within the partition
        model[r.tp].pop(0)
        taken[r.tp].append(r.timestamp)
        assert g.partition_time(r.tp) == max(taken[r.tp])
        assert g.stream_time == max(ts for tss in taken.values() for ts in tss)
        stream_times.append(g.stream_time)
    assert stream_times == sorted(stream_times)
    assert g.buffered() == sum(len(v) for v in model.values())
    assert g.enforced_processing_total == 0


@given(
    st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=20),
    st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=20),
)
def test_sorted_partitions_merge_into_sorted_output(xs: list[int], ys: list[int]) -> None:
    """With each partition in timestamp order and all data buffered, the task output is the
    sorted merge: the ordering guarantee idling protects."""
    g, _, _ = group(-1)
    g.add_records(A, recs(A, *sorted(xs)))
    g.add_records(B, recs(B, *sorted(ys)))
    out = [ts for _, ts in drain(g)]
    assert out == sorted(xs + ys)


@given(
    st.integers(min_value=0, max_value=500),
    st.lists(st.integers(min_value=0, max_value=1_000), min_size=1, max_size=20),
)
def test_enforced_exactly_from_deadline(max_idle: int, probes: list[int]) -> None:
    """With one caught-up empty partition, readiness is exactly `now >= first_seen + max_idle`
    for any sequence of (non-decreasing) probe times, and each ready probe is counted."""
    g, lag, clock = group(max_idle)
    lag.lags[B] = 0
    g.add_records(A, recs(A, 1))
    start = clock.now
    enforced = 0
    for offset in sorted(probes):
        clock.now = start + offset
        ready = g.ready_to_process()
        # The first probe sets the deadline from its own time.
        assert ready == (offset >= sorted(probes)[0] + max_idle)
        enforced += ready
    assert g.enforced_processing_total == enforced
