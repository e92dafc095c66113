"""Several runtime processes of one session application, for the progress-promise suite
(``tests/streams_runtime/cluster/test_promise.py``) and its benchmark
(``bench/promise_at_scale.py``).

The application (this module run with ``--instance``) is the one of issue 24: clicks keyed by
page on a 6-partition input, ``select_key(user) -> group_by_key -> session count (gap 2 s,
grace 1 s) -> suppress(until_window_closes) -> to(out)``, so every upstream task writes every
partition of the internal repartition topic. Every setting comes from PROGRESS_CONTROL_RUNTIME_*
env variables, set by :class:`SessionCluster`: its own state dir per instance, consumer session
timeout 6 s, one standby replica, a Prometheus endpoint on a free port.

Around it:

- :class:`ClickWriter` writes the input through ``interceptor.Producer`` (event time = wall
  clock, so idle input partitions get ticks after a second) from seeded users, pages and gaps,
  and keeps every record it wrote: the ground truth (:func:`sessions_of`);
- :class:`SessionCluster` starts, stops, kills (SIGKILL), pauses (SIGSTOP), resumes, replaces
  and restarts instances, reads the consumer group and the metrics, and waits for conditions
  with deadlines;
- the checkers: :func:`compare_sessions` (results against the ground truth) and
  :func:`behind_earlier_ticks` (data written behind a tick on a repartition or output
  partition);
- :func:`run_scenario` runs a scenario end to end (the suite's :data:`SCENARIOS`: kill, pause,
  rolling restart, a far-behind start; the benchmark's ``kill-then-pause`` and ``plain``) and
  returns a :class:`RunResult` with everything the checkers and the benchmark need.
"""

from __future__ import annotations

import faulthandler
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeVar

from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, MemberDescription, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from harness.waiting import unique_name, wait_for
from progress_control.protocol import (
    MalformedControlHeaderError,
    has_control_header,
    parse_control_headers,
)
from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.murmur2 import partition_for_key
from streams_runtime.serdes import Json, String

T = TypeVar("T")

INPUT_PARTITIONS = 6
"""Input partitions; the repartition topic and ``out`` have as many."""
GAP_MS = 2_000
GRACE_MS = 1_000
CLOSE_MS = GAP_MS + GRACE_MS
"""A session is final once stream time reaches its end + gap + grace."""
SESSION_TIMEOUT_MS = 6_000
ALOS_COMMIT_INTERVAL_MS = 500
"""At-least-once commits every 30 s by default. A failover replays what was not committed, and
the replayed span must stay below gap + grace (see :attr:`Plan.victim_s`): 500 ms."""
INPUT_TICK_START_MS = 1_000
"""An input partition idle for a second gets a tick from the interceptor (then every second)."""
ROOT = Path(__file__).resolve().parents[1]
FLUSH_PREFIX = "flush-"
STABLE_POLLS = 3
STARTUP_TIMEOUT_S = 180.0
DRAIN_TIMEOUT_S = 180.0

Guarantee = Literal["exactly_once", "at_least_once"]
GroupProtocol = Literal["auto", "consumer", "classic"]
TopicPartitionKey = tuple[str, int]


class ClusterError(RuntimeError):
    """The cluster did not get where it was waited for; the message says why."""


# -- the application --------------------------------------------------------------------------


def session_topology(source: str, sink: str) -> StreamsBuilder:
    """Issue 24's topology: per-user sessions of page-keyed clicks, final results only, as
    JSON ``{start, end, count}`` keyed by user."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(source)
        .select_key(lambda _page, click: click["user"])
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=GAP_MS, grace_ms=GRACE_MS))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(sink)
    )
    return builder


def run_instance(builder: StreamsBuilder, port_file: Path) -> None:
    """Run an app of ``builder``'s topology in this process (settings from the env), writing
    its bound metrics port to ``port_file`` once known."""
    from progress_control.logging import configure_logging
    from streams_runtime import App

    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    app = App(builder)

    def publish_metrics_port() -> None:
        # metrics_port is 0 (any free port): tell the harness which one was bound.
        while app.metrics_port is None:
            time.sleep(0.05)
        partial = port_file.with_suffix(".partial")
        partial.write_text(str(app.metrics_port))
        partial.rename(port_file)

    threading.Thread(target=publish_metrics_port, name="metrics-port", daemon=True).start()
    app.run()


def _instance_main(source: str, sink: str, port_file: Path) -> None:
    run_instance(session_topology(source, sink), port_file)


# -- input and ground truth ---------------------------------------------------------------------


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


# -- reading topics -----------------------------------------------------------------------------


def _reader(bootstrap: str, **extra: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique_name("promise-reader"),
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            **extra,
        }
    )


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """The high watermark of each partition of ``topic``."""
    consumer = _reader(bootstrap)
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1]
            for p in range(partitions)
        }
    finally:
        consumer.close()


def read_topic(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 120.0
) -> list[Message]:
    """Every record of ``topic`` from the beginning to its current end, read_committed (so
    aborted transactions are not there), in offset order per partition."""
    ends = high_watermarks(bootstrap, topic, partitions)
    consumer = _reader(bootstrap)
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records: list[Message] = []
    reached: set[int] = {p for p, end in ends.items() if end == 0}
    deadline = time.monotonic() + timeout_s
    try:
        while len(reached) < partitions:
            if time.monotonic() > deadline:
                raise ClusterError(f"{topic}: not read to {ends} in {timeout_s}s")
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            error = msg.error()
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF and offset >= ends[partition]:
                    reached.add(partition)
                continue
            records.append(msg)
            if offset + 1 >= ends[partition]:
                reached.add(partition)
    finally:
        consumer.close()
    return records


def is_tick(msg: Message) -> bool:
    """A record with our header is never data (see progress_control.protocol)."""
    return has_control_header(msg.headers())


def data_records(records: Iterable[Message]) -> list[Message]:
    return [m for m in records if not is_tick(m)]


def results_of(records: Iterable[Message]) -> list[Session]:
    """The final session results among ``out``'s records (flush users left out)."""
    found = []
    for msg in data_records(records):
        user = (msg.key() or b"").decode()
        if user.startswith(FLUSH_PREFIX):
            continue
        value = json.loads(msg.value() or b"null")
        found.append(Session(user, value["start"], value["end"], value["count"]))
    return sorted(found)


