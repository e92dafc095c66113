"""The progress promise with many writers per partition, as pure logic (no broker): a tick on a
shared partition promises that no record anyone in the application still writes there is older
than the tick (on in-order input; docs/concepts/promise.md, issue 24).

What is real and what is modelled:

- **Real**: the topology (built with :class:`StreamsBuilder`: a filter and ``select_key`` to an
  output topic and to a repartition topic, a session count with its updates, the same count
  suppressed until its windows close, a tumbling-window count), every :class:`StreamTask` (its
  processors, partition group, state manager with in-memory stores logged to changelogs,
  :meth:`~StreamTask.initialize` restoring partition time, stores *and the bound floor* from
  the committed offsets' metadata, :meth:`~StreamTask.flush`,
  :meth:`~StreamTask.offsets_to_commit` and :meth:`~StreamTask.committed_offsets`), the
  changelog restore (:class:`~streams_runtime.state.restore.ChangelogRestorer`: skipping records
  whose input was not committed), :class:`TaskCommitMetadata`, :func:`merged_bounds`,
  :class:`CommittedBounds` (its :meth:`~CommittedBounds.read` of the group's committed offsets,
  which never takes a bound back), :func:`promise`, :class:`WriterTasks` and :class:`TickWriter`.
- **Modelled**: the broker. Each partition is a list of records in write order; the group's
  committed offsets are a dict (offset and metadata, as ``Consumer.committed`` returns them);
  under exactly-once every owner of a task writes through its own producer transaction, committed
  together with its input offsets and aborted when the owner crashes (a crashed transaction's
  records are never read), under at-least-once every record stays written. The consumers the
  runtime would use (changelog restore, reading committed offsets) are replaced by stand-ins
  reading those lists; the stream thread's loop is the generated schedule below. Ticks are
  written outside any transaction and never lost (the runtime sends them in its instance's
  transaction, where an abort can only remove them: a weaker promise, never a stronger one).
- **Not modelled**: several tasks sharing one instance's transaction (per-task transactions and
  independent crashes interleave the same steps), out-of-order input, and a *zombie*: an owner
  that stops past the session timeout, loses its task to another instance, then wakes and
  processes what it had buffered before it learns so. Under exactly-once it is fenced and its
  records are never read; under at-least-once its records stay, and can be behind a tick the new
  owner's commits allowed (checked by hand when this test was written: a zombie step fails the
  safety property under at-least-once only), so the promise there holds only as long as an
  owner is not removed from the group while it still has records to process.

Each of 2-4 writer tasks (partitions of the input topic ``in``) reads its own in-order input
(timestamps never decrease; some control records; the tasks' inputs skewed arbitrarily, one
possibly far behind) and writes every output partition (each output topic has one partition, so
every task writes it). A generated schedule interleaves, per task: process one record (opening
the task first when nobody owns it: a task starts, or is taken over after a crash, only when it
gets its first step, so tasks start at different times and stay unowned for a while), commit
(flush, commit the offsets with their metadata, then :meth:`~StreamTask.committed_offsets`),
crash (before or after the flush of a commit: the owner's uncommitted work is lost, and the next
owner, a fresh task, resumes from the last commit), pause and resume (a paused owner takes no
step at all, then resumes where it was), and move (commit, close, reopen on another "instance").

The ticker runs after every step, as the stream thread's progress loop would at the finest
granularity: :meth:`CommittedBounds.read`, then :meth:`TickWriter.propagate` for every writer
task, with nothing counted as written (so every rise of the promise is ticked, at once). Ticks
only move when a commit moves a committed bound, so this places every possible tick as early as
it could be, which checks the most records after it; an explicit "tick" step would check a
subset.

Properties:

- **Safety**: on every shared partition, every data record written after a tick (in write order;
  under exactly-once, records of committed transactions only, every transaction being committed
  or aborted by the end of the run) is at least the promise that tick was written for (the tick
  is written one below it), so in particular at least the tick.
- **A task's committed bound never goes down** (read back from the committed metadata alone, as
  a fresh reader would).
- **Liveness**: when every task's committed input covers a control record at ``T`` or later,
  the promise of every topic is at least ``T`` minus the topic's hold (stateless paths 0,
  sessions ``gap + grace``, tumbling windows ``size + grace``); the ticker has ticked it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal, cast
from unittest import mock

import pytest
from confluent_kafka import KafkaError, TopicPartition
from hypothesis import currently_in_test_context, given, note, settings
from hypothesis import strategies as st

from progress_control.trust import ControlRecordSource
from streams_runtime import SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.errors import BadRecordHandler
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.task import StreamTask
from streams_runtime.processors import NO_PROGRESS
from streams_runtime.progress import (
    CommittedBounds,
    TaskCommitMetadata,
    TickWriter,
    WriterTasks,
    merged_bounds,
)
from streams_runtime.record import Headers, SourceRecord, TaskId, TopicPartitionId
from streams_runtime.serdes import String
from streams_runtime.settings import BadRecordPolicy, ProcessingGuarantee, RuntimeSettings
from streams_runtime.topology import Topology
from tests.hypothesis_profiles import examples

APP = "app"
INPUT = "in"
SESSIONS = SessionWindows(gap_ms=100, grace_ms=30)
TUMBLING = TimeWindows.of_size(100, grace=20)
NOT_COMMITTED = -1001  # Consumer.committed's offset for a partition with no commit


def _topology() -> Topology:
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    stream = builder.stream(INPUT)
    # Stateless paths: a filter (records it drops promise nothing) and select_key to an output,
    # and select_key before a grouping, which writes a repartition topic (the case).
    stream.filter(lambda key, _v: key != "c").select_key(lambda _k, value: value).to("keyed")
    stream.select_key(lambda _k, value: value).group_by_key().count(name="by-user")
    grouped = stream.group_by_key()
    sessions = grouped.windowed_by(SESSIONS).count(name="sessions")
    sessions.to_stream().map(lambda w, n: (w.key, str(n))).to("sessions")
    (
        sessions.suppress(until_window_closes(), name="final")
        .to_stream()
        .map(lambda w, n: (w.key, f"{w.start}-{w.end}:{n}"))
        .to("final")
    )
    tumbling = grouped.windowed_by(TUMBLING).count(name="tumbling")
    tumbling.to_stream().map(lambda w, n: (w.key, str(n))).to("tumbling")
    return builder.build(APP)


TOPOLOGY = _topology()
WRITING = TOPOLOGY.subtopologies[0]  # the sub-topology whose tasks share every output partition
(REPARTITION,) = TOPOLOGY.repartition_topics
HOLDS = {
    "keyed": 0,
    REPARTITION: 0,
    "sessions": SESSIONS.output_lag_ms,
    "final": SESSIONS.output_lag_ms,
    "tumbling": TUMBLING.output_lag_ms,
}
"""Each shared topic's hold: how far its bound trails the control time its writers took."""
assert set(WRITING.sink_topics) == set(HOLDS)


