"""At-least-once or exactly-once: the one place the processing guarantee is decided.

:func:`commit_strategy_for` picks a :class:`CommitStrategy` once per thread; everything that
differs between the guarantees is a method or a constant of it: how the consumer reads
(``isolation.level``), whether the producer is transactional, how a commit makes the tasks' work
durable, what an abort discards, and whether a stopping thread commits.

A commit has one fault-injection point, ``before_offset_commit`` (:data:`OffsetCommitHook`): crash
tests use it to die, or to commit nothing, in the window between the tasks' output and changelog
writes and the input offsets (KAFKA-12508's window). Production code leaves it ``None``.
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from enum import Enum
from typing import ClassVar

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from streams_runtime.errors import BadRecordError, StreamsError
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.lanes import ConsumerLanes
from streams_runtime.settings import RuntimeSettings

__all__ = [
    "AtLeastOnceCommit",
    "CommitResult",
    "CommitStrategy",
    "ExactlyOnceCommit",
    "OffsetCommitHook",
    "commit_strategy_for",
]

logger = logging.getLogger(__name__)


OffsetCommitHook = Callable[[], bool]
"""Fault injection for crash tests: called by every commit once the outputs and changelog writes
are flushed (at-least-once) or in the open transaction (exactly-once), just before the input
offsets are committed. It may kill the process there; returning ``False`` skips the commit
(:attr:`CommitResult.SKIPPED`: the input is processed again from the last commit)."""


class CommitResult(Enum):
    COMMITTED = "committed"
    """Outputs, changelogs and input offsets are durable: local state may checkpoint."""
    SKIPPED = "skipped"
    """Offsets not committed (the group is rebalancing); the tasks go on, and whoever owns the
    input next processes it again from the last commit."""
    ABORTED = "aborted"
    """The transaction was aborted: every task must restart from the last commit."""


class CommitStrategy(ABC):
    """How a commit makes the work of every task durable, and what an abort discards."""

    isolation_level: ClassVar[str]
    """The consumer's ``isolation.level``."""
    transactional: ClassVar[bool]
    """Whether the producer writes in transactions."""

    def __init__(
        self,
        collector: RecordCollector,
        consumer: ConsumerLanes,
        *,
        before_offset_commit: OffsetCommitHook | None = None,
    ) -> None:
        self.collector = collector
        self.consumer = consumer
        self.before_offset_commit = before_offset_commit
        """The fault-injection point (:data:`OffsetCommitHook`); ``None`` outside crash tests."""

    def _offset_commit_allowed(self) -> bool:
        """Whether this commit goes on to the offsets: no hook, or the hook says so."""
        return self.before_offset_commit is None or self.before_offset_commit()

    @abstractmethod
    def commit(self, offsets: Sequence[TopicPartition]) -> CommitResult:
        """Make the tasks' output and changelog writes durable, then commit ``offsets``."""

    @abstractmethod
    def abort(self) -> bool:
        """Discard what is not committed yet, if the guarantee can; True when that discarded
        the output of every task (they must then start again from the last commit)."""

    @abstractmethod
    def commits_on_stop(self, failure: BaseException | None) -> bool:
        """Whether a thread stopping because of ``failure`` (None: asked to stop) commits its
        tasks; otherwise it aborts."""


class AtLeastOnceCommit(CommitStrategy):
    """Flush every output, then commit the input offsets: a crash in between processes the
    input again (duplicates, never loss)."""

    isolation_level = "read_uncommitted"
    transactional = False

    def commit(self, offsets: Sequence[TopicPartition]) -> CommitResult:
        self.collector.flush()
        if not self._offset_commit_allowed():
            return CommitResult.SKIPPED
        if offsets:
            try:
                for lane, lane_offsets in self.consumer.commit_by_lane(offsets):
                    lane.commit(offsets=lane_offsets, asynchronous=False)
            except KafkaException as exc:
                error = exc.args[0] if exc.args else None
                if isinstance(error, KafkaError) and error.fatal():
                    raise
                # The group is rebalancing (ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS...):
                # whoever owns these partitions next starts from the last commit
                # (at-least-once), so local state must not checkpoint this position.
                logger.warning(
                    "offset commit failed (%(error)s); input will be processed again",
                    {"error": str(exc)},
                )
                return CommitResult.SKIPPED
        return CommitResult.COMMITTED

    def abort(self) -> bool:
        return False  # sent is sent: the input since the last commit is processed again

    def commits_on_stop(self, failure: BaseException | None) -> bool:
        # A bad record under "fail": commit everything before it, then stop.
        return failure is None or isinstance(failure, BadRecordError)


class ExactlyOnceCommit(CommitStrategy):
    """One producer transaction per commit interval holding outputs, changelog writes and the
    input offsets (``send_offsets_to_transaction``); read_committed input."""

    isolation_level = "read_committed"
    transactional = True

    def commit(self, offsets: Sequence[TopicPartition]) -> CommitResult:
        if not self._offset_commit_allowed():
            return CommitResult.SKIPPED
        try:
            self.collector.commit(
                [
                    (lane_offsets, lane.consumer_group_metadata())
                    for lane, lane_offsets in self.consumer.commit_by_lane(offsets)
                ]
            )
        except KafkaException as exc:
            error = exc.args[0] if exc.args else None
            if isinstance(error, KafkaError) and error.txn_requires_abort():
                logger.warning(
                    "transaction aborted (%(error)s); processing again from the last commit",
                    {"error": str(error)},
                )
                self.collector.abort()
                return CommitResult.ABORTED
            raise StreamsError(f"transaction commit failed: {exc}") from exc
        return CommitResult.COMMITTED

    def abort(self) -> bool:
        self.collector.abort()
        return True

    def commits_on_stop(self, failure: BaseException | None) -> bool:
        # A bad record under "fail" leaves partial output of it in the transaction: abort, the
        # records since the last commit are processed again on restart.
        return failure is None


def commit_strategy_for(settings: RuntimeSettings) -> type[CommitStrategy]:
    """The strategy of ``settings.processing_guarantee``."""
    return ExactlyOnceCommit if settings.exactly_once else AtLeastOnceCommit
