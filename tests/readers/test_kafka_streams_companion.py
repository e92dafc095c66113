"""The Kafka Streams companion (``readers/kafka-streams``, docs/readers/kafka-streams.md)
against the real thing: Kafka Streams 4.1 on the test broker reads a topic our interceptor ticks.

One JVM runs the companion's example app (``TickedWindows``) twice, on two topics holding the
same clicks:

- **ticks**: the clicks come from ``interceptor.Producer``, which ticks each partition once it
  goes idle; nothing but ticks follows the last click.
- **clean**: the same clicks (same partitions, timestamps and order) from a plain producer, then
  clicks of one more user per partition, stepping on past the last click, which close every
  window the way data does (those users, chosen so that every source and repartition partition
  gets one, are left out of the results).

The app: (1) ``selectKey(user)`` + repartition (multicast for ticks) + session count (gap 1 s,
grace 1 s), emitted on window close; (2) sliding-window count (1 s, grace 1 s) per input key,
suppressed until windows close. Its user functions throw on anything that is not a click, so a
tick reaching one fails the app. Asserted: in the ticks run, every session closes on ticks alone
and both outputs equal the clean run's (sessions also equal the ones computed here from the
clicks); no output holds a sentinel window or a ``progress-control`` header; the app never failed.

CI runs one seed on 3 partitions (the Maven build is cached; the JVM starts once).
``PROGRESS_CONTROL_LONG_TESTS=1`` adds more seeds and 6 partitions.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from interceptor import Producer as TickingProducer
from progress_control.protocol import DEFAULT_SENTINEL_KEY, has_control_header, is_control_record
from streams_runtime.murmur2 import partition_for_key
from tests.helpers import TopicReader, unique_name, wait_for
from tests.readers.clicks import (
    session_clicks,
    session_windows,
    users_on_every_partition,
)
from tests.readers.kafka_streams_companion import CompanionApps, build_companion

pytestmark = [pytest.mark.broker, pytest.mark.network]

LONG = os.environ.get("PROGRESS_CONTROL_LONG_TESTS") == "1"
CASES = [(1, 3), (2, 6), (3, 3)] if LONG else [(30, 3)]  # (seed, partitions)
GAP_MS = DIFFERENCE_MS = 1_000
GRACE_MS = 2_000  # tolerates Kafka Streams' upstream tasks lagging each other by up to 3 s
TICKS = {
    "progress.control.start.ms": 300,
    "progress.control.backoff.ms": 300,
    "progress.control.backoff.exponential": False,
    "progress.control.max.records": 60,  # 18 s of ticks at most; 5 s close everything
}
# The clean run's closing clicks: every 300 ms of event time on every partition, for 5 s past
# the last click. Steps, as a live stream moves: measured on Kafka Streams 4.1.2, one click a
# minute ahead closed nothing, as if the sessions' store segments expired before their emission.
FLUSH_STEP_MS = 300
FLUSH_STEPS = 17
RUN_SPAN_MS = 25_000  # clicks (at most ~12 s), then closing (5 s), with room to spare


@pytest.fixture(scope="module")
def companion_jars() -> Path:
    return build_companion()


def _flush_users(partitions: int) -> list[str]:
    """One user per partition whose key the default partitioner sends there."""
    users: dict[int, str] = {}
    i = 0
    while len(users) < partitions:
        name = f"flush-{i}"
        users.setdefault(partition_for_key(name.encode(), partitions), name)
        i += 1
    return [users[p] for p in range(partitions)]


class Results:
    """Everything an output topic holds, as ``user=start,end,count`` strings."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        self.topic = topic
        self._reader = TopicReader(bootstrap, topic, partitions)

    def read(self) -> set[str]:
        found = set()
        for msg in self._reader.read(quiet_s=0.2, max_s=1.0):
            key = (msg.key() or b"").decode()
            assert key != DEFAULT_SENTINEL_KEY.decode(), f"a sentinel window in {self.topic}"
            assert not has_control_header(msg.headers()), f"a result marked as a tick: {key}"
            found.add(f"{key}={(msg.value() or b'').decode()}")
        return found

    def close(self) -> None:
        self._reader.close()


