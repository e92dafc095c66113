"""The native core's topology rewrite (as Kafka Streams' ``InternalStreamsBuilder`` optimizes a
topology when it is built): every chain the native core has an operator for becomes one node,
so a task makes that operator as it makes any processor, and ``Topology.describe()`` shows it.

A chain is fused when it is a source whose only child is a windowed aggregation of any kind (a
count, sum, min or max natively; a reduce or an aggregate with the user's functions called
from the core), over session or time windows, whose only child is a suppression until each
window closes, with no other parent, and

- the sub-topology reads one topic (its tasks' batches are one partition's records in order);
- no node of the sub-topology runs user processors (their stream-time punctuators fire between
  records: the chain keeps them in step);
- the stores' serdes are plain (one aggregate's bytes are written to both stores; serdes that
  take their changelog's name, Schema Registry's, keep the chain)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from streams_runtime.fused.window_aggregate import FusedWindowAggregate
from streams_runtime.operations import (
    ReadTopics,
    RunUserProcessor,
    SuppressUntilWindowCloses,
    WindowedAggregation,
)
from streams_runtime.serde_context import is_contextual
from streams_runtime.topology import Node, SubtopologyRewrite
from streams_runtime.windows import SessionWindows, TimeWindows

__all__ = ["fuse_native_chains"]


def fuse_native_chains(write_budget: int) -> SubtopologyRewrite:
    """The rewrite that fuses every chain the native core runs; ``write_budget``: the bytes of
    unwritten changes after which an operator writes behind before the next commit (the record
    cache's budget: ``statestore_cache_max_bytes``)."""

    def rewrite(nodes: Sequence[Node], source_topics: tuple[str, ...]) -> Sequence[Node]:
        if len(source_topics) != 1 or any(isinstance(n.operation, RunUserProcessor) for n in nodes):
            return nodes
        for node in nodes:
            chain = _fusable_chain(node)
            if chain is not None:
                return _replaced(nodes, chain, write_budget)
        return nodes

    return rewrite


def _fusable_chain(source: Node) -> tuple[Node, Node, Node] | None:
    if not isinstance(source.operation, ReadTopics) or len(source.children) != 1:
        return None
    (aggregate,) = source.children
    counted = aggregate.operation
    if not (
        isinstance(counted, WindowedAggregation)
        and isinstance(counted.windows, SessionWindows | TimeWindows)
        and len(aggregate.children) == 1
    ):
        return None
    (suppress,) = aggregate.children
    held = suppress.operation
    if not isinstance(held, SuppressUntilWindowCloses) or suppress.parents != [aggregate]:
        return None
    stored = (counted.key_serde, counted.value_serde, held.key_serde, held.value_serde)
    if any(is_contextual(serde) for serde in stored):
        return None
    return source, aggregate, suppress


def _replaced(
    nodes: Sequence[Node], chain: tuple[Node, Node, Node], write_budget: int
) -> list[Node]:
    """The sub-topology's nodes with ``chain`` as one node, copied: the builder's own nodes stay
    as they are (a topology may be built again, for another application or path)."""
    source, aggregate, suppress = chain
    reads, counted, held = source.operation, aggregate.operation, suppress.operation
    assert isinstance(reads, ReadTopics)
    assert isinstance(counted, WindowedAggregation)
    assert isinstance(held, SuppressUntilWindowCloses)
    kind = "session" if isinstance(counted.windows, SessionWindows) else "time-window"
    fused = dataclasses.replace(
        source,
        name=f"{source.name}-FUSED",
        factory=lambda: FusedWindowAggregate(reads, counted, held, write_budget=write_budget),
        parents=[],
        children=[],
        # The operator keeps its state itself: its stores take no record cache.
        stores=tuple(
            dataclasses.replace(spec, cached=False)
            for spec in (*aggregate.stores, *suppress.stores)
        ),
        fuses=(source.name, aggregate.name, suppress.name),
        runs_as=f"native {kind} {counted.aggregation.kind}",
    )
    copies: dict[int, Node] = {id(n): dataclasses.replace(n) for n in nodes if n not in chain}
    for member in chain:
        copies[id(member)] = fused
    for node in nodes:  # no other node links to the source or the aggregation
        if node not in chain:
            copy = copies[id(node)]
            copy.parents = [copies[id(n)] for n in node.parents]
            copy.children = [copies[id(n)] for n in node.children]
    fused.children = [copies[id(n)] for n in suppress.children]
    return [copies[id(n)] for n in nodes if n not in (aggregate, suppress)]