class OutWatcher:
    """Reads ``out`` (read_committed) in a thread and notes when each final result became
    readable (wall clock, epoch ms): the window-close delay and the liveness checks use it."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._consumer = _reader(bootstrap, **{"enable.partition.eof": False})
        self._consumer.assign([TopicPartition(topic, p, 0) for p in range(INPUT_PARTITIONS)])
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._seen: list[tuple[Session, int]] = []
        self._thread = threading.Thread(target=self._run, name="out-watcher", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for msg in self._consumer.consume(500, 0.2):
                if msg.error() is not None:
                    continue
                arrived = int(time.time() * 1000)
                with self._lock:
                    self._seen.extend((s, arrived) for s in results_of([msg]))

    def seen(self) -> list[tuple[Session, int]]:
        """Every final result read so far with the wall-clock time it was read."""
        with self._lock:
            return list(self._seen)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._consumer.close()


# -- checkers -----------------------------------------------------------------------------------


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


# -- the processes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterConfig:
    """What every instance of one :class:`SessionCluster` shares."""

    bootstrap: str
    application_id: str
    source: str
    sink: str
    guarantee: Guarantee = "exactly_once"
    progress_propagation: bool = True
    group_protocol: GroupProtocol = "auto"
    """The runtime's ``group_protocol`` (it applies the session timeout and heartbeat interval
    below to a KIP-848 group's config)."""

    def env(self) -> dict[str, str]:
        prefix = "PROGRESS_CONTROL_RUNTIME_"
        settings = {
            "APPLICATION_ID": self.application_id,
            "BOOTSTRAP_SERVERS": self.bootstrap,
            "PROCESSING_GUARANTEE": self.guarantee,
            "NUM_STANDBY_REPLICAS": "1",
            "PROGRESS_PROPAGATION": "true" if self.progress_propagation else "false",
            "METRICS_PORT": "0",
            # The checkers read every repartition record at the end: purge none meanwhile.
            "REPARTITION_PURGE_INTERVAL_MS": "3600000",
            "CONSUMER__SESSION_TIMEOUT_MS": str(SESSION_TIMEOUT_MS),
            "CONSUMER__HEARTBEAT_INTERVAL_MS": "500",
            "GROUP_PROTOCOL": self.group_protocol,
        }
        if self.guarantee == "at_least_once":
            settings["COMMIT_INTERVAL_MS"] = str(ALOS_COMMIT_INTERVAL_MS)
        return {
            **os.environ,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
            **{prefix + name: value for name, value in settings.items()},
        }


InstanceState = Literal["running", "paused", "killed", "stopped"]


