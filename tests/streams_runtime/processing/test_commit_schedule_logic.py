"""When the stream thread commits, as pure logic (no broker): the interval, "commit now" for
ticks, and the drained commit (once per drain after records were processed, at most once per
interval, never when idle); when an input counts as drained; the milestone log lines."""

from __future__ import annotations

import logging
import time

import pytest

from streams_runtime.processing.commit_schedule import CommitSchedule, input_drained
from streams_runtime.processing.milestones import Milestones, process_started_at
from streams_runtime.record import TopicPartitionId

A, B = TopicPartitionId("in", 0), TopicPartitionId("in", 1)


def test_the_interval_commit_comes_an_interval_after_the_last_commit() -> None:
    schedule = CommitSchedule(1.0, now=100.0)
    assert not schedule.due(100.9)
    assert schedule.due(101.0)
    schedule.committed(101.2)
    assert schedule.seconds_left(101.7) == pytest.approx(0.5)
    assert not schedule.due(102.1)
    assert schedule.due(102.2)


def test_commit_now_makes_the_next_commit_due_at_once_never_later() -> None:
    schedule = CommitSchedule(30.0, now=0.0)
    schedule.commit_now(5.0)
    assert schedule.due(5.0)
    schedule.committed(6.0)
    schedule.commit_now(40.0)  # already due then: stays due
    assert schedule.due(40.0)


def test_an_idle_thread_never_commits_early() -> None:
    schedule = CommitSchedule(60.0, now=0.0)
    schedule.processed(0)
    assert not schedule.drained_commit_due(1.0)


def test_a_drained_input_commits_once_after_records_were_processed() -> None:
    schedule = CommitSchedule(60.0, now=0.0)
    schedule.processed(1000)
    assert schedule.drained_commit_due(2.0)
    schedule.committed(2.1, drained=True)
    # Drained again with nothing processed since: no second commit.
    assert not schedule.drained_commit_due(2.2)
    assert not schedule.drained_commit_due(100.0)
    # The interval commit comes as usual, an interval after the drained one.
    assert not schedule.due(62.0)
    assert schedule.due(62.1)


def test_drained_commits_come_at_most_once_per_interval() -> None:
    """A thread keeping up with a live input drains after nearly every fetch."""
    schedule = CommitSchedule(1.0, now=0.0)
    schedule.processed(3)
    assert schedule.drained_commit_due(0.2)
    schedule.committed(0.2, drained=True)
    schedule.processed(2)
    assert not schedule.drained_commit_due(0.5)
    assert not schedule.drained_commit_due(1.19)
    assert schedule.drained_commit_due(1.2)


def test_an_interval_commit_leaves_nothing_for_a_drained_commit() -> None:
    schedule = CommitSchedule(1.0, now=0.0)
    schedule.processed(10)
    schedule.committed(1.0)  # the interval's commit took those records
    assert not schedule.drained_commit_due(1.1)
    schedule.processed(1)
    assert schedule.drained_commit_due(1.2)


def test_an_input_is_drained_when_every_partition_is_at_its_end_with_nothing_buffered() -> None:
    buffered = {A: 0, B: 0}
    lags: dict[TopicPartitionId, int | None] = {A: 0, B: 0}
    assert input_drained([A, B], buffered.__getitem__, lags.__getitem__)
    buffered[B] = 3  # fetched, not processed yet (e.g. a task idling for its other input)
    assert not input_drained([A, B], buffered.__getitem__, lags.__getitem__)
    buffered[B] = 0
    lags[A] = 12  # records on the broker not fetched yet
    assert not input_drained([A, B], buffered.__getitem__, lags.__getitem__)
    lags[A] = None  # no watermark yet: not known to be at the end
    assert not input_drained([A, B], buffered.__getitem__, lags.__getitem__)


def test_a_thread_without_input_partitions_is_never_drained() -> None:
    assert not input_drained([], lambda tp: 0, lambda tp: 0)


def test_the_process_started_before_the_runtime_was_imported() -> None:
    started = process_started_at()
    assert started <= time.time()
    assert time.time() - started < 24 * 3600  # a start time, not a boot time or an epoch


def test_milestones_log_the_first_record_once_and_the_first_drain_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="streams_runtime.processing.milestones")
    milestones = Milestones()
    milestones.processed(0, now=1.0)
    assert not caplog.records
    assert not milestones.undrained
    milestones.processed(5, now=2.0)
    milestones.processed(5, now=3.0)
    assert milestones.undrained
    milestones.drained(3.25, committed=True)
    assert not milestones.undrained
    milestones.processed(1, now=4.0)
    milestones.drained(4.5, committed=False)
    first, drained, again = caplog.records
    assert first.levelno == logging.INFO
    assert first.getMessage().startswith("first record processed")
    assert isinstance(first.args, dict)
    assert first.args["since_start_s"] >= 0
    assert drained.levelno == logging.INFO
    assert drained.getMessage() == (
        "input drained; committed, 0.25 s after its last record was processed"
    )
    assert drained.args == {"how": "; committed", "since_last_record_s": 0.25, "committed": True}
    # A live input drains again and again: later drains are debug lines.
    assert again.levelno == logging.DEBUG
    assert isinstance(again.args, dict)
    assert again.args["committed"] is False
