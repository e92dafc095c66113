"""A source and the stateless steps below it as one node: ``filter``, ``map_values``, ``peek``,
``map``, ``select_key`` and stream-table joins, which :mod:`streams_runtime.fused.planner` fuses
where no windowed aggregation follows for the native core to take.

The task hands it its input's records a run at a time (:meth:`FusedStatelessChain.process_batch`);
each record is deserialized by the source's serdes and goes through the steps' own processors,
``apply`` or ``apply_pair`` in place of ``process``, with no record object, forward or task
dispatch between them, then is forwarded once to what follows the last step (a sink, a
repartition's sink, any processor). Record by record, as the chain: a record that a serde
refuses, or for which a step or anything below it raises, meets the bad-record policy before
the next record is taken, and every write below names the record's own offset."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from streams_runtime.errors import StreamsError
from streams_runtime.fused import BatchContext
from streams_runtime.operations import ReadTopics
from streams_runtime.processors import (
    DROPPED,
    BatchSourceProcessor,
    MapProcessor,
    OnBadRecord,
    ProcessorContext,
    ValueStep,
)
from streams_runtime.record import Record, SourceRecord
from streams_runtime.serdes import SerializationError
from streams_runtime.state import SourcePosition

__all__ = ["FusedStatelessChain"]


class FusedStatelessChain(BatchSourceProcessor):
    """The source and its steps of a fused chain; the parent of the last step's children."""

    name = "fused_stateless_chain"
    keeps_order = True  # every step does

    def __init__(self, source: ReadTopics, steps: Sequence[Callable[[], Any]]) -> None:
        super().__init__(source.key_serde, source.value_serde)
        self._step_factories = steps
        # Each step's function, and whether it gives a new key and value (else a value).
        self._steps: list[tuple[Callable[[Any, Any], Any], bool]] = []
        self._position: SourcePosition

    def init(self, context: ProcessorContext) -> None:
        assert isinstance(context, BatchContext)
        super().init(context)
        self._position = context.position
        for factory in self._step_factories:
            step = factory()
            step.init(context)
            if isinstance(step, MapProcessor):
                self._steps.append((step.apply_pair, True))
            else:
                assert isinstance(step, ValueStep)  # the planner fuses these two kinds only
                self._steps.append((step.apply, False))

    def process_batch(self, records: Sequence[SourceRecord], on_bad: OnBadRecord) -> None:
        """Each record through the steps and on, in order; a record refused, or for which a
        step or anything below raises, goes to ``on_bad`` before the next is taken."""
        steps = self._steps
        position = self._position
        forward = self.forward
        key_value_of = self.source_key_value
        for record in records:
            position.offset = record.offset  # what writes below name as their cause
            try:
                key, value = key_value_of(record)
            except SerializationError as exc:
                on_bad(record, "deserialization", exc)
                continue
            try:
                for step, rekeys in steps:
                    if rekeys:
                        key, value = step(key, value)
                    else:
                        value = step(key, value)
                        if value is DROPPED:
                            break
                else:
                    forward(Record(key, value, record.timestamp, record.headers))
            except StreamsError:
                raise  # the runtime's own failure (a fenced producer...), not the record's
            except Exception as exc:
                on_bad(record, "processing", exc)
