"""TickSchedule arithmetic and PartitionActivity driven by a fake monotonic clock (no broker)."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE
from hypothesis import given, settings
from hypothesis import strategies as st

from progress_control.ticks.activity import DueTick, PartitionActivity, TopicPartition
from progress_control.ticks.schedule import TickSchedule
from tests.hypothesis_profiles import examples

EPSILON_S = 1e-6
MIN_ACK_GAP_S = 1e-5
"""The fake clock moves between two acks, like a nanosecond monotonic clock does; acks at the
same reading are a separate case, see :func:`test_acks_at_the_same_clock_reading`."""
YEAR_2001_MS = 978_307_200_000
FAST = settings(max_examples=100, deadline=None)
HORIZON_STARTS = 60
"""Generated schedules end within this many ``start_ms`` of the ack. A tracked partition is
re-checked at least every ``start_ms`` forever, so the fake clock visits ~this many deadlines per
idle period; unbounded ratios would make the property tests slow, not stronger."""


class FakeClock:
    """A monotonic clock that only moves when the test says so."""

    def __init__(self, now: float = 1_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Emitted:
    """A tick as observed by the test: the tick and the ``now`` at which take_due returned it."""

    at: float
    tick: DueTick


def planned_offsets_ms(schedule: TickSchedule) -> list[float]:
    """Offsets of the ticks of one undisturbed idle period."""
    offsets: list[float] = []
    while (offset := schedule.offset_ms(len(offsets))) is not None:
        offsets.append(offset)
        assert len(offsets) < 10_000
    return offsets


def expected_count(schedule: TickSchedule) -> int:
    """Ticks in one undisturbed idle period."""
    return len(planned_offsets_ms(schedule))


def horizon_s(schedule: TickSchedule) -> float:
    """Time after an ack by which its idle period is certainly over, with a margin."""
    offsets = planned_offsets_ms(schedule)
    last_ms = max(offsets[-1] if offsets else 0.0, float(schedule.start_ms))
    return (last_ms + 3 * schedule.start_ms) / 1000


def at_end_ms(schedule: TickSchedule, offset_ms: float) -> bool:
    """A tick planned at (float-wise) exactly ``end_ms`` may be lost to rounding; see
    :func:`test_a_tick_planned_exactly_at_end_ms_is_sent`."""
    return schedule.end_ms is not None and offset_ms > schedule.end_ms - 1e-3


def assert_whole_schedule(schedule: TickSchedule, sent: int) -> None:
    """``sent`` ticks are one undisturbed idle period's worth (bar a tick exactly at end.ms)."""
    offsets = planned_offsets_ms(schedule)
    assert sent == len(offsets) or (sent == len(offsets) - 1 and at_end_ms(schedule, offsets[-1]))


@dataclass
class Driver:
    """Runs a PartitionActivity under a perfect timer: the fake clock jumps from heap deadline to
    heap deadline (or to the next ack), and every deadline is handled exactly when it comes due.

    Every visit checks the heap's invariants: a tracked partition stays armed forever, the
    earliest deadline lies in the future but at most ``start_ms`` away, and one ``take_due``
    returns at most one tick per partition."""

    schedule: TickSchedule
    clock: FakeClock = field(default_factory=FakeClock)
    emitted: list[Emitted] = field(default_factory=list)
    acks: dict[TopicPartition, list[tuple[float, int]]] = field(default_factory=dict)
    visits: int = 0
    activity: PartitionActivity = field(init=False)

    def __post_init__(self) -> None:
        self.activity = PartitionActivity(self.schedule, clock=self.clock)

    @property
    def start_s(self) -> float:
        return self.schedule.start_ms / 1000

    def visit(self, at: float) -> list[DueTick]:
        assert at >= self.clock.now, "a deadline in the past was left in the heap"
        self.clock.now = at
        due = self.activity.take_due(at)
        assert len({(t.topic, t.partition) for t in due}) == len(due)
        self.emitted.extend(Emitted(at, t) for t in due)
        following = self.activity.next_deadline()
        assert following is not None, "a tracked partition fell out of the heap"
        assert at < following <= at + self.start_s + EPSILON_S
        self.visits += 1
        assert self.visits < 200_000, "runaway re-checks"
        return due

    def run_until(self, until: float) -> None:
        """Handle every deadline up to and including ``until``, then move the clock there."""
        while (deadline := self.activity.next_deadline()) is not None and deadline <= until:
            self.visit(deadline)
        self.clock.now = max(self.clock.now, until)

    def ack(self, topic: str, partition: int, timestamp_ms: int, after_s: float = 0.0) -> None:
        """Deadlines due up to the ack's time are handled first, then the ack is recorded."""
        key = (topic, partition)
        self.run_until(self.clock.now + after_s)
        if any(at == self.clock.now for at, _ in self.acks.get(key, [])):
            self.run_until(self.clock.now + MIN_ACK_GAP_S)
        first_deadline = self.activity.record_data_ack(topic, partition, timestamp_ms)
        if key in self.acks:
            assert first_deadline is None  # later acks never touch the heap
        else:
            assert first_deadline == self.clock.now + self.start_s
        self.acks.setdefault(key, []).append((self.clock.now, timestamp_ms))
        assert self.activity.latest[key] == (timestamp_ms, self.clock.now)

    def settle(self) -> None:
        """Run until every partition's current idle period is over."""
        last_ack = max(at for acks in self.acks.values() for at, _ in acks)
        self.run_until(last_ack + horizon_s(self.schedule))

    def ticks_of(self, key: TopicPartition) -> list[Emitted]:
        return [e for e in self.emitted if (e.tick.topic, e.tick.partition) == key]


