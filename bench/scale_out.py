"""Scale-out of one session application over 1 to 5 runtime processes: how its tasks are
spread, how fast the group gets through a backlog, and what a SIGKILL costs, on a real broker.

The application and the harness are ``harness/session_cluster/`` (the promise suite's):
clicks keyed by page on 6 input partitions, ``select_key(user) -> group_by_key -> session count
(gap 2 s, grace 1 s) -> suppress(until_window_closes) -> to(out)``: sub-topology 0 reads the
input, sub-topology 1 the internal repartition topic, 6 tasks each; exactly-once, one standby
replica, consumer session timeout 6 s; every instance a process of its own. Which instance holds
a task is read from the group coordinator (``describe_consumer_groups``, either group protocol:
a member is matched to its process by client id, or by ``group.instance.id`` naming the
runtime's instance id): task (s, p) is on the member owning partition p of sub-topology s's
source topic (``harness/group_watch.py``). Standbys come from each instance's latest record on
the runtime's membership topic. Records processed come from each instance's
``streams_records_processed_total{task}``. ``BENCH_PHASES`` (default
``balance,throughput,failover``) selects the phases:

- **balance**: for ``BENCH_BALANCE_INSTANCES`` (1 to 5) instances, ``BENCH_BALANCE_RUNS`` (3)
  times each on a fresh application id and topics, no input: once the group is stable (exactly
  the running instances as members, every partition owned, the same assignment in 3 polls 0.5 s
  apart), the tasks of each sub-topology on each instance, each instance's total and the
  busiest / least busy of those totals, and the standby tasks on each (once every instance
  published a record after the group settled, with one standby per stateful task, the same in
  two reads 1 s apart; at most 30 s).
- **throughput**: ``BENCH_EVENTS`` (200,000) clicks of ``BENCH_USERS`` (1,000) users written to
  one input topic off the clock, stamped within ``BENCH_SPAN_MS`` (2,000 ms) of each other (less
  than gap + grace: no record is late whatever order the tasks take them in, so nothing is
  dropped and the figure is throughput alone). Then ``BENCH_THROUGHPUT_INSTANCES`` (1 to 5)
  instances, each from a fresh application id reading that input (``BENCH_THROUGHPUT_RUNS``,
  1, rounds, order rotating):
  the time from starting the processes until the group's committed offsets (polled every
  0.2 s) reach the end of the input and, on the repartition topic, the offset after its last
  data record: clicks/s of the whole group, records processed per instance per sub-topology,
  and each count's rate / 1 instance's.
- **failover**, ``BENCH_KILLS`` (10) seeded kills, each on a fresh application: 3 instances; once
  stable, clicks of 36 users on every partition for ``BENCH_WAVE_S`` (3 s), then SIGKILL one
  instance (``random.Random(seed).choice``), the clicks going on for ``BENCH_AFTER_KILL_S``
  (1 s) after it (longer and the records the killed tasks replay would be older than what the
  other tasks wrote meanwhile by more than gap + grace: late, dropped, as in Kafka Streams).
  Measured: kill -> processing resumed (per input and repartition partition the killed instance
  held, the first poll where the group's committed offset passed the one read 0.5 s after the
  kill; the slowest of them; partitions with nothing to process after the kill left out);
  kill -> every task re-owned (the first of 3 polls 0.2 s apart with the group stable, the
  survivors as its only members and every partition owned); the session timeout beside them.
  Then, with the clicks stopped: drain, a flush record per partition, drain, and the output
  compared with the sessions of every click written (``compare_sessions``, exactly-once);
  survivors that exited or logged ``state ERROR``, with their first error lines.

Figures: per run, then min / median / max. A run that fails prints why and the next starts.
``BENCH_GROUP_PROTOCOL`` sets the runtime's ``group_protocol`` (``auto``, the default: KIP-848
on this broker; ``classic``: the classic protocol with the range assignor).
"""

from __future__ import annotations

