"""Foreign-key table joins, KIP-213 (Kafka Streams' ``SubscriptionSendProcessorSupplier``,
``SubscriptionReceiveProcessorSupplier``, ``SubscriptionJoinProcessorSupplier``,
``ForeignTableJoinProcessorSupplier``, ``ResponseJoinProcessorSupplier`` and the
``SubscriptionWrapper``/``SubscriptionResponseWrapper`` they exchange).

This table (keys ``K``) joins the other table (keys ``KO``) on ``foreign_key_extractor(value)``;
the two need not be co-partitioned. Each update of this table sends a :class:`Subscription` to
the subscription registration topic, keyed by the foreign key: in the other table's task it is
kept (or removed) in the subscription store under (foreign key, primary key), and answered with
a :class:`Response` carrying the other table's current row for that foreign key. Each update of
the other table answers every subscription of its key the same way. Responses go back through
the subscription response topic, keyed by the primary key, to this table's task, which joins
them with this table's current row.

**Stale responses.** A subscription carries a 128-bit hash of the value that sent it (BLAKE2b,
16-byte digest, of the value's bytes under this table's value serde; Kafka Streams uses
MurmurHash3 x64-128: the hash never leaves the application, so any stable one does), and so does
its response. A response whose hash is not the hash of this table's current row answers a value
that was replaced meanwhile, and is dropped (counted, reason ``stale-response``): responses may
arrive out of order, and a value whose foreign key changed has its old subscription removed and
its old result replaced, as Kafka Streams does (see :func:`subscription_instructions`).

**Progress** (fails closed on data, passes ticks). Subscriptions are sent in order, stamped
with the update that sent them. A subscription comes through a topic, behind the other table's
own updates: :class:`SubscriptionJoinProcessor` stamps its answer with the later of its own and
the joined row's timestamp, possibly ahead of what comes next. The other table's task answers
from two inputs, one behind the other, merged by :class:`ResponseMergeProcessor`, which passes on
only the control time both inputs passed (the least): ticks on the response topic never run
ahead of a subscription still on its way. So answers, and the results
:class:`ResponseJoinProcessor` makes of them, are not in timestamp order even on in-order input:
these three declare ``keeps_order = False`` (data after them promises nothing), and since none
stamps anything below its input, each passes its inputs' control time on (the merge the
least of its two).
"""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from streams_runtime.processors.base import NO_PROGRESS, Processor, ProcessorContext
from streams_runtime.processors.table_joins import TableReader
from streams_runtime.record import Record
from streams_runtime.serdes import Serde, SerializationError, ValueAndTimestamp
from streams_runtime.state import KeyValueStore

__all__ = [
    "ForeignTableJoinProcessor",
    "Instruction",
    "Response",
    "ResponseJoinProcessor",
    "ResponseMergeProcessor",
    "ResponseSerde",
    "Subscription",
    "SubscriptionJoinProcessor",
    "SubscriptionReceiveProcessor",
    "SubscriptionSendProcessor",
    "SubscriptionSerde",
    "combined_key",
    "subscription_instructions",
    "value_hash",
]

_VERSION = 0
_HEADER = struct.Struct(">BBB")  # version, instruction (or flags), hash length (0 or 16)
_LENGTH = struct.Struct(">i")


class Instruction(enum.IntEnum):
    """What a subscription asks of the other table's task (Kafka Streams'
    ``SubscriptionWrapper.Instruction``)."""

    DELETE_KEY_NO_PROPAGATE = 0
    """Remove the subscription (the foreign key changed); answer nothing."""
    DELETE_KEY_AND_PROPAGATE = 1
    """Remove the subscription and answer with no row (the row was deleted)."""
    PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE = 2
    """Keep the subscription and answer, with no row when the foreign key has none."""
    PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE = 3
    """Keep the subscription; answer only when the foreign key has a row."""


def value_hash(serialized: bytes | None) -> bytes | None:
    """The 128-bit hash a subscription carries of the value that sent it (``None`` for a
    delete): BLAKE2b with a 16-byte digest."""
    return None if serialized is None else hashlib.blake2b(serialized, digest_size=16).digest()


@dataclass(frozen=True)
class Subscription:
    """A subscription (``SubscriptionWrapper``): the sending value's hash, the instruction, the
    primary key and the partition of the task that sent it, where its answers go back (as in
    Kafka Streams: the primary table's topic need not be partitioned by murmur2)."""

    hash: bytes | None
    instruction: Instruction
    primary_key: Any
    primary_partition: int = -1


