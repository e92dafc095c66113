"""Runtime processes for the scale-out suite (``tests/streams_runtime/cluster/test_scale_out.py``):
every instance a process of its own, as :mod:`harness.session_cluster` runs them, plus what that
suite drives and reads beyond it.

- Two applications: the session topology of :mod:`harness.session_cluster` (two sub-topologies
  of six tasks: clicks -> repartition -> sessions) and a **join** (this module run with
  ``--instance``): a stream of views joined with a table of profiles, two co-partitioned
  6-partition topics read by one sub-topology (six tasks, each with partition ``p`` of both
  topics and the table's store).
- :class:`ScaleCluster`: a :class:`~harness.session_cluster.cluster.SessionCluster` of either
  application, with runtime settings of its own (env variables), that reads who owns what
  (:meth:`ScaleCluster.placement`: the consumer group's members, each instance's membership
  record and ``/health/ready``) and checks it (:func:`balance_problems`).
- :class:`ContinuousInput`: clicks in real time from a thread, each user on its *home* input
  partition (the one whose number its repartition partition has), so each repartition partition
  gets data from one upstream task only. A task that stands still for a failover or a move then
  replays its records in order, and nothing other tasks wrote meanwhile makes them late (gap +
  grace is 3 s, a failover takes the 6 s session timeout: with users on every partition the
  replayed clicks would be dropped as late, as Kafka Streams drops them). Ticks still come from
  every upstream task: what :func:`~harness.session_cluster.checks.behind_earlier_ticks` checks.
- :class:`SessionRun`: one session application on fresh topics with all of the above, the
  group's committed offsets watched (:class:`~harness.group_watch.OffsetsWatch`), and
  :meth:`SessionRun.finish`: drain, stop, read every topic, check.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from harness.group_watch import Offsets, OffsetsWatch, failure_of, log_problems
from harness.session_cluster.app import INPUT_PARTITIONS, run_instance, session_topology
from harness.session_cluster.checks import (
    Behind,
    SessionCheck,
    behind_earlier_ticks,
    compare_sessions,
)
from harness.session_cluster.clicks import sessions_of, users_on
from harness.session_cluster.cluster import SessionCluster, create_topics
from harness.session_cluster.config import (
    ROOT,
    SESSION_TIMEOUT_MS,
    ClusterConfig,
    ClusterError,
    TopicPartitionKey,
)
from harness.session_cluster.instance import Instance
from harness.session_cluster.reader import high_watermarks, read_topic, results_of
from harness.session_cluster.writer import ClickWriter
from harness.waiting import unique_name
from streams_runtime import StreamsBuilder
from streams_runtime.cluster.assignment import front_lane_instance
from streams_runtime.cluster.membership import MemberInfo
from streams_runtime.serdes import Json, String
from streams_runtime.topology import Topology

JOIN_STORE = "profiles"
"""The join's table store (logged: standbys and warm-ups keep copies of it)."""
SESSION_TIMEOUT_S = SESSION_TIMEOUT_MS / 1000
BALANCED_POLLS = 3
"""Placements in a row, 0.5 s apart, without a problem: balanced."""
OFFSETS_POLL_S = 0.2
_ERROR_STATE = re.compile(r"streams app \S+: ERROR\b")


# -- the join application ---------------------------------------------------------------------


