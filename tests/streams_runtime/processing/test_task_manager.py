"""The task manager's rebalance decisions against the real broker: a commit that fails while
partitions are revoked leaves no task running past output that may be lost."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition

from streams_runtime import StreamsBuilder
from streams_runtime.errors import BadRecordHandler, StreamsError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.collector import RecordCollector
from streams_runtime.processing.commit_strategy import AtLeastOnceCommit, CommitResult
from streams_runtime.processing.input_partitions import InputPartitions
from streams_runtime.processing.task_manager import TaskManager
from streams_runtime.record import TaskId
from streams_runtime.serdes import Json, String
from streams_runtime.settings import RuntimeSettings
from tests.helpers import unique_name, wait_for

pytestmark = pytest.mark.broker


class _FailingCommit(AtLeastOnceCommit):
    """At-least-once whose commits fail, as a delivery that failed would make them."""

    def commit(self, offsets: Sequence[TopicPartition]) -> CommitResult:
        raise StreamsError("a record could not be delivered: (test)")


@pytest.fixture
def manager_for(
    kafka_bootstrap: str, create_topic: Callable[..., str], tmp_path: Path
) -> Iterator[Callable[[bool], tuple[TaskManager, Consumer, str]]]:
    made: list[tuple[TaskManager, Consumer, RecordCollector]] = []

    def make(failing: bool) -> tuple[TaskManager, Consumer, str]:
        source, sink = create_topic("in", partitions=2), create_topic("out", partitions=2)
        builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
        builder.stream(source).to(sink)
        settings = RuntimeSettings(
            application_id=unique_name("manager"),
            bootstrap_servers=kafka_bootstrap,
            state_dir=tmp_path,
        )
        consumer = Consumer(
            {
                **settings.consumer_config(),
                "group.id": settings.application_id,
                "partition.assignment.strategy": "cooperative-sticky",
            }
        )
        metrics = RuntimeMetrics(settings.application_id)
        collector = RecordCollector(settings, "test", metrics, transactional=False)
        strategy = (_FailingCommit if failing else AtLeastOnceCommit)(collector, consumer)
        manager = TaskManager(
            builder.build(settings.application_id),
            settings,
            consumer,
            collector,
            strategy,
            InputPartitions(consumer),
            metrics=metrics,
            bad_records=BadRecordHandler(
                settings.bad_record_policy, "dlq", collector.send, metrics
            ),
            cooperative=True,
        )
        made.append((manager, consumer, collector))
        return manager, consumer, source

    yield make
    for manager, consumer, collector in made:
        manager.shutdown(None)
        consumer.close()
        collector.close()


def _started(manager: TaskManager) -> None:
    """Wait for the tasks' stores to restore and start the tasks (the stream thread's job)."""

    def started() -> bool:
        manager.finish_restores()
        return not manager.restoring_tasks

    wait_for(started, timeout_s=30, message="every task restored")


@pytest.mark.parametrize("failing", [False, True])
def test_a_failed_commit_on_revocation_restarts_every_task(
    failing: bool, manager_for: Callable[[bool], tuple[TaskManager, Consumer, str]]
) -> None:
    manager, consumer, source = manager_for(failing)
    both = [TopicPartition(source, 0), TopicPartition(source, 1)]
    manager.on_assign(consumer, both)
    _started(manager)
    consumer.consume(10, 1.0)  # fetching, as partitions are when a rebalance revokes some
    kept = manager.tasks[TaskId(0, 1)]
    manager.on_revoke(consumer, both[:1])
    _started(manager)
    assert set(manager.tasks) == {TaskId(0, 1)}
    # A commit that went through leaves the other task as it was; one that failed may have lost
    # that task's output too, so it starts again from the last commit.
    assert (manager.tasks[TaskId(0, 1)] is kept) is not failing