@dataclass(frozen=True)
class Response:
    """An answer (``SubscriptionResponseWrapper``): the subscription's hash and the other
    table's row for its foreign key (``None``: none); ``primary_partition``, the partition it
    goes back to, only chooses the partition (not written)."""

    hash: bytes | None
    foreign_value: Any
    primary_partition: int = field(default=-1, compare=False)


def response_partition(record: Record[Any, Response]) -> int:
    """The partition an answer goes back to: its subscription's task's."""
    return record.value.primary_partition


def _header(first: int, digest: bytes | None) -> bytes:
    return _HEADER.pack(_VERSION, first, 0 if digest is None else len(digest)) + (digest or b"")


def _split(data: bytes) -> tuple[int, bytes | None, bytes]:
    """(instruction or flags, hash, rest) of a wrapper's bytes."""
    version, first, length = _HEADER.unpack_from(data)
    if version != _VERSION:
        raise SerializationError(f"a foreign-key join wrapper of unknown version {version}")
    start = _HEADER.size
    digest = data[start : start + length] if length else None
    return first, digest, data[start + length :]


class SubscriptionSerde:
    """A :class:`Subscription` on the subscription registration topic and in the subscription
    store: version, instruction, hash length and hash, the primary partition (4 bytes), then the
    primary key under ``key_serde``."""

    def __init__(self, key_serde: Serde[Any]) -> None:
        self.key_serde = key_serde

    def serialize(self, value: Subscription | None) -> bytes | None:
        if value is None:
            return None
        key = self.key_serde.serialize(value.primary_key) or b""
        head = _header(int(value.instruction), value.hash)
        return head + _LENGTH.pack(value.primary_partition) + key

    def deserialize(self, data: bytes | None) -> Subscription | None:
        if data is None:
            return None
        instruction, digest, rest = _split(data)
        (partition,) = _LENGTH.unpack_from(rest)
        key = self.key_serde.deserialize(rest[_LENGTH.size :])
        return Subscription(digest, Instruction(instruction), key, partition)


class ResponseSerde:
    """A :class:`Response` on the subscription response topic: version, a flag (1: a row
    follows), hash length and hash, then the row under ``value_serde``."""

    def __init__(self, value_serde: Serde[Any]) -> None:
        self.value_serde = value_serde

    def serialize(self, value: Response | None) -> bytes | None:
        if value is None:
            return None
        row = (
            None if value.foreign_value is None else self.value_serde.serialize(value.foreign_value)
        )
        return _header(0 if row is None else 1, value.hash) + (row or b"")

    def deserialize(self, data: bytes | None) -> Response | None:
        if data is None:
            return None
        flags, digest, rest = _split(data)
        return Response(digest, self.value_serde.deserialize(rest) if flags & 1 else None)


def combined_key(foreign_key: bytes, primary_key: bytes) -> bytes:
    """The subscription store's key (Kafka Streams' ``CombinedKeySchema``): the foreign key's
    length (4 bytes), the foreign key, then the primary key; a foreign key's subscriptions are
    the keys starting with the first two."""
    return _LENGTH.pack(len(foreign_key)) + foreign_key + primary_key


