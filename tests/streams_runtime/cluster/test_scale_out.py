"""Scale-out on the real broker (docs/design.md §5; streams_runtime/cluster/assignment.py and
placement.py): runtime instances, each a process of its own (``harness/scale_cluster.py`` on top
of ``harness/session_cluster/``), exactly-once, one standby replica, consumer session timeout
6 s, joining with KIP-848's range assignor.

1. **Balance**: 2, 3, 4 then 5 instances of the session application (two sub-topologies of six
   tasks) and of a stream-table join (one sub-topology reading two co-partitioned topics). Once
   stable: per sub-topology and in all, the tasks per instance differ by at most one (and so do
   the standbys per store); each task's input
   partitions (both topics of a join task) are on one member; each instance's membership
   record names its consumer's member id and the store partitions the group gives it; one
   standby per store partition, never on its active's instance; every instance RUNNING.
2. **Failover under load**: 3 instances, clicks flowing on every partition, SIGKILL of a seeded
   instance at a seeded moment, then its replacement (same slot and state dir). Survivors
   never exit nor go to ERROR; the output is exact; nothing is behind an earlier tick on the
   repartition or output topic; every partition the killed instance owned (input and
   repartition) is processed again (the group's committed offset passes the partition's end at
   the kill); how soon is printed (``./dev bench scale-out`` measures it: about the session
   timeout + 1-1.5 s).
3. **Scale 1 -> 3 -> 1** with clicks flowing: two instances join (after warming up what they
   will own), then leave with SIGTERM. Exact output, no ERROR, and no partition's committed
   offset stands still for longer than the session timeout + 3 s while clicks flow. And
   **1 -> 5 -> 1** with clicks flowing, one instance at a time, a seeded instance SIGKILLed at
   5: balanced after every step (per sub-topology and in total, the standbys too), exact output,
   nothing behind a tick, every survivor RUNNING.
4. **Restores racing rebalances**: a backlog builds up state; with warm-ups off (so a joining
   instance restores inside the group, where rebalances reach it) an instance is SIGKILLed
   while it restores; later, of three instances, one restarts and, a seeded 0.3-0.9 s before
   one of its restores ends (at the pace it restores; a leave takes about that long to reach
   it), another leaves (SIGTERM), chosen so that the leave takes a partition from the
   restoring one when the members' order allows (else it gives it one). Survivors stay
   RUNNING, output exact.

Clicks come from users pinned to the input partition whose number their repartition partition
has (``harness.scale_cluster.ContinuousInput``): a task that stood still replays in order, so
exactness is not lost to records late by more than gap + grace (as Kafka Streams would drop).

CI runs the short form (two kills, 1 -> 3 -> 1 and the session app's balance: about 2 minutes on 2
cores; the kill during a restore and the join app's balance are in the long form only);
``PROGRESS_CONTROL_LONG_TESTS=1`` (as for the other cluster suites) the long form: 20 kills
over 5 seeds, the other scenarios with 3 seeds and a bigger backlog.
Timings are in the assertion messages (and the steps of passing runs, printed: ``-rP``); the
only timed assertion is the stall bound of 3. (no stop-the-world rebalance).
"""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pytest

from harness.scale_cluster import (
    SESSION_TIMEOUT_S,
    AppInstance,
    AppSpec,
    Member,
    Outcome,
    ScaleCluster,
    SessionRun,
    end_offsets,
    home_users,
    longest_stall,
)
from harness.session_cluster.app import INPUT_PARTITIONS
from harness.session_cluster.cluster import create_topics
from harness.session_cluster.config import ClusterConfig
from harness.session_cluster.instance import Instance
from harness.waiting import unique_name

pytestmark = pytest.mark.broker

LONG = os.environ.get("PROGRESS_CONTROL_LONG_TESTS") == "1"
STALL_BOUND_S = SESSION_TIMEOUT_S + 3.0
"""Longest time a partition's committed offset may stand still while clicks flow (scale 1-3-1)."""
SETTLE_S = 120.0
"""Deadline of every wait for a balanced group (a starting process, warm-ups, standbys)."""
SEEDS = (1, 2, 3, 4, 5) if LONG else (1,)
KILLS_PER_RUN = 4 if LONG else 2
BACKLOG_CLICKS = 60_000 if LONG else 30_000
BACKLOG_USERS_PER_PARTITION = 300


