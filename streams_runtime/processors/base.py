"""Processors: the per-task instances of a topology's nodes.

Data flows through :meth:`Processor.process`; time flows through :meth:`Processor.advance`, which
a control record triggers at every processor reachable from its source. Time-driven processors
(session, time and sliding window aggregations, suppression) keep their own observed stream
time, the maximum timestamp of what reached them, as Kafka Streams' processors do.

**Progress** is what the runtime promises the readers of its outputs when it ticks them: on
in-order input, records a sink still sends are not older than :meth:`SinkProcessor.progress`.
It flows through the graph like data (docs/concepts/promise.md), not from the task's stream time:

- only forwarded data and input control records move it. A record a filter drops, or an
  aggregation drops as late or keyless, promises nothing downstream;
- each processor class declares how it moves progress (:attr:`Processor.keeps_order`), and one
  that declares nothing holds it: nothing after it is promised (fails closed);
- stateless and table processors keep their input's order, so the data a sink sends moves its
  progress, and control time passes through them (:meth:`Processor.control_progress`);
- a session aggregation stamps its output with session ends, which trail its input by up to
  ``gap + grace``, and holds progress back by as much; data after it is out of order and moves
  nothing. A suppression needs no hold of its own: what it still buffers ends after that bound;
- a time or sliding window aggregation stamps its output with the latest record of the window,
  never before the window's start, and holds progress back by ``size + grace`` (sliding:
  ``time difference + grace``): every window still open, or not yet emitted by a suppression,
  starts after that bound;
- a stream-stream join stamps joined results with the later of the two records, and a left or
  outer join emits unjoined records with their own timestamp once their window closed, up to
  ``max(before, after) + grace`` behind the stream time it last looked at; it holds progress
  back by as much (an inner join by nothing), and data after it moves nothing.

This module holds what every processor shares: the :class:`ProcessorContext` a task offers, the
:class:`Processor` base class, and :class:`KeyedStoreProcessor`, the base of those keeping
per-key state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, Protocol

from streams_runtime.record import Headers, Record
from streams_runtime.serdes import Serde
from streams_runtime.state import KeyValueStore, SessionStore, WindowStore

__all__ = [
    "NO_PROGRESS",
    "AggregateProcessor",
    "KeyedStoreProcessor",
    "Processor",
    "ProcessorContext",
    "Reducing",
    "ReducingMerger",
    "count_aggregator",
    "count_initializer",
    "count_merger",
    "reduce_initializer",
]


class ProcessorContext(Protocol):
    """What a task offers its processors."""

    @property
    def application_id(self) -> str: ...

    @property
    def stream_time(self) -> int: ...

    @property
    def partition(self) -> int:
        """The task's partition (of each of its inputs)."""
        ...

    def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        timestamp: int,
        headers: Headers | None,
        *,
        partition_key: bytes | None = None,
        partition: int = -1,
    ) -> None:
        """Send a record; ``partition`` (when not -1) is its partition, else ``partition_key``
        (when given) chooses it instead of ``key``, hashed the same way."""
        ...

    def kv_store(self, name: str) -> KeyValueStore: ...

    def session_store(self, name: str) -> SessionStore: ...

    def window_store(self, name: str) -> WindowStore: ...

    def record_dropped(self, processor: str, reason: str) -> None: ...

    def record_idempotent_skip(self, processor: str) -> None: ...

    def suppress_buffer_size(self, processor: str, size: int) -> None: ...


NO_PROGRESS = -1


# A count's functions (``count()`` of a windowed stream): an aggregation made of these is a
# count.
def count_initializer() -> int:
    return 0


def count_aggregator(_key: object, _value: object, total: int) -> int:
    return total + 1


def count_merger(_key: object, a: int, b: int) -> int:
    return a + b


def reduce_initializer() -> None:
    """A reduce's aggregate before its first value: none."""
    return None