@st.composite
def schedules(draw: st.DrawFn) -> TickSchedule:
    start_ms = draw(st.integers(1, 100_000))
    backoff_ms = draw(
        st.integers(1, 2 * start_ms) | st.integers(1, 10 * start_ms) | st.integers(1, 100_000)
    )
    exponential = draw(st.booleans())
    multiplier = draw(st.floats(1.0, 10.0, allow_nan=False, allow_infinity=False))
    unbounded = TickSchedule(start_ms, backoff_ms, exponential, multiplier, max_records=10_000)

    def within_horizon(ticks: int) -> int:
        """At most ``ticks``, and no more than fit in the horizon (at least one)."""
        while ticks > 1 and (unbounded.offset_ms(ticks - 1) or 0) > HORIZON_STARTS * start_ms:
            ticks -= 1
        return ticks

    max_records = draw(st.none() | st.integers(1, 25))
    if max_records is not None:
        max_records = within_horizon(max_records)
    # end.ms: mostly between two ticks or right at one; sometimes before start.ms or unset.
    end = draw(st.sampled_from(["after-tick", "after-tick", "before-start", None]))
    end_ms: int | None = None
    if end == "before-start":
        end_ms = draw(st.integers(1, start_ms))
    elif end == "after-tick" or max_records is None:
        last_tick = within_horizon(draw(st.integers(1, 50 if max_records is None else 30))) - 1
        end_ms = int(unbounded.offset_ms(last_tick) or 0) + draw(st.integers(0, backoff_ms - 1))
    return TickSchedule(start_ms, backoff_ms, exponential, multiplier, max_records, end_ms)


def check_idle_periods(driver: Driver) -> None:
    """Check every partition's ticks against the acks that preceded them."""
    schedule = driver.schedule
    offsets = planned_offsets_ms(schedule)
    for key, key_acks in driver.acks.items():
        ticks = driver.ticks_of(key)
        timestamps = dict(key_acks)
        ack_times = list(timestamps)
        assert len(ack_times) == len(key_acks)
        assert {e.tick.last_ack_monotonic for e in ticks} <= set(ack_times)
        for index, acked_at in enumerate(ack_times):
            next_ack = ack_times[index + 1] if index + 1 < len(ack_times) else math.inf
            period = [e for e in ticks if e.tick.last_ack_monotonic == acked_at]
            assert [e.tick.tick for e in period] == list(range(len(period)))
            if schedule.max_records is not None:
                assert len(period) <= schedule.max_records
            for emitted in period:
                assert emitted.tick.last_data_timestamp_ms == timestamps[acked_at]
                assert emitted.at <= next_ack  # the next ack restarts the schedule
                idle_s = emitted.at - acked_at
                assert idle_s >= schedule.start_ms / 1000 - EPSILON_S
                if schedule.end_ms is not None:
                    assert idle_s <= schedule.end_ms / 1000 + EPSILON_S
                # A perfect timer sends every tick at its planned offset.
                assert idle_s == pytest.approx(offsets[emitted.tick.tick] / 1000, abs=EPSILON_S)
            if period:
                # start.ms after the ack, however far the previous period's backoff had grown
                # (up to the scheduler's float slack: a re-check that lands within a microsecond
                # of the planned time sends the tick).
                assert period[0].at == pytest.approx(
                    acked_at + schedule.start_ms / 1000, abs=EPSILON_S
                )
            for earlier, later in itertools.pairwise(period):
                assert later.at - earlier.at >= schedule.backoff_ms / 1000 - EPSILON_S
            # Every tick planned before the next ack went out; none planned after it did.
            planned = [acked_at + offset / 1000 for offset in offsets]
            surely = sum(
                1
                for at, offset in zip(planned, offsets, strict=True)
                if at < next_ack - EPSILON_S and not at_end_ms(schedule, offset)
            )
            possibly = sum(1 for at in planned if at <= next_ack + EPSILON_S)
            assert surely <= len(period) <= possibly


