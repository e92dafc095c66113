"""A task's punctuators (the punctuation half of Kafka Streams' ``StreamTask``: its two
``PunctuationQueue`` s, ``schedule``, ``maybePunctuateStreamTime`` and
``maybePunctuateSystemTime``): when each fires, and what a punctuator that raises meets."""

from __future__ import annotations

import time
from collections.abc import Callable

from streams_runtime.errors import BadRecordHandler, StreamsError
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processor.punctuation import Cancellable, PunctuationQueue, PunctuationType

__all__ = ["TaskPunctuators"]


def _system_ms() -> int:
    return time.time_ns() // 1_000_000


class TaskPunctuators:
    """One task's stream-time and wall-clock schedules. ``stream`` is the queue the task checks
    after every record (one comparison with its ``due``)."""

    def __init__(
        self,
        task: str,
        bad_records: BadRecordHandler,
        metrics: RuntimeMetrics,
        wall_clock: Callable[[], int] | None = None,
    ) -> None:
        """``wall_clock``: milliseconds since the epoch (the test driver's; default the
        system's)."""
        self._task = task
        self._bad_records = bad_records
        self._fired = metrics.punctuations(task)
        self.wall_clock = wall_clock or _system_ms
        self.stream = PunctuationQueue()
        self._wall = PunctuationQueue()
        self.punctuating = False
        """A punctuator runs: there is no record being processed."""

    def schedule(
        self,
        interval_ms: int,
        punctuation_type: PunctuationType,
        fire: Callable[[int], None],
        start_ms: int | None,
        restored_stream_time: int | None,
    ) -> Cancellable:
        """Kafka Streams' rules: stream time from 0 (the first record or tick fires it),
        wall-clock time an interval from now, or from ``start_ms`` (KIP-1146). One difference:
        a stream-time schedule made as a task starts from committed state
        (``restored_stream_time``: its stream time then) begins after it, since the committed
        output holds what fired up to there (Kafka Streams fires again at once, and would
        repeat what the last run emitted)."""
        if punctuation_type is PunctuationType.STREAM_TIME:
            due = 0 if start_ms is None else start_ms
            if restored_stream_time is not None and restored_stream_time >= due:
                due += ((restored_stream_time - due) // interval_ms + 1) * interval_ms
            return self.stream.schedule(due, interval_ms, self._guarded(fire))
        due = self.wall_clock() + interval_ms if start_ms is None else start_ms
        return self._wall.schedule(due, interval_ms, self._guarded(fire))

    def _guarded(self, fire: Callable[[int], None]) -> Callable[[int], None]:
        """``fire`` run as a punctuation: no record metadata, and what it raises meets the
        bad-record policy (``fail`` stops the application; the others log and count it)."""

        def punctuate(timestamp: int) -> None:
            self.punctuating = True
            try:
                fire(timestamp)
            except StreamsError:
                raise
            except Exception as exc:
                self._bad_records.handle_punctuation(self._task, exc)
            finally:
                self.punctuating = False
            self._fired.inc()

        return punctuate

    def punctuate_wall_clock(self) -> int:
        """Fire the wall-clock punctuators due now; how many fired."""
        now = self.wall_clock()
        return self._wall.punctuate(now) if self._wall.due <= now else 0

    def clear(self) -> None:
        """Drop every schedule (the task closes)."""
        self.stream.clear()
        self._wall.clear()
