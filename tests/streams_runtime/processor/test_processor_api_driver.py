"""The Processor API on the ``TopologyTestDriver``: a user processor with a store and
stream-time and wall-clock punctuators; stream-time punctuators fire on ticks (which never reach
``process``), once per advance however many intervals it jumps; cancel, anchored start
(KIP-1146), forward to a named child, record metadata, ``process_values`` keeping keys, what a
punctuator that raises meets, and progress through user code failing closed."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from streams_runtime import Record, StreamsBuilder
from streams_runtime.errors import BadRecordError, PunctuationError
from streams_runtime.processor import (
    Cancellable,
    Processor,
    ProcessorContext,
    Progress,
    PunctuationType,
    Stores,
    TypedKeyValueStore,
)
from streams_runtime.serdes import Integer, Json, String
from streams_runtime.testing import TopologyTestDriver

MINUTE = 60_000


class RunningTotals(Processor[str, int, str, int]):
    """Sums values per key in the store ``totals``; every minute of stream time, forwards
    every total stamped with the punctuation's time."""

    progress: ClassVar[Progress | None] = Progress.keeps_order()
    seen: ClassVar[list[Any]] = []

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.totals: TypedKeyValueStore[str, int] = context.get_state_store("totals")
        self.fired: list[int] = []
        context.schedule(MINUTE, PunctuationType.STREAM_TIME, self.emit)

    def process(self, record: Record[str, int]) -> None:
        RunningTotals.seen.append((record.key, record.value, self.context.record_metadata()))
        self.totals.put(record.key, (self.totals.get(record.key) or 0) + record.value)

    def emit(self, timestamp: int) -> None:
        assert self.context.record_metadata() is None
        for key, total in self.totals.all():
            self.context.forward(Record(key, total, timestamp))


def _totals_builder(
    processor: type[Processor[Any, Any, Any, Any]] = RunningTotals,
) -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.add_state_store(Stores.key_value_store_builder("totals", String(), Integer()))
    builder.stream("clicks").process(RunningTotals, "totals").to(
        "totals-out", key_serde=String(), value_serde=Integer()
    )
    return builder


def test_stream_time_punctuation_fires_on_records_and_on_ticks_alone() -> None:
    RunningTotals.seen = []
    with TopologyTestDriver(_totals_builder()) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        out = driver.create_output_topic("totals-out", String(), Integer())
        clicks.pipe_input("a", 1, timestamp=10)  # stream time 10 >= 0: fires, after "a"
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [("a", 1, 10)]
        clicks.pipe_input("b", 2, timestamp=30_000)
        clicks.pipe_input("a", 3, timestamp=59_999)
        assert out.read_key_values() == []
        clicks.pipe_input("a", 1, timestamp=60_000)  # reaches the next minute
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("a", 5, 60_000),
            ("b", 2, 60_000),
        ]
        # The input goes quiet: only ticks. Each tick fires what is due, once per advance.
        clicks.pipe_tick(119_999)
        assert out.read_records() == []
        clicks.pipe_tick(400_000)  # five minutes jumped: fires once
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("a", 5, 400_000),
            ("b", 2, 400_000),
        ]
        clicks.pipe_tick(420_000)  # the grid is 0, 60 000, ...: 420 000 is on it
        assert len(out.read_records()) == 2
    # Ticks never reached process(); data came with its metadata.
    assert [(k, v) for k, v, _ in RunningTotals.seen] == [("a", 1), ("b", 2), ("a", 3), ("a", 1)]
    assert [m.offset for *_, m in RunningTotals.seen] == [0, 1, 2, 3]
    assert {m.topic for *_, m in RunningTotals.seen} == {"clicks"}


def test_the_first_stream_time_punctuation_fires_after_the_first_record() -> None:
    with TopologyTestDriver(_totals_builder()) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        out = driver.create_output_topic("totals-out", String(), Integer())
        clicks.pipe_input("a", 1, timestamp=1_000)
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [("a", 1, 1_000)]


