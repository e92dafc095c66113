"""Global stores (Kafka Streams' ``GlobalStateManagerImpl`` and the stores of its
``GlobalKTable`` s): every instance keeps every partition of a global table's topic in one local
key-value store, and the topic itself is the store's changelog (no changelog topic of its own).

- :class:`GlobalStores`: one built topology's global stores by name, as its tasks (a
  stream-global join) and interactive queries find them; filled by what runs the global tables
  (the global thread, :mod:`streams_runtime.processing.global_thread`, or the test driver)
  before the first task starts.
- :class:`GlobalStateManager`: one instance's global stores in ``state_dir / application_id /
  global`` (locked against a second owner, with a persistent engine), the checkpoint naming the
  next offset of every partition of their topics, and where each partition resumes: from the
  checkpoint, or, where it is missing, unreadable or does not fit the topic any more, from the
  beginning with the store wiped.

**Threads.** The global thread is the one writer; stream threads and queries read at the same
time. The stores run on the runtime's engines, each of which is safe for that
(:mod:`streams_runtime.state.engines`): memory (a dict; ordered reads copy under a lock), SQLite
(one connection opened with ``check_same_thread=False``, every statement under the engine's
lock: a reader on another thread sees the writer's writes at once, committed or not, as Kafka
Streams' readers of a global store do), RocksDB (a lock over the database and its overlay of
pending writes). A reader sees a record's write whole or not at all; there is no isolation
beyond one key, as in Kafka Streams.

**Crash safety.** Writes are committed to the engine, then the checkpoint is written (every
commit interval and at a clean stop). A crash between the two leaves the store ahead of its
checkpoint, and reading the topic again from the checkpoint writes the same latest value per
key: a table's records are idempotent, so no input position rule is needed here. A store is
wiped only after the checkpoint is deleted, so no checkpoint ever vouches for a store being
rebuilt.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

from streams_runtime.record import TopicPartitionId
from streams_runtime.state.directory import (
    Checkpoint,
    checkpoint_path,
    lock_directory,
    read_checkpoint,
    remove_store_files,
    unlock_directory,
    write_checkpoint,
)
from streams_runtime.state.engines import (
    ENGINE_FILE_ERRORS,
    ENGINE_KINDS,
    EngineKind,
    make_kv_engine,
)
from streams_runtime.state.stores import KeyValueStore

__all__ = ["GLOBAL_DIRECTORY", "GlobalStateManager", "GlobalStores"]

logger = logging.getLogger(__name__)

GLOBAL_DIRECTORY = "global"
"""The global stores' directory under ``state_dir / application_id`` (Kafka Streams' too)."""


class GlobalStores:
    """The global stores of one built topology, by name (Kafka Streams' global state stores as
    ``ProcessorContext.getStateStore`` finds them from any task). Empty until registered."""

    def __init__(self) -> None:
        self._stores: dict[str, KeyValueStore] = {}
        self._lock = threading.Lock()

    def register(self, store: KeyValueStore) -> None:
        """Make ``store`` the global store of its name."""
        with self._lock:
            self._stores = {**self._stores, store.name: store}  # replaced, never mutated

    def clear(self) -> None:
        """Forget every store (they are being closed)."""
        with self._lock:
            self._stores = {}

    def get(self, name: str) -> KeyValueStore | None:
        """The global store ``name``; ``None`` when there is none (yet)."""
        return self._stores.get(name)

    def store(self, name: str) -> KeyValueStore:
        """The global store ``name``; ``KeyError`` when it is not open here."""
        found = self._stores.get(name)
        if found is None:
            raise KeyError(f"global store {name!r} is not open")
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._stores

    def __iter__(self) -> Iterator[str]:
        return iter(self._stores)


class GlobalStateManager:
    """One instance's global stores, ``stores`` naming each one's topic: opening, where each
    partition resumes (:meth:`resume`), the positions applied (:attr:`offsets`), commits with
    their checkpoint, closing. With a persistent engine the stores live in ``state_dir /
    application_id / global`` (``<store>.sqlite`` or ``<store>.rocksdb``, and the checkpoint),
    locked; in memory they are rebuilt from the topics at every start."""

    def __init__(
        self,
        *,
        application_id: str,
        stores: Mapping[str, str],
        engine: EngineKind,
        state_dir: Path,
    ) -> None:
        if engine not in ENGINE_KINDS:
            raise ValueError(f"unknown engine kind {engine!r} ({', '.join(ENGINE_KINDS)})")
        self.engine = engine
        self.topics = dict(stores)
        self.directory = state_dir / application_id / GLOBAL_DIRECTORY
        self._checkpoint_path = checkpoint_path(self.directory, engine)
        self._lock_file: IO[bytes] | None = None
        self._damaged: set[str] = set()
        self.stores: dict[str, KeyValueStore] = {}
        self.offsets: dict[TopicPartitionId, int] = {}
        """The next offset of every partition the stores reflect (what a commit checkpoints)."""
        self._checkpointed: dict[TopicPartitionId, int] | None = None
        self._closed = False
        if engine != "memory":
            self.directory.mkdir(parents=True, exist_ok=True)
            self._lock_file = lock_directory(self.directory, GLOBAL_DIRECTORY)
        try:
            for name in self.topics:
                self.stores[name] = self._open(name)
        except BaseException:
            self.close()
            raise

    def _path(self, name: str) -> Path | None:
        return None if self.engine == "memory" else self.directory / f"{name}.{self.engine}"

    def _open(self, name: str) -> KeyValueStore:
        path = self._path(name)
        try:
            engine = make_kv_engine(self.engine, path)
        except ENGINE_FILE_ERRORS as exc:
            assert path is not None
            logger.warning(
                "global store %(store)s unreadable (%(error)s): recreating",
                {"store": name, "error": str(exc)},
            )
            remove_store_files(path)
            self._damaged.add(name)
            engine = make_kv_engine(self.engine, path)
        return KeyValueStore(name, 0, engine, None)

    def resume(
        self, watermarks: Mapping[TopicPartitionId, tuple[int, int]]
    ) -> dict[TopicPartitionId, int]:
        """Where every partition of ``watermarks`` (low, high: every partition of the stores'
        topics) is read from: a store's checkpointed offsets when the checkpoint holds it and
        each offset is within its partition; otherwise the partitions' beginning, the store
        wiped first (its checkpoint deleted before). A partition the checkpoint does not name
        (added since) starts at its beginning."""
        checkpoint = None if self.engine == "memory" else read_checkpoint(self._checkpoint_path)
        starts: dict[TopicPartitionId, int] = {}
        wipe: list[str] = []
        for name, topic in self.topics.items():
            partitions = sorted(tp for tp in watermarks if tp.topic == topic)
            reason = self._unusable(name, checkpoint, partitions, watermarks)
            if reason is None:
                assert checkpoint is not None
                for tp in partitions:
                    starts[tp] = checkpoint.changelog_offsets.get(tp, watermarks[tp][0])
                continue
            if self.engine != "memory":
                logger.info(
                    "global store %(store)s: %(reason)s: rebuilding it from %(topic)s",
                    {"store": name, "reason": reason, "topic": topic},
                )
            wipe.append(name)
            for tp in partitions:
                starts[tp] = watermarks[tp][0]
        if wipe:
            self._delete_checkpoint()
            for name in wipe:
                self.stores[name].engine.clear()
        self.offsets = dict(starts)
        return starts

    def _unusable(
        self,
        name: str,
        checkpoint: Checkpoint | None,
        partitions: list[TopicPartitionId],
        watermarks: Mapping[TopicPartitionId, tuple[int, int]],
    ) -> str | None:
        """Why the checkpoint cannot vouch for store ``name`` (``None``: it can)."""
        if checkpoint is None:
            return "no checkpoint"
        if name not in checkpoint.stores or name in self._damaged:
            return "not in the checkpoint"
        for tp in partitions:
            offset = checkpoint.changelog_offsets.get(tp)
            low, high = watermarks[tp]
            where = f"{tp.topic}[{tp.partition}]"
            if offset is not None and offset > high:
                # The topic is shorter than what was read before: recreated or truncated.
                return f"checkpoint offset {offset} beyond the end {high} of {where}"
            if offset is not None and offset < low:
                # Records were deleted before they were read (retention, DeleteRecords).
                return f"checkpoint offset {offset} before the start {low} of {where}"
        return None

    def applied(self, tp: TopicPartitionId, next_offset: int) -> None:
        """The stores reflect ``tp`` up to ``next_offset`` (excluded)."""
        if next_offset > self.offsets.get(tp, -1):
            self.offsets[tp] = next_offset

    def commit(self) -> None:
        """Make the stores' writes durable, then checkpoint the offsets they reflect (not again
        when nothing moved since the last checkpoint)."""
        self._check_open()
        for store in self.stores.values():
            store.engine.commit()
        if self.engine == "memory" or self._checkpointed == self.offsets:
            return
        write_checkpoint(
            self._checkpoint_path,
            Checkpoint(
                inputs={}, changelog_offsets=dict(self.offsets), stores=frozenset(self.stores)
            ),
        )
        self._checkpointed = dict(self.offsets)

    def _delete_checkpoint(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._checkpoint_path.unlink()
        self._checkpointed = None

    def close(self) -> None:
        """Close the stores (uncommitted writes are discarded: :meth:`commit` first) and release
        the directory. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for name, store in self.stores.items():
            try:
                store.engine.close()
            except ENGINE_FILE_ERRORS as exc:
                logger.warning(
                    "closing global store %(store)s: %(error)s", {"store": name, "error": str(exc)}
                )
        if self._lock_file is not None:
            unlock_directory(self._lock_file)
            self._lock_file = None

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the global state manager is closed")