class Instance:
    """One runtime process: slot ``slot`` (its state dir), start number ``generation``."""

    def __init__(self, config: ClusterConfig, slot: int, generation: int, workdir: Path) -> None:
        self.slot, self.generation = slot, generation
        self.name = f"i{slot}.{generation}"
        self.client_id = f"{config.application_id}-{self.name}"
        self.log_path = workdir / f"{self.name}.log"
        self._port_file = workdir / f"{self.name}.port"
        self._instance_id_file = workdir / f"state-{slot}" / config.application_id / "instance.id"
        self._log = self.log_path.open("ab")
        env = {
            **config.env(),
            "PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(workdir / f"state-{slot}"),
            "PROGRESS_CONTROL_RUNTIME_CONSUMER__CLIENT_ID": self.client_id,
        }
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness.session_cluster",
                "--instance",
                config.source,
                config.sink,
                str(self._port_file),
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.state: InstanceState = "running"
        self.last_metrics: dict[str, float] = {}

    @property
    def metrics_port(self) -> int | None:
        try:
            return int(self._port_file.read_text())
        except (OSError, ValueError):
            return None

    @property
    def runtime_instance_id(self) -> str | None:
        """The runtime's own instance id (kept in its state dir; its membership record's key,
        and its consumer's ``group.instance.id`` when it sets one); ``None`` until written."""
        try:
            return self._instance_id_file.read_text().strip() or None
        except OSError:
            return None

    def scrape(self) -> dict[str, float] | None:
        """Counter totals (``name{label=value,...}`` -> value) from ``/metrics``; ``None`` when
        not answering. The last answer is kept in :attr:`last_metrics`."""
        port = self.metrics_port
        if port is None or self.state != "running":
            return None
        try:
            url = f"http://127.0.0.1:{port}/metrics"
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
        except (OSError, urllib.error.URLError):
            return None
        found: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
                found[f"{sample.name}{{{labels}}}"] = float(sample.value)
        self.last_metrics = found
        return found

    def total(self, name: str, **labels: str) -> float:
        """The sum of ``name`` over matching labels, from the last scrape."""
        wanted = [f"{k}={v}" for k, v in labels.items()]
        return sum(
            value
            for key, value in self.last_metrics.items()
            if key.startswith(name + "{") and all(w in key for w in wanted)
        )

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None and self.state in ("running", "paused"):
            raise ClusterError(f"instance {self.name} exited with {code}: {self.log_tail()}")

    def log_tail(self, lines: int = 8) -> list[str]:
        text = self.log_path.read_text(errors="replace").splitlines()
        return [line[-400:] for line in text[-lines:]]

    def kill(self) -> None:
        """SIGKILL: nothing committed, nothing closed, metrics since the last scrape lost."""
        self.state = "killed"
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)
        self._log.close()

    def pause(self) -> None:
        """SIGSTOP: the process, its heartbeats and its in-flight requests freeze."""
        self.process.send_signal(signal.SIGSTOP)
        self.state = "paused"

    def resume(self) -> None:
        self.process.send_signal(signal.SIGCONT)
        self.state = "running"

    def terminate(self) -> None:
        """SIGTERM: the app commits and leaves the group (wait with :meth:`wait_stopped`)."""
        if self.state == "paused":
            self.resume()
        self.state = "stopped"
        if self.process.poll() is None:
            self.process.terminate()

    def wait_stopped(self, timeout_s: float = 60.0) -> int:
        try:
            code = self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(10)
        self._log.close()
        return code


@dataclass(frozen=True)
class GroupView:
    """The consumer group as the coordinator describes it."""

    stable: bool
    assignment: dict[str, frozenset[TopicPartitionKey]]  # client id -> partitions