class WallClockCounter(Processor[str, int, str, int]):
    """Forwards how many records it saw, every 10 s of wall-clock time; cancels itself after
    the third punctuation."""

    progress: ClassVar[Progress | None] = None  # holds progress (the default)

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.count = 0
        self.fired = 0
        self.handle: Cancellable = context.schedule(
            10_000, PunctuationType.WALL_CLOCK_TIME, self.emit
        )

    def process(self, record: Record[str, int]) -> None:
        self.count += 1

    def emit(self, timestamp: int) -> None:
        self.fired += 1
        self.context.forward(Record("count", self.count, timestamp))
        if self.fired == 3:
            self.handle.cancel()


def test_wall_clock_punctuation_fires_as_the_wall_clock_moves_without_input() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.stream("clicks").process(WallClockCounter).to("counts", value_serde=Integer())
    with TopologyTestDriver(builder, initial_wall_clock_time_ms=1_000_000) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        out = driver.create_output_topic("counts", String(), Integer())
        driver.advance_wall_clock_time(9_999)
        assert out.read_records() == []
        driver.advance_wall_clock_time(1)  # 10 s after the schedule: fires, without input
        clicks.pipe_input("a", 1, timestamp=5)
        clicks.pipe_input("a", 1, timestamp=6)
        driver.advance_wall_clock_time(35_000)  # three intervals jumped: fires once
        driver.advance_wall_clock_time(5_000)  # on the grid 1 010 000 + k * 10 000: third
        driver.advance_wall_clock_time(60_000)  # cancelled: no more
        assert [(r.value, r.timestamp) for r in out.read_records()] == [
            (0, 1_010_000),
            (2, 1_045_000),
            (2, 1_050_000),
        ]
        # It declared no progress: its sink is never ticked.
        assert out.read_ticks() == []


class Anchored(Processor[str, int, str, int]):
    """Punctuates on stream time from an anchor (KIP-1146), and on the wall clock from one."""

    progress: ClassVar[Progress | None] = Progress.keeps_order()

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        context.schedule(
            100, PunctuationType.STREAM_TIME, lambda t: self._out("stream", t), start=1_050
        )
        context.schedule(
            1_000, PunctuationType.WALL_CLOCK_TIME, lambda t: self._out("wall", t), start=500
        )

    def _out(self, kind: str, timestamp: int) -> None:
        self.context.forward(Record(kind, timestamp, timestamp))

    def process(self, record: Record[str, int]) -> None:
        pass


def test_an_anchored_schedule_starts_at_its_anchor() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.stream("clicks").process(Anchored).to("out", value_serde=Integer())
    with TopologyTestDriver(builder, initial_wall_clock_time_ms=0) as driver:
        clicks = driver.create_input_topic("clicks", String(), Json())
        out = driver.create_output_topic("out", String(), Integer())
        clicks.pipe_input("a", 0, timestamp=1_000)  # before the anchor 1 050: nothing
        clicks.pipe_input("a", 0, timestamp=1_060)  # fires at 1 060; next due 1 150
        clicks.pipe_input("a", 0, timestamp=1_149)
        clicks.pipe_tick(1_150)
        driver.advance_wall_clock_time(499)
        driver.advance_wall_clock_time(1)  # the wall-clock anchor 500
        driver.advance_wall_clock_time(1_000)  # 1 500
        assert out.read_key_values() == [
            ("stream", 1_060),
            ("stream", 1_150),
            ("wall", 500),
            ("wall", 1_500),
        ]


class Router(Processor[str, int, str, int]):
    """Forwards even values to the child ``evens`` only, odd ones to every child."""

    progress: ClassVar[Progress | None] = Progress.keeps_order()

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context

    def process(self, record: Record[str, int]) -> None:
        self.context.forward(record, "evens" if record.value % 2 == 0 else None)


class Evens(Processor[str, int, str, int]):
    progress: ClassVar[Progress | None] = Progress.keeps_order()

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context

    def process(self, record: Record[str, int]) -> None:
        self.context.forward(record)


def test_forward_to_a_named_child() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    routed = builder.stream("numbers").process(Router, name="router")
    routed.process(Evens, name="evens").to("evens-out")
    routed.to("all-out")
    with TopologyTestDriver(builder) as driver:
        numbers = driver.create_input_topic("numbers", String(), Integer())
        for i in range(4):
            numbers.pipe_input("k", i, timestamp=i)
        evens = driver.create_output_topic("evens-out", String(), Integer())
        everything = driver.create_output_topic("all-out", String(), Integer())
        assert evens.read_values() == [0, 1, 2, 3]
        assert everything.read_values() == [1, 3]