def check_silent_forever(driver: Driver) -> None:
    """After every idle period ended: re-checks go on, ticks do not."""
    sent = len(driver.emitted)
    driver.run_until(driver.clock.now + 5 * driver.start_s)
    assert len(driver.emitted) == sent
    assert driver.activity.next_deadline() is not None
    assert driver.activity.take_due(driver.clock.now + 10**9) == []


gap_fractions = st.just(0.0) | st.floats(0.0, 0.2) | st.floats(0.0, 1.5)
"""Gaps between acks as a fraction of the schedule's horizon: mostly mid-schedule."""


@settings(max_examples=examples(200))
@given(
    schedule=schedules(),
    script=st.lists(
        st.tuples(st.integers(0, 2), gap_fractions, st.integers(0, 2_000_000_000_000)),
        min_size=1,
        max_size=20,
    ),
)
def test_ticks_follow_the_schedule_across_acks(
    schedule: TickSchedule, script: list[tuple[int, float, int]]
) -> None:
    driver = Driver(schedule)
    horizon = horizon_s(schedule)
    assert driver.activity.next_deadline() is None
    for partition, fraction, timestamp_ms in script:
        driver.ack("clicks", partition, timestamp_ms, after_s=fraction * horizon)
    driver.settle()
    check_idle_periods(driver)
    check_silent_forever(driver)


@FAST
@given(schedule=schedules(), timestamp_ms=st.integers(0, 2_000_000_000_000))
def test_one_idle_period_sends_the_whole_schedule_then_stops(
    schedule: TickSchedule, timestamp_ms: int
) -> None:
    driver = Driver(schedule)
    driver.ack("t", 0, timestamp_ms)
    acked_at = driver.clock.now
    driver.settle()
    times = [e.at for e in driver.emitted]
    offsets = planned_offsets_ms(schedule)
    if schedule.max_records is not None:
        assert len(times) <= schedule.max_records
    assert_whole_schedule(schedule, len(times))
    if times:
        assert times[0] == acked_at + schedule.start_ms / 1000
    for at, offset in zip(times, offsets, strict=False):
        assert at == pytest.approx(acked_at + offset / 1000, abs=EPSILON_S)
    for earlier, later in itertools.pairwise(times):
        assert later - earlier >= schedule.backoff_ms / 1000 - EPSILON_S
    if schedule.end_ms is not None:
        assert all(t - acked_at <= schedule.end_ms / 1000 + EPSILON_S for t in times)
    assert driver.activity.idle_partitions() == (1 if times else 0)
    check_silent_forever(driver)


@FAST
@given(
    schedule=schedules(),
    ticks_before_ack=st.integers(0, 30),
    pause_fraction=st.floats(0.0, 1.0),
    second_timestamp_ms=st.integers(0, 2_000_000_000_000),
)
def test_a_data_ack_resets_the_schedule(
    schedule: TickSchedule,
    ticks_before_ack: int,
    pause_fraction: float,
    second_timestamp_ms: int,
) -> None:
    driver = Driver(schedule)
    driver.ack("t", 7, 1)
    offsets = planned_offsets_ms(schedule)
    # Let some (or all) of the first idle period's ticks go out.
    if sent_before := min(ticks_before_ack, len(offsets)):
        driver.run_until(driver.clock.now + offsets[sent_before - 1] / 1000)
    assert driver.activity.idle_partitions() == (1 if driver.emitted else 0)

    # The new ack lands anywhere before the next tick (or long after the schedule ended).
    driver.run_until(driver.clock.now + pause_fraction * horizon_s(schedule))
    idle_before = driver.activity.idle_partitions()
    assert idle_before == (1 if driver.emitted else 0)
    driver.ack("t", 7, second_timestamp_ms)
    acked_at = driver.clock.now
    # The ack path does not touch the scheduler's state: idle as of its last look.
    assert driver.activity.idle_partitions() == idle_before
    driver.settle()

    second = [e for e in driver.emitted if e.tick.last_ack_monotonic == acked_at]
    assert_whole_schedule(schedule, len(second))
    assert [e.tick.tick for e in second] == list(range(len(second)))
    if second:
        # Not delayed by whatever backoff the first idle period had reached.
        assert second[0].at == pytest.approx(acked_at + schedule.start_ms / 1000, abs=EPSILON_S)
    for emitted in second:
        assert emitted.tick.last_data_timestamp_ms == second_timestamp_ms
        assert emitted.at == pytest.approx(
            acked_at + offsets[emitted.tick.tick] / 1000, abs=EPSILON_S
        )
    check_idle_periods(driver)