class SessionCluster:
    """Runtime processes of one application (see the module docstring), each in its own slot
    (state dir); replacing or restarting a slot keeps its state dir, as a StatefulSet pod."""

    def __init__(self, config: ClusterConfig, workdir: Path) -> None:
        self.config = config
        self.workdir = workdir
        self.instances: list[Instance] = []
        """Every process started, in order (the running ones: :meth:`live`)."""
        self._admin = AdminClient({"bootstrap.servers": config.bootstrap})
        self.retired_late_drops = 0.0
        self.retired_ticks = 0.0
        self.unscraped: list[str] = []
        """Instances whose last counters are unknown (SIGKILLed after their last scrape)."""

    # -- processes ------------------------------------------------------------------------------

    def start(self, slot: int) -> Instance:
        generation = sum(1 for i in self.instances if i.slot == slot)
        instance = Instance(self.config, slot, generation, self.workdir)
        self.instances.append(instance)
        return instance

    def start_all(self, count: int) -> list[Instance]:
        return [self.start(slot) for slot in range(count)]

    def live(self) -> list[Instance]:
        """Instances started and neither killed nor stopped (paused ones included)."""
        return [i for i in self.instances if i.state in ("running", "paused")]

    def slot(self, slot: int) -> Instance:
        return next(i for i in reversed(self.instances) if i.slot == slot)

    def _retire(self, instance: Instance) -> None:
        instance.scrape()
        self.retired_late_drops += instance.total("streams_dropped_records_total", reason="late")
        self.retired_ticks += instance.total("streams_progress_ticks_total")

    def kill(self, instance: Instance) -> None:
        """Scrape, then SIGKILL (whatever it counts after the scrape is lost)."""
        self._retire(instance)
        self.unscraped.append(instance.name)
        instance.kill()

    def stop(self, instance: Instance) -> None:
        """Scrape, then SIGTERM and wait for the exit (it commits and leaves the group)."""
        self.begin_stop(instance)
        instance.wait_stopped()

    def begin_stop(self, instance: Instance) -> None:
        """:meth:`stop` without waiting for the exit (see :meth:`Instance.wait_stopped`)."""
        if instance.state == "paused":
            instance.resume()
        self._retire(instance)
        instance.terminate()

    def stop_all(self) -> None:
        for instance in self.live():
            self.begin_stop(instance)
        for instance in self.instances:
            if instance.process.returncode is None:
                instance.wait_stopped()

    def check_alive(self) -> None:
        for instance in self.instances:
            instance.check_alive()

    # -- waiting ----------------------------------------------------------------------------------

    def wait(
        self,
        condition: Callable[[], T | None],
        timeout_s: float,
        what: str,
        *,
        interval_s: float = 0.5,
    ) -> T:
        """Poll ``condition`` until it returns a truthy value; :class:`ClusterError` after
        ``timeout_s`` or as soon as an instance that was not stopped on purpose exits."""

        def checked() -> T | None:
            self.check_alive()
            return condition()

        try:
            return wait_for(checked, timeout_s=timeout_s, interval_s=interval_s, message=what)
        except AssertionError as exc:
            tails = {i.name: i.log_tail(3) for i in self.live()}
            raise ClusterError(f"{exc}; logs: {tails}") from None

    def group(self) -> GroupView | None:
        """The group's state and assignment by client id; ``None`` when it cannot be read."""
        group_id = self.config.application_id
        try:
            description = self._admin.describe_consumer_groups([group_id])[group_id].result(10)
        except (KafkaException, TimeoutError):  # no answer in 10 s, e.g. a broker just started
            return None
        assignment = {
            self._client_of(m): frozenset(
                (tp.topic, tp.partition)
                for tp in (m.assignment.topic_partitions if m.assignment else [])
            )
            for m in description.members
        }
        return GroupView(description.state == ConsumerGroupState.STABLE, assignment)

    def _client_of(self, member: MemberDescription) -> str:
        """The client id of the instance ``member`` is: its own client id when it is one of
        ours, else (a static member, classic or KIP-848, whose client id is another) the
        instance whose runtime instance id its ``group.instance.id`` names."""
        if any(i.client_id == member.client_id for i in self.instances):
            return member.client_id
        static = member.group_instance_id or ""
        for instance in reversed(self.instances):  # a slot's latest start first
            instance_id = instance.runtime_instance_id
            if static and instance_id and instance_id in static:
                return instance.client_id
        return member.client_id

    def wait_stable(self, timeout_s: float = STARTUP_TIMEOUT_S) -> GroupView:
        """Until the group is stable with exactly the running instances as members, each
        owning something, every source partition owned, the same way in
        :data:`STABLE_POLLS` polls in a row."""
        sources = self.source_partitions()
        streak: list[GroupView] = []

        def settled() -> GroupView | None:
            view = self.group()
            running = {i.client_id for i in self.live() if i.state == "running"}
            owned = set().union(*view.assignment.values()) if view else set()
            ok = (
                view is not None
                and view.stable
                and set(view.assignment) == running
                and all(view.assignment.values())
                and owned >= sources
            )
            if not ok or (streak and streak[-1].assignment != view.assignment):  # type: ignore[union-attr]
                streak.clear()
            if ok and view is not None:
                streak.append(view)
            return streak[-1] if len(streak) >= STABLE_POLLS else None

        return self.wait(settled, timeout_s, "a stable group with every partition owned")

    def source_partitions(self) -> set[TopicPartitionKey]:
        """The input's and the repartition topic's partitions (the topics the group reads)."""
        topics = [self.config.source]
        repartition = self.repartition_topic(wait=False)
        if repartition:
            topics.append(repartition)
        return {(t, p) for t in topics for p in range(INPUT_PARTITIONS)}

    def repartition_topic(self, *, wait: bool = True) -> str:
        """The internal repartition topic (named after the application id)."""

        def find() -> str:
            topics = self._admin.list_topics(timeout=10).topics
            prefix = self.config.application_id
            names = [t for t in topics if t.startswith(prefix) and t.endswith("-repartition")]
            return names[0] if len(names) == 1 else ""

        return self.wait(find, 120, "the repartition topic") if wait else find()

    def input_partitions_of(self, instance: Instance, view: GroupView) -> list[int]:
        """The input partitions ``instance`` owns in ``view``."""
        owned = view.assignment.get(instance.client_id, frozenset())
        return sorted(p for t, p in owned if t == self.config.source)

    def committed(self, topic: str) -> dict[int, int]:
        """The group's committed offsets on ``topic`` (stable ones: no pending transaction)."""
        request = ConsumerGroupTopicPartitions(
            self.config.application_id,
            [TopicPartition(topic, p) for p in range(INPUT_PARTITIONS)],
        )
        futures = self._admin.list_consumer_group_offsets([request], require_stable=True)
        result = futures[self.config.application_id].result(30)
        return {tp.partition: tp.offset for tp in result.topic_partitions or []}

    def wait_committed(self, topic: str, targets: dict[int, int], timeout_s: float) -> None:
        """Until the group committed at least ``targets[p]`` on each partition ``p``."""

        def reached() -> bool:
            try:
                committed = self.committed(topic)
            except KafkaException:
                return False
            return all(committed.get(p, -1) >= target for p, target in targets.items())

        self.wait(reached, timeout_s, f"offsets {targets} committed on {topic}")

    def wait_processed(self, writer: ClickWriter, timeout_s: float = DRAIN_TIMEOUT_S) -> None:
        """Until every input record written so far went through both sub-topologies: the
        input committed past it, then the repartition topic past every data record on it
        (the results of a processed record are committed with its offset)."""
        self.wait_committed(self.config.source, writer.end_offsets(), timeout_s)
        repartition = self.repartition_topic()
        records = read_topic(self.config.bootstrap, repartition, INPUT_PARTITIONS)
        targets: dict[int, int] = {}
        for msg in data_records(records):
            targets[msg.partition() or 0] = (msg.offset() or 0) + 1
        self.wait_committed(repartition, targets, timeout_s)

    # -- metrics --------------------------------------------------------------------------------

    def late_drops(self) -> float:
        """Records dropped as late, over every instance: the running ones scraped now, the
        stopped and killed ones as last scraped."""
        live = 0.0
        for instance in self.live():
            instance.scrape()
            live += instance.total("streams_dropped_records_total", reason="late")
        return live + self.retired_late_drops

    def ticks_sent(self) -> float:
        """``streams_progress_ticks`` over every instance (as :meth:`late_drops`)."""
        live = 0.0
        for instance in self.live():
            instance.scrape()
            live += instance.total("streams_progress_ticks_total")
        return live + self.retired_ticks

    def logs(self, lines: int = 5) -> dict[str, list[str]]:
        return {i.name: i.log_tail(lines) for i in self.instances}


