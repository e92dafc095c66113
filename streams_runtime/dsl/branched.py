"""Splitting a stream into branches (Kafka Streams' KIP-418 ``BranchedKStream``,
``BranchedKStreamImpl`` and ``Branched``): ``stream.split()`` then ``branch(...)`` per predicate
and ``default_branch()`` or ``no_default_branch()``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from streams_runtime import processors as p
from streams_runtime.topology import TopologyError

if TYPE_CHECKING:
    from streams_runtime.dsl.stream import Stream

__all__ = ["Branched", "BranchedStream"]

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class Branched(Generic[K, V]):
    """How a branch is named and what is done with it (Kafka Streams' ``Branched``).

    ``name``: the branch's name after the split's (``Branched.as``); a branch without one is
    named by its position (from 1; the default branch 0). ``function``: the branch stream goes
    through it and the result (unless ``None``) is what the split's dictionary holds
    (``Branched.withFunction``). ``consumer``: the branch stream is handed to it and is left out
    of the dictionary (``Branched.withConsumer``)."""

    name: str | None = None
    function: Callable[[Stream[K, V]], Stream[Any, Any] | None] | None = None
    consumer: Callable[[Stream[K, V]], None] | None = None

    def __post_init__(self) -> None:
        if self.function is not None and self.consumer is not None:
            raise ValueError("a branch takes a function or a consumer, not both")

    @staticmethod
    def with_name(name: str) -> Branched[Any, Any]:
        """A branch named ``name`` (Kafka Streams' ``Branched.as``)."""
        return Branched(name=name)

    @staticmethod
    def with_function(
        function: Callable[[Stream[Any, Any]], Stream[Any, Any] | None], name: str | None = None
    ) -> Branched[Any, Any]:
        """The branch goes through ``function``; its result is the split's entry."""
        return Branched(name=name, function=function)

    @staticmethod
    def with_consumer(
        consumer: Callable[[Stream[Any, Any]], None], name: str | None = None
    ) -> Branched[Any, Any]:
        """The branch is handed to ``consumer``, and is not in the split's dictionary."""
        return Branched(name=name, consumer=consumer)


class BranchedStream(Generic[K, V]):
    """The branches of a split stream (Kafka Streams' ``BranchedKStream``): a record goes to
    the first branch whose predicate it satisfies, in the order the branches were added, and
    one satisfying none to the default branch, or nowhere without one. Each branch is a stream
    named ``<split name><branch name>`` (``<split name><position>`` without a branch name,
    positions from 1; the default branch's is 0), the key of the dictionary that
    :meth:`default_branch` and :meth:`no_default_branch` return. Branches keep the split
    stream's key, and need a repartition before a grouping or join when it did."""

    def __init__(self, stream: Stream[K, V], name: str | None) -> None:
        self._stream = stream
        self._predicates: list[Callable[[K, V], bool]] = []
        graph = stream._builder._graph
        self._name = name or graph.name("KSTREAM-BRANCH")
        predicates = self._predicates
        self._node = graph.add(
            "KSTREAM-BRANCH",
            lambda: p.BranchProcessor(predicates),
            [stream._node],
            name=self._name,
        )
        self._branches: dict[str, Stream[Any, Any]] = {}
        self._done = False

    def branch(
        self, predicate: Callable[[K, V], bool], branched: Branched[K, V] | None = None
    ) -> BranchedStream[K, V]:
        """A branch of the records satisfying ``predicate(key, value)`` and no earlier
        branch's predicate."""
        self._check_open()
        self._predicates.append(predicate)
        self._add(branched or Branched(), len(self._predicates))
        return self

    def default_branch(self, branched: Branched[K, V] | None = None) -> dict[str, Stream[Any, Any]]:
        """A last branch of the records no predicate took; every branch by name."""
        self._check_open()
        self._add(branched or Branched(), 0)
        self._done = True
        return self._branches

    def no_default_branch(self) -> dict[str, Stream[Any, Any]]:
        """Drop the records no predicate took; every branch by name."""
        self._check_open()
        self._done = True
        return self._branches

    def _check_open(self) -> None:
        if self._done:
            raise TopologyError(f"split {self._name!r} already ended with its default branch")

    def _add(self, branched: Branched[K, V], index: int) -> None:
        from streams_runtime.dsl.stream import Stream  # a stream view sits above a split

        source = self._stream
        name = f"{self._name}{index if branched.name is None else branched.name}"
        graph = source._builder._graph
        graph.name("KSTREAM-BRANCHCHILD")  # Kafka Streams takes a number for every branch
        node = graph.add("KSTREAM-BRANCHCHILD", p.PassThroughProcessor, [self._node], name=name)
        stream: Stream[K, V] = Stream(
            source._builder,
            node,
            source.key_serde,
            source.value_serde,
            key_changed=source._key_changed,
        )
        if branched.function is not None:
            result = branched.function(stream)
            if result is not None:
                self._branches[name] = result
        elif branched.consumer is not None:
            branched.consumer(stream)
        else:
            self._branches[name] = stream