import faulthandler
import os
import random
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median

from bench._kafka import bootstrap_servers, unique_name
from bench._timing import interleaved
from harness.group_watch import (
    Offsets,
    OffsetsWatch,
    drain,
    log_problems,
    note_failures,
    processed_by_subtopology,
    standby_stores,
    task_owners,
    tasks_per_instance,
    wait_reowned,
)
from harness.session_cluster.app import INPUT_PARTITIONS, session_topology
from harness.session_cluster.checks import SessionCheck, compare_sessions
from harness.session_cluster.clicks import sessions_of
from harness.session_cluster.cluster import SessionCluster, create_topics
from harness.session_cluster.config import (
    SESSION_TIMEOUT_MS,
    ClusterConfig,
    GroupProtocol,
)
from harness.session_cluster.instance import Instance
from harness.session_cluster.reader import data_records, read_topic, results_of
from harness.session_cluster.writer import ClickWriter

PHASES = os.environ.get("BENCH_PHASES", "balance,throughput,failover").split(",")
BALANCE_RUNS = int(os.environ.get("BENCH_BALANCE_RUNS", "3"))
BALANCE_INSTANCES = [
    int(n) for n in os.environ.get("BENCH_BALANCE_INSTANCES", "1,2,3,4,5").split(",")
]
EVENTS = int(os.environ.get("BENCH_EVENTS", "200000"))
USERS = int(os.environ.get("BENCH_USERS", "1000"))
SPAN_MS = int(os.environ.get("BENCH_SPAN_MS", "2000"))
THROUGHPUT_RUNS = int(os.environ.get("BENCH_THROUGHPUT_RUNS", "1"))
THROUGHPUT_INSTANCES = [
    int(n) for n in os.environ.get("BENCH_THROUGHPUT_INSTANCES", "1,2,3,4,5").split(",")
]
KILLS = int(os.environ.get("BENCH_KILLS", "10"))
WAVE_S = float(os.environ.get("BENCH_WAVE_S", "3"))
AFTER_KILL_S = float(os.environ.get("BENCH_AFTER_KILL_S", "1"))
SEED = int(os.environ.get("BENCH_SEED", "1"))
GROUP_PROTOCOL: GroupProtocol = {"consumer": "consumer", "classic": "classic"}.get(
    os.environ.get("BENCH_GROUP_PROTOCOL", ""), "auto"
)
FAILOVER_USERS = 36
STANDBY_TIMEOUT_S = 30.0
RECOVERY_TIMEOUT_S = 120.0
THROUGHPUT_TIMEOUT_S = 1_800.0
BASELINE_DELAY_S = 0.5
"""The victim's committed offsets are read this long after the kill: a commit it had in flight
lands before, none of its tasks' new owners can commit this early (the session timeout)."""
SESSION_TIMEOUT = f"session timeout {SESSION_TIMEOUT_MS / 1000:.1f} s"


class _App:
    """A fresh application id (its own output, and input unless ``source`` is given), its
    topology as the runtime builds it, and a :class:`SessionCluster` of it."""

    def __init__(self, bootstrap: str, workdir: Path, source: str | None = None) -> None:
        self.app_id = unique_name("scale")
        self.source, self.sink = source or f"{self.app_id}-clicks", f"{self.app_id}-out"
        create_topics(bootstrap, *([] if source else [self.source]), self.sink)
        self.topology = session_topology(self.source, self.sink).build(self.app_id)
        (self.repartition,) = self.topology.repartition_topics
        self.config = ClusterConfig(
            bootstrap, self.app_id, self.source, self.sink, group_protocol=GROUP_PROTOCOL
        )
        (workdir / self.app_id).mkdir(parents=True)
        self.cluster = SessionCluster(self.config, workdir / self.app_id)
        self.topics = [self.source, self.repartition]


def _spread(values: Sequence[float]) -> str:
    if not values:
        return "-"
    return f"min {min(values):.2f} s, median {median(values):.2f} s, max {max(values):.2f} s"