def create_topics(bootstrap: str, *names: str) -> None:
    """Create ``names`` with :data:`INPUT_PARTITIONS` partitions each."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topics = [NewTopic(n, num_partitions=INPUT_PARTITIONS, replication_factor=1) for n in names]
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=30)


# -- scenarios ----------------------------------------------------------------------------------

ScenarioName = Literal["kill", "pause", "rolling", "far-behind", "kill-then-pause", "plain"]
SCENARIOS: tuple[ScenarioName, ...] = ("kill", "pause", "rolling", "far-behind")
"""The test suite's; the benchmark runs ``kill-then-pause`` and a ``plain`` baseline."""


@dataclass(frozen=True)
class Plan:
    """How one scenario runs: stream lengths, the fault's timing, the checks' deadlines."""

    guarantee: Guarantee = "exactly_once"
    progress_propagation: bool = True
    instances: int = 3
    seed: int = 1
    users: int = 36
    wave_s: float = 5.0
    """Input on every partition before the fault, and again after recovery."""
    victim_s: float = 1.0
    """After the fault, input on the victim's partitions only (the others idle: ticks). Its
    tasks' new owners replay it, with what was not committed, each task at its own pace, so a
    repartition partition can get one task's fresher records before another's older ones:
    with more than gap + grace between them, the older ones are late even without ticks
    (as in Kafka Streams). Kept well below 3 s so that without ticks nothing is late."""
    pause_s: float = 12.0
    """How long the paused instance stays stopped (pause scenario)."""
    backlog: int = 2_000
    """Old records on the far-behind partition (far-behind scenario)."""
    backlog_age_s: float = 180.0
    catch_up_s: float = 8.0
    """How long the far-behind partition takes to write the second half of its backlog (the
    group forms meanwhile, and the other partitions' tasks tick)."""
    liveness_timeout_s: float = 60.0
    """With ticks, how long after the last wave all its sessions may take to come out."""
    idle_s: float = 0.0
    """An idle phase after the last wave (ticks counted there; 0: none)."""


