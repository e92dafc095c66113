"""The progress promise, as pure logic (no broker): on in-order input, every record a sink sends
is at least as new as every progress its sink promised before. Checked on generated inputs over
stateless, table, session, time-window, sliding-window and suppressed topologies, and on the
issue's case of records a filter drops."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from streams_runtime import (
    SessionWindows,
    SlidingWindows,
    StreamsBuilder,
    TimeWindows,
    until_window_closes,
)
from streams_runtime.processors import NO_PROGRESS, SinkProcessor, SourceProcessor
from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Json, String
from streams_runtime.state import (
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueStore,
    SessionStore,
    WindowStore,
)
from tests.hypothesis_profiles import examples

WINDOWS = SessionWindows(gap_ms=100, grace_ms=30)
TUMBLING = TimeWindows.of_size(100, grace=30)
HOPPING = TimeWindows.of_size(100, grace=20).advance_by(40)
SLIDING = SlidingWindows.of_time_difference(70, grace=30)


class _Task:
    """Just enough of a task: in-memory stores, and every record sent, with the progress its
    sink had promised before the input record that caused it."""

    application_id = "app"
    stream_time = -1

    def __init__(self) -> None:
        self.kv: dict[str, KeyValueStore] = {}
        self.sessions: dict[str, SessionStore] = {}
        self.sent: list[tuple[str, int, int]] = []  # topic, timestamp, promised before
        self.promised: dict[str, int] = {}

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition_key: bytes | None = None,
        partition: int = -1,
    ) -> None:
        self.sent.append((topic, timestamp, self.promised.get(topic, NO_PROGRESS)))

    def kv_store(self, name: str) -> KeyValueStore:
        return self.kv.setdefault(name, KeyValueStore(name, 0, InMemoryKeyValueEngine(), None))

    def session_store(self, name: str) -> SessionStore:
        return self.sessions.setdefault(name, SessionStore(name, 0, InMemorySessionEngine(), None))

    def window_store(self, name: str) -> WindowStore:
        store = self.sessions.setdefault(name, WindowStore(name, 0, InMemorySessionEngine(), None))
        assert isinstance(store, WindowStore)
        return store

    def record_dropped(self, processor: str, reason: str) -> None:
        pass

    def record_idempotent_skip(self, processor: str) -> None:
        pass

    def suppress_buffer_size(self, processor: str, size: int) -> None:
        pass


def _topology() -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    stream = builder.stream("in")
    stream.filter(lambda _k, v: not v.get("drop")).map_values(lambda v: v["n"]).to("filtered")
    grouped = stream.filter(lambda _k, v: not v.get("drop")).group_by_key()
    grouped.count(name="counts").to_stream().to("counts")
    sessions = grouped.windowed_by(WINDOWS).count(name="sessions")
    sessions.to_stream().map(lambda w, n: (w.key, n)).to("sessions")
    (
        sessions.suppress(until_window_closes(), name="final")
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "n": n}))
        .to("final")
    )
    for name, windows in (("tumbling", TUMBLING), ("hopping", HOPPING), ("sliding", SLIDING)):
        counts = grouped.windowed_by(windows).count(name=name)
        counts.to_stream().map(lambda w, n: (w.key, n)).to(name)
        (
            counts.suppress(until_window_closes(), name=f"{name}-final")
            .to_stream()
            .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "n": n}))
            .to(f"{name}-final")
        )
    return builder


Event = tuple[str, int, str | None, bool]  # kind (data/control), time step, key, dropped


def _run(events: list[Event]) -> _Task:
    [sub] = _topology().build("app").subtopologies
    sources, processors = sub.instantiate()
    task = _Task()
    for processor in processors:
        processor.init(task)
    source: SourceProcessor = sources["in"]
    sinks = [p for p in processors if isinstance(p, SinkProcessor)]
    now = 0
    for n, (kind, step, key, dropped) in enumerate(events):
        now += step  # in order: never backwards
        if kind == "control":
            source.advance(now)
        else:
            source.forward(Record(key, {"n": n, "drop": dropped}, now))
        for sink in sinks:
            bound = sink.progress()
            assert bound <= max(now, 0), f"{sink.topic} promised {bound} past the input at {now}"
            task.promised[sink.topic] = max(task.promised.get(sink.topic, NO_PROGRESS), bound)
    return task


events = st.lists(
    st.tuples(
        st.sampled_from(["data", "data", "data", "control"]),
        st.integers(0, 150),
        st.sampled_from(["a", "b", "c", None]),
        st.booleans(),
    ),
    max_size=80,
)


@settings(max_examples=examples(300))
@given(events)
def test_no_sink_sends_a_record_older_than_its_earlier_promise(trace: list[Event]) -> None:
    task = _run(trace)
    behind = [(topic, ts, promised) for topic, ts, promised in task.sent if ts < promised]
    assert not behind


def test_records_a_filter_drops_promise_nothing() -> None:
    # The case on one partition: a far-future record the filter drops, then on-time ones.
    task = _run(
        [
            ("data", 1000, "ua", False),
            ("data", 500, "ub", False),
            ("data", 1_000_000 - 1500, "x", True),
        ]
    )
    assert task.promised["filtered"] == 1500  # not 1000000
    assert task.promised["counts"] == 1500
    assert task.promised["sessions"] == 1500 - WINDOWS.gap_ms - WINDOWS.grace_ms


def test_final_results_are_promised_only_up_to_the_windows_that_closed() -> None:
    # Stream time 1090: a's session [1000, 1000] closes at 1130 and b's at 1180, so final
    # results promise 1090 - gap - grace = 960, behind both; at 1140, a's result comes out
    # (stamped 1000, its end) and the promise moves to 1010, still behind b's end.
    task = _run(
        [("data", 1000, "a", False), ("data", 50, "b", False), ("control", 40, None, False)]
    )
    assert task.promised["final"] == 960
    assert not [ts for topic, ts, _ in task.sent if topic == "final"]
    task = _run(
        [("data", 1000, "a", False), ("data", 50, "b", False), ("control", 90, None, False)]
    )
    assert [ts for topic, ts, _ in task.sent if topic == "final"] == [1000]
    assert task.promised["final"] == 1010


def test_control_records_alone_move_every_sink() -> None:
    task = _run([("control", 5000, None, False)])
    assert task.promised == {
        "filtered": 5000,
        "counts": 5000,
        "sessions": 5000 - 130,
        "final": 5000 - 130,
        "tumbling": 5000 - 130,
        "tumbling-final": 5000 - 130,
        "hopping": 5000 - 120,
        "hopping-final": 5000 - 120,
        "sliding": 5000 - 100,
        "sliding-final": 5000 - 100,
    }


def test_a_tumbling_final_result_is_stamped_with_its_latest_record() -> None:
    # a at 1000 and 1010 in [1000, 1100); it closes at 1100 + 30: the final result comes out on
    # a control record, stamped 1010 (the window's latest record), never behind its promise.
    task = _run(
        [("data", 1000, "a", False), ("data", 10, "a", False), ("control", 120, None, False)]
    )
    assert [ts for topic, ts, _ in task.sent if topic == "tumbling-final"] == [1010]
    assert task.promised["tumbling-final"] == 1130 - 130
