"""One task's state (Kafka Streams' ``ProcessorStateManager``): opening its stores, restoring
them from their changelogs, checkpointing and closing them.

The crash-safety contract (docs/runtime/guarantees.md, emit-on-change and exactly-once): a restored
store is never ahead of the committed input position.

- Restore skips changelog records whose input was not committed and logs corrections for their
  keys (:mod:`streams_runtime.state.restore`, the one restore path of active tasks and standbys).
- A persistent store keeps its local data across restarts only when the checkpoint file
  (:mod:`streams_runtime.state.directory`) written at the last commit names exactly the committed
  input offsets it is given now; it then reads the changelog's tail only. Otherwise it is wiped
  and restored from the beginning.
- A task becoming active where a standby replica of its store is starts from the standby's
  :class:`WarmStore` and reads the changelog from the standby's position on.
- The checkpoint is deleted before the first record of a commit interval is processed
  (:meth:`TaskStateManager.mark_processing`), so a crash mid-interval never leaves a checkpoint
  describing state ahead of the committed input.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from confluent_kafka import KafkaException, TopicPartition

from streams_runtime.record import TopicPartitionId
from streams_runtime.state.changelog import (
    ChangelogWriter,
    RecordSink,
    SourcePosition,
    changelog_topic,
)
from streams_runtime.state.changelog_readers import ChangelogReaders
from streams_runtime.state.directory import (
    Checkpoint,
    checkpoint_path,
    lock_directory,
    remove_store_files,
    unlock_directory,
    usable_checkpoint,
    write_checkpoint,
)
from streams_runtime.state.engines import ENGINE_FILE_ERRORS, ENGINE_KINDS, EngineKind
from streams_runtime.state.restore import (
    ChangelogRestorer,
    Correction,
    RestoreResult,
    WarmStore,
    load_warm,
    read_watermarks,
)
from streams_runtime.state.spec import StoreSpec
from streams_runtime.state.stores import KeyValueStore, SessionStore, WindowStore, open_store

__all__ = ["TaskStateManager"]

logger = logging.getLogger(__name__)

_S = TypeVar("_S", KeyValueStore, SessionStore, WindowStore)


@dataclass
class _Slot:
    spec: StoreSpec
    store: KeyValueStore | SessionStore
    changelog_tp: TopicPartitionId | None
    path: Path | None
    writer: ChangelogWriter | None = None


class TaskStateManager:
    """Owns one task's stores: opening, restoring from changelogs, checkpointing, closing.

    Lifecycle, driven by the runtime: construct, :meth:`restore`, then per commit interval
    :meth:`mark_processing` before the first record and :meth:`commit` after the changelog
    records were acknowledged and the input offsets committed; finally :meth:`close`.

    With a persistent engine the state lives in ``state_dir / application_id / task_id``
    (``<store>.sqlite`` or ``<store>.rocksdb`` per store, plus the checkpoint), locked.
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
        if engine not in ENGINE_KINDS:
            raise ValueError(f"unknown engine kind {engine!r} ({', '.join(ENGINE_KINDS)})")
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
        self._checkpoint_path = checkpoint_path(self.directory, engine)
        self._lock_file: IO[bytes] | None = None
        self._slots: dict[str, _Slot] = {}
        self._damaged: set[str] = set()  # store files that could not be opened and were reset
        self._changelog_next: dict[TopicPartitionId, int] = {}
        self._checkpointed_inputs: dict[TopicPartitionId, int] | None = None
        self._pending_corrections: list[Correction] = []
        # Read_committed end offsets of the changelogs, for checkpoints (made on first use).
        self._offsets = ChangelogReaders(consumer_config, application_id, f"offsets-{task_id}")
        self._restored = False
        self._closed = False
        if engine != "memory":
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_file = lock_directory(self.directory, self.task_id)
        self._checkpoint_present = engine != "memory" and self._checkpoint_path.exists()
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
        return self._typed_store(name, KeyValueStore)

    def session_store(self, name: str) -> SessionStore:
        """The session store called ``name`` (a window store is one too)."""
        return self._typed_store(name, SessionStore)

    def window_store(self, name: str) -> WindowStore:
        """The window store called ``name``."""
        return self._typed_store(name, WindowStore)

    def _typed_store(self, name: str, kind: type[_S]) -> _S:
        store = self.store(name)
        if not isinstance(store, kind):
            raise TypeError(f"store {name!r} is a {type(store).__name__}, not a {kind.__name__}")
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
        *,
        timeout_s: float = 300,
        warm: Mapping[str, WarmStore] | None = None,
        cancelled: threading.Event | None = None,
        on_remaining: Callable[[int], None] | None = None,
        readers: ChangelogReaders | None = None,
    ) -> RestoreResult:
        """Bring every store to the committed input position ``committed_inputs`` (next offset to
        consume per input partition) from local state and the changelogs.

        A store with an entry in ``warm`` (and no usable checkpoint) starts from that copy and
        reads the changelog from its offset on, with the same skip rules as a full restore.
        ``on_remaining`` is told the changelog records left to read as the restore proceeds.
        ``readers`` are the calling thread's changelog consumers, kept for its next restore
        (otherwise the restore makes its own and closes them).

        Raises :class:`RestoreError` when a changelog cannot be read,
        :class:`RestoreTimeoutError` after ``timeout_s`` and :class:`RestoreCancelledError` once
        ``cancelled`` is set; the manager should then be closed."""
        self._check_open()
        if self._restored:
            raise RuntimeError(f"task {self.task_id} was already restored")
        started = time.monotonic()
        deadline = started + timeout_s
        result = RestoreResult()
        logged = {slot.changelog_tp: slot for slot in self._slots.values() if slot.changelog_tp}
        borrowed = readers is not None
        if readers is None:
            readers = ChangelogReaders(self._consumer_config, self.application_id, self.task_id)
        try:
            watermarks = (
                read_watermarks(readers.watermarks(), list(logged), deadline, self.task_id)
                if logged
                else {}
            )
            checkpoint = self._usable_checkpoint(committed_inputs, watermarks)
            reused = self._reuse_or_wipe(checkpoint, result)
            starts: dict[TopicPartitionId, int] = {}
            skipped: dict[tuple[str, bytes], dict[TopicPartitionId, int]] = {}
            for tp, slot in logged.items():
                low = watermarks[tp][0]
                if checkpoint is not None and slot.spec.name in reused:
                    starts[tp] = max(checkpoint.changelog_offsets[tp], low)
                else:
                    starts[tp] = load_warm(
                        slot.store,
                        (warm or {}).get(slot.spec.name),
                        watermarks[tp],
                        skipped,
                        result,
                    )
            if logged:
                restorer = ChangelogRestorer(
                    task_id=self.task_id,
                    logged={tp: slot.store for tp, slot in logged.items()},
                    committed_inputs=committed_inputs,
                    result=result,
                    skipped=skipped,
                )
                self._pending_corrections = restorer.run(
                    readers.records,
                    starts,
                    watermarks,
                    deadline,
                    cancelled,
                    on_remaining=on_remaining,
                )
        except BaseException:
            readers.close()  # whatever it was doing is not worth resuming
            raise
        finally:
            if borrowed:
                readers.release()
            else:
                readers.close()
        for slot in self._slots.values():
            slot.store.engine.commit()
        self._changelog_next = dict(result.end_offsets)
        result.corrections = len(self._pending_corrections)
        if self.engine != "memory" and not self._pending_corrections:
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
                    if self.engine != "memory":
                        result.stores_wiped.append(name)
        return reused

    def _usable_checkpoint(
        self,
        committed_inputs: Mapping[TopicPartitionId, int],
        watermarks: Mapping[TopicPartitionId, tuple[int, int]],
    ) -> Checkpoint | None:
        if self.engine == "memory":
            return None
        return usable_checkpoint(self._checkpoint_path, self.task_id, committed_inputs, watermarks)

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
                changelog = correction.store.changelog
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
        if self.engine == "memory":
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
        consumer = self._offsets.records()
        ends: dict[TopicPartitionId, int] = {}
        for tp in partitions:
            _, high = consumer.get_watermark_offsets(
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
        # No directory fsync: should the deletion be lost, so are the uncommitted store writes
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
            except ENGINE_FILE_ERRORS as exc:
                logger.warning(
                    "task %(task)s: closing store %(store)s: %(error)s",
                    {"task": str(self.task_id), "store": slot.spec.name, "error": str(exc)},
                )
        self._offsets.close()
        if wipe and self.engine != "memory":
            self._delete_checkpoint()
            for slot in self._slots.values():
                if slot.path is not None:
                    remove_store_files(slot.path)
        self._pending_corrections = []
        if self._lock_file is not None:
            unlock_directory(self._lock_file)
            self._lock_file = None

    def __enter__(self) -> TaskStateManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _open(self, spec: StoreSpec) -> _Slot:
        path = self.directory / f"{spec.name}.{self.engine}" if self.engine != "memory" else None
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
            store = open_store(spec, self.partition, self.engine, path, writer)
        except ENGINE_FILE_ERRORS as exc:
            assert path is not None
            # A damaged file is local state we can do without: start empty and restore.
            logger.warning(
                "task %(task)s: store %(store)s unreadable (%(error)s): recreating",
                {"task": str(self.task_id), "store": spec.name, "error": str(exc)},
            )
            remove_store_files(path)
            self._damaged.add(spec.name)
            store = open_store(spec, self.partition, self.engine, path, writer)
        return _Slot(spec, store, changelog_tp, path, writer)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"state manager of task {self.task_id} is closed")
