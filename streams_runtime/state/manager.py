"""One task's state: opening its stores, restoring them from their changelogs, checkpointing and
closing them.

The crash-safety contract (DESIGN §5, emit-on-change and exactly-once): a restored store is never
ahead of the committed input position.

- Every changelog record names the input record that caused it (``pc-source`` header). Restore
  skips records whose input was not committed (offset >= the committed offset of its partition,
  or a partition with no committed offset); that input is processed again after the restore.
- A persistent (SQLite) store keeps its local data across restarts only when the checkpoint file
  written at the last commit names exactly the committed input offsets it is given now; it then
  reads the changelog's tail only. Otherwise it is wiped and restored from the beginning.
- A task becoming active where a standby replica of its store is starts from the standby's
  :class:`WarmStore` (its records kept by the same skip rule, its skipped keys carried over for
  the corrections below) and reads the changelog from the standby's position on.
- The checkpoint is deleted before the first record of a commit interval is processed
  (:meth:`TaskStateManager.mark_processing`), so a crash mid-interval never leaves a checkpoint
  describing state ahead of the committed input.
- Skipped records stay in the changelog. Once their input offsets are committed by a later run
  (which may have produced different values, or none at all with emit-on-change), a later restore
  would apply them. So for every key with a skipped record, the restored value is logged again as
  a *correction*, attributed to the committed position, when processing starts: it follows the
  skipped records in the changelog and wins over them in every later restore.
- Restore reads with a read_committed consumer until every changelog partition's EOF event
  reaches the *high* watermark captured at the start (see ``_RestoreProgress``): the last stable
  offset alone can trail a just-committed transaction whose markers are not written yet, and the
  consumer position can stop one short of the end on a transaction marker.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sqlite3
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from progress_control.protocol import is_control_record
from streams_runtime.record import TopicPartitionId
from streams_runtime.state.changelog import (
    ChangelogWriter,
    RecordSink,
    SourcePosition,
    changelog_topic,
    record_source,
    split_session_changelog_key,
)
from streams_runtime.state.engines import (
    EngineKind,
    engine_files,
    make_kv_engine,
    make_session_engine,
)
from streams_runtime.state.stores import KeyValueStore, SessionStore

__all__ = [
    "CHECKPOINT_FILE",
    "Checkpoint",
    "RestoreError",
    "RestoreResult",
    "RestoreTimeoutError",
    "StateDirectoryLockedError",
    "StoreSpec",
    "TaskStateManager",
    "WarmStore",
    "changelog_topic_config",
    "read_checkpoint",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = ".checkpoint"
_LOCK_FILE = ".lock"
_CHECKPOINT_VERSION = 1
_RESTORE_BATCH = 1000
# Changelog records newer than this are never compacted away (see changelog_topic_config).
_MIN_COMPACTION_LAG_MS = 60 * 60 * 1000
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


@dataclass(frozen=True)
class StoreSpec:
    """What a processor asks for: a named key-value or session store, logged by default.

    ``retention_ms`` (session stores) is how long a session is kept after its end.
    """

    name: str
    kind: Literal["key_value", "session"]
    logged: bool = True
    retention_ms: int | None = None

    def __post_init__(self) -> None:
        # The name ends up in a file name and a topic name: keep to Kafka's topic alphabet.
        if not self.name or not all(c.isascii() and (c.isalnum() or c in "._-") for c in self.name):
            raise ValueError(f"store name must be non-empty [A-Za-z0-9._-], got {self.name!r}")
        if self.name in {".", ".."}:
            raise ValueError(f"invalid store name {self.name!r}")
        if self.kind not in ("key_value", "session"):
            raise ValueError(f"store kind must be key_value or session, got {self.kind!r}")
        if self.retention_ms is not None and self.retention_ms < 0:
            raise ValueError(f"retention_ms must be >= 0, got {self.retention_ms}")


def changelog_topic_config(spec: StoreSpec) -> dict[str, str]:
    """Topic configuration for the changelog of ``spec`` (the runtime creates the topic).

    Compacted, for both kinds: expired sessions are removed with tombstones. Not time-based
    deletion, which acts on record timestamps and would drop the changelog of live sessions when
    old data is replayed.
    """
    if spec.kind == "session" and spec.retention_ms is None:
        raise ValueError(f"session store {spec.name!r} needs retention_ms for its changelog")
    config = {"cleanup.policy": "compact"}
    # Restore skips records caused by input that was not committed. If the cleaner compacted a
    # key while such a newer, uncommitted version sits in the log, it would delete the committed
    # older version, and a restarted task would restore neither. Keeping the last hour out of
    # compaction leaves the committed version in place until the input is committed (commit
    # intervals are seconds) or the task has restored and logged a correction.
    config["min.compaction.lag.ms"] = str(_MIN_COMPACTION_LAG_MS)
    return config


class RestoreError(RuntimeError):
    """A changelog could not be read (missing topic, authorization, fatal client error)."""


class RestoreTimeoutError(RestoreError, TimeoutError):
    """Restore did not reach the end of every changelog partition in time."""


class StateDirectoryLockedError(RuntimeError):
    """Another manager (in this or another process) owns the task's state directory."""


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