# -- the broker, modelled ----------------------------------------------------------------------


@dataclass
class _Transaction:
    """One producer transaction of one owner (exactly-once): its records are read once it
    commits, never when it aborts."""

    state: Literal["open", "committed", "aborted"] = "open"


@dataclass(frozen=True)
class _Entry:
    """One record in a partition's log, in write order."""

    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: Headers | None
    writer: str  # "<task>#<owner>" or "ticker": for failure messages
    transaction: _Transaction | None  # None: outside any transaction
    tick: bool = False

    @property
    def readable(self) -> bool:
        """Whether a read_committed reader ever gets it (every record under at-least-once)."""
        return self.transaction is None or self.transaction.state == "committed"


class _Cluster:
    """The partitions' logs and the application group's committed offsets."""

    def __init__(self) -> None:
        self.logs: dict[TopicPartitionId, list[_Entry]] = {}
        self.offsets: dict[TopicPartitionId, tuple[int, str | None]] = {}

    def append(self, tp: TopicPartitionId, entry: _Entry) -> int:
        """Write ``entry``; its offset."""
        log = self.logs.setdefault(tp, [])
        log.append(entry)
        return len(log) - 1

    def committed(self, tp: TopicPartitionId) -> tuple[int, str | None]:
        return self.offsets.get(tp, (NOT_COMMITTED, None))


