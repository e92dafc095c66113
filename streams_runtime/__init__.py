"""A Kafka Streams-style stream-processing runtime on confluent-kafka that consumes control
records: stream time keeps moving on idle inputs, so session windows close and suppressed
results come out without new data.

    from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
    from streams_runtime.serdes import Json, String
"""

from streams_runtime.app import App
from streams_runtime.app_state import AppState
from streams_runtime.cluster.membership import LagInfo
from streams_runtime.dsl import (
    Branched,
    BranchedStream,
    BufferConfig,
    CogroupedStream,
    GlobalTable,
    GroupedStream,
    GroupedTable,
    SessionWindowedCogroupedStream,
    SessionWindowedStream,
    Stream,
    StreamsBuilder,
    Suppressed,
    Table,
    TimeWindowedCogroupedStream,
    TimeWindowedStream,
    WindowedTable,
    until_time_limit,
    until_window_closes,
)
from streams_runtime.errors import BadRecordError, StreamsError
from streams_runtime.queries.results import KeyQueryMetadata, QueryResult
from streams_runtime.record import Record
from streams_runtime.settings import (
    BadRecordPolicy,
    ProcessingGuarantee,
    RuntimeSettings,
    StateEngine,
)
from streams_runtime.topology import Topology, TopologyError
from streams_runtime.windowed import Windowed
from streams_runtime.windows import JoinWindows, SessionWindows, SlidingWindows, TimeWindows

__all__ = [
    "App",
    "AppState",
    "BadRecordError",
    "BadRecordPolicy",
    "Branched",
    "BranchedStream",
    "BufferConfig",
    "CogroupedStream",
    "GlobalTable",
    "GroupedStream",
    "GroupedTable",
    "JoinWindows",
    "KeyQueryMetadata",
    "LagInfo",
    "ProcessingGuarantee",
    "QueryResult",
    "Record",
    "RuntimeSettings",
    "SessionWindowedCogroupedStream",
    "SessionWindowedStream",
    "SessionWindows",
    "SlidingWindows",
    "StateEngine",
    "Stream",
    "StreamsBuilder",
    "StreamsError",
    "Suppressed",
    "Table",
    "TimeWindowedCogroupedStream",
    "TimeWindowedStream",
    "TimeWindows",
    "Topology",
    "TopologyError",
    "Windowed",
    "WindowedTable",
    "until_time_limit",
    "until_window_closes",
]