# -- balance ------------------------------------------------------------------------------------


def _standbys(app: _App, instances: Sequence[Instance], since_ms: int) -> str:
    """Standby tasks (every store of the task's stores kept there) per sub-topology and per
    instance, and their totals (see the module docstring)."""
    ids = [i.runtime_instance_id or "" for i in instances]
    stores = {spec.name: sub.id for sub in app.topology.subtopologies for spec in sub.stores}
    wanted = len(stores) * INPUT_PARTITIONS if len(instances) > 1 else 0
    deadline = time.monotonic() + STANDBY_TIMEOUT_S
    last: list[frozenset[tuple[str, int]]] | None = None
    while True:
        records = standby_stores(app.config.bootstrap, app.app_id)
        held = [records.get(i, (0, frozenset[tuple[str, int]]()))[1] for i in ids]
        fresh = all(i in records and records[i][0] >= since_ms for i in ids)
        settled = fresh and sum(map(len, held)) == wanted
        note = "" if settled and held == last else f" (not settled in {STANDBY_TIMEOUT_S:.0f} s)"
        if not note or time.monotonic() > deadline:
            break
        last = held if settled else None
        time.sleep(1.0)
    subs = sorted({*stores.values()})
    per_sub = {
        sub: [
            sum(
                all((name, p) in h for name, s in stores.items() if s == sub)
                for p in range(INPUT_PARTITIONS)
            )
            for h in held
        ]
        for sub in subs
    }
    totals = [sum(column) for column in zip(*per_sub.values(), strict=True)]
    split = sum(map(len, held)) - sum(
        len([n for n, s in stores.items() if s == sub]) * sum(per_sub[sub]) for sub in subs
    )
    return (
        "  ".join(f"sub-topology {sub}: {c}" for sub, c in per_sub.items())
        + f";  in all {totals}"
        + (f";  {split} store partitions apart from their task's others" if split else "")
        + note
    )


def _balance_run(n: int, bootstrap: str, workdir: Path) -> str:
    app = _App(bootstrap, workdir)
    try:
        started = time.monotonic()
        app.cluster.start_all(n)
        view = app.cluster.wait_stable()
        stable_s = time.monotonic() - started
        since_ms = int(time.time() * 1000)
        instances = app.cluster.live()
        counts = tasks_per_instance(view, app.topology, [i.client_id for i in instances])
        tasks = "  ".join(f"sub-topology {s}: {c}" for s, c in counts.items())
        totals = [sum(column) for column in zip(*counts.values(), strict=True)]
        ratio = f"{max(totals) / min(totals):.2f}" if min(totals) else "inf"
        return (
            f"{tasks};  in all {totals} (busiest / least busy {ratio});  "
            f"standby tasks {_standbys(app, instances, since_ms)}  "
            f"(stable after {stable_s:.1f} s)"
        )
    finally:
        app.cluster.stop_all()


def _balance(bootstrap: str, workdir: Path) -> None:
    print(
        f"balance: tasks per instance (instances in start order), {BALANCE_RUNS} runs each, "
        f"{GROUP_PROTOCOL} group protocol",
        flush=True,
    )
    for n in BALANCE_INSTANCES:
        for run in range(1, BALANCE_RUNS + 1):
            label = f"  {n} instance{'s' if n > 1 else ' '}, run {run}:"
            try:
                print(f"{label} {_balance_run(n, bootstrap, workdir)}", flush=True)
            except Exception as exc:  # one failed run must not stop the others
                print(f"{label} FAILED {type(exc).__name__}: {exc}", flush=True)


# -- throughput ---------------------------------------------------------------------------------


@dataclass
class _Throughput:
    instances: int
    elapsed_s: float
    first_commit_s: float | None
    processed: dict[str, dict[int, float]]
    """Per instance, records processed per sub-topology."""
    late_drops: float

    @property
    def rate(self) -> float:
        return EVENTS / self.elapsed_s