@dataclass
class RunResult:
    """Everything one scenario run produced, for the checkers and the benchmark."""

    scenario: ScenarioName
    plan: Plan
    topics: dict[str, str]
    """The run's ``input``, ``repartition`` and ``out`` topics (kept on the broker)."""
    expected: list[Session]
    found: list[Session]
    check: SessionCheck
    behind_input: list[Behind]
    """Data behind the interceptor's ticks on the input: the scenario broke the promise
    itself (out-of-order input stays out of order), so the other checks would mean nothing."""
    behind_repartition: list[Behind]
    behind_out: list[Behind]
    late_drops: float
    unscraped: list[str]
    progress_ticks: float
    clicks: int
    last_click_ms: int
    close_delays_ms: list[int]
    """Per session of the last wave closed after the data stopped: when it was read from
    ``out`` minus when it was due (end + gap + grace)."""
    all_closed_on_ticks: bool
    """Every session of the input was out before the flush (only ticks closed the last ones)."""
    idle_ticks: int
    idle_partitions: int
    idle_s: float
    events: list[str]
    logs: dict[str, list[str]]

    @property
    def ticks_per_idle_partition_hour(self) -> float:
        hours = self.idle_s / 3600
        return self.idle_ticks / (self.idle_partitions * hours) if hours else float("nan")

    def failures(self) -> list[str]:
        """What broke the promise in this run (empty: nothing)."""
        problems = []
        if self.behind_input:
            problems.append(f"the input itself has data behind its ticks: {self.behind_input[0]}")
        if not self.check.ok:
            problems.append(f"results: {self.check.summary()}")
        for name, behind in (("repartition", self.behind_repartition), ("out", self.behind_out)):
            if behind:
                shown = "; ".join(str(b) for b in behind[:5])
                problems.append(f"{len(behind)} records behind a tick on {name}: {shown}")
        if self.late_drops:
            problems.append(f"{self.late_drops:.0f} records dropped as late")
        if self.plan.progress_propagation and not self.all_closed_on_ticks:
            problems.append("some sessions did not close on ticks before the flush")
        return problems


class _Run:
    """One scenario's cluster, input and clock of events."""

    def __init__(self, bootstrap: str, workdir: Path, plan: Plan) -> None:
        self.plan = plan
        app_id = unique_name("promise")
        self.source, self.sink = f"{app_id}-clicks", f"{app_id}-out"
        create_topics(bootstrap, self.source, self.sink)
        self.config = ClusterConfig(
            bootstrap,
            app_id,
            self.source,
            self.sink,
            plan.guarantee,
            plan.progress_propagation,
        )
        self.cluster = SessionCluster(self.config, workdir)
        self.writer = ClickWriter(bootstrap, self.source, plan.seed)
        self.watcher = OutWatcher(bootstrap, self.sink)
        self.users = [f"user-{n:03d}" for n in range(plan.users)]
        self.events: list[str] = []
        self._t0 = time.monotonic()

    def note(self, event: str) -> None:
        self.events.append(f"{time.monotonic() - self._t0:7.1f}s {int(time.time() * 1000)} {event}")

    def wave(self, seconds: float, partitions: Sequence[int] = range(INPUT_PARTITIONS)) -> None:
        self.note(f"input on partitions {list(partitions)} for {seconds}s")
        self.writer.play(seconds, list(partitions), self.users)

    def stable(self) -> GroupView:
        view = self.cluster.wait_stable()
        self.note(f"stable group: {_describe(view)}")
        return view

    def recovered(self) -> GroupView:
        """A stable group that processed every record written so far. The next input waits
        for it: records replayed after fresher data reached the same repartition partition
        are late even without ticks (gap + grace is all a session aggregation waits)."""
        view = self.stable()
        self.cluster.wait_processed(self.writer)
        self.note("every record so far processed")
        return view

    def start(self, count: int) -> GroupView:
        """Start ``count`` instances and wait for a stable group before any input: tasks
        moving while the group forms would take their records seconds after the others'."""
        self.cluster.start_all(count)
        self.note(f"{count} instances started")
        return self.stable()

    def victim(self, view: GroupView) -> tuple[Instance, list[int]]:
        """The running instance owning the most input partitions, and those partitions."""
        running = [i for i in self.cluster.live() if i.state == "running"]
        chosen = max(running, key=lambda i: len(self.cluster.input_partitions_of(i, view)))
        inputs = self.cluster.input_partitions_of(chosen, view)
        if len(inputs) == INPUT_PARTITIONS:
            # Then no other instance has inputs to go idle and tick: the fault tests nothing.
            self.note(f"{chosen.name} owns every input partition: nobody else ticks")
        return chosen, inputs

    def close(self) -> None:
        self.watcher.close()
        self.cluster.stop_all()
        self.writer.close()


def _describe(view: GroupView) -> str:
    return "; ".join(
        f"{cid.rsplit('-', 1)[-1]}: {sorted(f'{t[-11:]}/{p}' for t, p in tps)}"
        for cid, tps in sorted(view.assignment.items())
    )


def _kill(run: _Run) -> None:
    view = run.start(run.plan.instances)
    run.wave(run.plan.wave_s)
    _kill_and_replace(run, view)
    run.wave(run.plan.wave_s)


def _pause(run: _Run) -> None:
    view = run.start(run.plan.instances)
    run.wave(run.plan.wave_s)
    _pause_and_resume(run, view)
    run.wave(run.plan.wave_s)


def _kill_then_pause(run: _Run) -> None:
    view = run.start(run.plan.instances)
    run.wave(run.plan.wave_s)
    view = _kill_and_replace(run, view)
    run.wave(run.plan.wave_s)
    _pause_and_resume(run, view)
    run.wave(run.plan.wave_s)