@pytest.fixture
def results(kafka_bootstrap: str) -> Iterator[Callable[[str, int], Results]]:
    opened: list[Results] = []

    def make(topic: str, partitions: int) -> Results:
        opened.append(Results(kafka_bootstrap, topic, partitions))
        return opened[-1]

    yield make
    for r in opened:
        r.close()


def _spec(bootstrap: str, app_id: str, topics: dict[str, str], state_dir: Path) -> dict[str, str]:
    return {
        "application.id": app_id,
        "bootstrap.servers": bootstrap,
        "input": topics["in"],
        "sessions.output": topics["sessions"],
        "sliding.output": topics["sliding"],
        "gap.ms": str(GAP_MS),
        "difference.ms": str(DIFFERENCE_MS),
        "grace.ms": str(GRACE_MS),
        "state.dir": str(state_dir / app_id),
        "commit.interval.ms": "100",
        "statestore.cache.max.bytes": "0",
        "auto.offset.reset": "earliest",
        # Emit on window close at every record, not at most once a second of wall-clock time.
        "__emit.interval.ms.kstreams.windowed.aggregation__": "0",
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"seed{c[0]}-{c[1]}partitions")
def test_kafka_streams_closes_every_window_on_ticks_alone_as_data_would(
    case: tuple[int, int],
    *,
    kafka_bootstrap: str,
    kafka_admin: AdminClient,
    create_topic: Callable[..., str],
    results: Callable[[str, int], Results],
    companion_jars: Path,
    tmp_path: Path,
) -> None:
    seed, partitions = case
    runs = {
        mode: {
            "in": create_topic(f"clicks-{mode}", partitions=partitions),
            "sessions": create_topic(f"sessions-{mode}", partitions=partitions),
            "sliding": create_topic(f"sliding-{mode}", partitions=partitions),
        }
        for mode in ("ticks", "clean")
    }
    app_ids = {mode: unique_name(f"companion-{mode}") for mode in runs}
    specs = [_spec(kafka_bootstrap, app_ids[m], runs[m], tmp_path / "state") for m in runs]
    users = users_on_every_partition(partitions)
    plain = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0})
    ticking = TickingProducer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 0, **TICKS})
    try:
        with CompanionApps(companion_jars, tmp_path / "jvm", specs) as apps:
            apps.wait_started(list(app_ids.values()))
            # Live, as a reader sees a producer: each click sent when its timestamp is due, so
            # Kafka Streams' upstream tasks write the repartition topic about in timestamp order
            # (replaying a backlog, one task's ticks or data would overtake another's records
            # and make them late, with or without ticks).
            clicks = session_clicks(
                seed,
                _start_ms(),
                users,
                start_spread_ms=1500,
                click_gap_ms=(100, 250),
                session_gap_ms=(1500, 2500),
            )
            for user, ts in clicks:
                time.sleep(max(0.0, ts / 1000 - time.time()))  # pacing the workload
                for producer, mode in ((plain, "clean"), (ticking, "ticks")):
                    _send(producer, runs[mode]["in"], user, ts, partitions)
                plain.poll(0)
            assert plain.flush(30) == 0
            assert ticking.flush(30) == 0
            # The clean run's closing clicks, once Kafka Streams wrote every click to the
            # repartition topic (so none can overtake one).
            by_user = f"{app_ids['clean']}-by-user-repartition"
            wait_for(
                lambda: _end_offsets(kafka_admin, by_user, partitions) >= len(clicks),
                timeout_s=60,
                message="the clean run's clicks in its repartition topic",
            )
            for step in range(1, FLUSH_STEPS + 1):
                for user in _flush_users(partitions):
                    ts = clicks[-1][1] + step * FLUSH_STEP_MS
                    _send(plain, runs["clean"]["in"], user, ts, partitions)
            assert plain.flush(30) == 0
            seen = _await_results(apps, results, runs, partitions, session_windows(clicks, GAP_MS))
        ticks = _ticks(kafka_bootstrap, runs["ticks"]["in"], partitions)
    finally:
        ticking.close()

    expected = session_windows(clicks, GAP_MS)
    assert {m.partition() for m in ticks} == set(range(partitions)), "every partition ticked"
    assert seen["ticks"]["sessions"] == expected
    assert _without_flush(seen["clean"]["sessions"]) == expected
    assert seen["ticks"]["sliding"] == _without_flush(seen["clean"]["sliding"])
    for user in users:  # the sliding windows closed too: each user's last click's left window
        last = max(t for u, t in clicks if u == user)
        assert any(
            r.startswith(f"{user}={last - DIFFERENCE_MS},{last},") for r in seen["ticks"]["sliding"]
        ), user