def _check_outcome(run: SessionRun, outcome: Outcome, killed: set[str]) -> None:
    print("steps:\n  " + "\n  ".join(run.events))  # shown for passing runs with -rP
    context = run.context()
    assert outcome.failures == {}, f"instances failed: {outcome.failures}{context}"
    states = set(outcome.final_states.values())
    assert states == {"RUNNING"}, f"app states once drained: {outcome.final_states}{context}"
    assert outcome.check.ok, outcome.check.summary() + context
    for where, behind in (("repartition", outcome.behind_repartition), ("out", outcome.behind_out)):
        shown = "\n  ".join(str(b) for b in behind[:10])
        assert behind == [], f"{len(behind)} behind a tick on {where}:\n  {shown}{context}"
    assert outcome.late_drops == 0, f"{outcome.late_drops} late drops{context}"
    codes = {name: code for name, code in outcome.exit_codes.items() if name not in killed}
    assert set(codes.values()) == {0}, f"exit codes after SIGTERM: {codes}{context}"


# -- 1. balance ---------------------------------------------------------------------------------


@pytest.mark.parametrize("app", ["sessions", "join"] if LONG else ["sessions"])
def test_tasks_spread_evenly_over_2_3_4_and_5_instances(
    app: Literal["sessions", "join"], kafka_bootstrap: str, tmp_path: Path
) -> None:
    app_id = unique_name(f"balance-{app}")
    config = ClusterConfig(kafka_bootstrap, app_id, f"{app_id}-in", f"{app_id}-out")
    if app == "join":
        profiles = f"{app_id}-profiles"
        create_topics(kafka_bootstrap, config.source, profiles, config.sink)
        spec = AppSpec.join(config, profiles)
    else:
        create_topics(kafka_bootstrap, config.source, config.sink)
        spec = AppSpec.sessions(config)
    cluster = ScaleCluster(config, tmp_path, spec)
    seen: list[str] = []
    try:
        cluster.start_all(2)
        for count in (2, 3, 4, 5):
            if count > 2:
                cluster.start(count - 1)
            started = time.monotonic()
            placement = cluster.wait_balanced(SETTLE_S)
            took = time.monotonic() - started
            seen.append(f"{count} instances, balanced in {took:.1f}s:\n  {placement.describe()}")
            # wait_balanced checked every property; these say it once more, readably.
            for sub in spec.topology.subtopologies:
                loads = [len(placement.tasks_of(i)[sub.id]) for i in placement.instances.values()]
                assert sorted(loads) == _even(INPUT_PARTITIONS, count), "\n".join(seen)
            tasks = len(spec.topology.subtopologies) * INPUT_PARTITIONS
            totals = [
                sum(map(len, placement.tasks_of(i).values())) for i in placement.instances.values()
            ]
            assert sorted(totals) == _even(tasks, count), "\n".join(seen)
        failures = cluster.failures()
    finally:
        cluster.stop_all()
    print("\n".join(seen))  # shown for passing runs with -rP
    assert failures == {}, f"{failures}\n" + "\n".join(seen)
    codes = {i.name: i.process.returncode for i in cluster.instances}
    assert set(codes.values()) == {0}, f"exit codes after SIGTERM: {codes}"


def _even(tasks: int, instances: int) -> list[int]:
    quota, extra = divmod(tasks, instances)
    return sorted([quota + 1] * extra + [quota] * (instances - extra))


# -- 2. failover under load ---------------------------------------------------------------------


@dataclass
class Takeover:
    victim: str
    at_s: float
    """When, in the run's clock (see the steps in the messages)."""
    resumed_s: dict[tuple[str, int], float]
    """Per partition the victim owned: kill -> its committed offset past its end at the kill."""

    def __str__(self) -> str:
        slowest = max(self.resumed_s.values())
        each = ", ".join(f"{t[-11:]}/{p}: {s:.2f}s" for (t, p), s in sorted(self.resumed_s.items()))
        return f"{self.victim} killed at {self.at_s:.1f}s: resumed in {slowest:.2f}s ({each})"


