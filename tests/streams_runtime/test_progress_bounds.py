"""The progress promise's pure parts (:mod:`streams_runtime.progress`): task bounds in commit
metadata, the promise over every writer, and which instance ticks which partition."""

from __future__ import annotations

from progress_control.protocol import parse_control_headers
from progress_control.trust import ControlRecordSource, SigningKey
from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processors import NO_PROGRESS
from streams_runtime.progress import (
    TaskCommitMetadata,
    TickWriter,
    WriterTasks,
    merged_bounds,
    promise,
)
from streams_runtime.record import Headers, TaskId, TopicPartitionId
from streams_runtime.serdes import String


def test_commit_metadata_round_trips_partition_time_and_bounds() -> None:
    metadata = TaskCommitMetadata(1234, {"out": 1000, "app-x-repartition": 990, "none": -1})
    decoded = TaskCommitMetadata.decode(metadata.encode())
    assert decoded == TaskCommitMetadata(1234, {"out": 1000, "app-x-repartition": 990})


def test_commit_metadata_reads_version_1_and_ignores_foreign_metadata() -> None:
    assert TaskCommitMetadata.decode("pc1:1234") == TaskCommitMetadata(1234)
    for foreign in (None, "", "someone else's", "pc1:x", "pc2:{", "pc2:[1]", "pc2:[1,[2]]"):
        assert TaskCommitMetadata.decode(foreign) == TaskCommitMetadata()


def test_bounds_too_large_for_commit_metadata_are_left_out_not_truncated() -> None:
    metadata = TaskCommitMetadata(7, {f"topic-{n:04d}-" + "x" * 200: 5 for n in range(30)})
    assert TaskCommitMetadata.decode(metadata.encode()) == TaskCommitMetadata(7)


def test_a_task_s_bounds_are_the_latest_over_its_inputs_commits() -> None:
    assert merged_bounds([{"a": 5, "b": 9}, {"a": 7}, {}]) == {"a": 7, "b": 9}


def test_the_promise_is_the_least_bound_and_waits_for_every_writer() -> None:
    writers = [TaskId(0, 0), TaskId(0, 1), TaskId(0, 2)]
    committed = {TaskId(0, 0): {"t": 500}, TaskId(0, 1): {"t": 300}, TaskId(0, 2): {"t": 900}}
    assert promise(writers, committed, "t") == 300
    # A task that never committed a bound (not started, restoring, took no record) holds.
    del committed[TaskId(0, 1)]
    assert promise(writers, committed, "t") == NO_PROGRESS
    assert promise(writers, {**committed, TaskId(0, 1): {"other": 1}}, "t") == NO_PROGRESS
    assert promise([], committed, "t") == NO_PROGRESS


def _topology() -> StreamsBuilder:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    (
        builder.stream("clicks")
        .select_key(lambda k, v: v)
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=100))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, str(n)))
        .to("out")
    )
    return builder


def test_writers_of_each_topic_and_one_ticker_per_partition() -> None:
    topology = _topology().build("app")
    (repartition,) = topology.repartition_topics
    writers = WriterTasks(topology, {"clicks": 3, repartition: 2, "out": 4})
    assert writers.of_topic[repartition] == tuple(TaskId(0, p) for p in range(3))
    assert writers.of_topic["out"] == (TaskId(1, 0), TaskId(1, 1))
    assert writers.inputs[TaskId(1, 1)] == (TopicPartitionId(repartition, 1),)
    assert [writers.ticker_of("out", p) for p in range(4)] == [
        TaskId(1, 0),
        TaskId(1, 1),
        TaskId(1, 0),
        TaskId(1, 1),
    ]
    assert writers.ticker_of("unknown", 0) is None


class _Sent:
    def __init__(self) -> None:
        self.ticks: list[tuple[str, int, int, Headers]] = []

    def __call__(
        self, topic: str, partition: int, key: bytes | None, timestamp: int, headers: Headers
    ) -> None:
        self.ticks.append((topic, partition, timestamp, headers))


def test_tick_writer_ticks_its_own_partitions_below_the_promise_once() -> None:
    topology = _topology().build("app")
    (repartition,) = topology.repartition_topics
    writers = WriterTasks(topology, {"clicks": 2, repartition: 2, "out": 2})
    promised = {repartition: 1000, "out": NO_PROGRESS}
    sent = _Sent()
    now = [100.0]
    key = SigningKey("runtime-1", b"0123456789abcdef")
    ticks = TickWriter(
        writers,
        promised.__getitem__,
        source=ControlRecordSource("streams:test", signing_key=key),
        send=sent,
        partitions_of=lambda topic: 2,
        metrics=RuntimeMetrics("test"),
        interval_s=1.0,
        clock=lambda: now[0],
    )
    written = {TopicPartitionId(repartition, 1): 500}
    assert ticks.propagate({TaskId(0, 1)}, written) == 1
    ((topic, partition, timestamp, headers),) = sent.ticks
    assert (topic, partition, timestamp) == (repartition, 1, 999)
    marker = parse_control_headers(headers)
    assert marker is not None
    assert marker.key_id == "runtime-1"
    # Coalesced: nothing new to promise, nothing sent; data at the promise makes a tick useless.
    assert ticks.propagate({TaskId(0, 1)}, written) == 0
    promised[repartition] = 2000
    assert ticks.propagate({TaskId(0, 1)}, {TopicPartitionId(repartition, 1): 1999}) == 0
    # At most one tick per partition and interval: the promise rises with every commit.
    assert ticks.propagate({TaskId(0, 0), TaskId(0, 1)}, written) == 1
    now[0] += 1.0
    assert ticks.propagate({TaskId(0, 0), TaskId(0, 1)}, written) == 1
    assert [(p, t) for _, p, t, _ in sent.ticks[1:]] == [(0, 1999), (1, 1999)]
