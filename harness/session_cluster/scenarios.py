"""Running one scenario end to end (:func:`run_scenario`): a fresh application, input and output;
the scenario's steps (kill, pause, rolling restart, a far-behind start, ...); the drain, the
idle phase and the flush; then every topic read and checked into a :class:`RunResult`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from confluent_kafka import Message

from harness.session_cluster.app import CLOSE_MS, INPUT_PARTITIONS
from harness.session_cluster.checks import behind_earlier_ticks, compare_sessions
from harness.session_cluster.clicks import Session, sessions_of, users_on
from harness.session_cluster.cluster import GroupView, SessionCluster, create_topics
from harness.session_cluster.config import ClusterConfig, ClusterError, TopicPartitionKey
from harness.session_cluster.instance import Instance
from harness.session_cluster.plan import Plan, RunResult, ScenarioName
from harness.session_cluster.reader import (
    OutWatcher,
    high_watermarks,
    is_tick,
    read_topic,
    results_of,
)
from harness.session_cluster.writer import ClickWriter
from harness.waiting import unique_name


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
            topology=plan.topology,
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
    view = run.start(run.plan.instances)
    _roll(run, view)


def _kill_then_rolling(run: _Run) -> None:
    view = run.start(run.plan.instances)
    run.wave(run.plan.wave_s)
    view = _kill_and_replace(run, view)
    _roll(run, view)


def _roll(run: _Run, view: GroupView) -> None:
    """A rolling restart: each instance in turn SIGTERMed while input goes on (on its
    partitions only), restarted, and the group recovered; then input on every partition."""
    cluster, plan = run.cluster, run.plan
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
    "kill-then-rolling": _kill_then_rolling,
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
