"""A user's processor in a task's graph (Kafka Streams' ``ProcessorNode`` around an
``api.Processor``, with its ``ProcessorContextImpl``): :func:`user_node` wraps one, and its
:class:`UserProcessorContext` is what the user's code sees.

Progress fails closed here as everywhere: the node holds it unless the user's class declares
how it moves it (:class:`~streams_runtime.processor.api.Progress`); one that keeps order passes
ticks and its data's progress on, one that trails passes ticks on held back by its lag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol, cast

from streams_runtime.processor.api import (
    Processor,
    Punctuator,
    RecordMetadata,
)
from streams_runtime.processor.punctuation import Cancellable, PunctuationType
from streams_runtime.processor.stores import (
    StoreBuilder,
    TypedKeyValueStore,
    TypedSessionStore,
    TypedWindowStore,
)
from streams_runtime.processors.base import NO_PROGRESS, ProcessorContext
from streams_runtime.processors.base import Processor as GraphProcessor
from streams_runtime.record import Record
from streams_runtime.state import WindowStore
from streams_runtime.topology import GlobalStore

__all__ = ["PunctuatingContext", "UserProcessorContext", "UserProcessorNode", "user_node"]


class PunctuatingContext(ProcessorContext, Protocol):
    """What a task offers user processors beyond what built-in ones use
    (:class:`~streams_runtime.processing.task.StreamTask` implements it)."""

    @property
    def task_name(self) -> str: ...

    def schedule_punctuation(
        self,
        interval_ms: int,
        punctuation_type: PunctuationType,
        fire: Callable[[int], None],
        start_ms: int | None,
    ) -> Cancellable:
        """Call ``fire(time)`` when due (the task runs it and handles what it raises)."""
        ...

    def record_metadata(self) -> RecordMetadata | None: ...

    def wall_clock_ms(self) -> int: ...

    def request_commit(self) -> None: ...


class UserProcessorNode(GraphProcessor):
    """A user's :class:`~streams_runtime.processor.api.Processor` as a node of the task's
    graph; a base: :func:`user_node` makes the subclass its declaration says."""

    name = "user-processor"

    def __init__(
        self,
        processor: Processor[Any, Any, Any, Any],
        stores: Mapping[str, StoreBuilder],
        *,
        fixed_key: bool = False,
        global_stores: Mapping[str, GlobalStore] | None = None,
    ) -> None:
        super().__init__()
        self.user = processor
        self._stores = stores
        self._global_stores = global_stores or {}
        self._fixed_key = fixed_key
        """``process_values``: what it forwards while processing a record has that record's
        key."""
        self._context: UserProcessorContext | None = None
        self._processing: Record[Any, Any] | None = None
        self.timestamp = -1
        """The time of what the user's code runs for: the record's, or the punctuation's."""

    def init(self, context: ProcessorContext) -> None:
        self._context = UserProcessorContext(self, cast(PunctuatingContext, context))
        self.user.init(self._context)

    def process(self, record: Record[Any, Any]) -> None:
        self._processing = record
        self.timestamp = record.timestamp
        try:
            self.user.process(record)
        finally:
            self._processing = None

    def punctuate(self, punctuator: Punctuator, timestamp: int) -> None:
        """Run a punctuator at ``timestamp`` (what it forwards goes to this node's children)."""
        self.timestamp = timestamp
        punctuator(timestamp)

    def emit(self, record: Record[Any, Any], child: str | None) -> None:
        """What the user's context forwards."""
        processing = self._processing
        if self._fixed_key and processing is not None and record.key != processing.key:
            raise ValueError(
                f"{type(self.user).__name__} runs in process_values: it may not forward key "
                f"{record.key!r} while processing key {processing.key!r}"
            )
        if child is None:
            self.forward(record)
            return
        targets = [c for c in self.children if c.node_name == child]
        if not targets:
            names = ", ".join(c.node_name for c in self.children) or "none"
            raise ValueError(f"no child named {child!r} (its children: {names})")
        for target in targets:
            target.process(record)

    def store(self, name: str) -> Any:
        """The typed store ``name``, if this node was connected to it, or a global table's
        (read-only, as in Kafka Streams)."""
        assert self._context is not None
        task = self._context.task
        now: Callable[[], int] = lambda: self.timestamp  # noqa: E731 - the write's timestamp
        shared = self._global_stores.get(name)
        if shared is not None:
            kv = task.kv_store(name)
            return TypedKeyValueStore(kv, shared.key_serde, shared.value_serde, now, read_only=True)
        builder = self._stores.get(name)
        if builder is None:
            connected = ", ".join(sorted(self._stores)) or "none"
            raise ValueError(
                f"store {name!r} is not connected to this processor (connected: {connected}); "
                f"name it in process(..., {name!r})"
            )
        ks, vs = builder.key_serde, builder.value_serde
        if builder.kind == "key_value":
            return TypedKeyValueStore(task.kv_store(name), ks, vs, now)
        if builder.kind == "window":
            window_store = task.window_store(name)
            assert isinstance(window_store, WindowStore)
            assert builder.window_size_ms is not None
            return TypedWindowStore(window_store, ks, vs, now, builder.window_size_ms)
        return TypedSessionStore(task.session_store(name), ks, vs, now)

    def close(self) -> None:
        self.user.close()