class _Producer:
    """The record collector of one owner of one task (what :class:`StreamTask` uses of
    :class:`RecordCollector`): every output and repartition topic has one partition; under
    exactly-once, records go into the owner's open transaction."""

    def __init__(self, cluster: _Cluster, writer: str, *, exactly_once: bool) -> None:
        self._cluster = cluster
        self.writer = writer
        self._exactly_once = exactly_once
        self._transaction: _Transaction | None = None
        self.next_offsets: dict[TopicPartitionId, int] = {}

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
        self.send_many(topic, partition, ((key, value, headers),), timestamp)

    def send_many(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
        timestamp: int,
    ) -> None:
        if self._exactly_once and self._transaction is None:
            self._transaction = _Transaction()
        # -1: partitioned by key, and every output topic has a single partition.
        tp = TopicPartitionId(topic, max(partition, 0))
        for key, value, headers in records:
            entry = _Entry(timestamp, key, value, headers, self.writer, self._transaction)
            self.next_offsets[tp] = self._cluster.append(tp, entry) + 1

    def partition_for(self, topic: str, key: bytes) -> int:
        return 0

    def commit(self) -> None:
        """The offsets' commit: under exactly-once the transaction's, with everything in it."""
        if self._transaction is not None:
            self._transaction.state = "committed"
            self._transaction = None

    def abort(self) -> None:
        """The owner died: under exactly-once its open transaction is aborted (fenced or timed
        out); under at-least-once what it sent stays."""
        if self._transaction is not None:
            self._transaction.state = "aborted"
            self._transaction = None


@dataclass(frozen=True)
class _Message:
    """A consumed changelog record, or a partition-EOF event (``eof``), as restore reads it."""

    tp: TopicPartitionId
    at: int
    entry: _Entry | None = None

    def topic(self) -> str:
        return self.tp.topic

    def partition(self) -> int:
        return self.tp.partition

    def offset(self) -> int:
        return self.at

    def error(self) -> KafkaError | None:
        return KafkaError(KafkaError._PARTITION_EOF) if self.entry is None else None

    def key(self) -> bytes | None:
        return None if self.entry is None else self.entry.key

    def value(self) -> bytes | None:
        return None if self.entry is None else self.entry.value

    def headers(self) -> Headers | None:
        return None if self.entry is None else self.entry.headers

    def timestamp(self) -> tuple[int, int]:
        return (1, 0 if self.entry is None else self.entry.timestamp)


class _ChangelogConsumer:
    """Stands in for the consumers of :meth:`TaskStateManager.restore`: watermarks of a
    changelog partition, then (read_committed) its records from an offset to the end, then the
    partition-EOF event."""

    def __init__(self, cluster: _Cluster, isolation: str) -> None:
        self._cluster = cluster
        self._committed_only = isolation == "read_committed"
        self._positions: dict[TopicPartitionId, int] = {}

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        return 0, len(
            self._cluster.logs.get(TopicPartitionId(partition.topic, partition.partition), [])
        )

    def assign(self, partitions: Sequence[TopicPartition]) -> None:
        self._positions = {TopicPartitionId(p.topic, p.partition): p.offset for p in partitions}

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[_Message]:
        messages = []
        for tp, position in self._positions.items():
            log = self._cluster.logs.get(tp, [])
            for offset in range(position, len(log)):
                entry = log[offset]
                # The task's previous owners all committed or aborted before it was reopened.
                assert entry.transaction is None or entry.transaction.state != "open"
                if entry.readable or not self._committed_only:
                    messages.append(_Message(tp, offset, entry))
            messages.append(_Message(tp, len(log)))
        self._positions = {}
        return messages

    def position(self, partitions: Sequence[TopicPartition]) -> list[TopicPartition]:
        raise AssertionError("restore saw an EOF before the end")

    def close(self) -> None:
        pass


