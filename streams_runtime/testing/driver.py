"""``TopologyTestDriver``: a topology run in-process, without a broker, deterministically (Kafka
Streams' driver of the same name).

The runtime's own parts do the work — :class:`~streams_runtime.processing.task.StreamTask` with
its processors, stores, record cache, suppression, idling (``max_task_idle_ms``) and the fused
native core; the bad-record policy; trust checks of control records; and the one tick writer
(:class:`~streams_runtime.progress.TickWriter`) with the bounds tasks commit. What the driver
replaces is the broker: every topic is one partition held in memory, and what the topology
writes to a topic it reads (a repartition topic) is handed to the reading task at once.

As in Kafka Streams' driver, each record is processed to the end and committed before the next
(the record cache then forwards every update: as if ``statestore_cache_max_bytes`` were 0), and
wall-clock time stands still until :meth:`TopologyTestDriver.advance_wall_clock_time` moves it:
it is what ``max_task_idle_ms`` deadlines and the progress interval are measured on. Tasks run
in sub-topology order, one record at a time, until none can take another. A record piped into a
global table's topic updates its store at once (the global thread's
:class:`~streams_runtime.processing.global_thread.GlobalStateUpdateTask` applies it).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

from progress_control.protocol import has_control_header
from progress_control.settings import ConfigurationError, load_settings
from progress_control.trust import ControlRecordSource
from streams_runtime.dsl import StreamsBuilder
from streams_runtime.errors import BadRecordHandler
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.global_thread import open_global_tables
from streams_runtime.processing.record_router import RecordRouter
from streams_runtime.processing.task import StreamTask
from streams_runtime.progress import TickWriter, WriterTasks, promise
from streams_runtime.record import Headers, SourceRecord, TaskId, TopicPartitionId
from streams_runtime.serdes import Serde
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import KeyValueStore, SessionStore, bound_engine_memory
from streams_runtime.testing.stores import KeyValueStoreView, SessionStoreView, WindowStoreView
from streams_runtime.testing.topics import TestInputTopic, TestOutputTopic, Tick
from streams_runtime.topology import QueryableStore, Topology

__all__ = ["TopologyTestDriver"]

logger = logging.getLogger(__name__)

K = TypeVar("K")
V = TypeVar("V")

_PARTITION = 0  # every topic of the driver has one partition


class _WallClock:
    """The driver's wall clock: milliseconds, moved by the test only."""

    def __init__(self, start_ms: int) -> None:
        self.ms = start_ms

    def now_ms(self) -> int:
        return self.ms

    def now_s(self) -> float:
        return self.ms / 1000


def _memory_dir(path: str = "/dev/shm", min_free_bytes: int = 1 << 30) -> str | None:  # noqa: S108
    try:
        stat = os.statvfs(path)
    except OSError:
        return None
    roomy = stat.f_bavail * stat.f_frsize >= min_free_bytes  # not a container's 64 MiB
    return path if roomy and os.access(path, os.W_OK) else None


MEMORY_DIR = _memory_dir()
"""Where a driver keeps its stores: in memory where the machine has a roomy tmpfs. A driver
commits after every record, as Kafka Streams' does, and each commit syncs the stores and
checkpoints to disk: there that sync is free (what a driver holds dies with it anyway)."""


class _Topics:
    """Every topic's one partition: the next offset of each, and what the topology wrote there
    (data records and ticks apart, until a test reads them)."""

    def __init__(self) -> None:
        self.next_offset: dict[str, int] = {}
        self.records: dict[str, list[SourceRecord]] = {}
        self.ticks: dict[str, list[Tick]] = {}
        self.produced: list[SourceRecord] = []  # not yet handed to a reading task

    def append(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
    ) -> SourceRecord:
        offset = self.next_offset.get(topic, 0)
        self.next_offset[topic] = offset + 1
        control = has_control_header(headers)
        return SourceRecord(topic, _PARTITION, offset, timestamp, key, value, headers, control)