def join_topology(views: str, profiles: str, sink: str) -> StreamsBuilder:
    """Views (keyed by user) joined with the latest profile of their user, to ``sink``."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    table = builder.table(profiles, store_name=JOIN_STORE)
    joined = builder.stream(views).join(table, lambda view, profile: [view, profile])
    joined.to(sink)
    return builder


def _instance_main(views: str, profiles: str, sink: str, port_file: Path) -> None:
    run_instance(join_topology(views, profiles, sink), port_file)


# -- the processes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class AppSpec:
    """The application a :class:`ScaleCluster` runs: the module run with ``--instance``, its
    arguments before the port file, and its topology (built: sub-topologies, stores)."""

    module: str
    args: tuple[str, ...]
    topology: Topology

    @classmethod
    def sessions(cls, config: ClusterConfig) -> AppSpec:
        topology = session_topology(config.source, config.sink).build(config.application_id)
        return cls("harness.session_cluster", (config.source, config.sink), topology)

    @classmethod
    def join(cls, config: ClusterConfig, profiles: str) -> AppSpec:
        """The join of ``config.source`` (views) with ``profiles``, to ``config.sink``."""
        builder = join_topology(config.source, profiles, config.sink)
        topology = builder.build(config.application_id)
        return cls("harness.scale_cluster", (config.source, profiles, config.sink), topology)

    def stores(self) -> dict[str, int]:
        """Logged stores (what standbys copy) and their sub-topology."""
        return {
            spec.name: sub.id
            for sub in self.topology.subtopologies
            for spec in sub.stores
            if spec.logged
        }


class AppInstance(Instance):
    """An :class:`~harness.session_cluster.instance.Instance` of any :class:`AppSpec`, with runtime
    settings (``PROGRESS_CONTROL_RUNTIME_<NAME>``) on top of the cluster config's."""

    def __init__(  # noqa: PLR0917 - the base class's arguments, plus the app and its settings
        self,
        config: ClusterConfig,
        slot: int,
        generation: int,
        workdir: Path,
        spec: AppSpec,
        settings: Mapping[str, str],
    ) -> None:
        # The base class starts the session app: its attributes, set as it sets them, and
        # another command. (Not super().__init__: that would start a process of its own.)
        self.slot, self.generation = slot, generation
        self.name = f"i{slot}.{generation}"
        self.client_id = f"{config.application_id}-{self.name}"
        self.log_path = workdir / f"{self.name}.log"
        self._port_file = workdir / f"{self.name}.port"
        state_dir = workdir / f"state-{slot}"
        self._instance_id_file = state_dir / config.application_id / "instance.id"
        self._log = self.log_path.open("ab")
        prefix = "PROGRESS_CONTROL_RUNTIME_"
        env = {
            **config.env(),
            **{prefix + name: value for name, value in settings.items()},
            f"{prefix}STATE_DIR": str(state_dir),
            f"{prefix}CONSUMER__CLIENT_ID": self.client_id,
        }
        command = [sys.executable, "-m", spec.module, "--instance", *spec.args]
        self.process = subprocess.Popen(
            [*command, str(self._port_file)],
            env=env,
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
        )
        self.state = "running"
        self.last_metrics = {}

    def health(self) -> dict[str, object] | None:
        """``/health/ready``'s body (``state``, ``active_tasks``, ``restoring_tasks``); None
        when it does not answer."""
        port = self.metrics_port
        if port is None or self.process.poll() is not None:
            return None
        url = f"http://127.0.0.1:{port}/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                body = response.read()
        except urllib.error.HTTPError as exc:  # 503: not ready, the same body
            body = exc.read()
        except OSError:
            return None
        found = json.loads(body)
        return found if isinstance(found, dict) else None

    def log_lines(self, needle: str) -> list[str]:
        """This process's log lines containing ``needle``."""
        text = self.log_path.read_text(errors="replace")
        return [line[:400] for line in text.splitlines() if needle in line]


@dataclass(frozen=True)
class Member:
    """One consumer group member as the coordinator describes it."""

    member_id: str
    client_id: str
    partitions: frozenset[TopicPartitionKey]


@dataclass
class Placement:
    """Who owns what at one moment: the group's members, each instance's membership record
    and app state (``/health/ready``)."""

    members: dict[str, Member]
    """Client id -> group member."""
    records: dict[str, MemberInfo]
    """Runtime instance id -> its latest membership record."""
    health: dict[str, dict[str, object] | None]
    """Instance name -> ``/health/ready`` body."""
    instances: dict[str, Instance]
    """Instance name -> process (the running ones)."""
    spec: AppSpec
    problems: list[str] = field(default_factory=list)

    def partitions_of(self, instance: Instance) -> frozenset[TopicPartitionKey]:
        member = self.members.get(instance.client_id)
        return member.partitions if member else frozenset()

    def tasks_of(self, instance: Instance) -> dict[int, list[int]]:
        """Sub-topology -> the partitions ``p`` whose task ``instance`` owns (every source topic's
        partition ``p`` is its)."""
        owned = self.partitions_of(instance)
        return {
            sub.id: [
                p
                for p in range(INPUT_PARTITIONS)
                if all((t, p) in owned for t in sub.source_topics)
            ]
            for sub in self.spec.topology.subtopologies
        }

    def record_of(self, instance: Instance) -> MemberInfo | None:
        return self.records.get(instance.runtime_instance_id or "")

    def describe(self) -> str:
        lines = []
        for name, instance in sorted(self.instances.items()):
            record = self.record_of(instance)
            member = self.members.get(instance.client_id)
            state = (self.health.get(name) or {}).get("state")
            lines.append(
                f"{name} ({instance.runtime_instance_id}, member "
                f"{member.member_id if member else None}, {state}): tasks "
                f"{self.tasks_of(instance)}; record: "
                + (
                    f"active {record.active} standby {record.standby} restoring "
                    f"{record.restoring} member {record.group_member_id}"
                    if record
                    else "none"
                )
            )
        return "\n  ".join(lines)