class _OffsetsConsumer:
    """Stands in for :class:`CommittedBounds`' consumer: the group's committed offsets."""

    def __init__(self, cluster: _Cluster) -> None:
        self._cluster = cluster

    def committed(
        self, partitions: Sequence[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        found = []
        for p in partitions:
            offset, metadata = self._cluster.committed(TopicPartitionId(p.topic, p.partition))
            found.append(
                TopicPartition(p.topic, p.partition, offset)
                if metadata is None
                else TopicPartition(p.topic, p.partition, offset, metadata)
            )
        return found

    def close(self) -> None:
        pass


@contextmanager
def _brokerless(cluster: _Cluster) -> Iterator[None]:
    """The runtime's consumers (changelog restore, committed offsets) read ``cluster``."""

    def changelog_consumer(
        _config: object, _group: str, isolation: str = "read_committed"
    ) -> _ChangelogConsumer:
        return _ChangelogConsumer(cluster, isolation)

    def offsets_consumer(_config: object) -> _OffsetsConsumer:
        return _OffsetsConsumer(cluster)

    with (
        mock.patch(
            "streams_runtime.state.changelog_readers.changelog_consumer", changelog_consumer
        ),
        mock.patch("streams_runtime.progress.committed.Consumer", offsets_consumer),
    ):
        yield


# -- the application, driven step by step ------------------------------------------------------


@dataclass
class _Owner:
    """One owner of a task (an instance, between its opening and its crash or close)."""

    task: StreamTask
    producer: _Producer
    next_offset: int  # of the next input record to take


class _Application:
    """Every writer task of the shared partitions, their owners, and the ticker."""

    def __init__(
        self, cluster: _Cluster, inputs: Sequence[Sequence[SourceRecord]], *, exactly_once: bool
    ) -> None:
        self.inputs = inputs
        self.exactly_once = exactly_once
        self.cluster = cluster
        self.settings = RuntimeSettings(
            application_id=APP,
            bootstrap_servers="unused:9092",
            processing_guarantee=(
                ProcessingGuarantee.EXACTLY_ONCE
                if exactly_once
                else ProcessingGuarantee.AT_LEAST_ONCE
            ),
            max_task_idle_ms=-1,  # one input partition per task: never idles anyway
            restore_timeout_s=5,
        )
        self.metrics = RuntimeMetrics(APP)
        self.owners: dict[int, _Owner | None] = dict.fromkeys(range(len(inputs)))
        self.paused: set[int] = set()
        self._opened = 0
        counts = {INPUT: len(inputs), **dict.fromkeys(HOLDS, 1)}
        self.writers = WriterTasks(TOPOLOGY, counts)
        self.bounds = CommittedBounds(
            self.writers,
            self.settings.consumer_config(),
            group_id=APP,
            interval_s=1,
            metrics=self.metrics,
        )
        self.ticker = TickWriter(
            self.writers,
            self.bounds.promise,
            source=ControlRecordSource("streams:test"),
            send=self._send_tick,
            partitions_of=lambda _topic: 1,
            metrics=self.metrics,
            interval_s=0.0,  # every promise ticked at once: the strictest schedule
        )
        self._committed_bounds: dict[int, dict[str, int]] = {}
        self.trace: list[str] = []  # what happened, for a failing example's note

    def _send_tick(
        self, topic: str, partition: int, key: bytes | None, timestamp: int, headers: Headers
    ) -> None:
        entry = _Entry(timestamp, key, None, headers, "ticker", None, tick=True)
        offset = self.cluster.append(TopicPartitionId(topic, partition), entry)
        self.trace.append(f"  tick {topic}@{offset} at {timestamp}")

    @staticmethod
    def _tp(i: int) -> TopicPartitionId:
        return TopicPartitionId(INPUT, i)

    # -- steps ---------------------------------------------------------------------------------

    def step(self, action: str, i: int) -> None:
        if action == "resume":
            self.paused.discard(i)
        elif i in self.paused:
            return  # a paused owner takes no step at all
        elif action == "pause":
            if self.owners[i] is not None:
                self.paused.add(i)
                self.trace.append(f"pause {i}")
        elif action == "process":
            self.process(i)
        elif action == "commit":
            self.commit(i)
        elif action in {"crash", "crash-after-flush"}:
            self.crash(i, flushed=action == "crash-after-flush")
        elif action == "move":
            self.move(i)
        else:
            raise AssertionError(action)
        self.tick()

    def open(self, i: int) -> _Owner:
        """A new owner of task ``i``: restored from the last commit, as the task manager does."""
        self._opened += 1
        task_id = TaskId(WRITING.id, i)
        producer = _Producer(
            self.cluster, f"{task_id}#{self._opened}", exactly_once=self.exactly_once
        )
        task = StreamTask(
            task_id,
            WRITING,
            settings=self.settings,
            collector=cast("RecordCollector", producer),
            metrics=self.metrics,
            bad_records=BadRecordHandler(BadRecordPolicy.FAIL, "dlq", producer.send, self.metrics),
            lag=lambda _tp: 0,
        )
        committed = self.cluster.committed(self._tp(i))
        task.initialize({self._tp(i): committed})
        owner = self.owners[i] = _Owner(task, producer, max(committed[0], 0))
        floor = task.bounds.current()
        self.trace.append(f"open {producer.writer} at {committed[0]}, floor {floor}")
        return owner

    def process(self, i: int) -> None:
        owner = self.owners[i] or self.open(i)
        if owner.next_offset >= len(self.inputs[i]):
            return
        record = self.inputs[i][owner.next_offset]
        owner.task.add_records(self._tp(i), [record])
        assert owner.task.process(1) == 1
        owner.next_offset += 1
        kind = "control" if record.is_control else "data"
        self.trace.append(
            f"{owner.producer.writer} takes {kind} @{record.offset} at {record.timestamp}"
        )

    def commit(self, i: int) -> None:
        """As the task manager and the commit strategies do: flush, then commit the offsets
        (under exactly-once with the transaction), then tell the task."""
        owner = self.owners[i]
        if owner is None:
            return
        owner.task.flush()
        offsets = owner.task.offsets_to_commit()
        owner.producer.commit()
        for tp in offsets:
            self.cluster.offsets[TopicPartitionId(tp.topic, tp.partition)] = (
                tp.offset,
                tp.metadata,
            )
        owner.task.committed_offsets(offsets)
        committed = [tp.offset for tp in offsets]
        self.trace.append(
            f"{owner.producer.writer} commits {committed}: {owner.task.bounds.committed}"
        )
        self._check_committed_bound_never_goes_down(i)

    def crash(self, i: int, *, flushed: bool) -> None:
        owner = self.owners[i]
        if owner is None:
            return
        if flushed:
            owner.task.flush()  # the changelog writes of a commit that never happened
        owner.producer.abort()
        owner.task.close()  # its memory is gone: nothing of it is committed
        self.owners[i] = None
        self.trace.append(f"{owner.producer.writer} crashes{' after a flush' if flushed else ''}")

    def move(self, i: int) -> None:
        if self.owners[i] is None:
            return
        self.commit(i)
        owner = self.owners[i]
        assert owner is not None
        owner.task.close()
        self.trace.append(f"{owner.producer.writer} closes (moves)")
        self.open(i)

    def tick(self) -> None:
        self.bounds.read()
        owned = {task for tasks in self.writers.of_topic.values() for task in tasks}
        self.ticker.propagate(owned, {})
        self._check_liveness()

    def finish(self) -> None:
        """Every owner resumes, takes the rest of its input and commits (closing every
        transaction), and the ticker runs once more."""
        self.paused.clear()
        for i, records in enumerate(self.inputs):
            owner = self.owners[i] or self.open(i)
            while owner.next_offset < len(records):
                self.process(i)
            self.commit(i)
        self.tick()

    # -- checks --------------------------------------------------------------------------------

    def _check_committed_bound_never_goes_down(self, i: int) -> None:
        _, metadata = self.cluster.committed(self._tp(i))
        now = merged_bounds([TaskCommitMetadata.decode(metadata).bounds])
        before = self._committed_bounds.get(i, {})
        lower = {
            t: (b, now.get(t, NO_PROGRESS))
            for t, b in before.items()
            if now.get(t, NO_PROGRESS) < b
        }
        assert not lower, f"task {i}'s committed bounds went down: {lower}"
        self._committed_bounds[i] = now

    def _check_liveness(self) -> None:
        reached = []
        for i, records in enumerate(self.inputs):
            offset = max(self.cluster.committed(self._tp(i))[0], 0)
            controls = [r.timestamp for r in records[:offset] if r.is_control]
            if not controls:
                return
            reached.append(max(controls))
        control_time = min(reached)
        for topic, hold in HOLDS.items():
            expected = control_time - hold
            if expected < 0:
                continue
            promised = self.bounds.promise(topic)
            assert promised >= expected, (
                f"{topic}: every writer committed control time >= {control_time}, "
                f"but the promise is {promised} (< {expected})"
            )
            ticks = [
                e.timestamp for e in self.cluster.logs.get(TopicPartitionId(topic, 0), []) if e.tick
            ]
            if promised > 0:
                assert ticks, f"{topic}: promised {promised}, never ticked"
                assert max(ticks) == promised - 1, (topic, promised, ticks[-3:])

    def behind_ticks(self) -> list[str]:
        """Every readable data record written after a tick and older than what it promised."""
        found = []
        for topic in HOLDS:
            promised, tick_at = NO_PROGRESS, -1
            for offset, entry in enumerate(self.cluster.logs.get(TopicPartitionId(topic, 0), [])):
                if entry.tick:
                    if entry.timestamp + 1 > promised:
                        promised, tick_at = entry.timestamp + 1, offset
                elif entry.readable and entry.timestamp < promised:
                    found.append(
                        f"{topic}@{offset}: {entry.writer} wrote {entry.timestamp}, behind the "
                        f"tick at {promised - 1} (offset {tick_at})"
                    )
        return found


# -- generated inputs and schedules ------------------------------------------------------------

Event = tuple[bool, int, str]  # control, time step, key


def _records(i: int, start: int, events: Sequence[Event]) -> list[SourceRecord]:
    """Task ``i``'s input: in order (time never goes backwards), starting at ``start``."""
    records = []
    now = start
    for offset, (control, step, key) in enumerate(events):
        now += step
        records.append(
            SourceRecord(
                INPUT,
                i,
                offset,
                now,
                None if control else key.encode(),
                None if control else f"user-{key}{offset % 2}".encode(),
                None,
                is_control=control,
            )
        )
    return records


_events = st.lists(
    st.tuples(
        st.sampled_from([False, False, False, True]),
        st.integers(0, 150),
        st.sampled_from(["a", "b", "c"]),
    ),
    min_size=3,
    max_size=30,
)
# Skew: aligned, a little apart, or far behind (a source catching up).
_start = st.one_of(st.just(0), st.integers(0, 400), st.just(10_000))
_inputs = st.integers(2, 4).flatmap(
    lambda n: st.lists(st.tuples(_start, _events), min_size=n, max_size=n)
)
_ACTIONS = (
    ["process"] * 8
    + ["commit"] * 3
    + ["crash", "crash-after-flush", "pause", "resume", "resume", "move"]
)
_schedule = st.lists(
    st.tuples(st.sampled_from(_ACTIONS), st.integers(0, 3)), min_size=40, max_size=160
)


def _run(
    inputs: list[tuple[int, list[Event]]], schedule: list[tuple[str, int]], *, exactly_once: bool
) -> _Application:
    records = [_records(i, start, events) for i, (start, events) in enumerate(inputs)]
    cluster = _Cluster()
    with _brokerless(cluster):
        app = _Application(cluster, records, exactly_once=exactly_once)
        try:
            for action, i in schedule:
                app.step(action, i % len(records))
            app.finish()
        except AssertionError:
            if currently_in_test_context():
                note("\n".join(app.trace))
            raise
    return app


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
@settings(max_examples=examples(250))
@given(inputs=_inputs, schedule=_schedule)
def test_no_writer_writes_behind_a_tick(
    exactly_once: bool, inputs: list[tuple[int, list[Event]]], schedule: list[tuple[str, int]]
) -> None:
    app = _run(inputs, schedule, exactly_once=exactly_once)
    behind = app.behind_ticks()
    if behind:
        note("\n".join(app.trace))
    assert not behind


def test_a_task_that_never_committed_holds_the_promise_back() -> None:
    # Task 0 runs far ahead and commits; task 1 (far behind, not started yet) holds every topic
    # back until it commits, and then writes its old records: none is behind a tick.
    inputs = [
        (10_000, [(False, 10, "a"), (True, 500, "a")]),
        (0, [(False, 10, "a"), (False, 10, "b"), (True, 300, "a")]),
    ]
    schedule = [("process", 0), ("process", 0), ("commit", 0)]
    app = _run(inputs, schedule, exactly_once=False)
    assert app.bounds.promise("keyed") == 320  # task 1's control record, after finish()
    assert not app.behind_ticks()
    ticks = [e.timestamp for e in app.cluster.logs[TopicPartitionId("keyed", 0)] if e.tick]
    assert ticks == [319]  # never task 0's 10510 alone


@pytest.mark.parametrize("exactly_once", [False, True], ids=["at-least-once", "exactly-once"])
def test_a_crashed_owner_s_uncommitted_progress_is_never_promised(exactly_once: bool) -> None:
    # Task 0 commits its bound 100, takes a control record at 1000 and data at 1010 (its live
    # bound is now 1010) and crashes; task 1 committed 2000. The promise is 100, not 1010: the
    # next owner of task 0 replays from the commit. Under exactly-once the crashed owner's 1010
    # is aborted; under at-least-once it stays, written before any tick above it.
    inputs = [
        (0, [(False, 100, "a"), (True, 900, "a"), (False, 10, "b")]),
        (2000, [(True, 0, "a")]),
    ]
    schedule = [
        ("process", 0),
        ("commit", 0),
        ("process", 0),
        ("process", 0),
        ("process", 1),
        ("commit", 1),
        ("crash", 0),
    ]
    app = _run(inputs, schedule, exactly_once=exactly_once)
    assert not app.behind_ticks()
    log = app.cluster.logs[TopicPartitionId("keyed", 0)]
    written = [(e.timestamp, e.writer) for e in log if e.readable and not e.tick]
    crashed = [(1010, "0_0#1")] if not exactly_once else []
    assert written == [(100, "0_0#1"), *crashed, (1010, "0_0#3")]
    assert [e.timestamp for e in log if e.tick] == [99, 1009]