class _Output:
    """The tasks' :class:`~streams_runtime.processing.collector.TaskOutput`: every record sent is
    acknowledged at once, kept for the test, and queued for the task that reads its topic."""

    def __init__(self, topics: _Topics, clock: _WallClock) -> None:
        self._topics = topics
        self._clock = clock
        self.changelogs: set[str] = set()
        self.written: dict[TopicPartitionId, int] = {}
        self.next_offsets: dict[TopicPartitionId, int] = {}
        self.topics: dict[str, None] = {}  # written to, in order

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
        del partition  # one partition per topic
        if topic in self.changelogs and timestamp == 0:
            timestamp = self._clock.now_ms()  # stamped by the producer (ChangelogSink)
        record = self._topics.append(topic, key, value, timestamp, list(headers or ()))
        tp = TopicPartitionId(topic, _PARTITION)
        self.topics[topic] = None
        self.written[tp] = max(self.written.get(tp, -1), timestamp)
        self.next_offsets[tp] = record.offset + 1
        if record.is_control:
            tick = Tick(topic, _PARTITION, timestamp, key, list(record.headers or ()))
            self._topics.ticks.setdefault(topic, []).append(tick)
        else:
            self._topics.records.setdefault(topic, []).append(record)
        self._topics.produced.append(record)

    def send_many(
        self,
        topic: str,
        partition: int,
        records: Iterable[tuple[bytes | None, bytes | None, Headers | None]],
        timestamp: int,
    ) -> None:
        for key, value, headers in records:
            self.send(topic, key, value, timestamp, headers, partition=partition)

    def partition_for(self, topic: str, key: bytes) -> int:
        del topic, key
        return _PARTITION


