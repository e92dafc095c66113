"""What some nodes of a topology do, recorded by the DSL as data (Kafka Streams' typed graph
nodes, ``StreamSourceNode``, ``StatefulProcessorNode`` ...): a node's factory makes its
processors, and its operation says what they compute, so that planning (the fused operators of
:mod:`streams_runtime.fused.planner`) reads a topology without making or opening a processor.

An aggregation is recorded as what was asked for (``count()``, ``sum()``, ``reduce(f)``,
``aggregate(...)``), never recognised afterwards from its functions."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from streams_runtime.serdes import Serde
from streams_runtime.windows import SessionWindows, SlidingWindows, TimeWindows

__all__ = [
    "Aggregation",
    "AggregationKind",
    "NodeOperation",
    "ReadTopics",
    "RunUserProcessor",
    "StepOnKeysAndValues",
    "StepOnValues",
    "SuppressUntilWindowCloses",
    "WindowedAggregation",
]

AggregationKind = Literal["count", "sum", "min", "max", "reduce", "aggregate"]


@dataclass(frozen=True)
class Aggregation:
    """One aggregation as the DSL was asked for it: its kind, and the functions the processor
    chain calls (``merger`` for session windows only; ``reducer``: a reduce's own, which
    ``aggregator`` and ``merger`` apply)."""

    kind: AggregationKind
    initializer: Callable[[], Any]
    aggregator: Callable[[Any, Any, Any], Any]
    merger: Callable[[Any, Any, Any], Any] | None = None
    reducer: Callable[[Any, Any], Any] | None = None


def reduce_kind(reducer: Callable[[Any, Any], Any]) -> AggregationKind:
    """What ``reduce(reducer)`` is: ``reduce(operator.add)``, ``reduce(min)`` and
    ``reduce(max)`` are documented to be ``sum()``, ``min()`` and ``max()``."""
    if reducer is operator.add:
        return "sum"
    if reducer is min:
        return "min"
    if reducer is max:
        return "max"
    return "reduce"


@dataclass(frozen=True)
class ReadTopics:
    """A source: its topics' records, deserialized with these serdes."""

    key_serde: Serde[Any]
    value_serde: Serde[Any]


@dataclass(frozen=True)
class WindowedAggregation:
    """A windowed aggregation into the session or window store ``store`` (its serdes as the
    store uses them)."""

    store: str
    windows: SessionWindows | TimeWindows | SlidingWindows
    key_serde: Serde[Any]
    value_serde: Serde[Any]
    aggregation: Aggregation


@dataclass(frozen=True)
class SuppressUntilWindowCloses:
    """A suppression holding every window's updates until it closes, in the key-value store
    ``store`` (its serdes as the store uses them)."""

    store: str
    key_serde: Serde[Any]
    value_serde: Serde[Any]


@dataclass(frozen=True)
class StepOnValues:
    """A step that gives each record on with its key, timestamp and headers, its value changed
    or not, or drops it: ``filter``, ``map_values``, ``peek``, a stream-table join. Its
    processor is a :class:`~streams_runtime.processors.ValueStep`, whose ``apply`` a fused
    operator calls in place of its ``process``."""

    kind: Literal["filter", "map_values", "peek", "table_join"]


@dataclass(frozen=True)
class StepOnKeysAndValues:
    """A step that gives each record on with its timestamp and headers, a new key and value:
    ``map``, ``select_key``. Its processor is a
    :class:`~streams_runtime.processors.MapProcessor`, whose ``apply_pair`` a fused chain calls
    in place of its ``process``."""

    kind: Literal["map", "select_key"]


@dataclass(frozen=True)
class RunUserProcessor:
    """A Processor API node: user code, whose punctuators may fire between any two records."""


NodeOperation = (
    ReadTopics
    | StepOnValues
    | StepOnKeysAndValues
    | WindowedAggregation
    | SuppressUntilWindowCloses
    | RunUserProcessor
)