def _kill_and_replace(run: _Run, view: GroupView) -> GroupView:
    """SIGKILL the instance owning the most input partitions, input on its partitions only
    for ``plan.victim_s``, then its replacement (same slot and state dir)."""
    victim, inputs = run.victim(view)
    run.cluster.kill(victim)
    run.note(f"SIGKILL {victim.name} (inputs {inputs})")
    run.wave(run.plan.victim_s, inputs)
    run.cluster.start(victim.slot)
    run.note(f"replacement of {victim.name} started")
    return run.recovered()


def _pause_and_resume(run: _Run, view: GroupView) -> GroupView:
    """SIGSTOP the instance owning the most input partitions for ``plan.pause_s``, input on
    its partitions only for the first ``plan.victim_s`` (the others idle: ticks), SIGCONT."""
    victim, inputs = run.victim(view)
    victim.scrape()
    victim.pause()
    paused_at = time.monotonic()
    run.note(f"SIGSTOP {victim.name} (inputs {inputs})")
    run.wave(run.plan.victim_s, inputs)
    # The scenario itself: the others' inputs stay idle (and get ticks) until the pause ends.
    time.sleep(max(0.0, paused_at + run.plan.pause_s - time.monotonic()))
    victim.resume()
    run.note(f"SIGCONT {victim.name}")
    return run.recovered()


def _rolling(run: _Run) -> None:
    cluster, plan = run.cluster, run.plan
    view = run.start(plan.instances)
    for slot in range(plan.instances):
        run.wave(plan.victim_s)
        instance = cluster.slot(slot)
        inputs = cluster.input_partitions_of(instance, view)
        cluster.begin_stop(instance)
        run.note(f"SIGTERM {instance.name} (inputs {inputs})")
        run.wave(plan.victim_s, inputs or range(INPUT_PARTITIONS))
        instance.wait_stopped()
        cluster.start(slot)
        run.note(f"{instance.name} restarted")
        view = run.recovered()
    run.wave(plan.wave_s)


