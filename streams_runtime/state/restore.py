"""Changelog restore (Kafka Streams' ``StoreChangelogReader``): reading a task's changelog
partitions into its stores without ever getting ahead of the committed input
(docs/runtime/state.md).

- The committed-input rule, :func:`input_committed`, written once and used by active restores
  and standby replicas alike: a changelog record names the input record that caused it
  (``pc-source`` header); its input is committed when its offset is below the committed offset
  of its partition. Restore skips records whose input is not committed (that input is processed
  again after the restore); records without a valid source header are applied.
- A restore can start from a standby replica's :class:`WarmStore` (its records kept by the same
  rule, its skipped keys carried over for the corrections) and read the changelog from the
  standby's position on (:func:`load_warm`).
- Skipped records stay in the changelog. Once their input offsets are committed by a later run
  (which may have produced different values, or none at all with emit-on-change), a later restore
  would apply them. So for every key with a skipped record, the restored value is logged again as
  a :class:`Correction`, attributed to the committed position, when processing starts: it follows
  the skipped records in the changelog and wins over them in every later restore.
- Restore reads with a read_committed consumer until every changelog partition's EOF event
  reaches the *high* watermark captured at the start (see ``_RestoreProgress``): the last stable
  offset alone can trail a just-committed transaction whose markers are not written yet, and the
  consumer position can stop one short of the end on a transaction marker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from progress_control.protocol import is_control_record
from streams_runtime.record import TopicPartitionId
from streams_runtime.state.changelog import record_source, split_session_changelog_key
from streams_runtime.state.stores import KeyValueStore, SessionStore

__all__ = [
    "ChangelogRestorer",
    "Correction",
    "RestoreCancelledError",
    "RestoreError",
    "RestoreResult",
    "RestoreTimeoutError",
    "WarmStore",
    "changelog_consumer",
    "input_committed",
    "load_warm",
    "read_watermarks",
]

logger = logging.getLogger(__name__)

_RESTORE_BATCH = 1000
# Consumer errors after which waiting cannot help: the changelog cannot be read at all.
_FATAL_RESTORE_ERRORS = frozenset(
    {
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError._AUTHENTICATION,
    }
)


class RestoreError(RuntimeError):
    """A changelog could not be read (missing topic, authorization, fatal client error)."""


class RestoreTimeoutError(RestoreError, TimeoutError):
    """Restore did not reach the end of every changelog partition in time."""


class RestoreCancelledError(RestoreError):
    """The task was revoked (or the thread stops) while it restored: the restore gave up."""


@dataclass
class RestoreResult:
    """What :meth:`TaskStateManager.restore` did."""

    records_applied: int = 0
    # Records caused by input beyond the committed position: not applied, that input is re-run.
    records_skipped_uncommitted: int = 0
    # Records without a valid source header: applied.
    unattributed: int = 0
    # Records that are not a valid changelog record of their store (null key, bad session key).
    records_malformed: int = 0
    # Per changelog partition, the next offset to read after the restore.
    end_offsets: dict[TopicPartitionId, int] = field(default_factory=dict)
    # True when the local (SQLite) state matched the checkpoint and only the tail was read.
    reused_checkpoint: bool = False
    # Persistent stores whose local data was dropped before restoring.
    stores_wiped: list[str] = field(default_factory=list)
    # Keys whose restored value will be logged again by mark_processing (see module docstring).
    corrections: int = 0
    # Stores started from a standby replica's copy (WarmStore), and how many keys it held.
    warm_stores: list[str] = field(default_factory=list)
    records_from_standby: int = 0
    duration_s: float = 0.0


@dataclass(frozen=True)
class WarmStore:
    """A store's committed state held elsewhere in this process (a standby replica), for a
    restore that only reads the changelog's tail.

    ``records``: the latest changelog value per changelog key among the records restore would
    apply (input committed, or unattributed) up to ``changelog_offset`` (the next changelog
    offset); ``skipped``: the keys whose newest records up to there were caused by input that is
    not committed, with each source partition's newest timestamp (exactly what restore skips).
    """

    changelog_offset: int
    records: Mapping[bytes, bytes]
    skipped: Mapping[bytes, Mapping[TopicPartitionId, int]]


def input_committed(
    source: tuple[TopicPartitionId, int], committed_inputs: Mapping[TopicPartitionId, int]
) -> bool:
    """The committed-input rule: whether the input record ``source`` (partition, offset) is
    committed, given ``committed_inputs`` (next offset to consume per input partition). A
    partition with no committed offset has nothing committed."""
    source_tp, source_offset = source
    committed = committed_inputs.get(source_tp)
    return committed is not None and source_offset < committed


@dataclass(frozen=True)
class Correction:
    """A restored value to log again when processing starts (see the module docstring)."""

    store: KeyValueStore | SessionStore
    changelog_key: bytes
    value: bytes | None
    timestamp: int
    source: tuple[TopicPartitionId, int]


def changelog_consumer(
    consumer_config: Mapping[str, str], group_id: str, isolation: str = "read_committed"
) -> Consumer:
    """A consumer of changelog partitions (assigned, never subscribed) from the application's
    ``consumer_config``."""
    config: dict[str, str | bool] = dict(consumer_config)
    config.pop("group.instance.id", None)  # a static member id belongs to the app's group
    config.update(
        {
            # Assigned partitions only; the group is never joined nor committed to.
            "group.id": group_id,
            # Restore waits for end-of-partition events: don't let each empty fetch idle.
            "fetch.wait.max.ms": "10",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
        }
    )
    return Consumer(config)


def read_watermarks(
    consumer: Consumer, partitions: Sequence[TopicPartitionId], deadline: float, task_id: str
) -> dict[TopicPartitionId, tuple[int, int]]:
    """Low and *high* watermark per changelog partition of task ``task_id``.

    Ask with a read_uncommitted ``consumer`` on purpose: a read_committed client gets the last
    stable offset instead, which right after a transaction commit (its markers are written
    asynchronously) can still be before that transaction's records, so restore would stop
    short of committed data.
    """
    marks = {}
    for tp in partitions:
        while True:
            try:
                marks[tp] = consumer.get_watermark_offsets(
                    TopicPartition(tp.topic, tp.partition),
                    timeout=max(deadline - time.monotonic(), 0.1),
                    cached=False,
                )
                break
            except KafkaException as exc:
                # A topic created a moment ago has a leader in the metadata before
                # that broker has taken the partition over: retry until the deadline.
                if _retriable(exc) and time.monotonic() < deadline:
                    time.sleep(0.1)
                    continue
                raise RestoreError(
                    f"task {task_id}: cannot read the offsets of changelog"
                    f" {tp.topic}[{tp.partition}] (the runtime creates changelog"
                    f" topics): {exc}"
                ) from exc
    return marks


def load_warm(
    store: KeyValueStore | SessionStore,
    copy: WarmStore | None,
    watermarks: tuple[int, int],
    skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]],
    result: RestoreResult,
) -> int:
    """Load ``copy`` into the (empty) ``store`` when it fits the changelog; the changelog
    offset to restore from."""
    low, high = watermarks
    if copy is None or not low <= copy.changelog_offset <= high:
        return low
    for key, value in copy.records.items():
        store.restore(key, value)
    for key, sources in copy.skipped.items():
        skipped[(store.name, key)] = dict(sources)
    result.warm_stores.append(store.name)
    result.records_from_standby += len(copy.records)
    return copy.changelog_offset


@dataclass
class _RestoreProgress:
    """Where a restore stands, per changelog partition.

    A partition is caught up when its partition-EOF event (which librdkafka reports at the last
    stable offset, past transaction markers and aborted batches) reaches the high watermark
    captured before reading. Comparing the consumer position with the high watermark instead
    can stall one short of the end on a trailing marker (the "lag stuck at 1" hazard). An EOF
    below the end means a transaction in the captured range is still open: we wait for its
    outcome (bounded by the producer's transaction timeout) rather than miss its records.
    """

    ends: dict[TopicPartitionId, int]
    next_offsets: dict[TopicPartitionId, int]
    remaining: set[TopicPartitionId] = field(default_factory=set)
    early_eof: set[TopicPartitionId] = field(default_factory=set)
    # Skipped records per (store, changelog key): source partition -> newest timestamp.
    skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]] = field(default_factory=dict)

    def eof(self, tp: TopicPartitionId, offset: int) -> None:
        if tp not in self.remaining:
            return
        if offset >= self.ends[tp]:
            self.reached(tp, offset)
        else:
            self.next_offsets[tp] = max(self.next_offsets[tp], offset)
            self.early_eof.add(tp)

    def reached(self, tp: TopicPartitionId, offset: int) -> None:
        self.next_offsets[tp] = max(self.next_offsets[tp], offset)
        self.remaining.discard(tp)
        self.early_eof.discard(tp)

    def left(self) -> int:
        """Records still to read (Kafka Streams' restore-remaining-records-total)."""
        return sum(max(0, self.ends[tp] - self.next_offsets[tp]) for tp in self.remaining)

    def behind(self) -> str:
        return ", ".join(
            f"{tp.topic}[{tp.partition}] (at {self.next_offsets[tp]}, end {self.ends[tp]})"
            for tp in sorted(self.remaining)
        )


class ChangelogRestorer:
    """One restore pass over the changelog partitions of task ``task_id``: the restore loop.

    ``logged``: the store restored from each changelog partition; ``committed_inputs``: the
    committed input position to restore to; ``skipped``: the keys skipped so far per (store,
    changelog key), e.g. by :func:`load_warm`; the counts go to ``result``.
    """

    def __init__(
        self,
        *,
        task_id: str,
        logged: Mapping[TopicPartitionId, KeyValueStore | SessionStore],
        committed_inputs: Mapping[TopicPartitionId, int],
        result: RestoreResult,
        skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]],
    ) -> None:
        self.task_id = task_id
        self._logged = logged
        self._committed_inputs = committed_inputs
        self._result = result
        self._skipped = skipped

    def run(
        self,
        consumer_for_records: Callable[[], Consumer],
        starts: Mapping[TopicPartitionId, int],
        watermarks: Mapping[TopicPartitionId, tuple[int, int]],
        deadline: float,
        cancelled: threading.Event | None = None,
        *,
        on_remaining: Callable[[int], None] | None = None,
    ) -> list[Correction]:
        """Read every changelog partition from ``starts`` to the high watermark captured in
        ``watermarks``; sets ``result.end_offsets`` and returns the corrections to log. Gives
        up with :class:`RestoreCancelledError` once ``cancelled`` is set (checked between
        batches); tells ``on_remaining`` the records left to read before the first batch and
        after each."""
        progress = _RestoreProgress(
            ends={tp: high for tp, (_low, high) in watermarks.items()},
            next_offsets=dict(starts),
            skipped=self._skipped,
        )
        progress.remaining = {tp for tp, start in starts.items() if start < progress.ends[tp]}
        if progress.remaining:  # a first start has nothing to read: no consumer to start
            consumer = consumer_for_records()
            consumer.assign(
                [TopicPartition(tp.topic, tp.partition, starts[tp]) for tp in progress.remaining]
            )
            self._read(consumer, progress, deadline, cancelled, on_remaining)
        self._result.end_offsets = progress.next_offsets
        if on_remaining is not None:
            on_remaining(0)
        return self._corrections(progress.skipped)

    def _read(
        self,
        consumer: Consumer,
        progress: _RestoreProgress,
        deadline: float,
        cancelled: threading.Event | None,
        on_remaining: Callable[[int], None] | None,
    ) -> None:
        while progress.remaining:
            if on_remaining is not None:
                on_remaining(progress.left())
            if cancelled is not None and cancelled.is_set():
                raise RestoreCancelledError(f"task {self.task_id}: restore cancelled")
            left = deadline - time.monotonic()
            if left <= 0:
                raise RestoreTimeoutError(
                    f"task {self.task_id}: restore did not reach the end of {progress.behind()}"
                )
            messages = consumer.consume(num_messages=_RESTORE_BATCH, timeout=min(left, 0.1))
            for msg in messages:
                self._handle(msg, progress)
            if progress.early_eof and not messages:
                # Belt and braces for an EOF that is not reported again once the open
                # transaction ends: the fetch position reaching the end is as good.
                for position in consumer.position(
                    [TopicPartition(tp.topic, tp.partition) for tp in progress.early_eof]
                ):
                    tp = TopicPartitionId(position.topic, position.partition)
                    if position.offset >= progress.ends[tp]:
                        progress.reached(tp, position.offset)

    def _handle(self, msg: Message, progress: _RestoreProgress) -> None:
        topic, partition, offset = msg.topic(), msg.partition(), msg.offset()
        error = msg.error()
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            self._restore_error(error)
            return
        if topic is None or partition is None or offset is None:
            return
        tp = TopicPartitionId(topic, partition)
        if error is not None:
            progress.eof(tp, offset)
            return
        store = self._logged.get(tp)
        if store is not None and not is_control_record(msg):
            self._apply(store, msg, progress.skipped)
            progress.next_offsets[tp] = max(progress.next_offsets[tp], offset + 1)

    def _apply(
        self,
        store: KeyValueStore | SessionStore,
        msg: Message,
        skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]],
    ) -> None:
        result = self._result
        key = msg.key()
        if key is None:
            result.records_malformed += 1
            return
        source = record_source(msg)
        if source is None:
            result.unattributed += 1
        elif not input_committed(source, self._committed_inputs):
            result.records_skipped_uncommitted += 1
            source_tp = source[0]
            by_source = skipped.setdefault((store.name, key), {})
            by_source[source_tp] = max(by_source.get(source_tp, 0), msg.timestamp()[1])
            return
        try:
            store.restore(key, msg.value())
        except ValueError as exc:
            result.records_malformed += 1
            logger.warning(
                "skipping malformed changelog record %(topic)s[%(partition)s]@%(offset)s:"
                " %(error)s",
                {
                    "task": str(self.task_id),
                    "store": store.name,
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                    "error": str(exc),
                },
            )
            return
        result.records_applied += 1
        # A committed record after skipped ones supersedes them in every later restore too.
        skipped.pop((store.name, key), None)

    def _corrections(
        self, skipped: Mapping[tuple[str, bytes], Mapping[TopicPartitionId, int]]
    ) -> list[Correction]:
        """For every key with skipped records, its restored value to be logged again.

        The correction is attributed to the committed position of each skipped record's source
        partition (``committed - 1``, or -1 when nothing is committed there), so any later
        restore that applies a skipped record (its input now committed) applies the correction,
        which comes after it in the changelog, too.
        """
        stores = {store.name: store for store in self._logged.values()}
        corrections = []
        for (name, changelog_key), sources in skipped.items():
            store = stores[name]
            if isinstance(store, KeyValueStore):
                value = store.get(changelog_key)
            else:
                key, start, end = split_session_changelog_key(changelog_key)
                value = store.fetch(key, start, end)
            for source_tp, timestamp in sorted(sources.items()):
                position = self._committed_inputs.get(source_tp, 0) - 1
                corrections.append(
                    Correction(store, changelog_key, value, timestamp, (source_tp, position))
                )
        return corrections

    def _restore_error(self, error: KafkaError) -> None:
        if error.fatal() or error.code() in _FATAL_RESTORE_ERRORS:
            raise RestoreError(f"task {self.task_id}: cannot read changelog: {error}")
        logger.warning(
            "task %(task)s: changelog consumer: %(error)s",
            {"task": str(self.task_id), "error": str(error)},
        )


_NOT_YET_LEADER = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        # The client's metadata predates the changelog topic the runtime just created.
        KafkaError._UNKNOWN_PARTITION,
    }
)


def _retriable(exc: KafkaException) -> bool:
    """Whether a broker answer means "not yet" (a partition still changing hands)."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in _NOT_YET_LEADER)