@pytest.mark.parametrize("exponential", [True, False])
@pytest.mark.parametrize(
    "ack_after_s",
    [
        pytest.param(0.5, id="before-the-first-tick"),
        pytest.param(1.0, id="at-the-first-tick"),
        pytest.param(1.001, id="just-after-the-first-tick"),
        pytest.param(3.7, id="mid-backoff"),
        pytest.param(5.999, id="just-before-the-second-tick"),
        pytest.param(10.5, id="mid-second-backoff"),
        pytest.param(500.25, id="long-after-the-schedule"),
    ],
)
def test_a_reset_is_not_delayed_by_a_long_backoff(exponential: bool, ack_after_s: float) -> None:
    """New data is noticed at the partition's next check, at most start.ms after the previous
    one, so the new period's first tick is exactly start.ms after the ack, not after the long
    backoff the old period was waiting out."""
    schedule = TickSchedule(1_000, 5_000, exponential=exponential, max_records=5)
    driver = Driver(schedule, FakeClock(0.0))
    driver.ack("orders", 0, 10)
    driver.ack("orders", 0, 20, after_s=ack_after_s)
    acked_at = driver.clock.now
    driver.settle()

    first = [e for e in driver.emitted if e.tick.last_data_timestamp_ms == 10]
    second = [e for e in driver.emitted if e.tick.last_data_timestamp_ms == 20]
    planned = [1.0, 6.0, 16.0, 36.0, 76.0] if exponential else [1.0, 6.0, 11.0, 16.0, 21.0]
    assert [e.at for e in first] == [at for at in planned if at <= acked_at]
    assert [e.tick.tick for e in second] == [0, 1, 2, 3, 4]
    assert second[0].at == acked_at + 1.0
    assert all(e.tick.last_ack_monotonic == acked_at for e in second)
    spacing = [1, 2, 4, 8] if exponential else [1, 1, 1, 1]
    for (earlier, later), factor in zip(itertools.pairwise(second), spacing, strict=True):
        assert later.at - earlier.at == pytest.approx(5.0 * factor)
    check_idle_periods(driver)


def test_a_late_take_due_sends_one_tick_per_partition_then_keeps_the_spacing() -> None:
    schedule = TickSchedule(1_000, 500, exponential=True, multiplier=2.0, max_records=5)
    clock = FakeClock(0.0)
    activity = PartitionActivity(schedule, clock=clock)
    activity.record_data_ack("a", 0, 1)
    activity.record_data_ack("a", 1, 2)
    clock.now = 0.25
    activity.record_data_ack("b", 0, 3)

    # The scheduler thread was stalled: all five ticks of every partition are overdue.
    clock.now = 100.0
    due = activity.take_due()
    assert sorted((t.topic, t.partition, t.tick, t.last_data_timestamp_ms) for t in due) == [
        ("a", 0, 0, 1),
        ("a", 1, 0, 2),
        ("b", 0, 0, 3),
    ]
    assert activity.take_due(100.0) == []  # no burst on a second look either
    assert activity.idle_partitions() == 3

    emitted: list[Emitted] = []
    while (deadline := activity.next_deadline()) is not None and deadline < 200.0:
        clock.now = deadline
        emitted.extend(Emitted(deadline, t) for t in activity.take_due())
    for key in [("a", 0), ("a", 1), ("b", 0)]:
        times = [100.0] + [e.at for e in emitted if (e.tick.topic, e.tick.partition) == key]
        ticks = [e.tick.tick for e in emitted if (e.tick.topic, e.tick.partition) == key]
        assert ticks == [1, 2, 3, 4]
        gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
        assert gaps == pytest.approx([schedule.spacing_ms(n) / 1000 for n in range(1, 5)])


@pytest.mark.parametrize("late_s", [0.5, 1.0, 3.0, 7.5, 1_000.0])
def test_a_late_take_due_keeps_the_fixed_spacing(late_s: float) -> None:
    schedule = TickSchedule(1_000, 2_000, max_records=4)
    driver = Driver(schedule, FakeClock(0.0))
    driver.ack("t", 0, 5)
    driver.visit(late_s)  # the first look comes late (or early: then nothing is due)
    driver.run_until(late_s + 20.0)
    # Ticks planned at 1, 3, 5, 7 s; a late first look sends tick 0 then, and spaces the rest.
    first = max(late_s, 1.0)
    assert [e.at for e in driver.emitted] == pytest.approx([first + 2.0 * n for n in range(4)])
    assert [e.tick.tick for e in driver.emitted] == [0, 1, 2, 3]


