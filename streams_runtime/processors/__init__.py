"""Processors: the per-task instances of a topology's nodes, one module per kind.

- :mod:`~streams_runtime.processors.base`: the processor base class, the context a task offers,
  and how **progress** flows through the graph (read this first);
- :mod:`~streams_runtime.processors.stateless`: source, sink, and the stateless transforms
  (flat maps and the branches of ``split`` among them);
- :mod:`~streams_runtime.processors.tables`: tables, emit-on-change and the stream-table join;
  :mod:`~streams_runtime.processors.grouped_tables`: a table regrouped and aggregated;
- :mod:`~streams_runtime.processors.windowed_aggregate`: what every windowed aggregation shares
  (observed stream time, progress hold), and :mod:`~streams_runtime.processors.retention`
  the purge of expired windows they and the joins use;
- :mod:`~streams_runtime.processors.sessions`: session-window aggregation and suppression;
  :mod:`~streams_runtime.processors.suppression`: a table's suppression until a time limit;
- :mod:`~streams_runtime.processors.time_windows`: time- and sliding-window aggregation;
- :mod:`~streams_runtime.processors.joins`: windowed stream-stream joins;
- :mod:`~streams_runtime.processors.cogroup`: the merge of a cogrouped aggregation's inputs;
- :mod:`~streams_runtime.processors.table_joins`: table-table joins on the key, and
  :mod:`~streams_runtime.processors.fk_join` on a foreign key (KIP-213).
"""

from streams_runtime.processors.base import (
    NO_PROGRESS,
    KeyedStoreProcessor,
    Processor,
    ProcessorContext,
    Reducing,
    ReducingMerger,
    count_aggregator,
    count_initializer,
    count_merger,
    reduce_initializer,
)
from streams_runtime.processors.cogroup import CogroupMergeProcessor
from streams_runtime.processors.fk_join import (
    ForeignTableJoinProcessor,
    ResponseJoinProcessor,
    ResponseMergeProcessor,
    ResponseSerde,
    SubscriptionJoinProcessor,
    SubscriptionReceiveProcessor,
    SubscriptionSendProcessor,
    SubscriptionSerde,
)
from streams_runtime.processors.grouped_tables import (
    TableChangeAggregateProcessor,
    TableRepartitionMapProcessor,
)
from streams_runtime.processors.joins import JoinState, StreamStreamJoinProcessor
from streams_runtime.processors.sessions import SessionAggregateProcessor, SuppressProcessor
from streams_runtime.processors.stateless import (
    DROPPED,
    BatchSourceProcessor,
    BranchProcessor,
    FilterProcessor,
    FlatMapProcessor,
    FlatMapValuesProcessor,
    MapProcessor,
    MapValuesProcessor,
    OnBadRecord,
    PassThroughProcessor,
    PeekProcessor,
    SinkProcessor,
    SourceProcessor,
    ValueStep,
)
from streams_runtime.processors.suppression import TimeLimitSuppressProcessor
from streams_runtime.processors.table_joins import (
    JoinKind,
    TableJoinMergeProcessor,
    TableReader,
    TableTableJoinProcessor,
)
from streams_runtime.processors.tables import (
    StreamTableJoinProcessor,
    TableAggregateProcessor,
    TableFilterProcessor,
    TableMapValuesProcessor,
    TableSourceProcessor,
    TimestampedTableStore,
    is_idempotent_update,
)
from streams_runtime.processors.time_windows import (
    SlidingWindowAggregateProcessor,
    TimeWindowAggregateProcessor,
)

__all__ = [
    "DROPPED",
    "NO_PROGRESS",
    "BatchSourceProcessor",
    "BranchProcessor",
    "CogroupMergeProcessor",
    "FilterProcessor",
    "FlatMapProcessor",
    "FlatMapValuesProcessor",
    "ForeignTableJoinProcessor",
    "JoinKind",
    "JoinState",
    "KeyedStoreProcessor",
    "MapProcessor",
    "MapValuesProcessor",
    "OnBadRecord",
    "PassThroughProcessor",
    "PeekProcessor",
    "Processor",
    "ProcessorContext",
    "Reducing",
    "ReducingMerger",
    "ResponseJoinProcessor",
    "ResponseMergeProcessor",
    "ResponseSerde",
    "SessionAggregateProcessor",
    "SinkProcessor",
    "SlidingWindowAggregateProcessor",
    "SourceProcessor",
    "StreamStreamJoinProcessor",
    "StreamTableJoinProcessor",
    "SubscriptionJoinProcessor",
    "SubscriptionReceiveProcessor",
    "SubscriptionSendProcessor",
    "SubscriptionSerde",
    "SuppressProcessor",
    "TableAggregateProcessor",
    "TableChangeAggregateProcessor",
    "TableFilterProcessor",
    "TableJoinMergeProcessor",
    "TableMapValuesProcessor",
    "TableReader",
    "TableRepartitionMapProcessor",
    "TableSourceProcessor",
    "TableTableJoinProcessor",
    "TimeLimitSuppressProcessor",
    "TimeWindowAggregateProcessor",
    "TimestampedTableStore",
    "ValueStep",
    "count_aggregator",
    "count_initializer",
    "count_merger",
    "is_idempotent_update",
    "reduce_initializer",
]