def _start_ms() -> int:
    """When the clicks start: soon, unless the run (clicks and closing, about 20 s of event time)
    would span a minute boundary; then 3 s past the next one. Kafka Streams 4.1.2's session store
    (60 s segments) drops a segment when a record moves its time past it, before the emission on
    window close: sessions closed at that moment are never emitted, with ticks or with data (see
    docs/readers/kafka-streams.md, "Limits")."""
    start = int(time.time() * 1000) + 500
    into_minute = (start - GAP_MS - GRACE_MS) % 60_000
    if into_minute + RUN_SPAN_MS >= 60_000:
        start += 60_000 - into_minute + GAP_MS + GRACE_MS
    time.sleep(max(0.0, start / 1000 - time.time() - 0.5))  # pacing the workload
    return start


def _send(producer: Producer, topic: str, user: str, ts: int, partitions: int) -> None:
    partition = partition_for_key(user.encode(), partitions)
    producer.produce(topic, key=user, value=f"{user}:click", partition=partition, timestamp=ts)


def _end_offsets(admin: AdminClient, topic: str, partitions: int) -> int:
    """The sum of ``topic``'s end offsets (0 while it does not exist)."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    request = {TopicPartition(topic, p): latest for p in range(partitions)}
    try:
        return sum(f.result(timeout=10).offset for f in admin.list_offsets(request).values())
    except KafkaException:
        return 0


def _await_results(
    apps: CompanionApps,
    results: Callable[[str, int], Results],
    runs: dict[str, dict[str, str]],
    partitions: int,
    expected: set[str],
) -> dict[str, dict[str, set[str]]]:
    """Every output of both runs once all sessions are out in both and the sliding windows of
    both runs agree (the sliding windows close before the sessions, which wait for the
    repartition), failing after a deadline with what was seen."""
    out = {m: {k: results(runs[m][k], partitions) for k in ("sessions", "sliding")} for m in runs}
    seen: dict[str, dict[str, set[str]]] = {m: {} for m in runs}

    def complete() -> bool:
        apps.check()
        for mode, outputs in out.items():
            seen[mode] = {kind: reader.read() for kind, reader in outputs.items()}
        clean = {kind: _without_flush(found) for kind, found in seen["clean"].items()}
        return (
            seen["ticks"]["sessions"] >= expected
            and clean["sessions"] >= expected
            and bool(clean["sliding"])
            and seen["ticks"]["sliding"] == clean["sliding"]
        )

    try:
        wait_for(complete, timeout_s=60, interval_s=0.2, message="every window out")
    except AssertionError as exc:
        missing = {m: sorted(expected - seen[m].get("sessions", set())) for m in seen}
        extra = {m: sorted(seen[m].get("sessions", set()) - expected) for m in seen}
        raise AssertionError(
            f"{exc}; sessions missing: {missing}; unexpected: {extra}; log: {apps.log_path}"
        ) from None
    return seen


def _ticks(bootstrap: str, topic: str, partitions: int) -> list[Message]:
    reader = TopicReader(bootstrap, topic, partitions)
    try:
        return [m for m in reader.read() if is_control_record(m)]
    finally:
        reader.close()


def _without_flush(found: set[str]) -> set[str]:
    return {r for r in found if not r.startswith("flush-")}