def test_a_late_wake_up_sends_nothing_after_end_ms() -> None:
    schedule = TickSchedule(1_000, 500, max_records=10, end_ms=3_000)
    clock = FakeClock(0.0)
    activity = PartitionActivity(schedule, clock=clock)
    activity.record_data_ack("t", 0, 1)
    activity.record_data_ack("t", 1, 1)
    # Woken past end.ms: nothing at all for that idle period.
    assert activity.take_due(3.5) == []
    # Another partition woken within end.ms, but with the next tick's spacing past it.
    clock.now = 10.0
    activity.record_data_ack("u", 0, 2)
    assert [t.tick for t in activity.take_due(12.75)] == [0]
    while (deadline := activity.next_deadline()) is not None and deadline < 50.0:
        clock.now = deadline
        assert activity.take_due() == []  # 12.75 + 0.5 s is past end.ms (13 s)


@FAST
@given(
    schedule=schedules(),
    gaps=st.lists(st.floats(0.0, 0.999, allow_nan=False), min_size=1, max_size=40),
)
def test_a_backfilling_producer_is_busy_not_idle(schedule: TickSchedule, gaps: list[float]) -> None:
    """Records from 2001 acked steadily: idleness is the ack clock, not the record timestamps."""
    driver = Driver(schedule)
    start_s = schedule.start_ms / 1000
    timestamp_ms = YEAR_2001_MS
    driver.ack("backfill", 0, timestamp_ms)
    for gap in gaps:
        timestamp_ms += 1_000
        driver.ack("backfill", 0, timestamp_ms, after_s=gap * start_s)
    assert driver.emitted == []
    assert driver.activity.idle_partitions() == 0

    # Once the acks stop, the partition is idle and its ticks carry the old timestamp.
    acked_at = driver.clock.now
    driver.settle()
    assert_whole_schedule(schedule, len(driver.emitted))
    for emitted in driver.emitted:
        assert emitted.tick.last_data_timestamp_ms == timestamp_ms
        assert emitted.tick.last_ack_monotonic == acked_at
    check_idle_periods(driver)


def test_due_tick_carries_the_most_recent_ack() -> None:
    clock = FakeClock(50.0)
    activity = PartitionActivity(TickSchedule(10_000, 1_000, max_records=3), clock=clock)
    assert activity.next_deadline() is None
    assert activity.record_data_ack("orders", 2, 1_700_000_000_000) == 60.0
    clock.now = 55.0
    assert activity.record_data_ack("orders", 2, 1_700_000_000_500) is None  # busy: no new entry
    assert activity.latest[("orders", 2)] == (1_700_000_000_500, 55.0)
    assert activity.take_due(60.0) == []  # the check notices the newer ack and re-arms
    assert activity.next_deadline() == 65.0
    assert activity.take_due(65.0) == [DueTick("orders", 2, 0, 1_700_000_000_500, 55.0)]
    assert activity.next_deadline() == 66.0
    assert activity.take_due(66.0) == [DueTick("orders", 2, 1, 1_700_000_000_500, 55.0)]
    assert activity.idle_partitions() == 1
    assert activity.next_deadline() == 67.0

    clock.now = 66.5
    assert activity.record_data_ack("orders", 2, 1_700_000_001_000) is None
    assert activity.idle_partitions() == 1  # as of the scheduler's last look
    assert activity.take_due(67.0) == []  # tick 2 is not sent: the period restarted
    assert activity.idle_partitions() == 0
    assert activity.next_deadline() == 76.5
    assert activity.take_due(76.5) == [DueTick("orders", 2, 0, 1_700_000_001_000, 66.5)]
    assert activity.idle_partitions() == 1


def test_take_due_uses_the_clock_when_now_is_omitted() -> None:
    clock = FakeClock(0.0)
    activity = PartitionActivity(TickSchedule(1_000, 1_000, max_records=1), clock=clock)
    assert activity.record_data_ack("t", 0, 5) == 1.0
    clock.now = 0.999
    assert activity.take_due() == []
    clock.now = 1.0
    assert activity.take_due() == [DueTick("t", 0, 0, 5, 0.0)]
    # The schedule ended, but the partition is still watched for new data every start.ms.
    assert activity.next_deadline() == 2.0
    clock.now = 2.0
    assert activity.take_due() == []
    assert activity.next_deadline() == 3.0


def test_partitions_are_independent() -> None:
    clock = FakeClock(0.0)
    activity = PartitionActivity(TickSchedule(1_000, 500, max_records=2), clock=clock)
    activity.record_data_ack("a", 0, 1)
    clock.now = 0.2
    activity.record_data_ack("a", 1, 2)
    activity.record_data_ack("b", 0, 3)
    assert [(t.topic, t.partition, t.tick) for t in activity.take_due(1.0)] == [("a", 0, 0)]
    assert activity.idle_partitions() == 1
    due = activity.take_due(1.25)
    assert sorted((t.topic, t.partition, t.tick) for t in due) == [("a", 1, 0), ("b", 0, 0)]
    assert activity.idle_partitions() == 3
    clock.now = 1.3
    activity.record_data_ack("a", 1, 4)  # restarts a-1 only
    assert [(t.topic, t.partition, t.tick) for t in activity.take_due(1.5)] == [("a", 0, 1)]
    assert [(t.topic, t.partition, t.tick) for t in activity.take_due(1.75)] == [("b", 0, 1)]
    assert activity.idle_partitions() == 2
    assert [(t.topic, t.partition, t.tick) for t in activity.take_due(2.4)] == [("a", 1, 0)]


