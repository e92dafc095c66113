"""Processing: the poll loop, the tasks it runs and what they produce (internal; Kafka Streams'
``processor/internals``), one job per module:

- ``stream_thread``: the poll loop (``StreamThread``): back-pressure, when to tick and when to
  commit;
- ``record_router``: fetched records to their tasks, control records checked
  (``StreamThread.addRecordsToTasks``);
- ``commit_schedule``: when the thread commits (``StreamThread.maybeCommit``);
- ``milestones``: the fixed cost per run, as log lines (first record processed, input drained);
- ``task_manager``: the tasks of one thread (``TaskManager``), created, closed and committed;
- ``task``: one task (``StreamTask``), its processors and state;
- ``partition_group``: a task's input queues and record choice with KIP-695 idling
  (``RecordQueue``, ``PartitionGroup``);
- ``input_partitions``: the consumer's assigned and paused partitions, shared by the thread and
  its task manager;
- ``state_updater``: restoration beside the poll loop (``StateUpdater``);
- ``collector``: the producer of outputs, repartition records, changelogs and ticks
  (``RecordCollectorImpl``);
- ``commit_strategy``: at-least-once or exactly-once, decided in one place;
- ``internal_topics``: creating and checking repartition, changelog and membership topics
  (``InternalTopicManager``);
- ``repartition_purge``: deleting committed repartition records (KIP-284).

Nothing here is public API: :class:`streams_runtime.App` runs it.
"""

__all__: list[str] = []
