"""The order workload of the engines benchmark (issue 53's realistic topology): generate it onto
two topics, and say what its output should be.

    orders -> filter(not cancelled) -> select_key(user)            (a repartition)
           -> join(users table) -> map_values -> group_by_key
           -> session windows (gap 60 s, grace 2 min) -> aggregate(user initializer, adder,
              merger) -> suppress until the window closes -> to

``events`` orders, 1 ms apart: key ``order-<i>``, spread over the partitions by order (so the
select_key's repartition moves them). They come in blocks of ``session_clicks`` orders from each
of 10,000 users (one order per user every 10 s), each block from the next of four cohorts of
users, so a user orders in one block and is silent for the next three (5 minutes: longer than
gap and grace), and its session closes. Every block's last order of each user is cancelled
(filtered out). The users table holds every user of every cohort, stamped before the first
order and partitioned by Kafka's default partitioner, as the repartition topic is, so every
order finds its user.

Time runs on without pauses, and the grace: the repartition topic interleaves what four tasks
wrote, each at its own pace, so a partition's records are out of order by however far one task
ran ahead of another. A pause in event time would turn any such lag at its edge into records
dropped as late, and a session closed without grace into one emitted twice, in every engine,
each as its pace falls; with neither, none.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Producer as KafkaProducer

from bench._clicks import GAP_MS, PARTITIONS, STEP_MS, USERS, produce_all, producer_config
from bench._kafka import end_offsets

__all__ = ["GRACE_MS", "Orders"]

REGIONS = ("eu", "us", "apac")
GRACE_MS = 120_000
COHORTS = 4  # a user orders in one block of four: silent 3 blocks (5 min) > gap + grace
_MARGIN_MS = 1_000  # a session this close to closing at the end is neither counted nor not


@dataclass(frozen=True)
class Orders:
    """One generated input: ``events`` orders in blocks of ``session_clicks`` per user, and
    the users table."""

    events: int
    session_clicks: int
    base_ms: int

    @classmethod
    def ending_now(cls, events: int, session_clicks: int) -> Orders:
        """Event time ends a minute before now (within the topics' retention)."""
        return cls(events, session_clicks, int(time.time() * 1000) - events * STEP_MS - 60_000)

    def timestamp(self, i: int) -> int:
        """Order i's timestamp."""
        return self.base_ms + i * STEP_MS

    def _user(self, i: int) -> int:
        return i % USERS + USERS * (i // (USERS * self.session_clicks) % COHORTS)

    def _cancelled(self, i: int) -> bool:
        return (i // USERS) % self.session_clicks == self.session_clicks - 1

    def _orders(self, topic: str) -> Iterator[tuple[str, int, bytes, bytes, int]]:
        for i in range(self.events):
            value = {
                "user": f"user-{self._user(i)}",
                "amount": i % 50 + 1,
                "status": "cancelled" if self._cancelled(i) else "paid",
            }
            key = b"order-%d" % i
            yield topic, i % PARTITIONS, key, json.dumps(value).encode(), self.timestamp(i)

    def _users(self, topic: str) -> Iterator[tuple[str, int, bytes, bytes, int]]:
        stamp = self.base_ms - 1_000
        for user in range(USERS * COHORTS):
            value = {"region": REGIONS[user % len(REGIONS)], "tier": user % 4}
            yield topic, -1, b"user-%d" % user, json.dumps(value).encode(), stamp

    def preload(self, bootstrap_servers: str, orders_topic: str, users_topic: str) -> None:
        """Produce the users, then the orders, and check they are all there."""
        users = KafkaProducer(
            # Kafka's default partitioner (murmur2), as the repartition topic's writer uses.
            {**producer_config(bootstrap_servers), "partitioner": "murmur2_random"}
        )
        produce_all(users, lambda: self._users(users_topic))
        produce_all(
            KafkaProducer(producer_config(bootstrap_servers)), lambda: self._orders(orders_topic)
        )
        for topic, expected in ((users_topic, USERS * COHORTS), (orders_topic, self.events)):
            on_broker = sum(end_offsets(bootstrap_servers, topic, PARTITIONS))
            if on_broker != expected:
                raise RuntimeError(f"{on_broker} records in {topic}, expected {expected}")

    def expected_sessions(self) -> tuple[int, int]:
        """Closed sessions and the orders they count: a session closes once its end, plus gap
        and grace, is at or before the last order's time (every repartition partition gets
        orders of every block up to the last ones: their stream times end within a second of
        it). Raises when a session is too close to call, or none closes."""
        last = self.timestamp(self.events - 1)
        sessions: dict[tuple[int, int], tuple[int, int]] = {}  # (user, block) -> (end, orders)
        block = USERS * self.session_clicks
        for i in range(self.events):
            if not self._cancelled(i):
                count = sessions.get((self._user(i), i // block), (0, 0))[1]
                sessions[self._user(i), i // block] = (self.timestamp(i), count + 1)
        closed = orders = 0
        for end, count in sessions.values():
            due = end + GAP_MS + GRACE_MS
            if last - _MARGIN_MS < due <= last:
                raise ValueError(f"a session closes {last - due} ms before the end: choose events")
            if due <= last:
                closed, orders = closed + 1, orders + count
        if not closed:
            raise ValueError(f"{self.events:,} orders close no session: 300,000 at least")
        return closed, orders
