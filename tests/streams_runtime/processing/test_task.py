"""``StreamTask``: a task takes each input offset once, whatever its consumer delivers.

librdkafka can move a partition's fetch position back under a task that has taken records: a
lookup of the beginning (a partition with nothing committed) whose reply a later pause, resume
or seek outdated re-arms its retry timer, even when a newer lookup then starts the fetch; the
timer fires while the partition is fetching and resolves the beginning again, and the next
barrier restarts the fetch there (librdkafka 2.16: ``timed offset query for offset BEGINNING
... in state active``). Those records are in the task's state already: taken again, they double
the counts of every session still open (exactly-once too: the transaction commits the doubled
state with the offsets)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import cast

import pytest
from confluent_kafka import Producer, TopicPartition

from harness.sessions_app import session_counts
from progress_control.protocol import ControlMarker, ControlRecord
from streams_runtime import App
from streams_runtime.errors import BadRecordHandler
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.task import StreamTask
from streams_runtime.record import Headers, SourceRecord, TaskId, TopicPartitionId
from streams_runtime.settings import BadRecordPolicy, RuntimeSettings
from tests.helpers import TopicReader, unique_name, wait_for
from tests.streams_runtime.test_restart import (
    GAP_MS,
    expected_sessions,
    generate_events,
    read_sessions,
)

IN = TopicPartitionId("in", 0)
VALUE = b"\0" * 8  # a long, as the topology's value serde reads it


class _Collector:
    """What a task's sinks and changelogs use of :class:`RecordCollector`: the outputs."""

    def __init__(self) -> None:
        self.next_offsets: dict[TopicPartitionId, int] = {}
        self.outputs: list[dict[str, int]] = []

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition: int = -1,
    ) -> None:
        if topic == "out" and value is not None:
            self.outputs.append(json.loads(value))

    def send_many(self, topic: str, partition: int, records: Iterable[object], ts: int) -> None:
        for _ in records:  # changelog writes: consumed, not kept
            pass


def _session_task(
    collector: _Collector, tmp_path: Path, *, native_core: bool, committed: int = -1
) -> StreamTask:
    topology = session_counts("in", "out", GAP_MS).build("rewind")
    settings = RuntimeSettings(
        application_id="rewind",
        bootstrap_servers="unused:9092",
        max_task_idle_ms=-1,
        native_core=native_core,
        state_dir=tmp_path,
    )
    metrics = RuntimeMetrics("rewind")
    task = StreamTask(
        TaskId(0, 0),
        topology.subtopologies[0],
        settings=settings,
        collector=cast("RecordCollector", collector),
        metrics=metrics,
        bad_records=BadRecordHandler(BadRecordPolicy.FAIL, "dlq", lambda *_: None, metrics),
        lag=lambda _tp: 0,
    )
    # The memory stores start empty: nothing to restore.
    task.prepare({IN: (committed, None)})
    task.start_processing()
    return task


def _records(offsets: range, start_ms: int = 1000) -> list[SourceRecord]:
    return [
        SourceRecord("in", 0, offset, start_ms + 100 * offset, b"k", VALUE, None)
        for offset in offsets
    ]


@pytest.mark.parametrize("native_core", [True, False], ids=["fused", "chain"])
def test_records_fetched_again_after_the_consumer_went_back_are_not_taken_again(
    tmp_path: Path, native_core: bool
) -> None:
    collector = _Collector()
    task = _session_task(collector, tmp_path, native_core=native_core)
    task.add_records(IN, _records(range(10)))
    assert task.process(100) == 10
    # The consumer's position went back to the beginning: offsets 0..9 again, then new ones.
    task.add_records(IN, _records(range(14)))
    assert task.process(100) == 4
    # A record far past the gap closes the session [1000, 2300] of offsets 0..13.
    task.add_records(IN, [SourceRecord("in", 0, 14, 60_000, b"k", VALUE, None)])
    task.process(100)
    task.flush()
    assert collector.outputs == [{"start": 1000, "end": 2300, "count": 14}]
    [offset] = task.offsets_to_commit()
    assert offset.offset == 15
    task.close()


def test_a_task_that_took_nothing_yet_does_not_commit_the_consumers_position(
    tmp_path: Path,
) -> None:
    # Records 5..8 came while the task restored (held, the partition sought back to 5); the
    # consumer's position still says 9 when a commit comes before the task took anything.
    # Committing 9 would lose 5..8: they are below the committed offset once fetched again.
    collector = _Collector()
    task = _session_task(collector, tmp_path, native_core=False, committed=5)
    assert task.offsets_to_commit(lambda _tp: 9, lambda _tp: -1) == []
    # The partition's end reached since the start, nothing taken: past a trailing marker.
    [end] = task.offsets_to_commit(lambda _tp: 9, lambda _tp: 6)
    assert end.offset == 6
    task.add_records(IN, _records(range(5, 9)))
    assert task.process(100) == 4
    [offset] = task.offsets_to_commit(lambda _tp: 9)
    assert offset.offset == 9
    task.close()


def test_records_below_the_committed_offset_are_never_taken(tmp_path: Path) -> None:
    collector = _Collector()
    task = _session_task(collector, tmp_path, native_core=True, committed=5)
    task.add_records(IN, _records(range(8)))
    assert task.process(100) == 3
    task.close()


# ------------------------------------------------------------------------------------------
# real broker


@pytest.mark.broker
def test_an_app_whose_consumer_goes_back_counts_each_record_once(
    create_topic: Callable[..., str],
    kafka_bootstrap: str,
    reader_for: Callable[[str, int], TopicReader],
    tmp_path: Path,
) -> None:
    """The consumer's fetch position is moved back to the beginning under the running task, as
    librdkafka's stale offset lookup does; exactly-once output still equals the ground truth."""
    source, sink = create_topic("events", partitions=1), create_topic("sessions")
    events = generate_events(1200, seed=5)
    app = App(
        session_counts(source, sink, GAP_MS),
        state_dir=tmp_path,
        application_id=unique_name("rewind"),
        bootstrap_servers=kafka_bootstrap,
        processing_guarantee="exactly_once",
    )
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})

    def produce(part: list[tuple[str, int]]) -> None:
        for key, ts in part:
            producer.produce(source, key=key, value=VALUE, timestamp=ts)
        producer.flush(10)

    def processed() -> float:
        sample = "streams_records_processed_total"
        return app.metrics.registry.get_sample_value(sample, {"task": "0_0"}) or 0

    half = len(events) // 2
    try:
        app.start()
        produce(events[:half])
        wait_for(lambda: processed() == half, timeout_s=60, message="the first half processed")
        thread = app._thread  # the consumer under the task, moved back by the test
        assert thread is not None
        thread.consumer.seek(TopicPartition(source, 0, 0))
        time.sleep(0.5)
        produce(events[half:])
        end = max(ts for _, ts in events) + 10 * GAP_MS
        tick = ControlRecord(source, 0, end, ControlMarker("test", 0))
        producer.produce(**tick.produce_kwargs())  # type: ignore[arg-type]
        producer.flush(10)
        expected = expected_sessions(events)
        reader = reader_for(sink, 1)
        wait_for(
            lambda: read_sessions(reader).total() >= expected.total(),
            timeout_s=60,
            interval_s=0.5,
            message="as many sessions as expected",
        )
        assert read_sessions(reader) == expected
        assert processed() == len(events)
        assert app.error is None
    finally:
        app.close()
