"""Progress: what the runtime's ticks promise, where each task's bound is kept, and the one place
ticks are written. Everything about bounds, holds, their commits and ticks lives in this package:

A tick on a partition of a repartition or output topic promises its readers that no record
anyone in this application still writes there is older than the tick (on in-order input; input
out of order stays as out of order as without ticks). Readers — the runtime's own repartition
consumers, Kafka Streams, Spark, Flink — take it as a watermark for the whole partition, and
every task of the upstream sub-topology may write every partition, on any instance, before or
after a failover, a pause or a restart. So:

- **A task's bound** per output topic is what its sinks promise (records they still send are at
  least this, :meth:`~streams_runtime.processors.SinkProcessor.progress`), and it is committed
  with the task's input offsets, in their commit metadata (:class:`TaskCommitMetadata`): under
  exactly-once inside the transaction, at-least-once after the outputs were flushed. Whoever
  owns the task next resumes from that commit, so it never writes below the bound; it restores
  the bound as a floor, so a task's committed bound never goes down.
- **A topic's promise** is the least committed bound over *every* task writing it
  (:func:`promise`), wherever the task runs: a task that is unowned, restoring or paused keeps
  its last committed bound, one that never committed one holds the topic back (as Flink's
  ``StatusWatermarkValve`` takes the minimum over input channels, Beam's output watermark the
  minimum over inputs and holds, and Timely Dataflow's frontier waits for every worker).
  :class:`CommittedBounds` reads the bounds back from the group's committed offsets on a thread
  of its own, so the stream thread never waits on the broker for them.
- **The one tick writer** (:class:`TickWriter`) ticks a partition just below its topic's promise
  when nothing this instance wrote there reached it, at most once per progress interval, and
  only the partitions it is responsible for (those whose writer task, chosen by partition number,
  it owns), so a cluster sends as many ticks as a single instance. Ticks are signed with the
  runtime's signing key when it has one (:class:`~progress_control.trust.ControlRecordSource`).

How far each processor moves or holds a bound is declared by the processor itself
(:attr:`~streams_runtime.processors.Processor.keeps_order`, failing closed) and read by the sinks
(:meth:`~streams_runtime.processors.SinkProcessor.progress`).

The modules, one job each:

- :mod:`~streams_runtime.progress.metadata`: a task's commit metadata (:class:`TaskCommitMetadata`)
  and how bounds from several commits merge;
- :mod:`~streams_runtime.progress.task_bounds`: one task's bounds (:class:`TaskBounds`): live from
  its sinks, floored by the restored commit, and its last committed ones;
- :mod:`~streams_runtime.progress.committed`: the writer tasks of each topic (:class:`WriterTasks`),
  their committed bounds read back from the group (:class:`CommittedBounds`), and :func:`promise`;
- :mod:`~streams_runtime.progress.ticks`: the tick writer (:class:`TickWriter`) and the stream
  thread's :class:`Progress`: these, and when to tick.
"""

from streams_runtime.progress.committed import CommittedBounds, WriterTasks, promise
from streams_runtime.progress.metadata import TaskCommitMetadata, merged_bounds
from streams_runtime.progress.task_bounds import TaskBounds
from streams_runtime.progress.ticks import Progress, TickWriter

__all__ = [
    "CommittedBounds",
    "Progress",
    "TaskBounds",
    "TaskCommitMetadata",
    "TickWriter",
    "WriterTasks",
    "merged_bounds",
    "promise",
]
