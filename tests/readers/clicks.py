"""Click streams for the reader tests (Kafka Streams, Flink): users on every partition, seeded
sessions of clicks, and the session windows they make."""

from __future__ import annotations

import random

from streams_runtime.murmur2 import partition_for_key

Clicks = list[tuple[str, int]]
"""``(user, timestamp)`` of each click, in time order."""


def users_on_every_partition(partitions: int, per_partition: int = 2) -> list[str]:
    """Users spread so that every partition has ``per_partition`` of them (and so data)."""
    by_partition: dict[int, list[str]] = {p: [] for p in range(partitions)}
    i = 0
    while any(len(users) < per_partition for users in by_partition.values()):
        name = f"user-{i}"
        users = by_partition[partition_for_key(name.encode(), partitions)]
        if len(users) < per_partition:
            users.append(name)
        i += 1
    return sorted(u for users in by_partition.values() for u in users)


def session_clicks(
    seed: int,
    base_ms: int,
    users: list[str],
    *,
    start_spread_ms: int,
    click_gap_ms: tuple[int, int],
    session_gap_ms: tuple[int, int],
) -> Clicks:
    """Two or three sessions per user, the first within ``start_spread_ms`` after ``base_ms``,
    clicks ``click_gap_ms`` apart inside one and ``session_gap_ms`` between them."""
    rng = random.Random(seed)  # noqa: S311 - test data, not secrets
    clicks: Clicks = []
    for user in users:
        t = base_ms + rng.randrange(0, start_spread_ms)
        for _session in range(rng.randint(2, 3)):
            for _click in range(rng.randint(1, 4)):
                clicks.append((user, t))
                t += rng.randrange(*click_gap_ms)
            t += rng.randrange(*session_gap_ms)
    return sorted(clicks, key=lambda click: (click[1], click[0]))


def session_windows(clicks: Clicks, gap_ms: int) -> set[str]:
    """The session windows (gap ``gap_ms``) of ``clicks``, as ``user=start,end,count``."""
    found: set[str] = set()
    for user in {u for u, _t in clicks}:
        times = sorted(t for u, t in clicks if u == user)
        start = end = times[0]
        count = 0
        for t in times:
            if t - end > gap_ms:
                found.add(f"{user}={start},{end},{count}")
                start, count = t, 0
            end, count = t, count + 1
        found.add(f"{user}={start},{end},{count}")
    return found
