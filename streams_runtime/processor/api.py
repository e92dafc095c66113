"""The Processor API users write against (Kafka Streams' ``processor.api`` since KIP-478:
``Processor``, ``FixedKeyProcessor``, ``ProcessorContext``, ``RecordMetadata``), and how a user
processor declares the progress it passes on (:class:`Progress`, ours: Kafka Streams has no
promise to keep).

    class RunningTotal(Processor[str, int, str, int]):
        progress = Progress.keeps_order()

        def init(self, context: ProcessorContext[str, int]) -> None:
            self.context = context
            self.totals = context.get_state_store("totals")
            context.schedule(60_000, PunctuationType.STREAM_TIME, self.emit)

        def process(self, record: Record[str, int]) -> None:
            self.totals.put(record.key, (self.totals.get(record.key) or 0) + record.value)

        def emit(self, timestamp: int) -> None:
            for key, total in self.totals.all():
                self.context.forward(Record(key, total, timestamp))
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

from streams_runtime.processor.punctuation import Cancellable, PunctuationType
from streams_runtime.record import Record

__all__ = [
    "FixedKeyProcessor",
    "Processor",
    "ProcessorContext",
    "Progress",
    "Punctuator",
    "RecordMetadata",
]

KIn = TypeVar("KIn")
VIn = TypeVar("VIn")
KOut = TypeVar("KOut")
VOut = TypeVar("VOut")

Punctuator = Callable[[int], None]
"""Called with the time a punctuation fires at: the task's stream time, or the wall clock."""


class RecordMetadata(NamedTuple):
    """Where the record being processed came from (Kafka Streams' ``RecordMetadata``)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True)
class Progress:
    """How a user processor moves the runtime's progress, the promise its output ticks make
    (docs/concepts/promise.md). A processor that declares nothing holds it: no sink after it
    ticks, because nothing says what it may still forward (fails closed).

    Use :meth:`keeps_order` or :meth:`trails_by`; a declaration that is not true breaks the
    promise for every reader of the outputs below it."""

    trails_ms: int
    """How far behind the task's stream time a record it forwards may be stamped."""

    def __post_init__(self) -> None:
        if self.trails_ms < 0:
            raise ValueError(f"trails_ms must be >= 0, got {self.trails_ms}")

    @classmethod
    def keeps_order(cls) -> Progress:
        """It forwards records no older than what made them: the record being processed (with
        its timestamp, or a later one) or a stream-time punctuation (stamped with its time).
        Then data it forwards moves the sinks' progress, and ticks pass through it."""
        return cls(0)

    @classmethod
    def trails_by(cls, ms: int) -> Progress:
        """What it forwards is stamped at most ``ms`` before the task's stream time (a buffer
        released within ``ms``, say). Ticks pass through it held back by ``ms``; data after it
        moves nothing (it may be out of order)."""
        return cls(ms)


class ProcessorContext(Protocol[KOut, VOut]):
    """What a task offers a user processor (Kafka Streams' ``api.ProcessorContext``)."""

    @property
    def application_id(self) -> str:
        """The application id."""
        ...

    @property
    def task_id(self) -> str:
        """The task running this processor instance (``<sub-topology>_<partition>``)."""
        ...

    def forward(self, record: Record[KOut, VOut], child: str | None = None) -> None:
        """Send ``record`` to every child, or to the child named ``child``."""
        ...

    def record_metadata(self) -> RecordMetadata | None:
        """The input record being processed; ``None`` in a punctuation."""
        ...

    def current_stream_time_ms(self) -> int:
        """The task's stream time (-1 before any record or tick)."""
        ...

    def current_system_time_ms(self) -> int:
        """The wall clock (ms since the epoch; the test driver's own clock under the driver)."""
        ...

    def schedule(
        self,
        interval: int | timedelta,
        punctuation_type: PunctuationType,
        punctuator: Punctuator,
        *,
        start: int | datetime | None = None,
    ) -> Cancellable:
        """Call ``punctuator(time)`` every ``interval`` (ms or a timedelta) of stream time or
        wall-clock time. Without ``start``, stream-time punctuations are aligned to 0 (the first
        fires at the first record or tick) and wall-clock ones start an interval from now; with
        ``start`` (ms since the epoch or a datetime, KIP-1146's anchored punctuation) the first
        fires once time reaches ``start``, the next ones on ``start``'s grid. A jump in time fires
        a punctuator once, not once per interval missed."""
        ...

    def commit(self) -> None:
        """Ask for a commit soon (the next turn of the poll loop)."""
        ...

    def get_state_store(self, name: str) -> Any:
        """The store ``name`` connected to this processor (``process(..., name)``), typed:
        a :class:`~streams_runtime.processor.TypedKeyValueStore`, ``TypedWindowStore`` or
        ``TypedSessionStore``."""
        ...


class Processor(Generic[KIn, VIn, KOut, VOut]):
    """A user's record processor (Kafka Streams' ``api.Processor``): ``init`` once per task,
    after its stores were restored; ``process`` per record (never a tick: ticks move time and
    fire punctuators); ``close`` when the task closes."""

    progress: ClassVar[Progress | None] = None
    """How it moves progress (:class:`Progress`); ``None``: it holds it."""

    def init(self, context: ProcessorContext[KOut, VOut]) -> None:
        """Called once per task before the first record."""

    def process(self, record: Record[KIn, VIn]) -> None:
        """Called per input record."""
        raise NotImplementedError

    def close(self) -> None:
        """Called when the task closes (revoked, or the application stops)."""


class FixedKeyProcessor(Processor[KIn, VIn, KIn, VOut]):
    """A processor that never changes keys (Kafka Streams' ``FixedKeyProcessor``, for
    ``process_values``): what it forwards while processing a record has that record's key, so
    the stream stays partitioned as it was and a later grouping does not repartition."""
