"""A sample producer of sparse click events: every user clicks in short bursts (sessions)
separated by pauses longer than the session gap, and all users stop before the end, so the last
sessions only close if time moves without data."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from interceptor import Producer, SerializingProducer
from progress_control_apps.demo.formats import DemoFormat

__all__ = ["ClickPlan", "ClickProducer", "Session", "plan_clicks"]


@dataclass(frozen=True)
class Session:
    """A burst of clicks of one user; times in seconds from the start of the run."""

    user: str
    clicks: tuple[float, ...]


@dataclass(frozen=True)
class ClickPlan:
    """What the producer will send: sessions per user, all within ``duration_s``."""

    sessions: tuple[Session, ...]
    duration_s: float

    def schedule(self) -> list[tuple[float, str]]:
        """(offset in seconds, user) for every click, in time order."""
        return sorted((t, s.user) for s in self.sessions for t in s.clicks)


def plan_clicks(users: int, duration_s: float, gap_s: float, seed: int = 1) -> ClickPlan:
    """Bursts of 2 to 6 clicks, 0.2 s to ``gap/2`` apart, with pauses of 1.5 to 3 gaps between.
    Nothing in the last ``2 * gap`` seconds of the run: the pipeline has to close the final
    sessions on idle partitions."""
    rng = random.Random(seed)  # noqa: S311 - sample data
    sessions = []
    last_click = duration_s - 2 * gap_s
    for u in range(users):
        user = f"user-{u:03d}"
        t = rng.uniform(0, gap_s)
        while t < last_click:
            clicks = []
            for _ in range(rng.randint(2, 6)):
                if t >= last_click:
                    break
                clicks.append(round(t, 3))
                t += rng.uniform(0.2, gap_s / 2)
            if clicks:
                sessions.append(Session(user, tuple(clicks)))
            t = clicks[-1] + rng.uniform(1.5 * gap_s, 3 * gap_s) if clicks else t
    return ClickPlan(tuple(sessions), duration_s)


@dataclass
class ClickProducer:
    """Sends a :class:`ClickPlan` in real time, stamped with wall-clock time, through
    ``interceptor.Producer`` (``interceptor.SerializingProducer`` in Avro): progress control is
    attached by configuration alone (``progress.control.*`` keys;
    ``progress.control.enabled=false`` turns it off)."""

    config: Mapping[str, Any]
    topic: str
    plan: ClickPlan
    wire: DemoFormat = field(default_factory=DemoFormat)
    sent: int = 0
    started_at: float = field(default=0.0)
    _thread: threading.Thread | None = None
    producer: Producer | SerializingProducer | None = None

    def start(self) -> None:
        config = {**self.config, **self.wire.producer_config(self.topic)}
        self.producer = SerializingProducer(config) if self.wire.avro else Producer(config)
        self.started_at = time.time()
        self._thread = threading.Thread(target=self._run, name="clicks", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        assert self.producer is not None
        for offset, user in self.plan.schedule():
            delay = self.started_at + offset - time.time()
            if delay > 0:
                time.sleep(delay)
            now_ms = int(time.time() * 1000)
            value = self.wire.click(user, f"/p/{self.sent % 7}", now_ms)
            self.producer.produce(self.topic, key=user, value=value, timestamp=now_ms)
            self.producer.poll(0)
            self.sent += 1
        self.producer.flush(10)

    def join(self) -> None:
        if self._thread is not None:
            self._thread.join()

    def ticks_sent(self) -> int:
        """Control records the interceptor sent (0 with progress control off)."""
        metrics = self.producer.progress_metrics() if self.producer else None
        return metrics.ticks_sent if metrics else 0

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