def _task_problems(placement: Placement) -> list[str]:
    """Each task's inputs on one member, each task owned, tasks per instance differing by at
    most one in every sub-topology and in all."""
    problems = []
    owner_of = {
        tp: client for client, member in placement.members.items() for tp in member.partitions
    }
    for sub in placement.spec.topology.subtopologies:
        for p in range(INPUT_PARTITIONS):
            owners = {owner_of.get((t, p)) for t in sub.source_topics}
            if len(owners) != 1 or None in owners:
                problems.append(f"task {sub.id}_{p}: its input partitions are on {owners}")
        loads = [len(placement.tasks_of(i)[sub.id]) for i in placement.instances.values()]
        if loads and max(loads) - min(loads) > 1:
            problems.append(f"sub-topology {sub.id}: tasks per instance {loads}")
    totals = [sum(map(len, placement.tasks_of(i).values())) for i in placement.instances.values()]
    if totals and max(totals) - min(totals) > 1:
        problems.append(f"tasks per instance in all: {totals}")
    return problems


def _record_problems(placement: Placement) -> list[str]:
    """Each instance's record: its group member id, its active store partitions as the group
    assigns them, RUNNING and restoring nothing."""
    problems = []
    for name, instance in placement.instances.items():
        record = placement.record_of(instance)
        member = placement.members.get(instance.client_id)
        health = placement.health.get(name)
        if health is None or health.get("state") != "RUNNING" or health.get("restoring_tasks"):
            problems.append(f"{name}: /health/ready {health}")
        if record is None:
            problems.append(f"{name}: no membership record for {instance.runtime_instance_id}")
            continue
        if member is None or record.group_member_id != member.member_id:
            member_id = member.member_id if member else None
            problems.append(
                f"{name}: record's member {record.group_member_id}, group's {member_id}"
            )
        tasks = placement.tasks_of(instance)
        for store, sub in placement.spec.stores().items():
            active = record.active.get(store, ())
            if active != tuple(tasks[sub]):
                problems.append(f"{name}: record's active {store} {active}, tasks {tasks[sub]}")
    return problems


def _standby_problems(placement: Placement, standbys: int) -> list[str]:
    """``standbys`` standbys per logged store partition (fewer with fewer other instances),
    none on its active's instance, per store as many on every instance as on any other, give
    or take one."""
    problems = []
    wanted = min(standbys, len(placement.instances) - 1)
    for store, sub in placement.spec.stores().items():
        for p in range(INPUT_PARTITIONS):
            holders, active = [], None
            for name, instance in placement.instances.items():
                record = placement.record_of(instance)
                if record is not None and p in record.standby.get(store, ()):
                    holders.append(name)
                if p in placement.tasks_of(instance)[sub]:
                    active = name
            if active in holders:
                problems.append(f"a standby of {store}/{p} on its active's instance {active}")
            if len(holders) != wanted:
                problems.append(f"{store}/{p}: standbys on {holders}, wanted {wanted}")
        counts = [
            len(record.standby.get(store, ())) if (record := placement.record_of(i)) else 0
            for i in placement.instances.values()
        ]
        if counts and max(counts) - min(counts) > 1:
            problems.append(f"{store}: standbys per instance {counts}")
    return problems


def balance_problems(placement: Placement, standbys: int = 1) -> list[str]:
    """What keeps ``placement`` from a stable, balanced group (empty: nothing): the group's
    members exactly the running instances (by client id), each mapped to its process by the
    member id in its membership record; every task's input partitions on one member, each task
    owned once, per sub-topology the tasks per instance differing by at most one; each record's
    active store partitions the tasks the group gives it; ``standbys`` standbys per logged store
    partition, none on its active's instance; every instance RUNNING, restoring nothing."""
    expected = {i.client_id for i in placement.instances.values()}
    problems = []
    if set(placement.members) != expected:
        problems.append(f"group members {sorted(placement.members)}, instances {sorted(expected)}")
    return (
        problems
        + _task_problems(placement)
        + _record_problems(placement)
        + _standby_problems(placement, standbys)
    )


