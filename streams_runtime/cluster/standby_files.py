"""Where a standby replica lives: opened on disk (resumed from its checkpoint when that still
fits the changelog) or in memory, and checkpointed (:mod:`streams_runtime.cluster.standby`)."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path

from streams_runtime.cluster.membership import StorePartition
from streams_runtime.cluster.standby import StandbyReplica
from streams_runtime.record import TopicPartitionId
from streams_runtime.state import StateDirectoryLockedError, StoreSpec

__all__ = ["checkpoint_standbys", "open_standby"]

logger = logging.getLogger(__name__)


def checkpoint_standbys(replicas: Iterable[StandbyReplica]) -> None:
    """Checkpoint the on-disk standbys among ``replicas`` (a no-op for those in memory or
    unchanged); a failure is logged and the next interval tries again."""
    for replica in replicas:
        try:
            replica.checkpoint()
        except (OSError, sqlite3.Error) as exc:
            logger.warning(
                "standby %(store)s/%(partition)d not checkpointed: %(error)s",
                {"store": replica.sp.store, "partition": replica.sp.partition, "error": str(exc)},
            )


def open_standby(
    spec: StoreSpec,
    sp: StorePartition,
    topic: str,
    directory: Path | None,
    watermarks: Callable[[TopicPartitionId], tuple[int, int]],
) -> StandbyReplica:
    """A standby of ``sp``: on disk in ``directory`` (``None``: in memory), resumed from its
    checkpoint when that lies within the changelog's ``watermarks``; in memory when the
    directory cannot be used."""
    if directory is None:
        return StandbyReplica(spec, sp, topic)
    try:
        replica = StandbyReplica(spec, sp, topic, directory)
    except (StateDirectoryLockedError, OSError, sqlite3.Error) as exc:
        # Another instance shares the state directory (or it is unusable): a standby in
        # memory is still a standby.
        logger.warning(
            "standby %(store)s/%(partition)d kept in memory: %(error)s",
            {"store": sp.store, "partition": sp.partition, "error": str(exc)},
        )
        return StandbyReplica(spec, sp, topic)
    if replica.resumed_from >= 0:
        low, high = watermarks(replica.tp)
        if not low <= replica.resumed_from <= high:
            # Beyond the end: the changelog was recreated or truncated; below the start:
            # records it never read are gone. Either way the files are not to be trusted.
            logger.warning(
                "standby %(store)s/%(partition)d: checkpoint %(offset)d outside the"
                " changelog's offsets [%(low)d, %(high)d]: reading it from the beginning",
                {
                    "store": sp.store,
                    "partition": sp.partition,
                    "offset": replica.resumed_from,
                    "low": low,
                    "high": high,
                },
            )
            replica.reset()
    return replica