def _throughput_run(
    n: int, source: str, writer: ClickWriter, bootstrap: str, workdir: Path
) -> _Throughput:
    app = _App(bootstrap, workdir, source=source)
    cluster = app.cluster
    try:
        with OffsetsWatch(bootstrap, app.app_id, app.topics) as watch:
            started = time.monotonic()
            cluster.start_all(n)
            inputs = writer.end_offsets()
            cluster.wait_committed(source, inputs, THROUGHPUT_TIMEOUT_S)
            ends = {(source, p): end for p, end in inputs.items()}
            for msg in data_records(read_topic(bootstrap, app.repartition, INPUT_PARTITIONS)):
                ends[(app.repartition, msg.partition() or 0)] = (msg.offset() or 0) + 1
            cluster.wait_committed(
                app.repartition,
                {p: end for (t, p), end in ends.items() if t == app.repartition},
                THROUGHPUT_TIMEOUT_S,
            )

            def done(offsets: Offsets) -> bool:
                return all(offsets.get(tp, -1) >= end for tp, end in ends.items())

            finished = cluster.wait(lambda: watch.first(done), 10, "the watch to see the end")
            first = watch.first(lambda o: any(o.get((source, p), -1) > 0 for p in inputs))
        late = cluster.late_drops()  # scrapes every instance
        processed = {i.name: processed_by_subtopology(i) for i in app.cluster.live()}
    finally:
        cluster.stop_all()
    return _Throughput(
        n, finished - started, None if first is None else first - started, processed, late
    )


def _throughput_line(r: _Throughput) -> str:
    per = "; ".join(
        f"{name} {sum(subs.values()):,.0f} ("
        + ", ".join(f"sub-topology {s}: {v:,.0f}" for s, v in sorted(subs.items()))
        + ")"
        for name, subs in r.processed.items()
    )
    first = "-" if r.first_commit_s is None else f"{r.first_commit_s:.1f} s"
    return (
        f"  {r.instances} instance{'s' if r.instances > 1 else ' '}: {EVENTS:,} clicks in "
        f"{r.elapsed_s:.1f} s from start (first commit at {first}): {r.rate:,.0f} clicks/s; "
        f"records processed: {per}; late drops {r.late_drops:.0f}"
    )


def _throughput(bootstrap: str, workdir: Path) -> None:
    source = unique_name("scale-clicks")
    create_topics(bootstrap, source)
    writer = ClickWriter(bootstrap, source, SEED)
    users = [f"user-{n:04d}" for n in range(USERS)]
    first_ms = int(time.time() * 1000) - SPAN_MS - 5_000  # all before the writer's ticks
    started = time.monotonic()
    for p in range(INPUT_PARTITIONS):
        count = EVENTS // INPUT_PARTITIONS + (p < EVENTS % INPUT_PARTITIONS)
        writer.backlog(p, users, writer.stamps(first_ms, SPAN_MS, count))
    writer.close()
    print(
        f"throughput: {EVENTS:,} clicks of {USERS:,} users stamped within {SPAN_MS} ms, "
        f"written to {INPUT_PARTITIONS} partitions in {time.monotonic() - started:.0f} s "
        f"(off the clock); {THROUGHPUT_RUNS} round(s)",
        flush=True,
    )
    results: dict[str, list[_Throughput]] = {str(n): [] for n in THROUGHPUT_INSTANCES}

    def run(name: str) -> float:
        try:
            result = _throughput_run(int(name), source, writer, bootstrap, workdir)
        except Exception as exc:  # one failed run must not stop the others
            print(f"  {name} instance(s): FAILED {type(exc).__name__}: {exc}", flush=True)
            return float("nan")
        print(_throughput_line(result), flush=True)
        results[name].append(result)
        return result.rate

    interleaved(run, list(results), THROUGHPUT_RUNS)
    rates = {int(n): median(r.rate for r in rs) for n, rs in results.items() if rs}
    if 1 in rates:
        print(
            "  clicks/s (median): "
            + ", ".join(
                f"{n} instance(s) {rate:,.0f} ({rate / rates[1]:.2f}x 1)"
                for n, rate in rates.items()
            )
            + f" (this machine: {os.cpu_count()} cores)"
        )


