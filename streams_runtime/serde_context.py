"""Serdes that are told where their bytes go: the topic, whether they are a key or a value, and
the record's headers (Kafka Streams' ``Serializer.serialize(topic, headers, data)`` and
``Deserializer.deserialize(topic, headers, data)``). Schema Registry serdes need it: the subject
they register under and look up is named after the topic and the field
(:mod:`streams_runtime.serdes_registry`; docs/runtime/schema-registry.md).

A plain :class:`~streams_runtime.serdes.Serde` (``serialize(value)``, ``deserialize(data)``)
needs nothing of this and is called as it always was. A serde that wants the context subclasses
:class:`ContextualSerde`; the runtime binds it where the topology uses it, as Kafka Streams
hands each serializer its topic:

- at a source and a sink: the topic read or written (a repartition topic's full name,
  ``<application.id>-<name>-repartition``), with the record's headers;
- in a state store: the store's changelog topic, ``<application.id>-<store>-changelog``,
  whether or not the store logs (Kafka Streams' ``StateSerdes``), with no headers; interactive
  queries read the store with the same binding.

Bound to a topic and a field (:meth:`ContextualSerde.bind`), a contextual serde is a plain
one-argument serde (:class:`BoundSerde`), which is what state stores and queries call.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Literal, NamedTuple, TypeVar

from streams_runtime.record import Headers
from streams_runtime.serdes import ChangedSerde, Serde, SessionWindowedSerde, TimeWindowedSerde

__all__ = [
    "BoundSerde",
    "ContextualSerde",
    "Field",
    "SerdeContext",
    "UnboundSerdeError",
    "bind",
    "is_contextual",
    "is_registry_framed",
    "rebind",
]

T = TypeVar("T")

Field = Literal["key", "value"]
"""Which part of a record a serde makes (the values of confluent-kafka's ``MessageField``)."""


class SerdeContext(NamedTuple):
    """Where a serde's bytes are read from or written to."""

    topic: str
    field: Field
    headers: Headers | None = None
    """The record's headers at sources and sinks (a sink's serializer may add to them, and
    they are sent); ``None`` in state stores, as in Kafka Streams."""


class UnboundSerdeError(TypeError):
    """A :class:`ContextualSerde` called without a context: bind it to a topic and field first
    (:meth:`ContextualSerde.bind`). In a topology the runtime does."""


class ContextualSerde(ABC, Generic[T]):
    """A serde that is told the topic, the field and the headers of every call (Kafka Streams'
    ``serialize(topic, headers, data)``). Subclass it and implement :meth:`serialize_with` and
    :meth:`deserialize_with`; ``None`` should map to ``None``, and bytes or values it cannot
    convert should raise :class:`~streams_runtime.serdes.SerializationError` (the bad-record
    policy then applies). Anything else it raises is the runtime's failure, not the record's:
    a :class:`~streams_runtime.StreamsError` stops the application.

    Pass it wherever a serde is taken (``key_serde=``, ``value_serde=``, the builder's
    defaults): the runtime binds it per use. Called directly, outside a topology, bind it
    first: ``serde.bind("orders", "value").serialize(order)``."""

    registry_framed: ClassVar[bool] = False
    """Whether its bytes are Schema Registry-framed (magic byte 0, then a schema id): a reader's
    deserializer fails on anything else, so the runtime's ticks on a topic it keys have a null
    key (docs/design.md §2)."""

    @abstractmethod
    def serialize_with(self, value: T | None, context: SerdeContext) -> bytes | None:
        """Bytes for ``value`` written to ``context.topic`` as its ``context.field``."""

    @abstractmethod
    def deserialize_with(self, data: bytes | None, context: SerdeContext) -> T | None:
        """The value in ``data`` read from ``context.topic`` as its ``context.field``."""

    def bind(self, topic: str, field: Field) -> BoundSerde[T]:
        """This serde as a plain one-argument serde for ``field`` of ``topic``."""
        return BoundSerde(self, topic, field)

    def serialize(self, value: T | None) -> bytes | None:
        """Not without a context: raises :class:`UnboundSerdeError`."""
        raise UnboundSerdeError(f"{type(self).__name__} needs a topic: bind it first")

    def deserialize(self, data: bytes | None) -> T | None:
        """Not without a context: raises :class:`UnboundSerdeError`."""
        raise UnboundSerdeError(f"{type(self).__name__} needs a topic: bind it first")


class BoundSerde(Generic[T]):
    """A :class:`ContextualSerde` bound to one topic and field: a plain serde. ``headers``,
    where given, are passed on for that call. A topology binds a store's serdes before it knows
    the application id; ``topic`` is set when the topology is built."""

    __slots__ = ("_context", "field", "inner")

    def __init__(self, inner: ContextualSerde[T], topic: str | None, field: Field) -> None:
        self.inner = inner
        self.field: Field = field
        self._context = None if topic is None else SerdeContext(topic, field)

    @property
    def topic(self) -> str | None:
        """The topic it is bound to (``None``: not yet, its topology is not built)."""
        return None if self._context is None else self._context.topic

    def resolve(self, topic: str) -> None:
        """Bind to ``topic`` (once its name is known)."""
        self._context = SerdeContext(topic, self.field)

    def _in(self, headers: Headers | None) -> SerdeContext:
        context = self._context
        if context is None:
            raise UnboundSerdeError(
                f"{type(self.inner).__name__} ({self.field}) is used before its topology was built"
            )
        return context if headers is None else context._replace(headers=headers)

    def serialize(self, value: T | None, headers: Headers | None = None) -> bytes | None:
        return self.inner.serialize_with(value, self._in(headers))

    def deserialize(self, data: bytes | None, headers: Headers | None = None) -> T | None:
        return self.inner.deserialize_with(data, self._in(headers))


# Our serdes that wrap another (windowed keys, table changes): bound, their inner one is.
_WRAPPERS = (SessionWindowedSerde, TimeWindowedSerde, ChangedSerde)


def is_contextual(serde: object) -> bool:
    """Whether ``serde``'s bytes depend on where they go: a :class:`ContextualSerde`, one bound
    already, or one of the runtime's wrappers around either."""
    while isinstance(serde, _WRAPPERS):
        serde = serde.inner
    return isinstance(serde, ContextualSerde | BoundSerde)


def is_registry_framed(serde: object) -> bool:
    """Whether ``serde`` (bound or not, or inside one of the runtime's wrappers) writes Schema
    Registry-framed bytes (:attr:`ContextualSerde.registry_framed`)."""
    while isinstance(serde, (*_WRAPPERS, BoundSerde)):
        serde = serde.inner
    return isinstance(serde, ContextualSerde) and serde.registry_framed


def rebind(serde: Serde[T], bind_one: Callable[[ContextualSerde[Any]], Serde[Any]]) -> Serde[T]:
    """``serde`` with its :class:`ContextualSerde` replaced by ``bind_one(it)``: itself when it
    has none (plain, or bound already); one of the runtime's wrappers around one is copied
    around ``bind_one``'s."""
    if isinstance(serde, ContextualSerde):
        return bind_one(serde)
    if isinstance(serde, _WRAPPERS):
        inner: Serde[Any] = serde.inner
        rebound = rebind(inner, bind_one)
        if rebound is not inner:
            clone = copy.copy(serde)
            clone.inner = rebound
            return clone
    return serde


def bind(serde: Serde[T], context: SerdeContext) -> Serde[T]:
    """``serde`` in ``context``, as a plain serde (see :func:`rebind`)."""
    headers = context.headers

    def bind_one(contextual: ContextualSerde[Any]) -> Serde[Any]:
        bound = contextual.bind(context.topic, context.field)
        return bound if headers is None else _WithHeaders(bound, headers)

    return rebind(serde, bind_one)


class _WithHeaders(Generic[T]):
    """A bound serde with one call's headers (a wrapper's inner serde at a source or sink)."""

    __slots__ = ("bound", "headers")

    def __init__(self, bound: BoundSerde[T], headers: Headers) -> None:
        self.bound = bound
        self.headers = headers

    def serialize(self, value: T | None) -> bytes | None:
        return self.bound.serialize(value, self.headers)

    def deserialize(self, data: bytes | None) -> T | None:
        return self.bound.deserialize(data, self.headers)


def serialize_in(serde: Serde[Any], value: Any, context: SerdeContext) -> bytes | None:
    """``serde``'s bytes for ``value`` in ``context`` (a plain serde: its own)."""
    if isinstance(serde, ContextualSerde):
        return serde.serialize_with(value, context)
    if isinstance(serde, BoundSerde):
        return serde.serialize(value, context.headers)
    return bind(serde, context).serialize(value)


def deserialize_in(serde: Serde[Any], data: bytes | None, context: SerdeContext) -> Any:
    """``serde``'s value for ``data`` in ``context`` (a plain serde: its own)."""
    if isinstance(serde, ContextualSerde):
        return serde.deserialize_with(data, context)
    if isinstance(serde, BoundSerde):
        return serde.deserialize(data, context.headers)
    return bind(serde, context).deserialize(data)