class Reducing:
    """The aggregator of ``reduce(reducer)``: a key's (or window's) first value is its aggregate
    as it is, later ones are combined with ``reducer(aggregate, value)``."""

    __slots__ = ("reducer",)

    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        self.reducer = reducer

    def __call__(self, _key: object, value: Any, aggregate: Any) -> Any:
        return value if aggregate is None else self.reducer(aggregate, value)


class ReducingMerger:
    """The session merger of ``reduce(reducer)``: ``reducer(a, b)``, or whichever is not
    ``None``."""

    __slots__ = ("reducer",)

    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        self.reducer = reducer

    def __call__(self, _key: object, a: Any, b: Any) -> Any:
        if a is None:
            return b
        return a if b is None else self.reducer(a, b)


class Processor:
    """Base processor: forwards records and time to its children.

    Every processor class says how it moves progress (:attr:`keeps_order`); one that does not
    holds it: nothing downstream of it is promised until it says (fails closed)."""

    name = "processor"
    keeps_order: ClassVar[bool | None] = None
    """How this processor moves progress, declared by the class that implements its behaviour:

    - ``True``: it forwards what it takes in the order it took it, and passes control time on
      (stateless, table and suppression processors);
    - ``False``: what it forwards may run behind its input (windows stamped behind it, joined
      and unjoined records), so data after it promises nothing and it says itself how far it
      holds control time back, by overriding :meth:`control_progress` from
      :meth:`parents_progress`;
    - ``None``, undeclared (bases meant for subclassing, and any processor that forgets): as
      ``False`` with nothing passed on: progress stops here."""

    def __init__(self) -> None:
        self.children: list[Processor] = []
        self.parents: list[Processor] = []
        self.node_name = self.name
        """The topology node this instance is (its generated or given name)."""

    def init(self, context: ProcessorContext) -> None:
        """Called once per task before the first record, after state was restored."""

    def close(self) -> None:
        """Called once when the task closes."""

    def process(self, record: Record[Any, Any]) -> None:
        self.forward(record)

    def forward(self, record: Record[Any, Any]) -> None:
        for child in self.children:
            child.process(record)

    def advance(self, timestamp: int) -> None:
        """Time passed to ``timestamp`` without data (a control record)."""
        for child in self.children:
            child.advance(timestamp)

    def control_progress(self) -> int:
        """The progress this processor passes on without data (:data:`NO_PROGRESS` when none):
        what its parents pass on when it keeps their order (:attr:`keeps_order`), else nothing
        unless its class says how far it holds it back."""
        return self.parents_progress() if self.keeps_order else NO_PROGRESS

    def parents_progress(self) -> int:
        """The control time that reached this processor, held back by every aggregation on the
        way (:data:`NO_PROGRESS` when none). Several parents are one time-ordered stream (the
        task takes records in timestamp order), so the largest counts, as for Kafka Streams'
        stream time."""
        return max((parent.control_progress() for parent in self.parents), default=NO_PROGRESS)

    def flush(self) -> None:
        """Called before every commit."""


class KeyedStoreProcessor(Processor):
    """A processor keeping per-key state in the store ``store_name``: records with a null key
    have no place in it and are dropped and counted (reason ``null-key``)."""

    def __init__(self, store_name: str, key_serde: Serde[Any]) -> None:
        super().__init__()
        self._store_name = store_name
        self._key_serde = key_serde
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context

    def _store_key(self, record: Record[Any, Any]) -> bytes | None:
        """The record's serialized key, or ``None`` (counted) when it has none."""
        if record.key is None:
            assert self._context is not None
            self._context.record_dropped(self._store_name, "null-key")
            return None
        return self._key_serde.serialize(record.key) or b""


class AggregateProcessor(KeyedStoreProcessor):
    """A per-key aggregation: ``aggregator(key, value, aggregate)`` folds each record into an
    aggregate that starts as ``initializer()``, stored with ``value_serde``."""

    def __init__(
        self,
        store_name: str,
        key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
    ) -> None:
        super().__init__(store_name, key_serde)
        self._value_serde = value_serde
        self._initializer = initializer
        self._aggregator = aggregator