class ScaleCluster(SessionCluster):
    """A :class:`~harness.session_cluster.cluster.SessionCluster` of ``spec``'s application, every
    instance with ``settings`` (runtime setting name -> value) on top of the config's."""

    def __init__(
        self,
        config: ClusterConfig,
        workdir: Path,
        spec: AppSpec,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(config, workdir)
        self.spec = spec
        self.settings = dict(settings or {})
        self.app_instances: list[AppInstance] = []
        self._describer = AdminClient({"bootstrap.servers": config.bootstrap})

    def start(self, slot: int) -> AppInstance:
        generation = sum(1 for i in self.instances if i.slot == slot)
        instance = AppInstance(
            self.config, slot, generation, self.workdir, self.spec, self.settings
        )
        self.instances.append(instance)
        self.app_instances.append(instance)
        return instance

    def running(self) -> list[AppInstance]:
        """Started, and neither killed nor stopped nor paused."""
        return [i for i in self.app_instances if i.state == "running"]

    def source_partitions(self) -> set[TopicPartitionKey]:
        topics = self.spec.topology.source_topics
        return {(t, p) for t in topics for p in range(INPUT_PARTITIONS)}

    def members(self, *, stable: bool = True) -> dict[str, Member] | None:
        """The group's members by client id; None when it cannot be read (or, with ``stable``,
        is not stable)."""
        group_id = self.config.application_id
        try:
            found = self._describer.describe_consumer_groups([group_id])[group_id].result(10)
        except (KafkaException, TimeoutError):
            return None
        if stable and found.state != ConsumerGroupState.STABLE:
            return None
        # An instance with lanes (streams_runtime/processing/lanes.py) is two members of one
        # client id: its front lane (front_lane_instance names its instance) and its back
        # lane, whose member id its membership record names. The placeholder is no task's.
        placeholder = f"{group_id}-lanes"
        members: dict[str, Member] = {}
        for m in sorted(
            found.members, key=lambda m: front_lane_instance(m.group_instance_id) is not None
        ):
            partitions = frozenset(
                (tp.topic, tp.partition)
                for tp in (m.assignment.topic_partitions if m.assignment else [])
                if tp.topic != placeholder
            )
            if m.client_id in members:  # the front lane, after its back
                known = members[m.client_id]
                members[m.client_id] = Member(
                    known.member_id, m.client_id, known.partitions | partitions
                )
            else:
                members[m.client_id] = Member(m.member_id, m.client_id, partitions)
        return members

    def membership_records(self) -> dict[str, MemberInfo]:
        """The latest record of every instance on ``<application_id>-membership``, by runtime
        instance id (those whose latest is a tombstone, a clean leave, left out)."""
        topic = f"{self.config.application_id}-membership"
        latest: dict[str, MemberInfo | None] = {}
        try:
            records = read_topic(self.config.bootstrap, topic, 1, timeout_s=30)
        except (KafkaException, ClusterError):  # not created yet, or not readable now
            return {}
        for msg in records:
            value = msg.value()
            latest[(msg.key() or b"").decode()] = (
                None if value is None else MemberInfo.from_json(value)
            )
        return {k: v for k, v in latest.items() if v is not None}

    def placement(self) -> Placement | None:
        """Who owns what now (None while the group is not stable)."""
        members = self.members()
        if members is None:
            return None
        running = self.running()
        return Placement(
            members,
            self.membership_records(),
            {i.name: i.health() for i in running},
            {i.name: i for i in running},
            self.spec,
        )

    def wait_balanced(self, timeout_s: float, standbys: int = 1) -> Placement:
        """Until :func:`balance_problems` finds nothing in :data:`BALANCED_POLLS` placements in
        a row with the same assignment; :class:`~harness.session_cluster.config.ClusterError`
        with the last problems found after ``timeout_s``, or as soon as an instance exits."""
        last: list[Placement] = []
        streak: list[Placement] = []

        def balanced() -> Placement | None:
            found = self.placement()
            if found is None:
                streak.clear()
                return None
            found.problems = balance_problems(found, standbys)
            last[:] = [found]
            if found.problems or (streak and streak[-1].members != found.members):
                streak.clear()
            if not found.problems:
                streak.append(found)
            return found if len(streak) >= BALANCED_POLLS else None

        try:
            return self.wait(balanced, timeout_s, "a balanced group")
        except ClusterError as exc:
            if not last:
                raise
            raise ClusterError(
                f"{exc}\nlast problems: {last[0].problems}\n  {last[0].describe()}"
            ) from None

    def failures(self) -> dict[str, str]:
        """Instances that exited while meant to run, or logged the ERROR state (killed and
        stopped ones too), with why and their first error lines."""
        found = {}
        for instance in self.instances:
            running = instance.state in ("running", "paused")
            why = failure_of(instance) if running else None
            if why is None and _ERROR_STATE.search(instance.log_path.read_text(errors="replace")):
                why = "state ERROR"
            if why is not None:
                found[instance.name] = f"{why}: {log_problems(instance)}"
        return found

    def problem_lines(self) -> dict[str, list[str]]:
        """Every instance's first log lines that name an error or an exception."""
        return {i.name: lines for i in self.instances if (lines := log_problems(i, 6))}


# -- input --------------------------------------------------------------------------------------


def home_users(per_partition: int, prefix: str = "u") -> dict[int, list[str]]:
    """``per_partition`` users for each input partition ``q``, whose repartition (and output)
    partition is ``q`` too (named ``<prefix><q>-<n>``)."""
    return {
        q: users_on([q], per_partition, prefix=f"{prefix}{q}-") for q in range(INPUT_PARTITIONS)
    }


class ContinuousInput:
    """Clicks in real time from a thread until :meth:`stop`, each user on its home partition
    (see the module docstring), at :class:`~harness.session_cluster.writer.ClickWriter`'s pace:
    within a session every 0.1-1.5 s, a 2.5-5 s pause (the session ends) one click in five, all
    drawn from ``random.Random(seed)``. The writer keeps every click: the ground truth."""

    def __init__(self, writer: ClickWriter, users: Mapping[int, Sequence[str]], seed: int) -> None:
        self.writer = writer
        self._homes = [(user, q) for q, names in users.items() for user in names]
        self._rng = random.Random(seed)  # noqa: S311 - a seeded workload, not a secret
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def flowing(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="clicks", daemon=True)
        self._thread.start()

    def _gap_s(self) -> float:
        if self._rng.random() < 0.2:
            return self._rng.uniform(2.5, 5.0)  # past the gap: the session ends
        return self._rng.uniform(0.1, 1.5)

    def _run(self) -> None:
        try:
            now = time.monotonic()
            due = {user: now + self._rng.uniform(0, 1.0) for user, _ in self._homes}
            while not self._stop.is_set():
                now = time.monotonic()
                for user, home in self._homes:
                    if due[user] <= now:
                        self.writer.click(user, home)
                        due[user] = now + self._gap_s()
                # The workload's own pace: until the next click is due.
                self._stop.wait(max(0.0, min(due.values()) - time.monotonic()))
        except BaseException as exc:  # raised by stop()
            self._error = exc

    def stop(self) -> None:
        """Stop clicking, every click delivered; raises what failed in the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)
        if self._error is not None:
            raise ClusterError(f"the input thread failed: {self._error!r}")
        self.writer.wait_delivered()


# -- one session application ----------------------------------------------------------------


def end_offsets(bootstrap: str, topics: Sequence[str]) -> dict[TopicPartitionKey, int]:
    """The end of every partition of ``topics`` as a read_committed reader sees it (the last
    stable offset: the high watermark, or the first record of a transaction still open)."""
    return {
        (t, p): end
        for t in topics
        for p, end in high_watermarks(bootstrap, t, INPUT_PARTITIONS).items()
    }


def longest_stall(
    watch: OffsetsWatch, tp: TopicPartitionKey, start: float, end: float
) -> tuple[float, float]:
    """The longest time in ``[start, end]`` (monotonic) between two polls of ``watch`` that
    saw ``tp``'s committed offset move (the edges count as moves), and when it began."""
    moves, after = [start], start
    offset = (watch.at(start) or {}).get(tp, -1)

    def moved(offsets: Offsets) -> bool:
        return offsets.get(tp, -1) > offset

    while (at := watch.first(moved, after)) is not None and at < end:
        moves.append(at)
        offset, after = (watch.at(at) or {}).get(tp, offset), at
    moves.append(end)
    return max((b - a, a) for a, b in itertools.pairwise(moves))


@dataclass
class Outcome:
    """What a :class:`SessionRun` produced, checked."""

    check: SessionCheck
    behind_repartition: list[Behind]
    behind_out: list[Behind]
    late_drops: float
    exit_codes: dict[str, int | None]
    """Instance name -> exit code (SIGKILLed ones: -9)."""
    failures: dict[str, str]
    """Instances that exited unexpectedly or logged the ERROR state."""
    final_states: dict[str, object]
    """Instance name -> app state (``/health/ready``) of every running instance once drained,
    before the stop."""
    clicks: int


class SessionRun:
    """The session application on fresh topics: a :class:`ScaleCluster` (with ``settings``),
    a :class:`ContinuousInput` of ``users_per_partition`` users per partition, the group's
    committed offsets on the input and the repartition topic watched once :meth:`watch` is
    called, and a clock of what happened (:meth:`note`)."""

    def __init__(
        self,
        bootstrap: str,
        workdir: Path,
        seed: int,
        *,
        users_per_partition: int = 6,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        app_id = unique_name("scale")
        self.bootstrap = bootstrap
        self.source, self.sink = f"{app_id}-clicks", f"{app_id}-out"
        create_topics(bootstrap, self.source, self.sink)
        self.config = ClusterConfig(bootstrap, app_id, self.source, self.sink)
        self.cluster = ScaleCluster(self.config, workdir, AppSpec.sessions(self.config), settings)
        self.writer = ClickWriter(bootstrap, self.source, seed)
        self.users = home_users(users_per_partition)
        self.input = ContinuousInput(self.writer, self.users, seed)
        self.watch: OffsetsWatch | None = None
        self.events: list[str] = []
        self.started_at = time.monotonic()
        """The run's clock starts here (monotonic): :meth:`note` counts from it."""
        self._closed = False

    def note(self, event: str) -> None:
        """``event`` with the run's clock and the wall clock (UTC, as the instances log)."""
        now = datetime.now(UTC).strftime("%H:%M:%S.%f")[:-3]
        self.events.append(f"{time.monotonic() - self.started_at:6.1f}s {now} {event}")

    def topics(self) -> list[str]:
        """The group's topics: the input and the repartition topic."""
        return [self.source, self.cluster.repartition_topic()]

    def start_watch(self) -> OffsetsWatch:
        self.watch = OffsetsWatch(
            self.bootstrap, self.config.application_id, self.topics(), OFFSETS_POLL_S
        ).__enter__()
        return self.watch

    def finish(self) -> Outcome:
        """Stop the input, write the flush records, wait until every record went through both
        sub-topologies, read the late drops and the app states, stop every instance (SIGTERM),
        then read the topics and check them."""
        if self.input.flowing:
            self.input.stop()
            self.note("input stopped")
        self.writer.write_flush()
        self.cluster.wait_processed(self.writer)
        self.note("flush processed")
        late_drops = self.cluster.late_drops()
        states = {i.name: (i.health() or {}).get("state") for i in self.cluster.running()}
        failures = self.cluster.failures()
        self.close()
        repartition = self.cluster.repartition_topic()
        out = read_topic(self.bootstrap, self.sink, INPUT_PARTITIONS)
        rep = read_topic(self.bootstrap, repartition, INPUT_PARTITIONS)
        return Outcome(
            check=compare_sessions(
                sessions_of(self.writer.clicks), results_of(out), exactly_once=True
            ),
            behind_repartition=behind_earlier_ticks(rep),
            behind_out=behind_earlier_ticks(out),
            late_drops=late_drops,
            exit_codes={i.name: i.process.returncode for i in self.cluster.instances},
            failures=failures,
            final_states=states,
            clicks=len(self.writer.clicks),
        )

    def close(self) -> None:
        """Stop everything (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        if self.input.flowing:
            self.input.stop()
        if self.watch is not None:
            self.watch.__exit__(None, None, None)
            self.watch = None
        self.cluster.stop_all()
        self.writer.close()

    def context(self) -> str:
        """The clock of events and every instance's log tail, for assertion messages."""
        events = "\n  ".join(self.events)
        logs = "\n  ".join(f"{name}: {tail}" for name, tail in self.cluster.logs(lines=8).items())
        problems = self.cluster.problem_lines()
        return f"\nsteps:\n  {events}\nproblem lines: {problems}\nlogs:\n  {logs}"


def _main() -> None:
    if sys.argv[1:2] != ["--instance"] or len(sys.argv) != 6:
        sys.exit("usage: python -m harness.scale_cluster --instance VIEWS PROFILES SINK PORT_FILE")
    _instance_main(sys.argv[2], sys.argv[3], sys.argv[4], Path(sys.argv[5]))


if __name__ == "__main__":
    _main()