def _far_behind(run: _Run) -> None:
    plan, writer = run.plan, run.writer
    # Partition 0 is a source minutes behind, catching up: half its backlog is there before
    # the instances start, the rest trickles in (never idle long enough for an input tick,
    # which would be dated past the rest) while they start and the others are live and
    # ticked. Until it caught up, old and live data go to different repartition partitions
    # (the old users' to the first half, the live users' to the second) and the live data
    # spans less than gap + grace: so without ticks nothing is late, whatever order the
    # tasks take records in.
    half = INPUT_PARTITIONS // 2
    old_users = users_on(range(half), max(4, plan.users // 2), prefix="old-")
    live_users = users_on(range(half, INPUT_PARTITIONS), max(4, plan.users // 2), prefix="new-")
    now = int(time.time() * 1000)
    old = writer.stamps(now - int(plan.backlog_age_s * 1000), 60_000, plan.backlog)
    for p in range(1, INPUT_PARTITIONS):
        writer.backlog(p, live_users, writer.stamps(now - 1_500, 1_500, 20))
    writer.backlog(0, old_users, old[: len(old) // 2])
    run.note(
        f"{len(old) // 2} records on partition 0 dated {plan.backlog_age_s:.0f}s back; "
        "a burst dated the last 1.5 s on the others (their ticks follow)"
    )
    run.cluster.start_all(plan.instances)
    run.note(f"{plan.instances} instances started")
    writer.backlog(0, old_users, old[len(old) // 2 :], over_s=plan.catch_up_s)
    run.note(f"{len(old) - len(old) // 2} more old records on partition 0")
    run.recovered()
    run.wave(plan.wave_s)


def _plain(run: _Run) -> None:
    run.start(run.plan.instances)
    run.wave(run.plan.wave_s)
    run.wave(run.plan.wave_s)


_STEPS: dict[ScenarioName, Callable[[_Run], None]] = {
    "kill": _kill,
    "pause": _pause,
    "rolling": _rolling,
    "far-behind": _far_behind,
    "kill-then-pause": _kill_then_pause,
    "plain": _plain,
}


def run_scenario(scenario: ScenarioName, bootstrap: str, workdir: Path, plan: Plan) -> RunResult:
    """Run ``scenario`` on a fresh application, input and output, then drain and check it.

    Steps: the scenario's own (see ``_kill``, ``_pause``, ...), ending with input on every
    partition; then, with ticks, wait until every session of the input came out on ticks alone
    (the liveness part: no flush yet); until every record is processed; an idle phase of
    ``plan.idle_s``; a flush record on every partition; until it is processed; the counters;
    stop; read the repartition and output topics and check them.
    """
    run = _Run(bootstrap, workdir, plan)
    try:
        _STEPS[scenario](run)
        last_click = max(c.timestamp for c in run.writer.clicks)
        run.note("input stopped")
        expected = sessions_of(run.writer.clicks)
        closed = _wait_closed_on_ticks(run, expected)
        # The flush goes last: were it read before another task's last records reached the
        # same repartition partition, they would be late with or without ticks.
        run.cluster.wait_processed(run.writer)
        idle_offsets = _idle_phase(run)
        flush_at = run.writer.write_flush()
        run.note(f"flush at {flush_at}")
        run.cluster.wait_processed(run.writer)
        run.note("flush processed")
        late_drops = run.cluster.late_drops()
        progress_ticks = run.cluster.ticks_sent()
        seen = run.watcher.seen()
    finally:
        run.close()
    repartition = run.cluster.repartition_topic()
    rep_records = read_topic(bootstrap, repartition, INPUT_PARTITIONS)
    out_records = read_topic(bootstrap, run.sink, INPUT_PARTITIONS)
    in_records = read_topic(bootstrap, run.source, INPUT_PARTITIONS)
    found = results_of(out_records)
    idle_ticks = _ticks_between(rep_records + out_records, idle_offsets)
    return RunResult(
        scenario=scenario,
        plan=plan,
        topics={"input": run.source, "repartition": repartition, "out": run.sink},
        expected=expected,
        found=found,
        check=compare_sessions(expected, found, exactly_once=plan.guarantee == "exactly_once"),
        behind_input=behind_earlier_ticks(in_records),
        behind_repartition=behind_earlier_ticks(rep_records),
        behind_out=behind_earlier_ticks(out_records),
        late_drops=late_drops,
        unscraped=list(run.cluster.unscraped),
        progress_ticks=progress_ticks,
        clicks=len(run.writer.clicks),
        last_click_ms=last_click,
        close_delays_ms=_close_delays(expected, seen, last_click),
        all_closed_on_ticks=closed,
        idle_ticks=idle_ticks,
        idle_partitions=2 * INPUT_PARTITIONS,
        idle_s=plan.idle_s,
        events=run.events,
        logs=run.cluster.logs(),
    )


def _wait_closed_on_ticks(run: _Run, expected: Sequence[Session]) -> bool:
    """With ticks: until every expected session was read from ``out`` (its bounds, at least
    its count), at most ``plan.liveness_timeout_s``; whether they all were."""
    if not run.plan.progress_propagation:
        return False
    wanted = {(s.user, s.start, s.end): s.count for s in expected}

    def all_out() -> bool:
        got: dict[tuple[str, int, int], int] = {}
        for s, _ in run.watcher.seen():
            got[(s.user, s.start, s.end)] = max(s.count, got.get((s.user, s.start, s.end), 0))
        return all(got.get(k, -1) >= n for k, n in wanted.items())

    try:
        run.cluster.wait(all_out, run.plan.liveness_timeout_s, "every session out on ticks")
    except ClusterError as exc:
        run.note(f"not every session came out on ticks: {exc}")
        return False
    run.note("every session out on ticks")
    return True


def _idle_phase(run: _Run) -> dict[TopicPartitionKey, tuple[int, int]]:
    """Wait ``plan.idle_s`` with no input (the scenario itself); the offsets the repartition
    and output partitions had at its start and end."""
    if run.plan.idle_s <= 0:
        return {}
    topics = [run.cluster.repartition_topic(), run.sink]
    start = {
        (t, p): end
        for t in topics
        for p, end in high_watermarks(run.config.bootstrap, t, INPUT_PARTITIONS).items()
    }
    run.note(f"idle for {run.plan.idle_s}s")
    time.sleep(run.plan.idle_s)
    return {
        (t, p): (start[(t, p)], end)
        for t in topics
        for p, end in high_watermarks(run.config.bootstrap, t, INPUT_PARTITIONS).items()
    }


def _ticks_between(
    records: Iterable[Message], ranges: dict[TopicPartitionKey, tuple[int, int]]
) -> int:
    count = 0
    for msg in records:
        window = ranges.get((msg.topic() or "", msg.partition() or 0))
        if window and window[0] <= (msg.offset() or 0) < window[1] and is_tick(msg):
            count += 1
    return count


def _close_delays(
    expected: Sequence[Session], seen: Sequence[tuple[Session, int]], last_click_ms: int
) -> list[int]:
    """For each expected session due after the data stopped (only ticks can close it): the
    time it was first read from ``out`` minus its due time (end + gap + grace)."""
    first_read: dict[Session, int] = {}
    for session, at in seen:
        first_read.setdefault(session, at)
    return [
        first_read[s] - (s.end + CLOSE_MS)
        for s in expected
        if s.end + CLOSE_MS >= last_click_ms and s in first_read
    ]


def _main() -> None:
    if sys.argv[1:2] != ["--instance"] or len(sys.argv) != 5:
        sys.exit("usage: python -m harness.session_cluster --instance SOURCE SINK PORT_FILE")
    _instance_main(sys.argv[2], sys.argv[3], Path(sys.argv[4]))


if __name__ == "__main__":
    _main()