# -- failover -----------------------------------------------------------------------------------


@dataclass
class _Kill:
    seed: int
    victim: str
    held: dict[int, list[int]]
    """The victim's tasks: sub-topology -> partitions."""
    resumed_s: dict[str, float | None]
    """Per partition the victim held with something to process after the kill (``in/p``,
    ``rep/p``): kill -> the group's committed offset passed its value at the kill."""
    reowned_s: float | None
    failed: dict[str, str] = field(default_factory=dict)
    """Survivors that exited or logged ``state ERROR``: name -> what happened."""
    problems: dict[str, list[str]] = field(default_factory=dict)
    check: SessionCheck | None = None
    late_drops: float = 0.0
    clicks: int = 0

    @property
    def resumed_all_s(self) -> float | None:
        """When every partition the victim held had resumed (``None``: one never did)."""
        values = list(self.resumed_s.values())
        return None if None in values else max((v for v in values if v is not None), default=0.0)


def _kill_run(seed: int, bootstrap: str, workdir: Path) -> _Kill:
    app = _App(bootstrap, workdir)
    cluster = app.cluster
    writer = ClickWriter(bootstrap, app.source, seed)
    users = [f"user-{n:03d}" for n in range(FAILOVER_USERS)]
    failed: dict[str, str] = {}
    try:
        cluster.start_all(3)
        stable = cluster.wait_stable()
        with OffsetsWatch(bootstrap, app.app_id, app.topics) as watch:
            player = threading.Thread(
                target=writer.play,
                args=(WAVE_S + AFTER_KILL_S, range(INPUT_PARTITIONS), users),
                name="clicks",
                daemon=True,
            )
            player.start()
            time.sleep(WAVE_S)  # the scenario itself: clicks flow this long before the kill
            view = cluster.group() or stable
            victim = random.Random(seed).choice(app.cluster.live())  # noqa: S311 - a seeded choice
            cluster.kill(victim)
            killed_at = time.monotonic()
            survivors = app.cluster.live()
            held = view.assignment.get(victim.client_id) or stable.assignment[victim.client_id]
            reowned = wait_reowned(cluster, app.topics, killed_at, failed, RECOVERY_TIMEOUT_S)
            player.join()
            drain(cluster, writer, failed)
            writer.write_flush()
            drain(cluster, writer, failed)
            drained = time.monotonic()
            note_failures(cluster, failed)
            late = cluster.late_drops()
            final = cluster.wait(lambda: watch.at(drained), 10, "the watch to see the drain")
            base = watch.at(killed_at + BASELINE_DELAY_S) or {}
        resumed: dict[str, float | None] = {}
        for tp in sorted(held, key=lambda tp: (tp[0] != app.source, tp[1])):
            before = base.get(tp, -1)
            if final.get(tp, -1) > before:
                at = watch.first_past(tp, before, after=killed_at)
                name = f"{'in' if tp[0] == app.source else 'rep'}/{tp[1]}"
                resumed[name] = None if at is None else at - killed_at
        owners = task_owners(view, app.topology)
        tasks: dict[int, list[int]] = {}
        for (s, p), client in sorted(owners.items()):
            if client == victim.client_id:
                tasks.setdefault(s, []).append(p)
        result = _Kill(seed, victim.name, tasks, resumed, reowned, failed, late_drops=late)
        result.problems = {i.name: lines for i in survivors if (lines := log_problems(i))}
    finally:
        cluster.stop_all()
        writer.close()
    found = results_of(read_topic(bootstrap, app.sink, INPUT_PARTITIONS))
    result.check = compare_sessions(sessions_of(writer.clicks), found, exactly_once=True)
    result.clicks = len(writer.clicks)
    return result


