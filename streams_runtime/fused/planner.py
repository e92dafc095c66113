"""The native core's topology rewrite (as Kafka Streams' ``InternalStreamsBuilder`` optimizes a
topology when it is built): every chain the native core has an operator for becomes one node,
so a task makes that operator as it makes any processor, and ``Topology.describe()`` shows it.

A chain is fused when it is a source of one topic, then any number of steps on values
(``filter``, ``map_values``, ``peek``, a stream-table join: each the only child of the one
before), then a windowed aggregation of any kind (a count, sum, min or max natively; a reduce or
an aggregate with the user's functions called from the core) over session or time windows,
whose only child is a suppression until each window closes, with no other parent, and

- no node of the sub-topology runs user processors (their stream-time punctuators fire between
  records: the chain keeps them in step);
- the stores' serdes are plain (one aggregate's bytes are written to both stores; serdes that
  take their changelog's name, Schema Registry's, keep the chain).

The sub-topology may read other topics (a joined table's): their records stay on the chain, in
the task's order between the fused source's runs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from streams_runtime.fused.window_aggregate import FusedWindowAggregate
from streams_runtime.operations import (
    ReadTopics,
    RunUserProcessor,
    StepOnValues,
    SuppressUntilWindowCloses,
    WindowedAggregation,
)
from streams_runtime.processors import PassThroughProcessor
from streams_runtime.serde_context import is_contextual
from streams_runtime.topology import Node, SubtopologyRewrite
from streams_runtime.windows import SessionWindows, TimeWindows

__all__ = ["fuse_native_chains"]


def fuse_native_chains(write_budget: int) -> SubtopologyRewrite:
    """The rewrite that fuses every chain the native core runs; ``write_budget``: the bytes of
    unwritten changes after which an operator writes behind before the next commit (the record
    cache's budget: ``statestore_cache_max_bytes``)."""

    def rewrite(nodes: Sequence[Node], source_topics: tuple[str, ...]) -> Sequence[Node]:
        if any(isinstance(n.operation, RunUserProcessor) for n in nodes):
            return nodes
        for node in nodes:
            chain = _fusable_chain(node)
            if chain is not None:
                return _replaced(nodes, chain, write_budget)
        return nodes

    return rewrite


def _fusable_chain(source: Node) -> tuple[Node, ...] | None:
    """The chain from ``source`` to a suppression: the source, its steps, the aggregation and
    the suppression; ``None`` when it cannot be fused."""
    if not isinstance(source.operation, ReadTopics) or len(source.source_topics) != 1:
        return None
    chain = [source]
    while isinstance(_only_child(chain[-1]).operation, StepOnValues):
        chain.append(_only_child(chain[-1]))
    aggregate = _only_child(chain[-1])
    suppress = _only_child(aggregate)
    counted, held = aggregate.operation, suppress.operation
    if not (
        isinstance(counted, WindowedAggregation)
        and isinstance(counted.windows, SessionWindows | TimeWindows)
        and isinstance(held, SuppressUntilWindowCloses)
    ):
        return None
    stored = (counted.key_serde, counted.value_serde, held.key_serde, held.value_serde)
    if any(is_contextual(serde) for serde in stored):
        return None
    return *chain, aggregate, suppress


def _only_child(node: Node) -> Node:
    """The node's child, when it has one only and is its only parent; else a node with no
    operation (which ends a chain)."""
    if len(node.children) == 1 and node.children[0].parents == [node]:
        return node.children[0]
    return _NO_NODE


_NO_NODE = Node("", PassThroughProcessor)


def _replaced(nodes: Sequence[Node], chain: tuple[Node, ...], write_budget: int) -> list[Node]:
    """The sub-topology's nodes with ``chain`` as one node, copied: the builder's own nodes stay
    as they are (a topology may be built again, for another application or path)."""
    source, *steps, aggregate, suppress = chain
    reads, counted, held = source.operation, aggregate.operation, suppress.operation
    step_factories = tuple(step.factory for step in steps)
    assert isinstance(reads, ReadTopics)
    assert isinstance(counted, WindowedAggregation)
    assert isinstance(held, SuppressUntilWindowCloses)
    kind = "session" if isinstance(counted.windows, SessionWindows) else "time-window"
    fused = dataclasses.replace(
        source,
        name=f"{source.name}-FUSED",
        factory=lambda: FusedWindowAggregate(
            reads, step_factories, counted, held, write_budget=write_budget
        ),
        parents=[],
        children=[],
        # The operator keeps its state itself: its stores take no record cache.
        stores=tuple(
            dataclasses.replace(spec, cached=False)
            for spec in (*aggregate.stores, *suppress.stores)
        ),
        uses_stores=tuple(dict.fromkeys(name for step in steps for name in step.uses_stores)),
        fuses=tuple(member.name for member in chain),
        runs_as=f"native {kind} {counted.aggregation.kind}",
    )
    copies: dict[int, Node] = {id(n): dataclasses.replace(n) for n in nodes if n not in chain}
    for member in chain:
        copies[id(member)] = fused
    for node in nodes:  # no other node links to the chain but below the suppression
        if node not in chain:
            copy = copies[id(node)]
            copy.parents = [copies[id(n)] for n in node.parents]
            copy.children = [copies[id(n)] for n in node.children]
    fused.children = [copies[id(n)] for n in suppress.children]
    return [copies[id(n)] for n in nodes if n is source or n not in chain]
