"""Reconcile Spark's sessions with the streams runtime's closed sessions for the same events.

The runtime writes one record per closed session to its sessions topic: key = user, value = JSON
``{"user": ..., "start": <ms>, "end": <ms>, "count": <n>}`` (or, as the README's topology writes
it, ``{"start", "end", "clicks"}``: the user in the key, the count as ``clicks``) where ``[start,
end]`` are the first and last event time (inclusive). Those map directly to Spark's
``session_start``/``session_end``, so a session matches when user, start, end and event count are
equal.

**The one boundary difference.** Both sides merge inclusively: the runtime (Kafka Streams
semantics) merges an event at ``t`` into a session when ``start - gap <= t <= end + gap``, and
Spark merges session windows that touch, so an event exactly ``gap`` after the last one joins the
session on both sides. But Spark's streaming job emits and forgets a session as soon as the
watermark reaches ``end + gap``, and a row exactly at the watermark is not late: an event at
exactly ``end + gap`` that arrives after the watermark got there (a control record at that very
timestamp suffices) starts a new Spark session, exactly ``gap`` after the first, where the runtime
has one. :func:`reconcile` reports this as a :attr:`DifferenceKind.BOUNDARY_SPLIT` rather than
hiding it. (A batch job over the same records merges them, like the runtime.)
"""

from __future__ import annotations

import enum
import itertools
import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, TypeGuard

from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from progress_control.trust import TrustPolicy
from progress_control_apps.spark.batch import BatchRange, batch_sessions, read_range
from progress_control_apps.spark.sessionize import collect_sessions
from progress_control_apps.spark.source import KafkaSource, has_control_header

__all__ = [
    "Difference",
    "DifferenceKind",
    "ReconciliationReport",
    "RuntimeSession",
    "RuntimeSessions",
    "SessionLike",
    "parse_runtime_session",
    "read_runtime_sessions",
    "reconcile",
    "reconcile_topics",
]


class SessionLike(Protocol):
    """What reconciliation compares: user, first and last event time (ms), event count."""

    @property
    def user(self) -> str: ...
    @property
    def start_ms(self) -> int: ...
    @property
    def end_ms(self) -> int: ...
    @property
    def events(self) -> int: ...


@dataclass(frozen=True, slots=True, order=True)
class RuntimeSession:
    """A closed session as the streams runtime emitted it."""

    user: str
    start_ms: int
    end_ms: int
    events: int


@dataclass(frozen=True, slots=True)
class RuntimeSessions:
    """The runtime's sessions read from its topic, and the records that could not be read."""

    sessions: list[RuntimeSession]
    malformed: int


class DifferenceKind(enum.StrEnum):
    """How a runtime session and Spark's sessions disagree."""

    MISSING_IN_SPARK = "missing-in-spark"
    MISSING_IN_RUNTIME = "missing-in-runtime"
    COUNT_MISMATCH = "count-mismatch"
    BOUNDS_MISMATCH = "bounds-mismatch"
    BOUNDARY_SPLIT = "boundary-split"
    """One runtime session is several Spark sessions exactly ``gap`` apart: the streaming
    boundary edge of the module docstring."""


@dataclass(frozen=True, slots=True)
class Difference:
    """One disagreement, with the sessions involved on each side."""

    kind: DifferenceKind
    user: str
    runtime: RuntimeSession | None
    spark: tuple[SessionLike, ...]
    detail: str

    def __str__(self) -> str:
        return f"{self.kind} user={self.user!r}: {self.detail}"


@dataclass(frozen=True, slots=True)
class ReconciliationReport:
    """The outcome: matched sessions and every difference."""

    matched: int
    differences: tuple[Difference, ...]
    runtime_sessions: int
    spark_sessions: int
    duplicates_ignored: int = 0
    """Identical runtime records seen more than once (at-least-once re-emission)."""
    malformed_runtime_records: int = 0

    @property
    def equal(self) -> bool:
        """Whether both sides hold exactly the same sessions."""
        return not self.differences

    def summary(self) -> str:
        """A human-readable report, one line per difference."""
        head = (
            f"runtime sessions: {self.runtime_sessions}, Spark sessions: {self.spark_sessions}, "
            f"matched: {self.matched}, differences: {len(self.differences)}"
        )
        notes = []
        if self.duplicates_ignored:
            notes.append(f"duplicate runtime records ignored: {self.duplicates_ignored}")
        if self.malformed_runtime_records:
            notes.append(f"unreadable runtime records: {self.malformed_runtime_records}")
        verdict = "EQUAL" if self.equal else "DIFFERENT"
        lines = [f"{verdict} - {head}", *notes, *(f"  {d}" for d in self.differences)]
        return "\n".join(lines)