class _HoldingUserNode(UserProcessorNode):
    """Declared nothing: what it forwards may be stamped anywhere, so nothing after it is
    promised, data or ticks (fails closed)."""

    keeps_order = False

    def control_progress(self) -> int:
        return NO_PROGRESS


class _OrderKeepingUserNode(UserProcessorNode):
    """Declared :meth:`~streams_runtime.processor.api.Progress.keeps_order`."""

    keeps_order = True


class _TrailingUserNode(UserProcessorNode):
    """Declared :meth:`~streams_runtime.processor.api.Progress.trails_by`: ticks pass on held
    back by the lag; data after it promises nothing."""

    keeps_order = False

    def control_progress(self) -> int:
        declared = type(self.user).progress
        assert declared is not None
        seen = self.parents_progress()
        held = seen - declared.trails_ms
        return held if seen >= 0 and held >= 0 else NO_PROGRESS


def user_node(
    processor: Processor[Any, Any, Any, Any],
    stores: Mapping[str, StoreBuilder],
    *,
    fixed_key: bool = False,
    global_stores: Mapping[str, GlobalStore] | None = None,
) -> UserProcessorNode:
    """The node for ``processor``, as its class declares progress; it reads the stores
    ``stores`` and, read-only, the global tables' ``global_stores``."""
    progress = type(processor).progress
    node_class: type[UserProcessorNode]
    if progress is None:
        node_class = _HoldingUserNode
    elif progress.trails_ms == 0:
        node_class = _OrderKeepingUserNode
    else:
        node_class = _TrailingUserNode
    return node_class(processor, stores, fixed_key=fixed_key, global_stores=global_stores)


def _ms(value: int | timedelta, what: str) -> int:
    ms = value if isinstance(value, int) else int(value.total_seconds() * 1000)
    if ms < 1:
        raise ValueError(f"{what} must be at least 1 ms, got {value!r}")
    return ms


class UserProcessorContext:
    """The user's view of its task (:class:`~streams_runtime.processor.api.ProcessorContext`)."""

    def __init__(self, node: UserProcessorNode, task: PunctuatingContext) -> None:
        self._node = node
        self.task = task

    @property
    def application_id(self) -> str:
        return self.task.application_id

    @property
    def task_id(self) -> str:
        return self.task.task_name

    def forward(self, record: Record[Any, Any], child: str | None = None) -> None:
        self._node.emit(record, child)

    def record_metadata(self) -> RecordMetadata | None:
        return self.task.record_metadata()

    def current_stream_time_ms(self) -> int:
        return self.task.stream_time

    def current_system_time_ms(self) -> int:
        return self.task.wall_clock_ms()

    def schedule(
        self,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        punctuator: Punctuator,
        *,
        start: int | datetime | None = None,
    ) -> Cancellable:
        interval_ms = _ms(interval, "a punctuation interval")
        start_ms = int(start.timestamp() * 1000) if isinstance(start, datetime) else start
        node = self._node
        return self.task.schedule_punctuation(
            interval_ms,
            punctuation_type,
            lambda timestamp: node.punctuate(punctuator, timestamp),
            start_ms,
        )

    def commit(self) -> None:
        self.task.request_commit()

    def get_state_store(self, name: str) -> Any:
        return self._node.store(name)