def test_include_topic_decides_which_partitions_are_tracked() -> None:
    clock = FakeClock(0.0)
    activity = PartitionActivity(
        TickSchedule(1_000, 500, max_records=2),
        include_topic=lambda topic: not topic.startswith("_"),
        clock=clock,
    )
    assert activity.record_data_ack("_internal", 0, 1) is None
    assert activity.latest[("_internal", 0)] == (1, 0.0)  # stored (reports filter themselves)
    assert activity.next_deadline() is None
    assert activity.take_due(100.0) == []
    assert activity.track(("_internal", 0)) is None

    assert activity.record_data_ack("clicks", 0, 2) == 1.0  # the clock is still at 0
    assert activity.track(("clicks", 0)) is None  # already tracked
    assert [(t.topic, t.tick) for t in activity.take_due(1.0)] == [("clicks", 0)]


class FakeMessage:
    """What the host's delivery callback stores in ``latest``: a delivered message."""

    def __init__(self, kind: int, timestamp_ms: int) -> None:
        self._timestamp = (kind, timestamp_ms)

    def timestamp(self) -> tuple[int, int]:
        return self._timestamp


def test_acked_messages_are_read_lazily_and_without_a_timestamp_use_the_ack_wall_clock() -> None:
    clock = FakeClock(100.0)
    to_wall = 1_699_999_900.0  # wall clock = monotonic clock + to_wall

    activity = PartitionActivity(
        TickSchedule(1_000, 1_000, max_records=1),
        clock=clock,
        wall_clock=lambda: clock.now + to_wall,
    )
    # What commit_pending does for the producer's acks: a store, and track() for a new partition.
    activity.latest[("t", 0)] = (FakeMessage(TIMESTAMP_CREATE_TIME, 1_234), 100.0)
    assert activity.track(("t", 0)) == 101.0
    activity.latest[("t", 1)] = (FakeMessage(TIMESTAMP_NOT_AVAILABLE, -1), 100.0)
    assert activity.track(("t", 1)) == 101.0
    clock.now = 100.5
    activity.latest[("t", 0)] = (FakeMessage(TIMESTAMP_CREATE_TIME, 5_678), 100.5)
    activity.latest[("t", 2)] = (FakeMessage(TIMESTAMP_CREATE_TIME, -1), 100.25)
    assert activity.track(("t", 2)) == 101.25

    clock.now = 101.0
    # No usable timestamp: the wall-clock time of the ack, however late it is read.
    assert [(t.partition, t.last_data_timestamp_ms) for t in activity.take_due()] == [
        (1, 1_700_000_000_000)
    ]
    clock.now = 101.25
    assert [(t.partition, t.last_data_timestamp_ms) for t in activity.take_due()] == [
        (2, 1_700_000_000_250)
    ]
    clock.now = 101.5
    assert [(t.partition, t.last_data_timestamp_ms) for t in activity.take_due()] == [(0, 5_678)]

    message_without_timestamp = FakeMessage(TIMESTAMP_NOT_AVAILABLE, 7)
    assert activity.data_timestamp(message_without_timestamp, 100.5) == 1_700_000_000_500
    assert activity.data_timestamp(FakeMessage(TIMESTAMP_CREATE_TIME, 7), 100.5) == 7
    assert activity.data_timestamp(42, 0.0) == 42


def test_acks_at_the_same_clock_reading() -> None:
    clock = FakeClock(0.0)
    activity = PartitionActivity(TickSchedule(1_000, 1_000, max_records=1), clock=clock)
    activity.record_data_ack("t", 0, 1_000)
    activity.record_data_ack("t", 0, 2_000)  # same batch of delivery reports, same clock reading
    assert activity.take_due(1.0) == [DueTick("t", 0, 0, 2_000, 0.0)]


