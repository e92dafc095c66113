"""Standby replicas: warm copies of store partitions fed from their changelogs (Kafka Streams'
``StandbyTask``).

What a standby applies: everything up to the end of the changelog, like Kafka Streams'
standbys. Under exactly-once, read_committed only shows records whose transaction (which also
committed the input offsets that caused them) committed, so a standby is never ahead of the
committed input. Under at-least-once the changelog can hold records caused by input that is not
committed yet (the active crashed before committing its offsets); a standby shows them, just as
the active's own store did before the crash. That is what a query should see (the freshest
state the application computed), and it never reaches a restored *active* store: when a
standby's partition becomes active on the same instance, the task starts from the standby's
*committed* copy (records whose input the application committed, see :class:`StandbyReplica`)
and reads the changelog's tail with the crash-safety rules of ``TaskStateManager``. The standby
keeps serving stale queries until that restore is done.

Where a standby lives: in memory with the memory engine; with a persistent engine (SQLite or
RocksDB) on disk, in SQLite files whichever the engine, in a
directory of its own per store partition (``state_dir / application_id / standby /
<store>-<partition>``, see :func:`standby_directory`), never the active task's: the two exist
side by side while a promoted task restores from the standby, which keeps serving stale
queries meanwhile. That directory holds the store (``store.sqlite``), the committed copy
(``committed.sqlite``) and a checkpoint (``.checkpoint``, :class:`StandbyCheckpoint`) naming
the next changelog offset both match, with the pending records and the committed input offsets
known then. The SQLite writes are committed only when a checkpoint is written (periodically and
on close), after the previous checkpoint was deleted: what is on disk is always either exactly
what the checkpoint describes, or has no checkpoint and is read again from the beginning. A
restart resumes from the checkpoint, so it reads only the changelog's tail; a missing, corrupt
or mismatched checkpoint, or one outside the changelog's offsets, means a full read.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from confluent_kafka import Message

from progress_control.protocol import is_control_record
from streams_runtime.cluster.membership import LagInfo, StorePartition
from streams_runtime.record import TopicPartitionId
from streams_runtime.state import (
    KeyValueEngine,
    KeyValueStore,
    SessionStore,
    StoreSpec,
    WarmStore,
    input_committed,
    make_kv_engine,
    open_store,
    record_source,
)
from streams_runtime.state.directory import (
    CHECKPOINT_FILE,
    lock_directory,
    remove_store_files,
    unlock_directory,
    write_atomically,
)

__all__ = ["StandbyCheckpoint", "StandbyReplica", "standby_directory"]

logger = logging.getLogger(__name__)

_STORE_FILE = "store.sqlite"
_COMMITTED_FILE = "committed.sqlite"
_CHECKPOINT_VERSION = 1


def standby_directory(state_dir: Path, application_id: str, sp: StorePartition) -> Path:
    """Where the on-disk standby of ``sp`` lives (apart from task directories, which are
    named ``<subtopology>_<partition>``)."""
    return state_dir / application_id / "standby" / f"{sp.store}-{sp.partition}"


@dataclass(frozen=True)
class _PendingRecord:
    source: TopicPartitionId
    source_offset: int
    timestamp: int
    value: bytes | None


@dataclass(frozen=True)
class StandbyCheckpoint:
    """A standby's checkpoint: the next changelog offset its files match (``offset``), the
    committed input offsets it knew, its pending records in changelog order per key, and the
    timestamp of the last record applied (for the time lag)."""

    changelog: TopicPartitionId
    offset: int
    inputs: dict[TopicPartitionId, int]
    pending: dict[bytes, list[_PendingRecord]] = field(default_factory=dict)
    last_applied_ms: int = -1

    def to_json(self) -> str:
        """Serialize; keys and values in base64 (they are arbitrary bytes)."""
        return json.dumps(
            {
                "version": _CHECKPOINT_VERSION,
                "changelog": {
                    "topic": self.changelog.topic,
                    "partition": self.changelog.partition,
                    "offset": self.offset,
                },
                "last_applied_ms": self.last_applied_ms,
                "inputs": [
                    {"topic": tp.topic, "partition": tp.partition, "offset": offset}
                    for tp, offset in sorted(self.inputs.items())
                ],
                "pending": [
                    {
                        "key": _b64(key),
                        "topic": r.source.topic,
                        "partition": r.source.partition,
                        "offset": r.source_offset,
                        "timestamp": r.timestamp,
                        "value": None if r.value is None else _b64(r.value),
                    }
                    for key, records in sorted(self.pending.items())
                    for r in records
                ],
            },
            indent=1,
        )

    @classmethod
    def from_json(cls, text: str) -> StandbyCheckpoint:
        """Parse; ``ValueError`` on anything that is not a standby checkpoint of this version."""
        try:
            data = json.loads(text)
            if data["version"] != _CHECKPOINT_VERSION:
                raise ValueError(f"unsupported checkpoint version {data['version']!r}")
            changelog = data["changelog"]
            pending: dict[bytes, list[_PendingRecord]] = {}
            for entry in data["pending"]:
                value = entry["value"]
                record = _PendingRecord(
                    TopicPartitionId(_str(entry["topic"]), _int(entry["partition"])),
                    _int(entry["offset"]),
                    _int(entry["timestamp"]),
                    None if value is None else _unb64(value),
                )
                pending.setdefault(_unb64(entry["key"]), []).append(record)
            checkpoint = cls(
                TopicPartitionId(_str(changelog["topic"]), _int(changelog["partition"])),
                _int(changelog["offset"]),
                {
                    TopicPartitionId(_str(e["topic"]), _int(e["partition"])): _int(e["offset"])
                    for e in data["inputs"]
                },
                pending,
                _int(data["last_applied_ms"]),
            )
        except (KeyError, TypeError, AttributeError, json.JSONDecodeError) as exc:
            raise ValueError(f"not a standby checkpoint: {exc}") from exc
        if checkpoint.offset < 0:
            raise ValueError(f"negative changelog offset {checkpoint.offset}")
        return checkpoint


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: Any) -> bytes:
    try:
        return base64.b64decode(_str(text), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"bad base64 {text!r}") from exc


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not a string: {value!r}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"not an integer: {value!r}")
    return value


class StandbyReplica:
    """A warm copy of one store partition, fed from its changelog partition.

    ``store`` holds everything read (what stale queries see). For a promotion it also keeps
    what a restore would produce (docs/runtime/state.md): ``committed`` has the latest changelog
    value per key among the records whose input is known to be committed, ``pending`` the newer
    records per key whose input is not (yet). :meth:`fold` moves pending records over as the
    application's committed offsets advance; :meth:`warm_store` hands the result to a task.

    With a ``directory`` (SQLite engine) the replica lives on disk and resumes from its
    checkpoint (see the module docstring); the pending records and the committed input offsets
    known at the checkpoint are restored with it, so records whose input commit status was not
    known then stay pending until a :meth:`fold` learns it, exactly as without the restart.
    Raises ``StateDirectoryLockedError`` when another replica owns ``directory``.
    """

    def __init__(
        self, spec: StoreSpec, sp: StorePartition, topic: str, directory: Path | None = None
    ) -> None:
        self.spec = spec
        self.sp = sp
        self.tp = TopicPartitionId(topic, sp.partition)
        self.directory = directory
        self.next_offset = -1  # after the last record read (applied or skipped)
        self.eof_offset = -1
        self.end_offset = -1  # the changelog's end as of the last fetch (-1: not known yet)
        self.last_applied_ms = -1
        self.pending: dict[bytes, list[_PendingRecord]] = {}
        self.committed_inputs: dict[TopicPartitionId, int] = {}
        self.resumed_from = -1
        """The checkpoint offset this replica resumed from (-1: read from the beginning)."""
        self.records_read = 0
        """Changelog records read since the replica was opened (applied or skipped)."""
        self._checkpointed = -1  # the position of the checkpoint on disk (-1: none)
        self._dirty = False  # changed since the checkpoint (committed or pending moved)
        self._lock_file: IO[bytes] | None = None
        self.store: KeyValueStore | SessionStore
        self.committed: KeyValueEngine
        if directory is None:
            self.store = open_store(spec, sp.partition, "memory")
            self.committed = make_kv_engine("memory")
            return
        directory.mkdir(parents=True, exist_ok=True)
        self._lock_file = lock_directory(directory, f"standby {sp.store}/{sp.partition}")
        try:
            self._open_files(directory)
            self._resume(directory / CHECKPOINT_FILE)
        except BaseException:
            unlock_directory(self._lock_file)
            raise

    def _open_files(self, directory: Path) -> None:
        store_path, committed_path = directory / _STORE_FILE, directory / _COMMITTED_FILE
        try:
            self.store = open_store(self.spec, self.sp.partition, "sqlite", store_path)
            self.committed = make_kv_engine("sqlite", committed_path)
        except sqlite3.DatabaseError as exc:
            # Local state we can do without: drop it (and the checkpoint vouching for it).
            logger.warning(
                "standby %(store)s/%(partition)d unreadable (%(error)s): recreating",
                {"store": self.sp.store, "partition": self.sp.partition, "error": str(exc)},
            )
            with contextlib.suppress(FileNotFoundError):
                (directory / CHECKPOINT_FILE).unlink()
            remove_store_files(store_path)
            remove_store_files(committed_path)
            self.store = open_store(self.spec, self.sp.partition, "sqlite", store_path)
            self.committed = make_kv_engine("sqlite", committed_path)

    def _resume(self, path: Path) -> None:
        checkpoint = self._read_checkpoint(path)
        if checkpoint is None:
            # Files without a checkpoint match no known offset: start over.
            self.reset()
            return
        self.next_offset = checkpoint.offset
        self.committed_inputs = dict(checkpoint.inputs)
        self.pending = checkpoint.pending
        self.last_applied_ms = checkpoint.last_applied_ms
        self.resumed_from = self._checkpointed = checkpoint.offset
        logger.info(
            "standby %(store)s/%(partition)d resumed from its checkpoint at %(offset)d",
            {"store": self.sp.store, "partition": self.sp.partition, "offset": checkpoint.offset},
        )

    def _read_checkpoint(self, path: Path) -> StandbyCheckpoint | None:
        fields = {"store": self.sp.store, "partition": self.sp.partition, "path": str(path)}
        try:
            checkpoint = StandbyCheckpoint.from_json(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            logger.warning(
                "standby %(store)s/%(partition)d: ignoring checkpoint %(path)s: %(error)s",
                {**fields, "error": str(exc)},
            )
            return None
        if checkpoint.changelog != self.tp:
            logger.warning(
                "standby %(store)s/%(partition)d: checkpoint %(path)s is of %(topic)s",
                {**fields, "topic": checkpoint.changelog.topic},
            )
            return None
        return checkpoint

    def reset(self) -> None:
        """Drop the local state and checkpoint: read the changelog from the beginning (a
        checkpoint that cannot be trusted, or is outside the changelog's offsets)."""
        self._delete_checkpoint()
        self.store.engine.clear()
        self.committed.clear()
        self.pending.clear()
        self.next_offset = self.eof_offset = self.resumed_from = -1
        self.last_applied_ms = -1

    def apply(self, msg: Message) -> None:
        offset = msg.offset() or 0
        self.next_offset = offset + 1
        self.records_read += 1
        key = msg.key()
        if key is None or (msg.headers() and is_control_record(msg)):
            return
        value = msg.value()
        try:
            self.store.restore(key, value)
        except ValueError:
            logger.warning(
                "standby %(store)s/%(partition)d: malformed changelog record at %(offset)d",
                {"store": self.sp.store, "partition": self.sp.partition, "offset": offset},
            )
            return
        self._dirty = True
        self.last_applied_ms = msg.timestamp()[1]
        source = record_source(msg)
        if source is None or input_committed(source, self.committed_inputs):
            self._commit(key, value)
            self.pending.pop(key, None)
        else:
            pending = _PendingRecord(source[0], source[1], self.last_applied_ms, value)
            self.pending.setdefault(key, []).append(pending)

    def _commit(self, key: bytes, value: bytes | None) -> None:
        if value is None:
            self.committed.delete(key)
        else:
            self.committed.put(key, value)

    def fold(self, committed_inputs: Mapping[TopicPartitionId, int]) -> None:
        """Take in the application's committed input offsets (next offset per partition): a
        key's newest pending record whose input is now committed becomes its committed value,
        and the pending records before it are dropped, as restore would."""
        for tp, offset in committed_inputs.items():
            if offset > self.committed_inputs.get(tp, -1):
                self.committed_inputs[tp] = offset
                self._dirty = True
        for key, records in list(self.pending.items()):
            last = max(
                (
                    i
                    for i, r in enumerate(records)
                    if input_committed((r.source, r.source_offset), self.committed_inputs)
                ),
                default=-1,
            )
            if last < 0:
                continue
            self._dirty = True
            self._commit(key, records[last].value)
            if last == len(records) - 1:
                del self.pending[key]
            else:
                self.pending[key] = records[last + 1 :]

    def pending_sources(self) -> set[TopicPartitionId]:
        return {r.source for records in self.pending.values() for r in records}

    def warm_store(self, committed_inputs: Mapping[TopicPartitionId, int]) -> WarmStore:
        """What a restore at ``committed_inputs`` would produce up to :meth:`position`."""
        self.fold(committed_inputs)
        skipped: dict[bytes, dict[TopicPartitionId, int]] = {}
        for key, records in self.pending.items():
            sources = skipped.setdefault(key, {})
            for r in records:
                sources[r.source] = max(sources.get(r.source, 0), r.timestamp)
        return WarmStore(self.position(), dict(self.committed.items()), skipped)

    def position(self) -> int:
        return max(self.next_offset, self.eof_offset)

    def lag(self, now_ms: int) -> LagInfo:
        """The lag as of the replicator's last fetch. Until the replica has read something
        (a record or the end) since it was assigned, it is behind by the whole changelog, or
        by an unknown amount (-1) while the end is not known either: an empty store must
        never look caught up."""
        position, end = self.position(), self.end_offset
        if position < 0:
            return LagInfo(position, end, end if end > 0 else -1, -1)
        if end < 0:
            return LagInfo(position, end, -1, -1)
        offset_lag = max(0, end - position)
        time_lag = 0
        if offset_lag:
            time_lag = max(0, now_ms - self.last_applied_ms) if self.last_applied_ms >= 0 else -1
        return LagInfo(position, end, offset_lag, time_lag)

    def checkpoint(self) -> bool:
        """Make the on-disk state durable and checkpoint it at :meth:`position` (a no-op in
        memory, before anything was read, or when nothing changed); whether one was written.

        The old checkpoint is deleted before the SQLite commits: a crash in between leaves no
        checkpoint (a full read next time), never one describing other data.
        """
        position = self.position()
        if self.directory is None or position < 0:
            return False
        if not self._dirty and position == self._checkpointed:
            return False
        self._delete_checkpoint()
        self.store.engine.commit()
        self.committed.commit()
        checkpoint = StandbyCheckpoint(
            self.tp,
            position,
            dict(self.committed_inputs),
            {key: list(records) for key, records in self.pending.items()},
            self.last_applied_ms,
        )
        write_atomically(self.directory / CHECKPOINT_FILE, checkpoint.to_json())
        self._checkpointed = position
        self._dirty = False
        return True

    def _delete_checkpoint(self) -> None:
        if self.directory is not None:
            with contextlib.suppress(FileNotFoundError):
                (self.directory / CHECKPOINT_FILE).unlink()
        self._checkpointed = -1

    def close(self) -> None:
        """Checkpoint (on disk) and release the replica."""
        try:
            self.checkpoint()
        except (OSError, sqlite3.Error) as exc:
            # A checkpoint is an optimization: without one the next start reads everything.
            logger.warning(
                "standby %(store)s/%(partition)d: no checkpoint on close: %(error)s",
                {"store": self.sp.store, "partition": self.sp.partition, "error": str(exc)},
            )
        self.store.engine.close()
        self.committed.close()
        if self._lock_file is not None:
            unlock_directory(self._lock_file)
            self._lock_file = None