@pytest.mark.parametrize("seed", SEEDS, ids=lambda s: f"seed{s}")
def test_survivors_take_over_a_killed_instance_under_load(
    seed: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = SessionRun(kafka_bootstrap, tmp_path, seed)
    rng = random.Random(seed)  # noqa: S311 - the seeded moments and victims
    takeovers: list[Takeover] = []
    killed: set[str] = set()
    try:
        run.cluster.start_all(3)
        placement = run.cluster.wait_balanced(SETTLE_S)
        run.note("3 instances balanced")
        watch = run.start_watch()
        run.input.start()
        run.note("input flowing")
        for _ in range(KILLS_PER_RUN):
            # The seeded moment: the scenario itself, not a wait for something.
            time.sleep(rng.uniform(1.0, 4.0))
            victim = rng.choice(sorted(run.cluster.running(), key=lambda i: i.slot))
            owned = sorted(placement.partitions_of(victim))
            run.cluster.kill(victim)
            killed_at = time.monotonic()
            killed.add(victim.name)
            ends = end_offsets(kafka_bootstrap, run.topics())
            run.note(f"SIGKILL {victim.name} (owned {owned})")

            def resumed(
                owned: list[tuple[str, int]] = owned,
                ends: dict[tuple[str, int], int] = ends,
                at: float = killed_at,
            ) -> bool:
                return all(watch.first_past(tp, ends[tp], at) is not None for tp in owned)

            # Survivors that exit meanwhile fail the wait at once.
            run.cluster.wait(resumed, 60, "the killed instance's partitions processed again")
            takeover = Takeover(
                victim.name,
                killed_at - run.started_at,
                {tp: (watch.first_past(tp, ends[tp], killed_at) or 0) - killed_at for tp in owned},
            )
            takeovers.append(takeover)
            run.note(str(takeover))
            run.cluster.start(victim.slot)
            placement = run.cluster.wait_balanced(SETTLE_S)
            run.note(f"replacement of {victim.name} joined, balanced")
        outcome = run.finish()
    finally:
        run.close()
    _check_outcome(run, outcome, killed)
    print("\n".join(str(t) for t in takeovers))  # shown for passing runs with -rP


# -- 3. scale 1 -> 3 -> 1 -----------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS[:3], ids=lambda s: f"seed{s}")
def test_scaling_one_three_one_under_load_never_stalls(
    seed: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = SessionRun(kafka_bootstrap, tmp_path, seed)
    phase_s = 4.0
    try:
        run.cluster.start_all(1)
        run.cluster.wait_balanced(SETTLE_S)
        watch = run.start_watch()
        run.input.start()
        flowing_from = time.monotonic()
        run.note("1 instance, input flowing")
        time.sleep(phase_s)  # the scenario: clicks on one instance for a while
        added = [run.cluster.start(1), run.cluster.start(2)]
        run.note("2 instances started")
        placement = run.cluster.wait_balanced(SETTLE_S)
        run.note(f"3 instances balanced:\n  {placement.describe()}")
        joins = {i.name: i.log_lines("joining the group:") for i in added}
        time.sleep(phase_s)  # the scenario: clicks on three instances
        for instance in added:
            run.cluster.begin_stop(instance)
        run.note("SIGTERM to the two added instances")
        for instance in added:
            instance.wait_stopped()
        run.cluster.wait_balanced(SETTLE_S)
        run.note("1 instance balanced")
        time.sleep(phase_s)  # the scenario: clicks on one instance again
        flowing_until = time.monotonic()
        outcome = run.finish()
    finally:
        run.close()
    stalls = {
        tp: longest_stall(watch, tp, flowing_from, flowing_until)
        for tp in ((t, p) for t in run.topics() for p in range(INPUT_PARTITIONS))
    }
    shown = ", ".join(
        f"{t[-11:]}/{p}: {s:.1f}s from {at - run.started_at:.1f}s"
        for (t, p), (s, at) in sorted(stalls.items())
    )
    run.note(f"longest stall per partition: {shown}")
    _check_outcome(run, outcome, set())
    for name, lines in joins.items():
        assert len(lines) == 1, f"{name} joined {len(lines)} times: {lines}{run.context()}"
        assert "warm-up copies caught up" in lines[0], f"{name}: {lines[0]}{run.context()}"
    worst = max(s for s, _ in stalls.values())
    assert worst <= STALL_BOUND_S, (
        f"a committed offset stood still {worst:.1f}s (> {STALL_BOUND_S}s) while clicks flowed "
        f"over {flowing_until - flowing_from:.0f}s{run.context()}"
    )


@pytest.mark.parametrize("seed", SEEDS[:1], ids=lambda s: f"seed{s}")
def test_scaling_one_to_five_and_back_with_a_kill_is_balanced_after_every_step(
    seed: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    run = SessionRun(kafka_bootstrap, tmp_path, seed)
    rng = random.Random(seed)  # noqa: S311 - a seeded choice of victim, not a secret
    killed: set[str] = set()
    try:
        run.cluster.start_all(1)
        run.cluster.wait_balanced(SETTLE_S)
        run.input.start()
        run.note("1 instance, input flowing")
        for slot in range(1, 5):
            run.cluster.start(slot)
            placement = run.cluster.wait_balanced(SETTLE_S)
            run.note(f"{slot + 1} instances balanced:\n  {placement.describe()}")
        victim = rng.choice(run.cluster.running())
        run.cluster.kill(victim)
        killed.add(victim.name)
        placement = run.cluster.wait_balanced(SETTLE_S)
        run.note(f"{victim.name} SIGKILLed; 4 instances balanced:\n  {placement.describe()}")
        while len(run.cluster.running()) > 1:
            leaver = run.cluster.running()[-1]
            run.cluster.stop(leaver)
            placement = run.cluster.wait_balanced(SETTLE_S)
            count = len(run.cluster.running())
            run.note(
                f"{leaver.name} stopped; {count} instances balanced:\n  {placement.describe()}"
            )
        outcome = run.finish()
    finally:
        run.close()
    _check_outcome(run, outcome, killed)


# -- 4. restores racing rebalances --------------------------------------------------------------


_REMAINING = "streams_restore_remaining_records{task="


def _remaining(instance: AppInstance, sub: int) -> dict[str, float]:
    """Changelog records each task of sub-topology ``sub`` restoring on ``instance`` still has
    to read (0: restored; tasks never restored there, or closed, absent)."""
    found = instance.scrape() or {}
    tasks = {k[len(_REMAINING) : -1]: v for k, v in found.items() if k.startswith(_REMAINING)}
    return {t: v for t, v in tasks.items() if t.startswith(f"{sub}_")}


def _wait_restoring(
    run: SessionRun, instances: list[AppInstance], sub: int
) -> tuple[AppInstance, set[str]]:
    """Until one of ``instances`` restores tasks of sub-topology ``sub`` (its metrics polled
    every 20 ms: a restore of this backlog takes about half a second); that one, and those
    tasks."""

    def restoring() -> tuple[AppInstance, set[str]] | None:
        for instance in instances:
            tasks = {t for t, left in _remaining(instance, sub).items() if left > 0}
            if tasks:
                return instance, tasks
        return None

    return run.cluster.wait(restoring, SETTLE_S, "a restoring instance", interval_s=0.02)


def _wait_restore_ending(
    run: SessionRun, instance: AppInstance, tasks: set[str], sub: int, lead_s: float
) -> tuple[str, float]:
    """Until one of ``tasks`` (restoring on ``instance``), or of those it starts restoring
    meanwhile, is at most ``lead_s`` from the end of its restore at the pace it has restored so
    far, or done; which one, and how far from its end it was (s). (A task revoked while
    restoring is closed: gone.)"""
    first: dict[str, tuple[float, float]] = {t: (time.monotonic(), -1.0) for t in tasks}

    def ending() -> tuple[str, float] | None:
        left, now = _remaining(instance, sub), time.monotonic()
        for task, records in sorted(left.items()):
            since, initially = first.get(task, (now, -1.0))
            if records > 0 and initially < 0:
                first[task] = (now, records)  # its first reading with records left
            elif records == 0 and task in first:
                return task, 0.0
            elif 0 < records < initially and now > since:
                eta = records * (now - since) / (initially - records)
                if eta <= lead_s:
                    return task, eta
        return None

    return run.cluster.wait(
        ending, SETTLE_S, f"a restore on {instance.name} ending", interval_s=0.01
    )


def _restored(instance: AppInstance, sub: int) -> set[str]:
    """The tasks of sub-topology ``sub`` whose restore ``instance`` logged as done."""
    lines = instance.log_lines(" restored: ")
    tasks = {line.split("task ", 1)[1].split(" ", 1)[0] for line in lines}
    return {t for t in tasks if t.startswith(f"{sub}_")}


def _range_of(client: str, clients: list[str]) -> set[int]:
    """The partitions (of every topic) the range assignor gives ``client`` among ``clients``
    (sorted by member id): contiguous ranges, the first ``partitions % members`` one longer."""
    quota, extra = divmod(INPUT_PARTITIONS, len(clients))
    n = clients.index(client)
    start = n * quota + min(n, extra)
    return set(range(start, start + quota + (1 if n < extra else 0)))


def _leaver(
    members: dict[str, Member], instances: list[Instance], restoring: Instance
) -> tuple[Instance, str]:
    """Of ``instances`` other than ``restoring``, one whose leave takes a partition from
    ``restoring``, else the first; and what its leave moves for ``restoring``."""
    others = [i for i in instances if i is not restoring]
    order = [m.client_id for m in sorted(members.values(), key=lambda m: m.member_id)]
    if restoring.client_id not in order or not all(i.client_id in order for i in others):
        return others[0], f"unknown (members {order})"
    moves = []
    for leaver in others:
        rest = [c for c in order if c != leaver.client_id]
        now, then = _range_of(restoring.client_id, order), _range_of(restoring.client_id, rest)
        moves.append(
            (not now - then, leaver, f"revokes {sorted(now - then)}, assigns {sorted(then - now)}")
        )
    _, leaver, move = min(moves, key=lambda m: m[0])
    return leaver, move


@pytest.mark.skipif(not LONG, reason="long form only (~1 min); the short form also kills")
@pytest.mark.parametrize("seed", SEEDS[:3], ids=lambda s: f"seed{s}")
def test_kill_while_restoring_and_leave_when_a_restore_finishes(
    seed: int, kafka_bootstrap: str, tmp_path: Path
) -> None:
    # Warm-ups off: a joining instance restores inside the group, where rebalances reach it.
    run = SessionRun(kafka_bootstrap, tmp_path, seed, settings={"WARMUP_TIMEOUT_MS": "0"})
    stateful = max(run.cluster.spec.stores().values())
    lead_s = random.Random(seed).uniform(0.3, 0.9)  # noqa: S311 - the seeded moment
    writer = run.writer
    killed: set[str] = set()
    try:
        now = int(time.time() * 1000)
        backlog_users = home_users(BACKLOG_USERS_PER_PARTITION, prefix="b")
        for q, users in backlog_users.items():
            # Dated 120 to 20 s ago, before every live click of the partition.
            writer.backlog(q, users, writer.stamps(now - 120_000, 100_000, BACKLOG_CLICKS // 6))
        run.cluster.start_all(1)
        run.cluster.wait_balanced(SETTLE_S)
        run.cluster.wait_processed(writer)
        run.note(f"backlog of {len(writer.clicks)} clicks processed by one instance")
        run.input.start()
        run.note("input flowing")
        # (a) SIGKILL an instance while it restores the tasks it took.
        second = run.cluster.start(1)
        _, restoring_then = _wait_restoring(run, [second], stateful)
        run.cluster.kill(second)
        killed.add(second.name)
        restored = _restored(second, stateful)
        run.note(
            f"SIGKILL {second.name} while restoring {sorted(restoring_then)}; restored by then: "
            f"{sorted(restored)}"
        )
        run.cluster.wait_balanced(SETTLE_S)
        run.note("1 instance balanced again")
        # (b) Three instances; one restarts (its state is in memory: it restores all it gets),
        # and the moment it finishes a restore, another leaves.
        run.cluster.start(1)
        run.cluster.start(2)
        run.cluster.wait_balanced(SETTLE_S)
        run.cluster.stop(run.cluster.slot(1))
        run.cluster.wait_balanced(SETTLE_S)
        run.note("3 instances balanced; i1 stopped, 2 balanced")
        restarted = run.cluster.start(1)
        _, tasks = _wait_restoring(run, [restarted], stateful)
        # Leaving takes about half a second to reach the group (commit, close, a heartbeat).
        task, eta = _wait_restore_ending(run, restarted, tasks, stateful, lead_s)
        members = run.cluster.members(stable=False) or {}
        leaver, move = _leaver(members, [*run.cluster.running()], restarted)
        run.cluster.begin_stop(leaver)
        run.note(
            f"{restarted.name} {eta:.2f}s from restoring {task} (of {sorted(tasks)}); SIGTERM "
            f"{leaver.name}: for {restarted.name} the leave {move}"
        )
        leaver.wait_stopped()
        run.cluster.wait_balanced(SETTLE_S)
        run.note("2 instances balanced")
        time.sleep(3.0)  # the scenario: clicks on the two instances left
        outcome = run.finish()
    finally:
        run.close()
    context = run.context()
    # The scenario's premise: the kill came while the task restores were under way.
    assert len(restored) < INPUT_PARTITIONS // 2, f"restored before the kill{context}"
    _check_outcome(run, outcome, killed)