class Rekeying(Processor[str, int, str, int]):
    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context

    def process(self, record: Record[str, int]) -> None:
        self.context.forward(record.with_key(record.key + "!"))


def test_process_values_may_not_change_keys_and_keeps_partitioning() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    builder.stream("in").process_values(Rekeying).to("out")
    with TopologyTestDriver(builder) as driver:
        source = driver.create_input_topic("in", String(), Integer())
        with pytest.raises(BadRecordError) as raised:
            source.pipe_input("k", 1, timestamp=1)
        assert "may not forward key 'k!' while processing key 'k'" in str(raised.value.__cause__)
    kept = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    kept.stream("in").process_values(Evens).group_by_key().count()
    assert kept.build("app").repartition_topics == {}
    changed = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    changed.stream("in").process(Evens).group_by_key().count()
    assert len(changed.build("app").repartition_topics) == 1


class Failing(Processor[str, int, str, int]):
    def init(self, context: ProcessorContext[str, int]) -> None:
        context.schedule(10, PunctuationType.STREAM_TIME, self.fail)

    def process(self, record: Record[str, int]) -> None:
        pass

    def fail(self, timestamp: int) -> None:
        raise RuntimeError(f"at {timestamp}")


@pytest.mark.parametrize("policy", ["fail", "log-and-skip"])
def test_a_punctuator_that_raises_meets_the_bad_record_policy(policy: str) -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    builder.stream("in").process(Failing)
    with TopologyTestDriver(builder, bad_record_policy=policy) as driver:
        source = driver.create_input_topic("in", String(), Integer())
        if policy == "fail":
            with pytest.raises(PunctuationError, match="at 5"):
                source.pipe_input("k", 1, timestamp=5)
            return
        source.pipe_input("k", 1, timestamp=5)
        source.pipe_tick(25)  # fires again, once
        assert driver.metrics.total("streams_bad_records", reason="punctuation") == 2
        assert driver.metrics.total("streams_punctuations") == 2


class Holding(Processor[str, int, str, int]):
    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context

    def process(self, record: Record[str, int]) -> None:
        self.context.forward(record)


class Trailing(Holding):
    progress: ClassVar[Progress | None] = Progress.trails_by(1_000)


@pytest.mark.parametrize(
    ("processor", "ticked"),
    [(Holding, []), (Evens, [8_999]), (Trailing, [7_999])],
    ids=["undeclared", "keeps-order", "trails"],
)
def test_progress_through_user_code_is_what_it_declares(
    processor: type[Processor[Any, Any, Any, Any]], ticked: list[int]
) -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Integer())
    builder.stream("in").process(processor).to("out")
    with TopologyTestDriver(builder) as driver:
        source = driver.create_input_topic("in", String(), Integer())
        out = driver.create_output_topic("out", String(), Integer())
        source.pipe_input("k", 1, timestamp=5_000)
        driver.advance_wall_clock_time(1_000)
        source.pipe_tick(9_000)
        driver.advance_wall_clock_time(1_000)
        assert [t.timestamp for t in out.read_ticks()] == ticked


class Enricher(Processor[str, str, str, str]):
    """Appends each record's row of the global table ``users`` (read-only)."""

    progress: ClassVar[Progress | None] = Progress.keeps_order()

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context
        self.users: TypedKeyValueStore[str, str] = context.get_state_store("users")

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value(f"{record.value}|{self.users.get(record.key)}"))
        if record.value == "write":
            self.users.put(record.key, "x")


def test_a_processor_reads_a_global_table_and_may_not_write_it() -> None:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.global_table("users-topic", store_name="users")
    builder.stream("clicks").process(Enricher).to("enriched")
    with TopologyTestDriver(builder) as driver:
        driver.create_input_topic("users-topic", String(), String()).pipe_input("u1", "Ada", 1)
        clicks = driver.create_input_topic("clicks", String(), String())
        clicks.pipe_input("u1", "home", timestamp=2)
        clicks.pipe_input("u2", "home", timestamp=3)
        out = driver.create_output_topic("enriched", String(), String())
        assert out.read_values() == ["home|Ada", "home|None"]
        with pytest.raises(BadRecordError) as raised:
            clicks.pipe_input("u1", "write", timestamp=4)
        assert "read-only" in str(raised.value.__cause__)
