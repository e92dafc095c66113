"""The session application's input and its ground truth: a click as written, a final session,
the sessions clicks make (what the results must equal), and users chosen by the repartition
partition they hash to."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from harness.session_cluster.app import GAP_MS, INPUT_PARTITIONS
from streams_runtime.murmur2 import partition_for_key

FLUSH_PREFIX = "flush-"


@dataclass(frozen=True)
class Click:
    """One input data record as written: ``user`` clicked a page on ``partition`` at
    ``timestamp`` (epoch ms)."""

    user: str
    partition: int
    timestamp: int


@dataclass(frozen=True, order=True)
class Session:
    """A final session result: ``user``'s clicks from ``start`` to ``end`` (epoch ms)."""

    user: str
    start: int
    end: int
    count: int


def sessions_of(clicks: Iterable[Click], gap_ms: int = GAP_MS) -> list[Session]:
    """The sessions the clicks make (clicks at most ``gap_ms`` apart share one), sorted."""
    by_user: dict[str, list[int]] = defaultdict(list)
    for click in clicks:
        by_user[click.user].append(click.timestamp)
    found: list[Session] = []
    for user, stamps in by_user.items():
        stamps.sort()
        start = previous = stamps[0]
        count = 0
        for ts in stamps:
            if ts - previous > gap_ms:
                found.append(Session(user, start, previous, count))
                start, count = ts, 0
            previous = ts
            count += 1
        found.append(Session(user, start, previous, count))
    return sorted(found)


def repartition_of(user: str) -> int:
    """The repartition (and output) partition of ``user``: murmur2, as the runtime's producer."""
    return partition_for_key(user.encode(), INPUT_PARTITIONS)


def users_on(partitions: Iterable[int], count: int, prefix: str = "user-") -> list[str]:
    """``count`` user names whose repartition partition is in ``partitions``."""
    wanted, found, n = set(partitions), list[str](), 0
    while len(found) < count:
        name = f"{prefix}{n:03d}"
        if repartition_of(name) in wanted:
            found.append(name)
        n += 1
    return found


def flush_users() -> list[str]:
    """One user per repartition partition, for the flush records (never compared)."""
    return [users_on([q], 1, prefix=FLUSH_PREFIX)[0] for q in range(INPUT_PARTITIONS)]
