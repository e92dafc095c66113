"""The topology DSL: ``StreamsBuilder`` and the stream, grouped, windowed and table views.

Building a topology only records logical nodes in a
:class:`~streams_runtime.topology.TopologyBuilder`; :meth:`StreamsBuilder.build` splits them into
sub-topologies (connected parts between repartition topics), and every task instantiates its own
processors from them.

    builder = StreamsBuilder()
    (builder.stream("clicks", key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(SessionWindows.with_inactivity_gap(30_000))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "clicks": n}))
        .to("sessions"))

Tables (``builder.table(topic)``, and ``group_by_key()`` or ``Table.group_by(selector)`` followed
by ``count``, ``reduce`` or ``aggregate``) are materialised in changelog-backed key-value stores
and emit on change (KIP-557): an update with the same serialized value as stored and a strictly
newer timestamp is dropped and counted; see :func:`streams_runtime.processors.is_idempotent_update`.

Modules, each importing only those below it: ``builder`` (the entry point) > ``stream`` >
``branched`` (a split's branches) > ``joins`` > ``global_table`` (a ``GlobalTable``: no
operations, only joined and queried), and ``grouped`` > ``cogrouped`` > ``table`` >
``suppressed``
(``to_stream``, ``group_by``, ``to_table``, a split's branches and the joins import the views
above them when called).
"""

from streams_runtime.dsl.branched import Branched, BranchedStream
from streams_runtime.dsl.builder import StreamsBuilder
from streams_runtime.dsl.cogrouped import (
    CogroupedStream,
    SessionWindowedCogroupedStream,
    TimeWindowedCogroupedStream,
)
from streams_runtime.dsl.global_table import GlobalTable
from streams_runtime.dsl.grouped import (
    GroupedStream,
    GroupedTable,
    SessionWindowedStream,
    TimeWindowedStream,
)
from streams_runtime.dsl.stream import Stream
from streams_runtime.dsl.suppressed import (
    BufferConfig,
    Suppressed,
    until_time_limit,
    until_window_closes,
)
from streams_runtime.dsl.table import Table, WindowedTable

__all__ = [
    "Branched",
    "BranchedStream",
    "BufferConfig",
    "CogroupedStream",
    "GlobalTable",
    "GroupedStream",
    "GroupedTable",
    "SessionWindowedCogroupedStream",
    "SessionWindowedStream",
    "Stream",
    "StreamsBuilder",
    "Suppressed",
    "Table",
    "TimeWindowedCogroupedStream",
    "TimeWindowedStream",
    "WindowedTable",
    "until_time_limit",
    "until_window_closes",
]