def test_pending_acks_are_stamped_at_the_commit_and_only_the_last_per_partition_counts() -> None:
    clock = FakeClock(10.0)
    activity = PartitionActivity(TickSchedule(1_000, 1_000, max_records=1), clock=clock)
    assert activity.commit_pending() == []
    first, second, other = (FakeMessage(TIMESTAMP_CREATE_TIME, ts) for ts in (1, 2, 3))
    # What the delivery callback does per ack: one store, no clock reading.
    activity.pending[("t", 0)] = first
    activity.pending[("t", 0)] = second
    activity.pending[("t", 1)] = other
    clock.now = 10.5  # the poll() that served them returns
    assert sorted(activity.commit_pending()) == [("t", 0), ("t", 1)]
    assert activity.pending == {}
    assert activity.latest == {("t", 0): (second, 10.5), ("t", 1): (other, 10.5)}
    assert [activity.track(key) for key in (("t", 0), ("t", 1))] == [11.5, 11.5]

    activity.pending[("t", 0)] = first
    clock.now = 11.0
    assert activity.commit_pending() == []  # known partitions are not new again
    assert activity.latest[("t", 0)] == (first, 11.0)
    # The newer ack restarts t-0's idle period: only t-1 is due at 11.5.
    assert [(t.partition, t.last_data_timestamp_ms) for t in activity.take_due(11.5)] == [(1, 3)]
    assert [(t.partition, t.last_data_timestamp_ms) for t in activity.take_due(12.0)] == [(0, 1)]


def test_a_tick_planned_exactly_at_end_ms_is_sent() -> None:
    schedule = TickSchedule(10_000, 1_000, max_records=None, end_ms=10_000)
    assert planned_offsets_ms(schedule) == [10_000]
    driver = Driver(schedule, FakeClock(6.1))  # ((6.1 + 10.0) - 6.1) * 1000 > 10_000
    driver.ack("t", 0, 1)
    driver.settle()
    assert [e.at for e in driver.emitted] == [6.1 + 10.0]


# --- TickSchedule --------------------------------------------------------------------------------


def test_fixed_offsets() -> None:
    schedule = TickSchedule(10_000, 1_000, max_records=4)
    assert [schedule.offset_ms(n) for n in range(5)] == [10_000, 11_000, 12_000, 13_000, None]
    assert [schedule.spacing_ms(n) for n in range(1, 4)] == [1_000, 1_000, 1_000]


def test_exponential_offsets() -> None:
    schedule = TickSchedule(10_000, 1_000, exponential=True, multiplier=2.0, max_records=10)
    offsets = [schedule.offset_ms(n) for n in range(11)]
    assert offsets[:6] == [10_000, 11_000, 13_000, 17_000, 25_000, 41_000]
    assert offsets[9] == 10_000 + 1_000 * (2**9 - 1)
    assert offsets[10] is None
    assert [schedule.spacing_ms(n) for n in range(1, 5)] == [1_000, 2_000, 4_000, 8_000]


def test_exponential_with_multiplier_one_is_fixed() -> None:
    schedule = TickSchedule(100, 10, exponential=True, multiplier=1.0, max_records=3)
    assert [schedule.offset_ms(n) for n in range(4)] == [100, 110, 120, None]
    assert [schedule.spacing_ms(n) for n in range(1, 3)] == [10, 10]


def test_end_ms_cuts_the_schedule() -> None:
    schedule = TickSchedule(10_000, 1_000, exponential=True, end_ms=20_000)
    assert [schedule.offset_ms(n) for n in range(5)] == [10_000, 11_000, 13_000, 17_000, None]
    fixed = TickSchedule(10_000, 1_000, max_records=100, end_ms=12_000)
    assert [fixed.offset_ms(n) for n in range(4)] == [10_000, 11_000, 12_000, None]


def test_an_unbounded_schedule_is_rejected() -> None:
    with pytest.raises(ValueError, match="unbounded"):
        TickSchedule(10_000, 1_000)
    with pytest.raises(ValueError, match="unbounded"):
        TickSchedule(10_000, 1_000, exponential=True, max_records=None, end_ms=None)


@pytest.mark.parametrize("multiplier", [0.999, 0.5, 0.0, -2.0])
@pytest.mark.parametrize("exponential", [True, False])
def test_a_shrinking_multiplier_is_rejected(multiplier: float, exponential: bool) -> None:
    with pytest.raises(ValueError, match="multiplier must be >= 1"):
        TickSchedule(10_000, 1_000, exponential=exponential, multiplier=multiplier, max_records=3)


@settings(max_examples=examples(200))
@given(schedule=schedules(), tick=st.integers(1, 24))
def test_offsets_grow_by_at_least_the_backoff(schedule: TickSchedule, tick: int) -> None:
    previous, current = schedule.offset_ms(tick - 1), schedule.offset_ms(tick)
    if current is None:
        return
    assert previous is not None
    assert current - previous >= schedule.backoff_ms - 1e-3
    assert current - previous == pytest.approx(schedule.spacing_ms(tick), rel=1e-6)