def reconcile(
    runtime: Iterable[RuntimeSession],
    spark: Iterable[SessionLike],
    gap_ms: int,
    *,
    malformed_runtime_records: int = 0,
) -> ReconciliationReport:
    """Compare the runtime's sessions with Spark's (same users, events and gap).

    Per runtime session, the Spark sessions of the same user overlapping ``[start, end]``
    decide: none → missing in Spark; one with the same bounds → a match, or a count mismatch;
    several that tile it with gaps of exactly ``gap_ms`` → a boundary split; anything else → a
    bounds mismatch. Spark sessions overlapping no runtime session are missing in the runtime.
    """
    if gap_ms <= 0:
        raise ValueError(f"gap_ms must be positive, got {gap_ms}")
    runtime_all = list(runtime)
    runtime_unique = sorted(set(runtime_all))
    spark_by_user: dict[str, list[SessionLike]] = defaultdict(list)
    spark_count = 0
    for session in spark:
        spark_by_user[session.user].append(session)
        spark_count += 1
    for sessions in spark_by_user.values():
        sessions.sort(key=lambda s: (s.start_ms, s.end_ms))

    matched = 0
    differences: list[Difference] = []
    used: set[tuple[str, int]] = set()  # (user, index in spark_by_user[user])
    for r in runtime_unique:
        candidates = [
            (i, s)
            for i, s in enumerate(spark_by_user.get(r.user, ()))
            if s.start_ms <= r.end_ms and s.end_ms >= r.start_ms
        ]
        used.update((r.user, i) for i, _ in candidates)
        overlapping = tuple(s for _, s in candidates)
        difference = _compare(r, overlapping, gap_ms)
        if difference is None:
            matched += 1
        else:
            differences.append(difference)
    for user, sessions in sorted(spark_by_user.items()):
        for i, s in enumerate(sessions):
            if (user, i) not in used:
                differences.append(
                    Difference(
                        DifferenceKind.MISSING_IN_RUNTIME,
                        user,
                        None,
                        (s,),
                        f"no runtime session overlaps Spark's {_span(s)} (if it closed only "
                        "recently, the runtime may not have emitted it yet)",
                    )
                )
    return ReconciliationReport(
        matched=matched,
        differences=tuple(differences),
        runtime_sessions=len(runtime_unique),
        spark_sessions=spark_count,
        duplicates_ignored=len(runtime_all) - len(runtime_unique),
        malformed_runtime_records=malformed_runtime_records,
    )


def _compare(r: RuntimeSession, spark: Sequence[SessionLike], gap_ms: int) -> Difference | None:
    if not spark:
        return Difference(
            DifferenceKind.MISSING_IN_SPARK,
            r.user,
            r,
            (),
            f"no Spark session overlaps the runtime's {_span(r)}",
        )
    if len(spark) == 1 and (spark[0].start_ms, spark[0].end_ms) == (r.start_ms, r.end_ms):
        if spark[0].events == r.events:
            return None
        return Difference(
            DifferenceKind.COUNT_MISMATCH,
            r.user,
            r,
            tuple(spark),
            f"session {_range(r)}: runtime counted {r.events} events, Spark {spark[0].events}",
        )
    tiles = (
        len(spark) > 1
        and spark[0].start_ms == r.start_ms
        and spark[-1].end_ms == r.end_ms
        and all(b.start_ms - a.end_ms == gap_ms for a, b in itertools.pairwise(spark))
    )
    if tiles:
        total = sum(s.events for s in spark)
        counts = (
            "same event total"
            if total == r.events
            else f"event totals differ: runtime {r.events}, Spark {total}"
        )
        return Difference(
            DifferenceKind.BOUNDARY_SPLIT,
            r.user,
            r,
            tuple(spark),
            f"the runtime's {_span(r)} is {len(spark)} Spark sessions "
            f"({', '.join(_span(s) for s in spark)}), each exactly {gap_ms} ms after the last: "
            "Spark's stream had emitted the earlier session when the watermark reached its end "
            f"+ gap, and a record at exactly that time started a new one ({counts})",
        )
    return Difference(
        DifferenceKind.BOUNDS_MISMATCH,
        r.user,
        r,
        tuple(spark),
        f"the runtime's {_span(r)} vs Spark's {', '.join(_span(s) for s in spark)}",
    )