class TopologyTestDriver:
    """Runs the topology of ``builder`` without a broker: pipe records in through
    :meth:`create_input_topic`, read what comes out through :meth:`create_output_topic`, move
    wall-clock time with :meth:`advance_wall_clock_time`, look into stores with
    :meth:`get_key_value_store`, :meth:`get_session_store` and :meth:`get_window_store`::

        with TopologyTestDriver(builder) as driver:
            clicks = driver.create_input_topic("clicks", String(), String())
            keys = SessionWindowedSerde(String())
            sessions = driver.create_output_topic("sessions", keys, Integer())
            clicks.pipe_input("alice", "home", timestamp=0)
            clicks.pipe_tick(60_000)  # time passes with no data: the session closes
            assert sessions.read_key_values() == [(Windowed("alice", 0, 0), 1)]

    Settings are the app's (``settings``, or keywords over ``PROGRESS_CONTROL_RUNTIME_*`` env
    variables, as :class:`~streams_runtime.App` takes them); ``application_id`` defaults to
    ``topology-test-driver`` and ``bootstrap_servers`` is never used. Stores live in a
    temporary directory removed by :meth:`close`. Not covered: several partitions (every
    topic has one), rebalances, exactly-once transactions, several instances, interactive
    queries between instances, restoring from changelogs.
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        settings: RuntimeSettings | None = None,
        *,
        initial_wall_clock_time_ms: int | None = None,
        **overrides: Any,
    ) -> None:
        self._state_dir = Path(tempfile.mkdtemp(prefix="topology-test-driver-", dir=MEMORY_DIR))
        try:
            if settings is None:
                overrides.setdefault("application_id", "topology-test-driver")
                overrides.setdefault("bootstrap_servers", "topology-test-driver:9092")
                settings = load_settings(RuntimeSettings, **overrides)
            elif overrides:
                raise TypeError("pass settings or keywords, not both")
            self.settings = settings = settings.model_copy(update={"state_dir": self._state_dir})
            self.topology: Topology = builder.build(settings.application_id, settings)
            bound_engine_memory(settings.state_engine.value, settings.rocksdb_memory_bytes)
            problem = settings.signing_problem(
                has_repartition_topics=bool(self.topology.repartition_topics)
            )
            if problem is not None:
                raise ConfigurationError(problem)
            self._start(initial_wall_clock_time_ms)
        except BaseException:
            shutil.rmtree(self._state_dir, ignore_errors=True)
            raise

    def _start(self, initial_wall_clock_time_ms: int | None) -> None:
        settings = self.settings
        self._clock = _WallClock(
            time.time_ns() // 1_000_000
            if initial_wall_clock_time_ms is None
            else initial_wall_clock_time_ms
        )
        self.metrics = RuntimeMetrics(settings.application_id)
        """The app's metrics (``metrics.registry``: what ``/metrics`` would serve)."""
        self._topics = _Topics()
        self._output = _Output(self._topics, self._clock)
        self._router = RecordRouter(
            settings,
            frozenset(self.topology.repartition_topics),
            self.metrics,
            clock_ms=self._clock.now_ms,
        )
        bad_records = BadRecordHandler(
            settings.bad_record_policy,
            settings.dead_letter_topic or f"{settings.application_id}-dlq",
            self._output.send,
            self.metrics,
        )
        self.tick_source = ControlRecordSource("topology-test-driver")
        """The writer of ticks :meth:`TestInputTopic.pipe_tick` pipes (unsigned)."""
        self._tasks: list[StreamTask] = []
        self._task_of: dict[str, StreamTask] = {}
        # Global tables' stores, the topology's before its tasks start.
        self._globals = open_global_tables(
            self.topology, settings, bad_records=bad_records, metrics=self.metrics
        )
        for store in self._globals.state.stores.values() if self._globals else ():
            self.topology.global_state.register(store)
        try:
            for sub in self.topology.subtopologies:
                task = StreamTask(
                    TaskId(sub.id, _PARTITION),
                    sub,
                    settings=settings,
                    collector=self._output,
                    metrics=self.metrics,
                    bad_records=bad_records,
                    lag=lambda _tp: 0,  # caught up: nothing more is on any "broker"
                    clock=self._clock.now_ms,
                    wall_clock=self._clock.now_ms,
                )
                self._tasks.append(task)
                self._output.changelogs.update(tp.topic for tp in task.state.changelog_partitions())
                task.prepare({})
                task.start_processing()
                for topic in sub.source_topics:
                    self._task_of[topic] = task
        except BaseException:
            self._close_tasks()
            raise
        self._committed_bounds: dict[TaskId, Mapping[str, int]] = {}
        writers = WriterTasks(self.topology, dict.fromkeys(self._all_topics(), 1))
        self._ticks: TickWriter | None = None
        if settings.progress_propagation:
            self._ticks = TickWriter(
                writers,
                lambda topic: promise(
                    writers.of_topic.get(topic, ()), self._committed_bounds, topic
                ),
                source=ControlRecordSource(
                    f"streams:{settings.application_id[:160]}:topology-test-driver",
                    signing_key=settings.signing_key,
                    null_key_topics=frozenset(
                        t for sub in self.topology.subtopologies for t in sub.null_key_tick_topics
                    ).__contains__,
                ),
                send=lambda topic, partition, key, timestamp, headers: self._output.send(
                    topic, key, None, timestamp, headers, partition=partition
                ),
                partitions_of=lambda _topic: 1,
                metrics=self.metrics,
                interval_s=settings.progress_interval_ms / 1000,
                clock=self._clock.now_s,
            )
        self._closed = False

    def _all_topics(self) -> set[str]:
        return {
            t for sub in self.topology.subtopologies for t in (*sub.source_topics, *sub.sink_topics)
        }

    # -- topics -----------------------------------------------------------------------------

    def create_input_topic(
        self,
        topic: str,
        key_serde: Serde[K],
        value_serde: Serde[V],
        *,
        start_timestamp_ms: int | None = None,
        auto_advance_ms: int = 0,
    ) -> TestInputTopic[K, V]:
        """A typed way into ``topic``, one of the topology's sources (a global table's topic
        too). Records piped without a timestamp get the topic's time: ``start_timestamp_ms``
        (default the driver's wall clock), moved on by ``auto_advance_ms`` after each."""
        if self._globals is None or topic not in self._globals.topics:
            self._reading_task(topic)
        return TestInputTopic(
            self,
            topic,
            key_serde,
            value_serde,
            start_timestamp_ms=(
                self._clock.now_ms() if start_timestamp_ms is None else start_timestamp_ms
            ),
            auto_advance_ms=auto_advance_ms,
        )

    def create_output_topic(
        self, topic: str, key_serde: Serde[K], value_serde: Serde[V]
    ) -> TestOutputTopic[K, V]:
        """A typed reader of what the topology writes to ``topic`` (any topic: outputs,
        repartition and changelog topics, the dead-letter topic)."""
        return TestOutputTopic(
            topic,
            key_serde,
            value_serde,
            records=lambda: self._topics.records.setdefault(topic, []),
            ticks=lambda: self._topics.ticks.setdefault(topic, []),
        )

    def produced_topic_names(self) -> set[str]:
        """Every topic the topology wrote to so far (outputs, internal topics, dead letters)."""
        return set(self._output.topics)

    def _reading_task(self, topic: str) -> StreamTask:
        task = self._task_of.get(topic)
        if task is None:
            raise ValueError(
                f"unknown input topic {topic!r}; the topology reads "
                f"{', '.join(sorted(self._task_of))}"
            )
        return task

    # -- processing -------------------------------------------------------------------------

    def pipe_raw(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None = None,
    ) -> None:
        """Pipe one serialized record into ``topic`` and process what it makes processable
        (what :class:`TestInputTopic` does after serializing)."""
        self._check_open()
        if self._globals is not None and topic in self._globals.topics:
            self._globals.update(self._topics.append(topic, key, value, timestamp, headers))
            self._globals.state.commit()
            return
        task = self._reading_task(topic)
        self._add(task, self._topics.append(topic, key, value, timestamp, headers))
        self._process_all()

    def advance_wall_clock_time(self, advance: int | timedelta) -> None:
        """Move wall-clock time by ``advance`` (ms, or a ``timedelta``): wall-clock punctuators
        fire (each once, however many intervals passed), idling deadlines may pass and ticks
        come due; then process what became processable."""
        self._check_open()
        ms = advance if isinstance(advance, int) else int(advance.total_seconds() * 1000)
        if ms < 0:
            raise ValueError(f"wall-clock time moves forward only, got {ms} ms")
        self._clock.ms += ms
        for task in self._tasks:
            if task.punctuators.punctuate_wall_clock():
                self._commit(task)
        self._tick()
        self._process_all()

    @property
    def wall_clock_time_ms(self) -> int:
        """The driver's wall clock, in milliseconds since the epoch."""
        return self._clock.ms

    def _add(self, task: StreamTask, record: SourceRecord) -> None:
        if record.is_control:
            record.is_control = self._router.accepts_control(
                record.topic, record.partition, record.timestamp, record.headers or []
            )
            record.rejected = not record.is_control
        task.add_records(record.tp, (record,))

    def _deliver_produced(self) -> None:
        """Hand what the topology wrote to topics it reads (repartition topics, or a user's
        topic it also reads) to the reading task."""
        produced, self._topics.produced = self._topics.produced, []
        for record in produced:
            task = self._task_of.get(record.topic)
            if task is not None:
                self._add(task, record)

    def _process_all(self) -> None:
        self._deliver_produced()
        while True:
            for task in self._tasks:
                if task.process(1):
                    self._commit(task)
                    self._deliver_produced()
                    break
            else:
                break
        for task in self._tasks:
            if task.group.buffered():
                decision = task.group.last_decision
                logger.info(
                    "task %(task)s holds %(buffered)d records but waits (%(reason)s): advance "
                    "wall-clock time or pipe records to its other inputs",
                    {
                        "task": str(task.id),
                        "buffered": task.group.buffered(),
                        "reason": decision.reason.value,
                    },
                )

    def _commit(self, task: StreamTask) -> None:
        """Commit ``task`` as the runtime does after a commit interval (cache, stores and
        changelogs flushed; offsets with their bounds), then tick what its bounds allow."""
        task.flush()
        offsets = task.offsets_to_commit()
        task.committed_offsets(offsets)
        self._committed_bounds[task.id] = dict(task.bounds.committed)
        self._tick()

    def _tick(self) -> None:
        if self._ticks is not None:
            self._ticks.propagate([task.id for task in self._tasks], self._output.written)

    # -- stores -----------------------------------------------------------------------------

    def _store(self, name: str, kind: Literal["key_value", "session", "window"]) -> QueryableStore:
        spec = self.topology.queryable_stores.get(name)
        if spec is None:
            raise KeyError(
                f"no store {name!r}; the topology's stores are "
                f"{', '.join(sorted(self.topology.queryable_stores)) or 'none'}"
            )
        if spec.kind != kind:
            raise TypeError(f"store {name!r} is a {spec.kind} store, not a {kind} store")
        return spec

    def _lookup(self, spec: QueryableStore) -> KeyValueStore | SessionStore:
        self._check_open()
        if spec.name in self.topology.global_stores:
            return self.topology.global_state.store(spec.name)
        task = next(t for t in self._tasks if t.subtopology.id == spec.subtopology)
        return task.query_store(spec.name)

    def get_key_value_store(self, name: str) -> KeyValueStoreView[Any, Any]:
        """The table store ``name``, typed with its serdes."""
        spec = self._store(name, "key_value")
        return KeyValueStoreView(spec, lambda: self._lookup(spec))

    def get_session_store(self, name: str) -> SessionStoreView[Any, Any]:
        """The session store ``name`` of a session-windowed aggregation."""
        spec = self._store(name, "session")
        return SessionStoreView(spec, lambda: self._lookup(spec))

    def get_window_store(self, name: str) -> WindowStoreView[Any, Any]:
        """The window store ``name`` of a time- or sliding-windowed aggregation."""
        spec = self._store(name, "window")
        return WindowStoreView(spec, lambda: self._lookup(spec))

    # -- lifecycle --------------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the driver is closed")

    def _close_tasks(self) -> None:
        for task in self._tasks:
            try:
                task.close()
            except Exception as exc:  # closing the rest matters more
                logger.warning(
                    "closing task %(task)s: %(error)s", {"task": str(task.id), "error": str(exc)}
                )

    def close(self) -> None:
        """Close every task and remove the driver's state directory."""
        if self._closed:
            return
        self._closed = True
        self._close_tasks()
        self.topology.global_state.clear()
        if self._globals is not None:
            self._globals.state.close()
        shutil.rmtree(self._state_dir, ignore_errors=True)

    def __enter__(self) -> TopologyTestDriver:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
