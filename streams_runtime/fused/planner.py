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
the task's order between the fused source's runs.

Where no such chain is, a source of one topic and the steps below it (those on values, and
``map`` and ``select_key``) become one node that runs them a batch at a time in Python
(:mod:`streams_runtime.fused.stateless_chain`), the parent of what follows them. A task has one
batch source: a sub-topology gets one fused node at most."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence

from streams_runtime.fused.stateless_chain import FusedStatelessChain
from streams_runtime.fused.window_aggregate import FusedWindowAggregate
from streams_runtime.operations import (
    ReadTopics,
    RunUserProcessor,
    StepOnKeysAndValues,
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
    """The rewrite that fuses, in each sub-topology, one chain: a windowed aggregation the
    native core runs, else a source's stateless steps; ``write_budget``: the bytes of unwritten
    changes after which an aggregation writes behind before the next commit (the record
    cache's budget: ``statestore_cache_max_bytes``)."""

    def rewrite(nodes: Sequence[Node], source_topics: tuple[str, ...]) -> Sequence[Node]:
        if any(isinstance(n.operation, RunUserProcessor) for n in nodes):
            return nodes
        for node in nodes:
            chain = _aggregation_chain(node)
            if chain is not None:
                return _replaced(nodes, chain, _window_aggregate(chain, write_budget))
        for node in nodes:
            steps = _steps_below(node)
            if len(steps) > 1:
                return _replaced(nodes, steps, _stateless_chain(steps))
        return nodes

    return rewrite


def _steps_below(source: Node) -> tuple[Node, ...]:
    """A source of one topic and the steps on values, keys or both below it, each the only
    child of the one before (the source alone when it has none; nothing when not a source)."""
    if not isinstance(source.operation, ReadTopics) or len(source.source_topics) != 1:
        return ()
    chain = [source]
    while isinstance(_only_child(chain[-1]).operation, StepOnValues | StepOnKeysAndValues):
        chain.append(_only_child(chain[-1]))
    return tuple(chain)


def _aggregation_chain(source: Node) -> tuple[Node, ...] | None:
    """The chain from ``source`` to a suppression: the source, its steps on values, the
    aggregation and the suppression; ``None`` when it cannot be fused."""
    chain = _steps_below(source)
    values_only = tuple(itertools.takewhile(lambda n: not _rekeys(n), chain))
    if not values_only:
        return None
    aggregate = _only_child(values_only[-1])
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
    return *values_only, aggregate, suppress


def _rekeys(node: Node) -> bool:
    return isinstance(node.operation, StepOnKeysAndValues)


def _only_child(node: Node) -> Node:
    """The node's child, when it has one only and is its only parent; else a node with no
    operation (which ends a chain)."""
    if len(node.children) == 1 and node.children[0].parents == [node]:
        return node.children[0]
    return _NO_NODE


_NO_NODE = Node("", PassThroughProcessor)


def _window_aggregate(chain: tuple[Node, ...], write_budget: int) -> Node:
    """The fused node of an aggregation chain (its links are set by :func:`_replaced`)."""
    source, *steps, aggregate, suppress = chain
    reads, counted, held = source.operation, aggregate.operation, suppress.operation
    step_factories = tuple(step.factory for step in steps)
    assert isinstance(reads, ReadTopics)
    assert isinstance(counted, WindowedAggregation)
    assert isinstance(held, SuppressUntilWindowCloses)
    kind = "session" if isinstance(counted.windows, SessionWindows) else "time-window"
    return dataclasses.replace(
        source,
        name=f"{source.name}-FUSED",
        factory=lambda: FusedWindowAggregate(
            reads, step_factories, counted, held, write_budget=write_budget
        ),
        # The operator keeps its state itself: its stores take no record cache.
        stores=tuple(
            dataclasses.replace(spec, cached=False)
            for spec in (*aggregate.stores, *suppress.stores)
        ),
        uses_stores=_stores_used(steps),
        fuses=tuple(member.name for member in chain),
        runs_as=f"native {kind} {counted.aggregation.kind}",
    )


def _stateless_chain(chain: tuple[Node, ...]) -> Node:
    """The fused node of a source and its stateless steps."""
    source, *steps = chain
    reads = source.operation
    assert isinstance(reads, ReadTopics)
    step_factories = tuple(step.factory for step in steps)
    return dataclasses.replace(
        source,
        name=f"{source.name}-FUSED",
        factory=lambda: FusedStatelessChain(reads, step_factories),
        uses_stores=_stores_used(steps),
        fuses=tuple(member.name for member in chain),
        runs_as="batched stateless steps",
    )


def _stores_used(steps: Sequence[Node]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(name for step in steps for name in step.uses_stores))


def _replaced(nodes: Sequence[Node], chain: tuple[Node, ...], fused: Node) -> list[Node]:
    """The sub-topology's nodes with ``chain`` as the one node ``fused``, copied: the
    builder's own nodes stay as they are (a topology may be built again, for another
    application or path). Only the chain's last node has children outside it."""
    copies: dict[int, Node] = {id(n): dataclasses.replace(n) for n in nodes if n not in chain}
    for member in chain:
        copies[id(member)] = fused
    for node in nodes:
        if node not in chain:
            copy = copies[id(node)]
            copy.parents = [copies[id(n)] for n in node.parents]
            copy.children = [copies[id(n)] for n in node.children]
    fused.parents = []
    fused.children = [copies[id(n)] for n in chain[-1].children]
    source = chain[0]
    return [copies[id(n)] for n in nodes if n is source or n not in chain]
