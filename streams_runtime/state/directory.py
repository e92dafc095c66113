"""A task's state directory (``state_dir / application_id / task_id``): the lock that keeps a
second owner out, and the checkpoint file, which names the committed input offsets the local
state matches and the next changelog offset to read per changelog partition (Kafka Streams'
``StateDirectory`` and ``OffsetCheckpoint``)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from streams_runtime.record import TopicPartitionId
from streams_runtime.state.engines import engine_files

STATE_DIRECTORY_MODE = 0o750
"""``rwxr-x---``, Kafka Streams' ``StateDirectory``'s: the state is the application's data, and
with these two directories closed to others, what is created inside them needs no mode of its
own."""

__all__ = [
    "CHECKPOINT_FILE",
    "STATE_DIRECTORY_MODE",
    "Checkpoint",
    "StateDirectoryLockedError",
    "application_directory",
    "checkpoint_path",
    "lock_directory",
    "read_checkpoint",
    "remove_store_files",
    "unlock_directory",
    "usable_checkpoint",
    "write_atomically",
    "write_checkpoint",
]

logger = logging.getLogger(__name__)

CHECKPOINT_FILE = ".checkpoint"
_LOCK_FILE = ".lock"
_CHECKPOINT_VERSION = 1


class StateDirectoryLockedError(RuntimeError):
    """Another manager (in this or another process) owns the task's state directory."""


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


def application_directory(state_dir: Path, application_id: str) -> Path:
    """``state_dir / application_id``, created if missing; both made :data:`STATE_DIRECTORY_MODE`
    whether they were there or not, as Kafka Streams' ``StateDirectory`` does. A directory this
    user cannot change (a ``state_dir`` another user created) is logged and used as it is."""
    directory = state_dir / application_id
    directory.mkdir(mode=STATE_DIRECTORY_MODE, parents=True, exist_ok=True)
    for path in (state_dir, directory):
        try:
            path.chmod(STATE_DIRECTORY_MODE)
        except OSError as exc:
            logger.warning(
                "could not make the state directory %(path)s rwxr-x---: %(error)s",
                {"path": str(path), "error": str(exc)},
            )
    return directory


def checkpoint_path(directory: Path, engine: str) -> Path:
    """The checkpoint file of a task directory whose stores are of ``engine``. One name per
    engine: after a switch of engines, the old engine's checkpoint must not vouch for the new
    engine's (empty) stores; ``sqlite`` keeps the original name."""
    return directory / (CHECKPOINT_FILE if engine == "sqlite" else f"{CHECKPOINT_FILE}.{engine}")


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


def usable_checkpoint(
    path: Path,
    task_id: str,
    committed_inputs: Mapping[TopicPartitionId, int],
    watermarks: Mapping[TopicPartitionId, tuple[int, int]],
) -> Checkpoint | None:
    """The checkpoint at ``path`` (of task ``task_id``) when the local state it vouches for
    can be reused: it names exactly ``committed_inputs``, and no changelog offset beyond the
    end of its partition in ``watermarks`` (low, high); ``None`` otherwise (logged)."""
    checkpoint = read_checkpoint(path)
    if checkpoint is None:
        return None
    if checkpoint.inputs != dict(committed_inputs):
        logger.info(
            "task %(task)s: checkpoint is for inputs %(checkpoint_inputs)s, committed are"
            " %(committed_inputs)s: restoring from scratch",
            {
                "task": str(task_id),
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
                    "task": str(task_id),
                    "offset": offset,
                    "end_offset": watermarks[tp][1],
                    "topic": tp.topic,
                    "partition": tp.partition,
                },
            )
            return None
    return checkpoint


def _offsets_field(offsets: Mapping[TopicPartitionId, int]) -> dict[str, int]:
    """Offsets by partition as a log field: ``{"clicks[0]": 12}`` (JSON keys are strings)."""
    return {f"{tp.topic}[{tp.partition}]": offset for tp, offset in sorted(offsets.items())}


def write_checkpoint(path: Path, checkpoint: Checkpoint) -> None:
    """Write ``checkpoint`` atomically and durably (:func:`write_atomically`)."""
    write_atomically(path, checkpoint.to_json())


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically and durably: temporary file, fsync, rename, fsync
    dir. A reader finds the old file or the new one, never a part of either."""
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("w", encoding="utf-8") as out:
        out.write(text)
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


def lock_directory(directory: Path, task_id: str) -> IO[bytes]:
    """Lock ``directory`` (of task ``task_id``) against a second owner, in this or another
    process; the open lock file, for :func:`unlock_directory`."""
    handle = (directory / _LOCK_FILE).open("ab")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise StateDirectoryLockedError(
            f"state directory {directory} of task {task_id} is in use"
        ) from None
    return handle


def unlock_directory(handle: IO[bytes]) -> None:
    """Release a lock taken by :func:`lock_directory`."""
    fcntl.flock(handle, fcntl.LOCK_UN)
    handle.close()


def remove_store_files(path: Path) -> None:
    """Delete the files of the persistent store at ``path`` (a RocksDB store is a directory),
    those absent included."""
    for file in engine_files(path):
        with contextlib.suppress(FileNotFoundError):
            if file.is_dir():
                shutil.rmtree(file)
            else:
                file.unlink()
