"""How each processor moves progress is declared, and a processor that declares nothing holds it
(issue 41: a new aggregation that forgets to say must promise nothing rather than too much).
Pure logic, no broker."""

from __future__ import annotations

import importlib
import pkgutil

import streams_runtime
from streams_runtime.processor.node import UserProcessorNode
from streams_runtime.processors import (
    NO_PROGRESS,
    MapValuesProcessor,
    Processor,
    SinkProcessor,
    SourceProcessor,
)
from streams_runtime.processors.base import AggregateProcessor, KeyedStoreProcessor
from streams_runtime.serdes import String

# Bases meant for subclassing: they declare nothing, so their subclasses must.
_BASES = {KeyedStoreProcessor, AggregateProcessor, UserProcessorNode}


def _runtime_processor_classes() -> set[type[Processor]]:
    for module in pkgutil.walk_packages(streams_runtime.__path__, "streams_runtime."):
        importlib.import_module(module.name)
    found: set[type[Processor]] = set()
    stack: list[type[Processor]] = [Processor]
    while stack:
        for subclass in stack.pop().__subclasses__():
            if subclass not in found and subclass.__module__.startswith("streams_runtime."):
                found.add(subclass)
                stack.append(subclass)
    return found


def test_every_processor_of_the_runtime_declares_how_it_moves_progress() -> None:
    classes = _runtime_processor_classes() - _BASES
    assert len(classes) >= 20  # the walk found them
    undeclared = sorted(c.__qualname__ for c in classes if c.keeps_order is None)
    assert not undeclared, f"declare keeps_order on {undeclared}"
    # One whose output may run behind its input says how far it holds control time back.
    silent = sorted(
        c.__qualname__
        for c in classes
        if c.keeps_order is False and c.control_progress is Processor.control_progress
    )
    assert not silent, f"override control_progress on {silent}"
    for base in _BASES:
        assert base.keeps_order is None, base


def _chain(middle: Processor) -> tuple[SourceProcessor, SinkProcessor]:
    source = SourceProcessor(String(), String())
    sink = SinkProcessor("out", String(), String())
    for parent, child in ((source, middle), (middle, sink)):
        parent.children.append(child)
        child.parents.append(parent)
    return source, sink


class _Forgetful(AggregateProcessor):
    """A new aggregation that declares nothing."""


def test_a_processor_that_declares_nothing_holds_progress() -> None:
    forgetful = _Forgetful(
        "store", String(), String(), initializer=lambda: 0, aggregator=lambda k, v, a: a
    )
    source, sink = _chain(forgetful)
    source.advance(100)
    assert sink.progress() == NO_PROGRESS
    # The same chain through a processor that keeps order passes control time on.
    source, sink = _chain(MapValuesProcessor(lambda value: value))
    source.advance(100)
    assert sink.progress() == 100
