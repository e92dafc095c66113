"""The processing guarantee's decisions, in one place (commit_strategy.py), without a broker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from streams_runtime.errors import BadRecordError, StreamsError
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.commit_strategy import (
    AtLeastOnceCommit,
    CommitResult,
    CommitStrategy,
    ExactlyOnceCommit,
    commit_strategy_for,
)
from streams_runtime.processing.lanes import ConsumerLanes
from streams_runtime.record import SourceRecord
from streams_runtime.settings import RuntimeSettings

OFFSETS = [TopicPartition("in", 0, 7, "pc1:1000")]
BAD = SourceRecord("in", 0, 8, 1000, b"k", b"not json", None, False, False)


class _Collector:
    def __init__(self, commit_error: KafkaException | None = None) -> None:
        self.calls: list[str] = []
        self._commit_error = commit_error

    def flush(self) -> None:
        self.calls.append("flush")

    def commit(self, offsets: Sequence[tuple[Sequence[TopicPartition], object]]) -> None:
        self.calls += [f"commit {len(tps)} {metadata}" for tps, metadata in offsets]
        if self._commit_error is not None:
            raise self._commit_error

    def abort(self) -> None:
        self.calls.append("abort")


class _Consumer:
    def __init__(self, commit_error: KafkaException | None = None) -> None:
        self.commits: list[tuple[list[TopicPartition], bool]] = []
        self._commit_error = commit_error

    def commit(self, *, offsets: list[TopicPartition], asynchronous: bool) -> None:
        self.commits.append((offsets, asynchronous))
        if self._commit_error is not None:
            raise self._commit_error

    def consumer_group_metadata(self) -> str:
        return "group-metadata"

    def commit_by_lane(
        self, offsets: Sequence[TopicPartition]
    ) -> list[tuple[_Consumer, list[TopicPartition]]]:
        return [(self, list(offsets))] if offsets else []  # one lane


def _strategy(
    kind: type[CommitStrategy], collector: _Collector, consumer: _Consumer
) -> CommitStrategy:
    return kind(cast(RecordCollector, collector), cast(ConsumerLanes, consumer))


def _error(code: int, **flags: Any) -> KafkaException:
    return KafkaException(KafkaError(code, "test", **flags))


def test_the_guarantee_picks_the_strategy_and_what_follows_from_it() -> None:
    alo = RuntimeSettings(application_id="a", bootstrap_servers="b:1")
    eos = RuntimeSettings(
        application_id="a", bootstrap_servers="b:1", processing_guarantee="exactly_once_v2"
    )
    assert commit_strategy_for(alo) is AtLeastOnceCommit
    assert commit_strategy_for(eos) is ExactlyOnceCommit
    assert (AtLeastOnceCommit.isolation_level, AtLeastOnceCommit.transactional) == (
        "read_uncommitted",
        False,
    )
    assert (ExactlyOnceCommit.isolation_level, ExactlyOnceCommit.transactional) == (
        "read_committed",
        True,
    )


def test_at_least_once_flushes_then_commits_offsets_synchronously() -> None:
    collector, consumer = _Collector(), _Consumer()
    assert _strategy(AtLeastOnceCommit, collector, consumer).commit(OFFSETS) is (
        CommitResult.COMMITTED
    )
    assert collector.calls == ["flush"]
    assert consumer.commits == [(OFFSETS, False)]
    consumer.commits.clear()
    assert _strategy(AtLeastOnceCommit, collector, consumer).commit([]) is CommitResult.COMMITTED
    assert consumer.commits == []  # nothing moved: no offset commit


def test_at_least_once_skips_a_commit_the_rebalance_refused_and_raises_a_fatal_one() -> None:
    refused = _Consumer(_error(KafkaError.REBALANCE_IN_PROGRESS))
    assert _strategy(AtLeastOnceCommit, _Collector(), refused).commit(OFFSETS) is (
        CommitResult.SKIPPED
    )
    fatal = _Consumer(_error(KafkaError._FATAL, fatal=True))
    with pytest.raises(KafkaException):
        _strategy(AtLeastOnceCommit, _Collector(), fatal).commit(OFFSETS)


def test_exactly_once_commits_the_offsets_in_the_transaction() -> None:
    collector, consumer = _Collector(), _Consumer()
    assert _strategy(ExactlyOnceCommit, collector, consumer).commit(OFFSETS) is (
        CommitResult.COMMITTED
    )
    assert collector.calls == ["commit 1 group-metadata"]
    assert consumer.commits == []


def test_exactly_once_aborts_a_transaction_that_requires_it_else_fails() -> None:
    abortable = _Collector(_error(KafkaError._STATE, txn_requires_abort=True))
    assert _strategy(ExactlyOnceCommit, abortable, _Consumer()).commit(OFFSETS) is (
        CommitResult.ABORTED
    )
    assert abortable.calls == ["commit 1 group-metadata", "abort"]
    broken = _Collector(_error(KafkaError._FENCED, fatal=True))
    with pytest.raises(StreamsError, match="transaction commit failed"):
        _strategy(ExactlyOnceCommit, broken, _Consumer()).commit(OFFSETS)
    assert broken.calls == ["commit 1 group-metadata"]


@pytest.mark.parametrize("kind", [AtLeastOnceCommit, ExactlyOnceCommit])
def test_the_fault_injection_point_runs_before_the_offsets_and_may_skip_them(
    kind: type[CommitStrategy],
) -> None:
    for allow, result in ((True, CommitResult.COMMITTED), (False, CommitResult.SKIPPED)):
        collector, consumer = _Collector(), _Consumer()

        def before_offset_commit(allow: bool = allow, collector: _Collector = collector) -> bool:
            collector.calls.append("hook")
            return allow

        strategy = kind(
            cast(RecordCollector, collector),
            cast(Consumer, consumer),
            before_offset_commit=before_offset_commit,
        )
        assert strategy.commit(OFFSETS) is result
        flushed = ["flush"] if kind is AtLeastOnceCommit else []
        committed = ["commit 1 group-metadata"] if kind is ExactlyOnceCommit and allow else []
        assert collector.calls == [*flushed, "hook", *committed]
        assert consumer.commits == (
            [(OFFSETS, False)] if kind is AtLeastOnceCommit and allow else []
        )


def test_abort_discards_every_task_s_output_only_under_exactly_once() -> None:
    alo, eos = _Collector(), _Collector()
    assert _strategy(AtLeastOnceCommit, alo, _Consumer()).abort() is False
    assert _strategy(ExactlyOnceCommit, eos, _Consumer()).abort() is True
    assert (alo.calls, eos.calls) == ([], ["abort"])


@pytest.mark.parametrize(
    ("failure", "at_least_once", "exactly_once"),
    [
        (None, True, True),  # asked to stop: commit
        # The "fail" policy: at least once commits what came before the bad record.
        (BadRecordError(BAD, "deserialization"), True, False),
        (RuntimeError("crash"), False, False),
    ],
)
def test_what_a_stopping_thread_commits(
    failure: BaseException | None, at_least_once: bool, exactly_once: bool
) -> None:
    alo = _strategy(AtLeastOnceCommit, _Collector(), _Consumer())
    eos = _strategy(ExactlyOnceCommit, _Collector(), _Consumer())
    assert alo.commits_on_stop(failure) is at_least_once
    assert eos.commits_on_stop(failure) is exactly_once
