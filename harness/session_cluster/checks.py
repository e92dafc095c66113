"""The checkers of a run: final results against the ground truth (:func:`compare_sessions`), and
data records written behind a tick on their partition (:func:`behind_earlier_ticks`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import Message

from harness.session_cluster.clicks import Session
from harness.session_cluster.config import TopicPartitionKey
from harness.session_cluster.reader import is_tick
from progress_control.protocol import MalformedControlHeaderError, parse_control_headers


@dataclass(frozen=True)
class Behind:
    """A data record written to ``topic[partition]`` at ``offset`` older than a tick written
    there earlier (at ``tick_offset``, by ``tick_source``)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    tick_offset: int
    tick_timestamp: int
    tick_source: str

    def __str__(self) -> str:
        return (
            f"{self.topic}[{self.partition}]@{self.offset} ts {self.timestamp} is "
            f"{self.tick_timestamp - self.timestamp} ms behind the tick @{self.tick_offset} "
            f"ts {self.tick_timestamp} from {self.tick_source}"
        )


def _tick_source(msg: Message) -> str:
    try:
        marker = parse_control_headers(msg.headers())
    except MalformedControlHeaderError:
        return "malformed"
    return "?" if marker is None else marker.source_id


def behind_earlier_ticks(records: Sequence[Message]) -> list[Behind]:
    """Data records older than a control record written before them (lower offset) to their
    partition: the promise a tick makes, broken (records in offset order per partition)."""
    latest: dict[TopicPartitionKey, Message] = {}
    behind = []
    for msg in records:
        tp = (msg.topic() or "", msg.partition() or 0)
        ts = msg.timestamp()[1]
        if is_tick(msg):
            if tp not in latest or ts > latest[tp].timestamp()[1]:
                latest[tp] = msg
        elif tp in latest and ts < latest[tp].timestamp()[1]:
            tick = latest[tp]
            behind.append(
                Behind(
                    tp[0],
                    tp[1],
                    msg.offset() or 0,
                    ts,
                    tick.offset() or 0,
                    tick.timestamp()[1],
                    _tick_source(tick),
                )
            )
    return behind


@dataclass
class SessionCheck:
    """Final results against the ground truth.

    Exactly-once: equal, each once. At-least-once: no loss; a result may come more than once
    only identically, and a replayed input record may be counted twice (``inflated``: a
    session with the right bounds and a higher count)."""

    exactly_once: bool
    expected: list[Session]
    found: list[Session]
    missing: list[Session] = field(default_factory=list)
    unexpected: list[Session] = field(default_factory=list)
    duplicates: list[Session] = field(default_factory=list)
    inflated: list[tuple[Session, Session]] = field(default_factory=list)
    records_lost: int = 0

    @property
    def ok(self) -> bool:
        if self.exactly_once:
            return not (self.missing or self.unexpected or self.duplicates or self.inflated)
        return not (self.missing or self.unexpected or self.duplicates)

    def summary(self, show: int = 5) -> str:
        return (
            f"{len(self.expected)} sessions expected, {len(self.found)} results; "
            f"{self.records_lost} records lost; missing {len(self.missing)} "
            f"{self.missing[:show]}; unexpected {len(self.unexpected)} {self.unexpected[:show]}; "
            f"duplicates {len(self.duplicates)} {self.duplicates[:show]}; "
            f"inflated {len(self.inflated)} {self.inflated[:show]}"
        )


def compare_sessions(
    expected: Sequence[Session], found: Sequence[Session], *, exactly_once: bool
) -> SessionCheck:
    """:class:`SessionCheck` of ``found`` against ``expected`` (see there). Records lost: per
    user, the clicks of the expected sessions beyond those the results count."""
    check = SessionCheck(exactly_once, sorted(expected), sorted(found))
    by_bounds: dict[tuple[str, int, int], list[Session]] = defaultdict(list)
    for s in found:
        by_bounds[(s.user, s.start, s.end)].append(s)
    for results in by_bounds.values():
        distinct = set(results)
        if len(results) > len(distinct) and exactly_once:
            check.duplicates.extend(results[1:])
        elif len(distinct) > 1:
            check.duplicates.extend(sorted(distinct)[1:])
    for s in expected:
        results = by_bounds.pop((s.user, s.start, s.end), [])
        if not results or min(r.count for r in results) < s.count:
            check.missing.append(s)
        elif max(r.count for r in results) > s.count:
            check.inflated.append((s, max(results)))
    check.unexpected = sorted(r for results in by_bounds.values() for r in results)
    expected_clicks: dict[str, int] = defaultdict(int)
    for s in expected:
        expected_clicks[s.user] += s.count
    counted: dict[str, int] = defaultdict(int)
    for s in set(found):
        counted[s.user] += s.count
    check.records_lost = sum(max(0, n - counted[u]) for u, n in expected_clicks.items())
    return check
