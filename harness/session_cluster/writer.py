"""Writing the session application's input: :class:`ClickWriter`, clicks through
``interceptor.Producer`` (so idle input partitions get ticks), kept as the ground truth."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import KafkaError, Message

from harness.session_cluster.app import CLOSE_MS
from harness.session_cluster.clicks import Click, flush_users
from harness.session_cluster.config import ClusterError

INPUT_TICK_START_MS = 1_000
"""An input partition idle for a second gets a tick from the interceptor (then every second)."""


@dataclass
class _UserPace:
    """When a user clicks next (monotonic s), drawn from the seeded generator."""

    user: str
    next_at: float


class ClickWriter:
    """Writes clicks through ``interceptor.Producer`` and keeps them (the ground truth).

    Clicks are keyed by page (``page-<partition>-<n>``, written to that partition explicitly),
    valued ``{"user": ..., "page": ...}`` and stamped with the wall clock at the time of writing
    (never below the partition's previous click). Users click within a session every 0.1-1.5 s
    and end it with a pause of 2.5-5 s (one click in five), all drawn from ``random.Random(seed)``.
    """

    def __init__(self, bootstrap: str, topic: str, seed: int) -> None:
        from interceptor import Producer

        self.topic = topic
        self.rng = random.Random(seed)  # noqa: S311 - a seeded workload, not a secret
        self.clicks: list[Click] = []
        self.flushes: list[Click] = []
        self._last_ts: dict[int, int] = {}
        self._end_offsets: dict[int, int] = {}
        self._errors: list[str] = []
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "linger.ms": 5,
                "on_delivery": self._on_delivery,
                "progress.control.start.ms": INPUT_TICK_START_MS,
                "progress.control.backoff.ms": 1_000,
                "progress.control.backoff.exponential": False,
                "progress.control.max.records": "none",
                "progress.control.end.ms": 3_600_000,
            }
        )

    def _on_delivery(self, error: KafkaError | None, msg: Message) -> None:
        if error is not None:
            self._errors.append(error.str())
            return
        partition, offset = msg.partition() or 0, msg.offset() or 0
        self._end_offsets[partition] = max(self._end_offsets.get(partition, 0), offset + 1)

    def _write(self, user: str, partition: int, timestamp: int) -> Click:
        timestamp = max(timestamp, self._last_ts.get(partition, 0))
        self._last_ts[partition] = timestamp
        page = f"page-{partition}-{self.rng.randrange(5)}"
        value = json.dumps({"user": user, "page": page}).encode()
        while True:
            try:
                self._producer.produce(
                    self.topic, value, page.encode(), partition, timestamp=timestamp
                )
                break
            except BufferError:
                self._producer.poll(0.05)
        self._producer.poll(0)
        return Click(user, partition, timestamp)

    def click(self, user: str, partition: int, timestamp: int | None = None) -> None:
        """One click of ``user`` on ``partition`` (at the wall clock unless ``timestamp``)."""
        at = int(time.time() * 1000) if timestamp is None else timestamp
        self.clicks.append(self._write(user, partition, at))

    def play(self, seconds: float, partitions: Sequence[int], users: Sequence[str]) -> None:
        """Click in real time for ``seconds``, on pages of ``partitions`` only: each user at
        its own seeded pace, starting within the first second."""
        rng = self.rng
        start = time.monotonic()
        end = start + seconds
        paces = [_UserPace(u, start + rng.uniform(0, 1.0)) for u in users]
        while True:
            now = time.monotonic()
            if now >= end:
                break
            due = [p for p in paces if p.next_at <= now]
            for pace in due:
                self.click(pace.user, rng.choice(partitions))
                pace.next_at = now + self._next_gap_s()
            upcoming = min(p.next_at for p in paces)
            time.sleep(max(0.0, min(upcoming, end) - time.monotonic()))
        self.wait_delivered()

    def _next_gap_s(self) -> float:
        if self.rng.random() < 0.2:
            return self.rng.uniform(2.5, 5.0)  # past the gap: the session ends
        return self.rng.uniform(0.1, 1.5)

    def backlog(
        self,
        partition: int,
        users: Sequence[str],
        stamps: Sequence[int],
        *,
        over_s: float = 0.0,
    ) -> None:
        """Clicks on ``partition`` at ``stamps`` (in order; data dated in the past is fine,
        ticks there are not), all at once or spread over ``over_s`` seconds (a source
        catching up)."""
        batches = max(1, int(over_s * 10))
        size = -(-len(stamps) // batches)
        started = time.monotonic()
        for n in range(batches):
            for ts in stamps[n * size : (n + 1) * size]:
                self.click(self.rng.choice(users), partition, ts)
            self._producer.poll(0)
            # Pacing is the scenario itself: the source writes its backlog over time.
            time.sleep(max(0.0, started + (n + 1) * over_s / batches - time.monotonic()))
        self.wait_delivered()

    def stamps(self, start_ms: int, span_ms: int, count: int) -> list[int]:
        """``count`` sorted random timestamps in ``[start_ms, start_ms + span_ms)``."""
        return sorted(start_ms + self.rng.randrange(span_ms) for _ in range(count))

    def write_flush(self) -> int:
        """One flush record per repartition partition (its user hashes there), on the input
        partition of the same number, far enough ahead to make every session final; returns
        its timestamp."""
        latest = max((c.timestamp for c in self.clicks), default=0)
        at = max(int(time.time() * 1000), latest + CLOSE_MS + 1_000)
        for q, user in enumerate(flush_users()):
            self.flushes.append(self._write(user, q, at))
        self.wait_delivered()
        return at

    def wait_delivered(self) -> None:
        """Flush the producer (data and ticks); raise if any record failed."""
        if self._producer.flush(30):
            raise ClusterError("input records still queued after 30 s")
        if self._errors:
            raise ClusterError(f"input records failed: {self._errors[:3]}")

    def end_offsets(self) -> dict[int, int]:
        """Per input partition, the offset after the last data record written there."""
        return dict(self._end_offsets)

    def ticks_sent(self) -> int:
        """Control records the interceptor sent to the input so far."""
        metrics = self._producer.progress_metrics()
        return 0 if metrics is None else int(metrics.ticks_sent)

    def close(self) -> None:
        self._producer.flush(10)
        self._producer.close()