def parse_runtime_session(key: bytes | None, value: bytes | None) -> RuntimeSession | None:
    """One record of the runtime's sessions topic, or ``None`` if it is not a valid session.

    ``user`` comes from the JSON value, else from the key (the runtime's key is the user);
    ``start``, ``end`` and ``count`` (or ``clicks`` when there is no ``count``) must be integers
    with ``start <= end`` and ``count >= 1``.
    """
    data = _json_object(value)
    if data is None:
        return None
    user = data.get("user")
    if user is None and key is not None:
        try:
            user = key.decode("utf-8")
        except UnicodeDecodeError:
            return None
    start, end = data.get("start"), data.get("end")
    count = data["count"] if "count" in data else data.get("clicks")
    if not (isinstance(user, str) and _is_int(start) and _is_int(end) and _is_int(count)):
        return None
    if start > end or count < 1:
        return None
    return RuntimeSession(user=user, start_ms=start, end_ms=end, events=count)


def read_runtime_sessions(
    spark: SparkSession, source: KafkaSource, records: BatchRange | None = None
) -> RuntimeSessions:
    """Read the runtime's sessions topic (a batch read): sessions, and a count of records that
    are not valid sessions. The runtime's control records on the topic are skipped."""
    records = records or BatchRange()
    raw = read_range(spark, source, records)
    # A record with the control header is never data, valid or not.
    rows = raw.where(~has_control_header(sf.col("headers"))).select("key", "value").collect()
    sessions: list[RuntimeSession] = []
    malformed = 0
    for row in rows:
        key = None if row["key"] is None else bytes(row["key"])
        value = None if row["value"] is None else bytes(row["value"])
        session = parse_runtime_session(key, value)
        if session is None:
            malformed += 1
        else:
            sessions.append(session)
    return RuntimeSessions(sessions=sessions, malformed=malformed)


def reconcile_topics(
    spark: SparkSession,
    events: KafkaSource,
    sessions_topic: str,
    gap_ms: int,
    records: BatchRange | None = None,
    *,
    grace_ms: int = 0,
    trust: TrustPolicy | None = None,
) -> ReconciliationReport:
    """Sessionize the events topic in batch and reconcile with the runtime's sessions topic.

    Spark keeps only sessions closed by the end of the range (window end + ``grace_ms`` at or
    before the latest timestamp, accepted control records included: ``trust``), as the runtime
    only emits closed sessions. With a time range, runtime sessions starting outside it are
    ignored.
    """
    computed = collect_sessions(
        batch_sessions(
            spark,
            events,
            gap_ms,
            records,
            closed_only=True,
            watermark_delay_ms=grace_ms,
            trust=trust,
        )
    )
    runtime = read_runtime_sessions(
        spark, KafkaSource(events.bootstrap_servers, sessions_topic, events.options)
    )
    wanted = runtime.sessions
    if records is not None:
        low = records.start_time_ms
        high = records.end_time_ms
        wanted = [
            s
            for s in wanted
            if (low is None or s.start_ms >= low) and (high is None or s.start_ms < high)
        ]
    return reconcile(wanted, computed, gap_ms, malformed_runtime_records=runtime.malformed)


def _json_object(value: bytes | None) -> dict[str, object] | None:
    if value is None:
        return None
    try:
        data = json.loads(value)
    except (UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _is_int(value: object) -> TypeGuard[int]:
    # bool is an int subclass in Python; true/false is not a timestamp or a count.
    return isinstance(value, int) and not isinstance(value, bool)


def _span(s: SessionLike) -> str:
    return f"{_range(s)} ({s.events} events)"


def _range(s: SessionLike) -> str:
    return f"[{_iso(s.start_ms)}, {_iso(s.end_ms)}]"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