@settings(max_examples=examples(300))
@given(schedule=schedules(), elapsed_ms=st.floats(0, 1e12) | st.integers(0, 10_000_000))
def test_ticks_due_by_counts_the_offsets_passed(schedule: TickSchedule, elapsed_ms: float) -> None:
    offsets = planned_offsets_ms(schedule)
    assert schedule.ticks_due_by(elapsed_ms) == sum(1 for o in offsets if o <= elapsed_ms)
    for offset in offsets:  # exactly at a tick's offset, that tick is due
        assert schedule.ticks_due_by(offset) == sum(1 for o in offsets if o <= offset)


def test_ticks_due_by_an_idle_of_years_does_not_loop_per_tick() -> None:
    fixed = TickSchedule(1, 1, max_records=None, end_ms=10**12)
    assert fixed.ticks_due_by(3e16) == 10**12
    exponential = TickSchedule(1, 1, exponential=True, multiplier=1.00001, max_records=10**9)
    tick = 10**6
    assert exponential.ticks_due_by(exponential.offset_ms(tick) or 0) == tick + 1


# --- PartitionActivity.resume: a restarted sidecar continues each partition's schedule ----------

RESUME_SCHEDULE = TickSchedule(10_000, 1_000, exponential=True, multiplier=2.0, max_records=10)
"""The defaults: ticks 10, 11, 13, 17, 25, 41, 73, 137, 265, 521 s after the last data."""


def resumed(idle_s: float, ticks_seen: int = 0) -> Driver:
    driver = Driver(RESUME_SCHEDULE)
    ack = driver.clock.now - idle_s
    deadline = driver.activity.resume("t", 0, YEAR_2001_MS, ack, ticks_seen)
    assert deadline == driver.clock.now
    driver.acks[("t", 0)] = [(ack, YEAR_2001_MS)]
    driver.run_until(driver.clock.now + 1_000)
    return driver


@pytest.mark.parametrize("idle_s", [522.0, 3_600.0, 7 * 86_400.0])
@pytest.mark.parametrize("ticks_seen", [0, 3, 10, 64])
def test_a_partition_idle_past_its_schedule_gets_no_tick(idle_s: float, ticks_seen: int) -> None:
    driver = resumed(idle_s, ticks_seen)
    assert driver.emitted == []
    assert driver.activity.ticks_sent(("t", 0)) == max(10, ticks_seen)


def test_a_partition_mid_schedule_continues_at_its_planned_times() -> None:
    # Idle 30 s with ticks 0..4 on the partition (the last one at 25 s): tick 5 at 41 s, ...
    driver = resumed(30.0, ticks_seen=5)
    ack = driver.acks[("t", 0)][0][0]
    assert [e.tick.tick for e in driver.emitted] == [5, 6, 7, 8, 9]
    assert [e.at - ack for e in driver.emitted] == pytest.approx([41, 73, 137, 265, 521])
    assert {e.tick.last_data_timestamp_ms for e in driver.emitted} == {YEAR_2001_MS}


def test_ticks_due_while_no_one_looked_are_one_catch_up_tick() -> None:
    # Idle 30 s, no tick on the partition (a new sidecar): tick 4 (due at 25 s) now, not 0..4.
    driver = resumed(30.0, ticks_seen=0)
    ack = driver.acks[("t", 0)][0][0]
    assert [e.tick.tick for e in driver.emitted] == [4, 5, 6, 7, 8, 9]
    assert driver.emitted[0].at - ack == pytest.approx(30.0)
    # Then the schedule's spacing from that tick (16 s before tick 5, 32 s before tick 6, ...).
    assert [e.at - ack for e in driver.emitted[1:]] == pytest.approx([46, 78, 142, 270, 526])


def test_more_ticks_seen_than_due_are_not_repeated() -> None:
    driver = resumed(12.0, ticks_seen=4)  # another replica ran ahead: continue after them
    assert [e.tick.tick for e in driver.emitted] == [4, 5, 6, 7, 8, 9]


def test_a_fresh_idle_period_resumes_as_a_whole_schedule() -> None:
    driver = resumed(1.0)
    ack = driver.acks[("t", 0)][0][0]
    assert [e.tick.tick for e in driver.emitted] == list(range(10))
    assert driver.emitted[0].at - ack == pytest.approx(10.0)


def test_resume_leaves_tracked_and_excluded_partitions_alone() -> None:
    activity = PartitionActivity(
        RESUME_SCHEDULE, include_topic=lambda t: t != "x", clock=FakeClock()
    )
    assert activity.resume("x", 0, 0, 0.0) is None
    assert ("x", 0) not in activity.latest
    activity.record_data_ack("t", 0, 5, 1_000.0)
    assert activity.resume("t", 0, 0, 0.0, 3) is None
    assert activity.latest[("t", 0)] == (5, 1_000.0)
    assert activity.ticks_sent(("t", 0)) == 0
    assert activity.ticks_sent(("t", 1)) is None