@dataclass(frozen=True)
class Checkpoint:
    """The checkpoint file: which committed input offsets the local state matches, and the next
    changelog offset to read per changelog partition."""

    inputs: dict[TopicPartitionId, int]
    changelog_offsets: dict[TopicPartitionId, int]
    stores: frozenset[str]

    def to_json(self) -> str:
        """Serialize (stable order, for diffs and tests)."""

        def entries(offsets: Mapping[TopicPartitionId, int]) -> list[dict[str, object]]:
            return [
                {"topic": tp.topic, "partition": tp.partition, "offset": offset}
                for tp, offset in sorted(offsets.items())
            ]

        return json.dumps(
            {
                "version": _CHECKPOINT_VERSION,
                "inputs": entries(self.inputs),
                "changelog_offsets": entries(self.changelog_offsets),
                "stores": sorted(self.stores),
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> Checkpoint:
        """Parse; ``ValueError`` on anything that is not a checkpoint of this version."""
        try:
            data = json.loads(text)
            if data["version"] != _CHECKPOINT_VERSION:
                raise ValueError(f"unsupported checkpoint version {data['version']!r}")

            def offsets(entries: list[dict[str, object]]) -> dict[TopicPartitionId, int]:
                parsed: dict[TopicPartitionId, int] = {}
                for entry in entries:
                    topic, partition, offset = entry["topic"], entry["partition"], entry["offset"]
                    if not (
                        isinstance(topic, str)
                        and isinstance(partition, int)
                        and isinstance(offset, int)
                    ):
                        raise ValueError(f"bad checkpoint entry {entry!r}")
                    parsed[TopicPartitionId(topic, partition)] = offset
                return parsed

            stores = data["stores"]
            if not isinstance(stores, list) or not all(isinstance(s, str) for s in stores):
                raise ValueError("bad checkpoint store list")
            return cls(
                offsets(data["inputs"]), offsets(data["changelog_offsets"]), frozenset(stores)
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a checkpoint: {exc}") from exc


def _offsets_field(offsets: Mapping[TopicPartitionId, int]) -> dict[str, int]:
    """Offsets by partition as a log field: ``{"clicks[0]": 12}`` (JSON keys are strings)."""
    return {f"{tp.topic}[{tp.partition}]": offset for tp, offset in sorted(offsets.items())}


def read_checkpoint(path: Path) -> Checkpoint | None:
    """The checkpoint at ``path``; ``None`` when absent or unreadable (logged)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        logger.warning(
            "cannot read checkpoint %(path)s: %(error)s", {"path": str(path), "error": str(exc)}
        )
        return None
    try:
        return Checkpoint.from_json(text)
    except ValueError as exc:
        logger.warning(
            "ignoring invalid checkpoint %(path)s: %(error)s",
            {"path": str(path), "error": str(exc)},
        )
        return None


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` atomically and durably: temporary file, fsync, rename, fsync dir."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.write(checkpoint.to_json())
        out.flush()
        os.fsync(out.fileno())
    tmp.replace(path)
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass
class _Slot:
    spec: StoreSpec
    store: KeyValueStore | SessionStore
    changelog_tp: TopicPartitionId | None
    path: Path | None
    writer: ChangelogWriter | None = None


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

    def behind(self) -> str:
        return ", ".join(
            f"{tp.topic}[{tp.partition}] (at {self.next_offsets[tp]}, end {self.ends[tp]})"
            for tp in sorted(self.remaining)
        )


@dataclass(frozen=True)
class _Correction:
    slot: _Slot
    changelog_key: bytes
    value: bytes | None
    timestamp: int
    source: tuple[TopicPartitionId, int]


class TaskStateManager:
    """Owns one task's stores: opening, restoring from changelogs, checkpointing, closing.

    Lifecycle, driven by the runtime: construct, :meth:`restore`, then per commit interval
    :meth:`mark_processing` before the first record and :meth:`commit` after the changelog
    records were acknowledged and the input offsets committed; finally :meth:`close`.

    With the SQLite engine the state lives in ``state_dir / application_id / task_id``
    (``<store>.sqlite`` per store, plus the checkpoint), locked against a second owner.
    """

    def __init__(
        self,
        *,
        application_id: str,
        task_id: str,
        partition: int,
        specs: Sequence[StoreSpec],
        engine: EngineKind,
        state_dir: Path,
        sink: RecordSink,
        position: SourcePosition,
        consumer_config: Mapping[str, str],
    ) -> None:
        if engine not in ("memory", "sqlite"):
            raise ValueError(f"unknown engine kind {engine!r} (memory or sqlite)")
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate store names in {names}")
        self.application_id = application_id
        self.task_id = task_id
        self.partition = partition
        self.engine = engine
        self.position = position
        self._sink = sink
        self._consumer_config = dict(consumer_config)
        self.directory = state_dir / application_id / task_id
        self._checkpoint_path = self.directory / CHECKPOINT_FILE
        self._lock_file: IO[bytes] | None = None
        self._slots: dict[str, _Slot] = {}
        self._damaged: set[str] = set()  # SQLite files that could not be opened and were reset
        self._changelog_next: dict[TopicPartitionId, int] = {}
        self._checkpointed_inputs: dict[TopicPartitionId, int] | None = None
        self._pending_corrections: list[_Correction] = []
        self._offsets_consumer: Consumer | None = None
        self._restored = False
        self._closed = False
        if engine == "sqlite":
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_directory()
        self._checkpoint_present = engine == "sqlite" and self._checkpoint_path.exists()
        try:
            for spec in specs:
                self._slots[spec.name] = self._open(spec)
        except BaseException:
            self.close()
            raise

    # ---------------------------------------------------------------- stores

    def store(self, name: str) -> KeyValueStore | SessionStore:
        """The store called ``name``; ``KeyError`` when the task has none."""
        try:
            return self._slots[name].store
        except KeyError:
            raise KeyError(f"task {self.task_id} has no store {name!r}") from None

    def kv_store(self, name: str) -> KeyValueStore:
        """The key-value store called ``name``."""
        store = self.store(name)
        if not isinstance(store, KeyValueStore):
            raise TypeError(f"store {name!r} is a session store")
        return store

    def session_store(self, name: str) -> SessionStore:
        """The session store called ``name``."""
        store = self.store(name)
        if not isinstance(store, SessionStore):
            raise TypeError(f"store {name!r} is a key-value store")
        return store

    @property
    def specs(self) -> list[StoreSpec]:
        """The task's store specs, in construction order."""
        return [slot.spec for slot in self._slots.values()]

    def flush(self) -> int:
        """Send the buffered changelog writes (before every commit); returns how many."""
        return sum(slot.writer.flush() for slot in self._slots.values() if slot.writer)

    def changelog_partitions(self) -> list[TopicPartitionId]:
        """The changelog partitions of the task's logged stores."""
        return [slot.changelog_tp for slot in self._slots.values() if slot.changelog_tp is not None]

    # ---------------------------------------------------------------- restore

    def restore(
        self,
        committed_inputs: Mapping[TopicPartitionId, int],
        timeout_s: float = 300,
        warm: Mapping[str, WarmStore] | None = None,
    ) -> RestoreResult:
        """Bring every store to the committed input position ``committed_inputs`` (next offset to
        consume per input partition) from local state and the changelogs.

        A store with an entry in ``warm`` (and no usable checkpoint) starts from that copy and
        reads the changelog from its offset on, with the same skip rules as a full restore.

        Raises :class:`RestoreError` when a changelog cannot be read and
        :class:`RestoreTimeoutError` after ``timeout_s``; the manager should then be closed.
        """
        self._check_open()
        if self._restored:
            raise RuntimeError(f"task {self.task_id} was already restored")
        started = time.monotonic()
        deadline = started + timeout_s
        result = RestoreResult()
        logged = {slot.changelog_tp: slot for slot in self._slots.values() if slot.changelog_tp}
        consumer = self._new_consumer("restore") if logged else None
        try:
            watermarks = self._watermarks(list(logged), deadline) if logged else {}
            checkpoint = self._usable_checkpoint(committed_inputs, watermarks)
            reused = self._reuse_or_wipe(checkpoint, result)
            starts: dict[TopicPartitionId, int] = {}
            skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]] = {}
            for tp, slot in logged.items():
                low = watermarks[tp][0]
                if checkpoint is not None and slot.spec.name in reused:
                    starts[tp] = max(checkpoint.changelog_offsets[tp], low)
                else:
                    starts[tp] = self._load_warm(
                        slot, (warm or {}).get(slot.spec.name), watermarks[tp], skipped, result
                    )
            if consumer is not None:
                self._consume(
                    consumer=consumer,
                    logged=logged,
                    starts=starts,
                    watermarks=watermarks,
                    committed_inputs=committed_inputs,
                    deadline=deadline,
                    result=result,
                    skipped=skipped,
                )
        finally:
            if consumer is not None:
                consumer.close()
        for slot in self._slots.values():
            slot.store.engine.commit()
        self._changelog_next = dict(result.end_offsets)
        result.corrections = len(self._pending_corrections)
        if self.engine == "sqlite" and not self._pending_corrections:
            # The restored state is exactly the committed position: checkpoint it, so a restart
            # before the first commit does not restore everything again.
            self._write_checkpoint(committed_inputs, self._changelog_next)
        self._restored = True
        result.duration_s = time.monotonic() - started
        logger.info(
            "task %(task)s restored: %(applied)d applied, %(skipped_uncommitted)d skipped"
            " (uncommitted input), %(unattributed)d unattributed, %(malformed)d malformed,"
            " %(corrections)d corrections, checkpoint reused: %(checkpoint_reused)s,"
            " %(from_standby)d keys from standbys of %(standby_stores)s, in %(duration_s).2fs",
            {
                "task": str(self.task_id),
                "applied": result.records_applied,
                "skipped_uncommitted": result.records_skipped_uncommitted,
                "unattributed": result.unattributed,
                "malformed": result.records_malformed,
                "corrections": result.corrections,
                "checkpoint_reused": result.reused_checkpoint,
                "from_standby": result.records_from_standby,
                "standby_stores": list(result.warm_stores),
                "duration_s": result.duration_s,
            },
        )
        return result

    def _reuse_or_wipe(self, checkpoint: Checkpoint | None, result: RestoreResult) -> set[str]:
        """Keep the stores the checkpoint vouches for, wipe the others; the kept ones' names."""
        reused = {
            name
            for name, slot in self._slots.items()
            if checkpoint is not None
            and name in checkpoint.stores
            and name not in self._damaged
            and (slot.changelog_tp is None or slot.changelog_tp in checkpoint.changelog_offsets)
        }
        result.reused_checkpoint = checkpoint is not None and bool(reused)
        if len(reused) < len(self._slots):
            # Delete the checkpoint before wiping, so a crash in between cannot leave a
            # checkpoint vouching for a store that is now empty.
            self._delete_checkpoint()
            for name, slot in self._slots.items():
                if name not in reused:
                    slot.store.engine.clear()
                    if self.engine == "sqlite":
                        result.stores_wiped.append(name)
        return reused

    @staticmethod
    def _load_warm(
        slot: _Slot,
        copy: WarmStore | None,
        watermarks: tuple[int, int],
        skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]],
        result: RestoreResult,
    ) -> int:
        """Load ``copy`` into the (empty) store when it fits the changelog; the changelog
        offset to restore from."""
        low, high = watermarks
        if copy is None or not low <= copy.changelog_offset <= high:
            return low
        for key, value in copy.records.items():
            slot.store.restore(key, value)
        for key, sources in copy.skipped.items():
            skipped[(slot.spec.name, key)] = dict(sources)
        result.warm_stores.append(slot.spec.name)
        result.records_from_standby += len(copy.records)
        return copy.changelog_offset

    def _consume(
        self,
        *,
        consumer: Consumer,
        logged: Mapping[TopicPartitionId, _Slot],
        starts: Mapping[TopicPartitionId, int],
        watermarks: Mapping[TopicPartitionId, tuple[int, int]],
        committed_inputs: Mapping[TopicPartitionId, int],
        deadline: float,
        result: RestoreResult,
        skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]],
    ) -> None:
        progress = _RestoreProgress(
            ends={tp: high for tp, (_low, high) in watermarks.items()},
            next_offsets=dict(starts),
            skipped=skipped,
        )
        progress.remaining = {tp for tp, start in starts.items() if start < progress.ends[tp]}
        if progress.remaining:
            consumer.assign(
                [TopicPartition(tp.topic, tp.partition, starts[tp]) for tp in progress.remaining]
            )
        while progress.remaining:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RestoreTimeoutError(
                    f"task {self.task_id}: restore did not reach the end of {progress.behind()}"
                )
            messages = consumer.consume(num_messages=_RESTORE_BATCH, timeout=min(left, 0.1))
            for msg in messages:
                self._handle(msg, progress, logged, committed_inputs, result)
            if progress.early_eof and not messages:
                # Belt and braces for an EOF that is not reported again once the open
                # transaction ends: the fetch position reaching the end is as good.
                for position in consumer.position(
                    [TopicPartition(tp.topic, tp.partition) for tp in progress.early_eof]
                ):
                    tp = TopicPartitionId(position.topic, position.partition)
                    if position.offset >= progress.ends[tp]:
                        progress.reached(tp, position.offset)
        result.end_offsets = progress.next_offsets
        self._queue_corrections(progress.skipped, committed_inputs)

    def _handle(
        self,
        msg: Message,
        progress: _RestoreProgress,
        logged: Mapping[TopicPartitionId, _Slot],
        committed_inputs: Mapping[TopicPartitionId, int],
        result: RestoreResult,
    ) -> None:
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
        slot = logged.get(tp)
        if slot is not None and not is_control_record(msg):
            self._apply(slot, msg, committed_inputs, result, progress.skipped)
            progress.next_offsets[tp] = max(progress.next_offsets[tp], offset + 1)

    def _apply(
        self,
        slot: _Slot,
        msg: Message,
        committed_inputs: Mapping[TopicPartitionId, int],
        result: RestoreResult,
        skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]],
    ) -> None:
        key = msg.key()
        if key is None:
            result.records_malformed += 1
            return
        source = record_source(msg)
        if source is None:
            result.unattributed += 1
        else:
            source_tp, source_offset = source
            committed = committed_inputs.get(source_tp)
            if committed is None or source_offset >= committed:
                result.records_skipped_uncommitted += 1
                by_source = skipped.setdefault((slot.spec.name, key), {})
                by_source[source_tp] = max(by_source.get(source_tp, 0), msg.timestamp()[1])
                return
        try:
            slot.store.restore(key, msg.value())
        except ValueError as exc:
            result.records_malformed += 1
            logger.warning(
                "skipping malformed changelog record %(topic)s[%(partition)s]@%(offset)s:"
                " %(error)s",
                {
                    "task": str(self.task_id),
                    "store": slot.spec.name,
                    "topic": msg.topic(),
                    "partition": msg.partition(),
                    "offset": msg.offset(),
                    "error": str(exc),
                },
            )
            return
        result.records_applied += 1
        # A committed record after skipped ones supersedes them in every later restore too.
        skipped.pop((slot.spec.name, key), None)

    def _queue_corrections(
        self,
        skipped: Mapping[tuple[str, bytes], Mapping[TopicPartitionId, int]],
        committed_inputs: Mapping[TopicPartitionId, int],
    ) -> None:
        """For every key with skipped records, queue its restored value to be logged again.

        The correction is attributed to the committed position of each skipped record's source
        partition (``committed - 1``, or -1 when nothing is committed there), so any later
        restore that applies a skipped record (its input now committed) applies the correction,
        which comes after it in the changelog, too.
        """
        self._pending_corrections = []
        for (name, changelog_key), sources in skipped.items():
            slot = self._slots[name]
            if isinstance(slot.store, KeyValueStore):
                value = slot.store.get(changelog_key)
            else:
                key, start, end = split_session_changelog_key(changelog_key)
                value = slot.store.fetch(key, start, end)
            for source_tp, timestamp in sorted(sources.items()):
                position = committed_inputs.get(source_tp, 0) - 1
                self._pending_corrections.append(
                    _Correction(slot, changelog_key, value, timestamp, (source_tp, position))
                )

    def _restore_error(self, error: KafkaError) -> None:
        if error.fatal() or error.code() in _FATAL_RESTORE_ERRORS:
            raise RestoreError(f"task {self.task_id}: cannot read changelog: {error}")
        logger.warning(
            "task %(task)s: changelog consumer: %(error)s",
            {"task": str(self.task_id), "error": str(error)},
        )

    def _watermarks(
        self, partitions: Sequence[TopicPartitionId], deadline: float
    ) -> dict[TopicPartitionId, tuple[int, int]]:
        """Low and *high* watermark per changelog partition.

        Asked with read_uncommitted on purpose: a read_committed client gets the last stable
        offset instead, which right after a transaction commit (its markers are written
        asynchronously) can still be before that transaction's records, so restore would stop
        short of committed data.
        """
        consumer = self._new_consumer("watermarks", isolation="read_uncommitted")
        try:
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
                            f"task {self.task_id}: cannot read the offsets of changelog"
                            f" {tp.topic}[{tp.partition}] (the runtime creates changelog"
                            f" topics): {exc}"
                        ) from exc
            return marks
        finally:
            consumer.close()

    def _usable_checkpoint(
        self,
        committed_inputs: Mapping[TopicPartitionId, int],
        watermarks: Mapping[TopicPartitionId, tuple[int, int]],
    ) -> Checkpoint | None:
        if self.engine != "sqlite":
            return None
        checkpoint = read_checkpoint(self._checkpoint_path)
        if checkpoint is None:
            return None
        if checkpoint.inputs != dict(committed_inputs):
            logger.info(
                "task %(task)s: checkpoint is for inputs %(checkpoint_inputs)s, committed are"
                " %(committed_inputs)s: restoring from scratch",
                {
                    "task": str(self.task_id),
                    "checkpoint_inputs": _offsets_field(checkpoint.inputs),
                    "committed_inputs": _offsets_field(committed_inputs),
                },
            )
            return None
        for tp, offset in checkpoint.changelog_offsets.items():
            if tp in watermarks and offset > watermarks[tp][1]:
                # The changelog is shorter than what we read before: recreated or truncated.
                logger.warning(
                    "task %(task)s: checkpoint offset %(offset)d beyond the end %(end_offset)d"
                    " of %(topic)s[%(partition)d]: restoring from scratch",
                    {
                        "task": str(self.task_id),
                        "offset": offset,
                        "end_offset": watermarks[tp][1],
                        "topic": tp.topic,
                        "partition": tp.partition,
                    },
                )
                return None
        return checkpoint

    # ---------------------------------------------------------------- processing and commit

    def mark_processing(self) -> None:
        """Call before the first record of each commit interval is processed.

        Deletes the checkpoint (the local state is about to move past the committed input; a
        no-op when already deleted this interval), and logs the corrections of the restore.
        """
        self._check_open()
        if self._checkpoint_present:
            self._delete_checkpoint()
        if self._pending_corrections:
            for correction in self._pending_corrections:
                changelog = correction.slot.store.changelog
                assert changelog is not None  # only logged stores have skipped records
                changelog.log(
                    correction.changelog_key,
                    correction.value,
                    correction.timestamp,
                    source=correction.source,
                )
            logger.info(
                "task %(task)s: logged %(corrections)d restore corrections",
                {"task": str(self.task_id), "corrections": len(self._pending_corrections)},
            )
            self._pending_corrections = []

    def commit(
        self,
        committed_inputs: Mapping[TopicPartitionId, int],
        changelog_offsets: Mapping[TopicPartitionId, int] | None = None,
    ) -> None:
        """Make the local state durable and checkpoint it as matching ``committed_inputs``.

        Call after the changelog records were acknowledged and the input offsets committed.
        ``changelog_offsets``: the next offset after the last acknowledged record per changelog
        partition, as the record collector knows them; partitions it does not name keep what is
        known already (a lower offset only means re-reading records on reuse, never missing
        some). Without it, the end offsets are asked from the broker.
        """
        self._check_open()
        for slot in self._slots.values():
            slot.store.engine.commit()
        if self.engine != "sqlite":
            return
        if self._checkpoint_present and self._checkpointed_inputs == dict(committed_inputs):
            return  # nothing processed since the checkpoint, which still holds
        if self._pending_corrections:
            # The corrections are not logged yet: a checkpoint would let a restart skip the
            # records they are meant to override, and never queue them again.
            return
        if changelog_offsets is None:
            try:
                changelog_offsets = self._query_end_offsets()
            except KafkaException as exc:
                # A checkpoint is an optimization: without one the next start restores fully.
                logger.warning(
                    "task %(task)s: no checkpoint, changelog offsets unknown: %(error)s",
                    {"task": str(self.task_id), "error": str(exc)},
                )
                self._delete_checkpoint()
                return
        self._merge_offsets(changelog_offsets)
        self._write_checkpoint(committed_inputs, self._changelog_next)

    def _merge_offsets(self, offsets: Mapping[TopicPartitionId, int]) -> None:
        for tp in self.changelog_partitions():
            if tp in offsets:
                self._changelog_next[tp] = max(self._changelog_next.get(tp, 0), offsets[tp])

    def _query_end_offsets(self) -> dict[TopicPartitionId, int]:
        # read_committed: the last stable offset, never past committed (hence locally applied)
        # records. Right after a transaction commit it may still trail our own records, which
        # only means re-reading them when the checkpoint is reused.
        partitions = self.changelog_partitions()
        if not partitions:
            return {}
        if self._offsets_consumer is None:
            self._offsets_consumer = self._new_consumer("offsets")
        ends: dict[TopicPartitionId, int] = {}
        for tp in partitions:
            _, high = self._offsets_consumer.get_watermark_offsets(
                TopicPartition(tp.topic, tp.partition), timeout=10, cached=False
            )
            ends[tp] = high
        return ends

    def _write_checkpoint(
        self,
        committed_inputs: Mapping[TopicPartitionId, int],
        changelog_offsets: Mapping[TopicPartitionId, int],
    ) -> None:
        checkpoint = Checkpoint(
            inputs=dict(committed_inputs),
            changelog_offsets={
                tp: changelog_offsets[tp]
                for tp in self.changelog_partitions()
                if tp in changelog_offsets
            },
            stores=frozenset(self._slots),
        )
        write_checkpoint(self._checkpoint_path, checkpoint)
        self._checkpoint_present = True
        self._checkpointed_inputs = dict(checkpoint.inputs)

    def _delete_checkpoint(self) -> None:
        # No directory fsync: should the deletion be lost, so are the uncommitted SQLite writes
        # it protects against, and the checkpoint describes the committed data again.
        with contextlib.suppress(FileNotFoundError):
            self._checkpoint_path.unlink()
        self._checkpoint_present = False

    # ---------------------------------------------------------------- close

    def close(self, *, wipe: bool = False) -> None:
        """Close the stores (uncommitted writes are discarded: :meth:`commit` first for a clean
        close). ``wipe``: also delete the local state and checkpoint. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for slot in self._slots.values():
            if slot.writer is not None:
                slot.writer.discard()
            try:
                slot.store.engine.close()
            except sqlite3.Error as exc:
                logger.warning(
                    "task %(task)s: closing store %(store)s: %(error)s",
                    {"task": str(self.task_id), "store": slot.spec.name, "error": str(exc)},
                )
        if self._offsets_consumer is not None:
            self._offsets_consumer.close()
            self._offsets_consumer = None
        if wipe and self.engine == "sqlite":
            self._delete_checkpoint()
            for slot in self._slots.values():
                if slot.path is not None:
                    _remove_files(slot.path)
        self._pending_corrections = []
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def __enter__(self) -> TaskStateManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _open(self, spec: StoreSpec) -> _Slot:
        path = self.directory / f"{spec.name}.sqlite" if self.engine == "sqlite" else None
        changelog_tp = (
            TopicPartitionId(changelog_topic(self.application_id, spec.name), self.partition)
            if spec.logged
            else None
        )
        writer = (
            ChangelogWriter(
                self._sink,
                changelog_tp.topic,
                changelog_tp.partition,
                self.position,
                buffered=True,
            )
            if changelog_tp is not None
            else None
        )
        store: KeyValueStore | SessionStore
        try:
            store = self._make_store(spec, path, writer)
        except sqlite3.DatabaseError as exc:
            assert path is not None
            # A damaged file is local state we can do without: start empty and restore.
            logger.warning(
                "task %(task)s: store %(store)s unreadable (%(error)s): recreating",
                {"task": str(self.task_id), "store": spec.name, "error": str(exc)},
            )
            _remove_files(path)
            self._damaged.add(spec.name)
            store = self._make_store(spec, path, writer)
        return _Slot(spec, store, changelog_tp, path, writer)

    def _make_store(
        self, spec: StoreSpec, path: Path | None, writer: ChangelogWriter | None
    ) -> KeyValueStore | SessionStore:
        if spec.kind == "key_value":
            return KeyValueStore(
                spec.name, self.partition, make_kv_engine(self.engine, path), writer
            )
        return SessionStore(
            spec.name, self.partition, make_session_engine(self.engine, path), writer
        )

    def _new_consumer(self, purpose: str, isolation: str = "read_committed") -> Consumer:
        group_id = f"{self.application_id}-{purpose}-{self.task_id}-{uuid.uuid4().hex[:8]}"
        config: dict[str, str | bool] = dict(self._consumer_config)
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

    def _lock_directory(self) -> None:
        handle = (self.directory / _LOCK_FILE).open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise StateDirectoryLockedError(
                f"state directory {self.directory} of task {self.task_id} is in use"
            ) from None
        self._lock_file = handle

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"state manager of task {self.task_id} is closed")


def _remove_files(path: Path) -> None:
    for file in engine_files(path):
        with contextlib.suppress(FileNotFoundError):
            file.unlink()


_NOT_YET_LEADER = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
    }
)


def _retriable(exc: KafkaException) -> bool:
    """Whether a broker answer means "not yet" (a partition still changing hands)."""
    error = exc.args[0] if exc.args else None
    return isinstance(error, KafkaError) and (error.retriable() or error.code() in _NOT_YET_LEADER)