def _s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def _print_kill(n: int, r: _Kill) -> None:
    held = ", ".join(f"sub-topology {s} tasks {ps}" for s, ps in r.held.items()) or "nothing"
    resumed = ", ".join(f"{name} {_s(v)}" for name, v in r.resumed_s.items())
    died = "; ".join(f"{name} {why}" for name, why in r.failed.items()) or "none"
    check = r.check
    output = "-" if check is None else ("exact" if check.ok else check.summary(3))
    print(
        f"  kill {n}/{KILLS} (seed {r.seed}): SIGKILL {r.victim} holding {held}\n"
        f"    kill -> processing resumed: {_s(r.resumed_all_s)} "
        f"({resumed or 'nothing to process'}); kill -> every task re-owned: "
        f"{_s(r.reowned_s)}; {SESSION_TIMEOUT}\n"
        f"    survivors exited or in ERROR: {died}; output: {r.clicks} clicks, "
        f"{0 if check is None else len(check.expected)} sessions, {output}; "
        f"late drops {r.late_drops:.0f}",
        flush=True,
    )
    for name, lines in r.problems.items():
        for line in lines:
            print(f"      {name}: {line}")


def _failover(bootstrap: str, workdir: Path) -> None:
    print(
        f"failover: {KILLS} kills; 3 instances, one standby, exactly-once, clicks of "
        f"{FAILOVER_USERS} users on every partition {WAVE_S:g} s before the kill and "
        f"{AFTER_KILL_S:g} s after; {SESSION_TIMEOUT}",
        flush=True,
    )
    results: list[_Kill] = []
    for n in range(1, KILLS + 1):
        seed = SEED + n - 1
        try:
            result = _kill_run(seed, bootstrap, workdir)
        except Exception as exc:  # one failed run must not stop the others
            print(f"  kill {n}/{KILLS} (seed {seed}): FAILED {type(exc).__name__}: {exc}")
            continue
        _print_kill(n, result)
        results.append(result)
    if not results:
        return
    print(f"  {len(results)} of {KILLS} kills complete; {SESSION_TIMEOUT}")
    for label, values in (
        ("kill -> processing resumed", [r.resumed_all_s for r in results]),
        ("kill -> every task re-owned", [r.reowned_s for r in results]),
    ):
        known = [v for v in values if v is not None]
        print(
            f"  {label}: {_spread(known)} ({len(known)} kills); per kill "
            f"[{', '.join('never' if v is None else f'{v:.2f}' for v in values)}]"
        )
    failed = [r for r in results if r.failed]
    print(
        f"  survivors exited or in ERROR: {sum(len(r.failed) for r in results)} "
        f"(in {len(failed)} of {len(results)} kills"
        + "".join(f"; seed {r.seed}: {', '.join(r.failed)}" for r in failed)
        + ")"
    )
    checks = [r.check for r in results if r.check is not None]
    print(
        f"  output exact: {sum(c.ok for c in checks)} of {len(results)} kills; records lost "
        f"{sum(c.records_lost for c in checks)} of {sum(r.clicks for r in results)}; "
        f"late drops {sum(r.late_drops for r in results):.0f}"
    )


def main() -> None:
    phases = {"balance": _balance, "throughput": _throughput, "failover": _failover}
    faulthandler.enable()  # a crash in librdkafka's C code shows every thread's Python stack
    unknown = set(PHASES) - set(phases)
    if unknown:
        raise SystemExit(f"BENCH_PHASES: unknown {sorted(unknown)} (known: {list(phases)})")
    with (
        bootstrap_servers() as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp,
    ):
        for name, phase in phases.items():
            if name in PHASES:
                started = time.monotonic()
                phase(bootstrap, Path(tmp))
                print(f"({name}: {time.monotonic() - started:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