def subscription_instructions(
    old_key: bytes | None, new_key: bytes | None, *, has_old: bool, has_new: bool, left: bool
) -> list[tuple[bytes | None, Instruction]]:
    """The subscriptions an update of this table sends, as (serialized foreign key,
    instruction), in order (``SubscriptionSendProcessorSupplier``): ``old_key``/``new_key`` are
    the foreign keys of the old and new value (``None``: no value, or a null foreign key);
    ``has_old``/``has_new`` whether there is an old and a new value. As Kafka Streams 4.1
    does: an inner join sends nothing when neither value has a foreign key (the caller counts
    it as skipped), and a left join unsubscribes a changed foreign key without an answer."""
    sends: list[tuple[bytes | None, Instruction]] = []
    if left:
        # Every insert, update and delete is answered: a left join always has a result.
        if has_old and old_key is not None and new_key != old_key:
            sends.append((old_key, Instruction.DELETE_KEY_NO_PROPAGATE))
        if has_old or has_new:
            sends.append((new_key, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
    elif has_old and old_key is None:
        if new_key is not None:  # a row (re)gaining a foreign key: as an insert
            sends.append((new_key, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
    elif has_old:
        if new_key is None:  # deleted, or its foreign key now null: its result goes
            sends.append((old_key, Instruction.DELETE_KEY_AND_PROPAGATE))
        elif new_key != old_key:
            sends.append((old_key, Instruction.DELETE_KEY_NO_PROPAGATE))
            # "No row" is answered too: the result of the old foreign key must be unset.
            sends.append((new_key, Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE))
        else:
            sends.append((new_key, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
    elif has_new and new_key is not None:
        sends.append((new_key, Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE))
    return sends


class SubscriptionSendProcessor(Processor):
    """Sends this table's updates to the subscription registration topic
    (``SubscriptionSendProcessorSupplier``): keyed by the foreign key of the new and the old
    value, as :func:`subscription_instructions` says; the foreign key is compared serialized
    with ``foreign_key_serde`` (the other table's key serde), the value hashed serialized with
    ``value_serde``. An inner join drops (and counts, ``null-foreign-key``) an update whose
    foreign key is null; a left join sends it under a null key, answered with no row."""

    name = "fk_subscription_send"
    keeps_order = True

    def __init__(
        self,
        foreign_key_extractor: Callable[[Any], Any],
        foreign_key_serde: Serde[Any],
        value_serde: Serde[Any],
        *,
        left: bool,
    ) -> None:
        super().__init__()
        self._extract = foreign_key_extractor
        self._foreign_key_serde = foreign_key_serde
        self._value_serde = value_serde
        self._left = left
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context

    def _foreign_key(self, value: Any) -> tuple[Any, bytes | None]:
        if value is None:
            return None, None
        key = self._extract(value)
        return key, None if key is None else self._foreign_key_serde.serialize(key)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        new, old = record.value, record.old_value
        new_key, new_bytes = self._foreign_key(new)
        old_key, old_bytes = self._foreign_key(old)
        sends = subscription_instructions(
            old_bytes, new_bytes, has_old=old is not None, has_new=new is not None, left=self._left
        )
        if not sends and not self._left and (new is not None or old is not None):
            self._context.record_dropped(self.node_name, "null-foreign-key")
            return
        digest = value_hash(None if new is None else self._value_serde.serialize(new))
        for key_bytes, instruction in sends:
            key = new_key if key_bytes == new_bytes else old_key
            subscription = Subscription(digest, instruction, record.key, self._context.partition)
            self.forward(Record(key, subscription, record.timestamp, record.headers))


class SubscriptionReceiveProcessor(Processor):
    """Keeps the subscriptions in the subscription store ``store_name`` (values
    :class:`ValueAndTimestamp` of a :class:`SubscriptionSerde`), or removes one on a delete
    instruction, and passes each on (``SubscriptionReceiveProcessorSupplier``). A subscription
    under a null foreign key is kept nowhere: passed on when it asks for an answer with no row
    (a left join's), else dropped and counted (``null-foreign-key``)."""

    name = "fk_subscription_receive"
    keeps_order = True

    def __init__(
        self, store_name: str, foreign_key_serde: Serde[Any], subscriptions: SubscriptionSerde
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._foreign_key_serde = foreign_key_serde
        self._subscriptions = subscriptions
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        subscription: Subscription = record.value
        if record.key is None:
            if subscription.instruction is not Instruction.PROPAGATE_NULL_IF_NO_FK_VAL_AVAILABLE:
                self._context.record_dropped(self.node_name, "null-foreign-key")
                return
            self.forward(record)
            return
        foreign = self._foreign_key_serde.serialize(record.key) or b""
        primary = self._subscriptions.key_serde.serialize(subscription.primary_key) or b""
        key = combined_key(foreign, primary)
        if subscription.instruction in (
            Instruction.DELETE_KEY_AND_PROPAGATE,
            Instruction.DELETE_KEY_NO_PROPAGATE,
        ):
            self._store.delete(key, record.timestamp)
        else:
            raw = self._subscriptions.serialize(subscription) or b""
            self._store.put(
                key, ValueAndTimestamp(raw, record.timestamp).to_bytes(), record.timestamp
            )
        self.forward(record)


class SubscriptionJoinProcessor(Processor):
    """Answers a subscription with the other table's current row for its foreign key
    (``SubscriptionJoinProcessorSupplier``), keyed by the primary key and stamped with the later
    of the subscription's and the row's timestamp, as its instruction says.

    Progress: a subscription comes through a repartition topic, behind the other table's own
    updates, so the row it joins may be newer than it and the answer stamped ahead of later
    ones: its data orders nothing, but no answer is stamped below its subscription, so control
    time passes."""

    name = "fk_subscription_join"
    keeps_order = False

    def __init__(self, other: TableReader) -> None:
        super().__init__()
        self._other = other

    def init(self, context: ProcessorContext) -> None:
        self._other.init(context)

    def control_progress(self) -> int:
        return self.parents_progress()

    def process(self, record: Record[Any, Any]) -> None:
        subscription: Subscription = record.value
        found = None if record.key is None else self._other.get(record.key)
        row, timestamp = None, record.timestamp
        if found is not None:
            row, timestamp = found[0], max(record.timestamp, found[1])
        instruction = subscription.instruction
        if instruction is Instruction.DELETE_KEY_NO_PROPAGATE:
            return
        if instruction is Instruction.PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE and found is None:
            return
        if instruction is Instruction.DELETE_KEY_AND_PROPAGATE:
            row = None
        response = Response(subscription.hash, row, subscription.primary_partition)
        self.forward(Record(subscription.primary_key, response, timestamp, record.headers))


class ForeignTableJoinProcessor(Processor):
    """Answers every subscription of a foreign key when the other table's row of it changes
    (``ForeignTableJoinProcessorSupplier``): a prefix scan of the subscription store, one
    response per subscribed primary key, stamped with the update's timestamp. Updates with a
    null key are dropped and counted."""

    name = "fk_foreign_table_join"
    keeps_order = True

    def __init__(
        self, store_name: str, foreign_key_serde: Serde[Any], subscriptions: SubscriptionSerde
    ) -> None:
        super().__init__()
        self._store_name = store_name
        self._foreign_key_serde = foreign_key_serde
        self._subscriptions = subscriptions
        self._store: KeyValueStore | None = None
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._store = context.kv_store(self._store_name)

    def process(self, record: Record[Any, Any]) -> None:
        assert self._store is not None
        assert self._context is not None
        if record.key is None:
            self._context.record_dropped(self.node_name, "null-key")
            return
        foreign = self._foreign_key_serde.serialize(record.key) or b""
        prefix = _LENGTH.pack(len(foreign)) + foreign
        for _key, raw in list(self._store.prefix_scan(prefix)):
            subscription = self._subscriptions.deserialize(ValueAndTimestamp.from_bytes(raw).value)
            assert subscription is not None
            response = Response(subscription.hash, record.value, subscription.primary_partition)
            self.forward(
                Record(subscription.primary_key, response, record.timestamp, record.headers)
            )


class ResponseMergeProcessor(Processor):
    """The other table's task's answers, from subscriptions and from its own updates, on their
    way to the response topic. Subscriptions come through a topic, behind the table's updates:
    the answers are not in timestamp order (data after it orders nothing), and the control time
    passed on is the least the two inputs passed, so a tick on the response topic never runs
    ahead of an answer to a subscription still on its way."""

    name = "fk_response_merge"
    keeps_order = False

    def control_progress(self) -> int:
        return min((parent.control_progress() for parent in self.parents), default=NO_PROGRESS)


class ResponseJoinProcessor(Processor):
    """Joins each answer with this table's current row (``ResponseJoinProcessorSupplier``): an
    answer whose hash is not the hash of the current row is stale and dropped (counted,
    ``stale-response``); else the result is ``joiner(row, foreign row)``, or a delete when the
    foreign row is missing in an inner join or this table's row is gone. Stamped with the
    answer's timestamp.

    Progress: answers are not in timestamp order on the response topic (see
    :class:`ResponseMergeProcessor`), so neither are the results: their data orders nothing;
    the response topic's control time passes (no answer is stamped before it)."""

    name = "fk_response_join"
    keeps_order = False

    def __init__(
        self,
        this: TableReader,
        value_serde: Serde[Any],
        joiner: Callable[[Any, Any], Any],
        *,
        left: bool,
    ) -> None:
        super().__init__()
        self._this = this
        self._value_serde = value_serde
        self._joiner = joiner
        self._left = left
        self._context: ProcessorContext | None = None

    def init(self, context: ProcessorContext) -> None:
        self._context = context
        self._this.init(context)

    def control_progress(self) -> int:
        return self.parents_progress()

    def process(self, record: Record[Any, Any]) -> None:
        assert self._context is not None
        response: Response = record.value
        found = None if record.key is None else self._this.get(record.key)
        current = None if found is None else found[0]
        digest = value_hash(None if current is None else self._value_serde.serialize(current))
        if digest != response.hash:
            self._context.record_dropped(self.node_name, "stale-response")
            return
        result = None
        if response.foreign_value is not None or (self._left and current is not None):
            result = self._joiner(current, response.foreign_value)
        self.forward(Record(record.key, result, record.timestamp, record.headers))
