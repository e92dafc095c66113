"""The progress promise at scale (issue 24): three runtime instances through a SIGKILL and a
SIGSTOP, against one instance, on a real broker.

The application and the harness are ``harness/session_cluster/`` (the promise suite's):
clicks keyed by page on 6 input partitions through ``interceptor.Producer`` (event time = wall
clock, idle partitions ticked after 1 s), ``select_key(user) -> group_by_key -> session count
(gap 2 s, grace 1 s) -> suppress(until_window_closes) -> to(out)``, exactly-once unless
``BENCH_GUARANTEE=at_least_once``, one standby, consumer session timeout 6 s.

Each of ``BENCH_RUNS`` (default 10) seeded runs does, on fresh topics and processes:

- **3 instances** (``kill-then-pause``): input on every partition for ``BENCH_WAVE_S`` (5 s);
  SIGKILL the instance owning the most input partitions, input on its partitions only for 1 s
  (the others idle, so ticked), start its replacement (same state dir), wait until everything
  is processed; a second wave; SIGSTOP the instance owning the most input partitions for 12 s
  (input on its partitions only for the first second), SIGCONT, wait until everything is
  processed; a last wave;
- **1 instance** (``plain``), the baseline: the same waves, no fault;

then, in both: wait (at most ``BENCH_LIVENESS_S``, 30 s) until every session came out on
ticks alone; an idle phase of ``BENCH_IDLE_S`` (30 s) with no input; a flush record on every
input partition; drain; read the repartition and output topics.

Printed per run and summed: records lost (clicks of ground-truth sessions missing from the
results), sessions wrong (missing or unexpected), records behind an earlier tick on the
repartition and output partitions, late drops (a SIGKILLed instance's drops after its last
scrape are not counted); the runtime's ticks per idle partition-hour (control records on the
6 repartition and 6 output partitions during the idle phase), 3 instances / 1; and the
window-close delay after the data stops (per session of the last wave due after its last
click: when it was read from ``out``, read_committed, minus its end + gap + grace),
3 instances / 1. A run that fails (a cluster that does not settle, an instance dying) prints
why, and the next run starts.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from statistics import median

from bench._kafka import bootstrap_servers
from harness.session_cluster.config import Guarantee
from harness.session_cluster.plan import Plan, RunResult
from harness.session_cluster.scenarios import run_scenario

RUNS = int(os.environ.get("BENCH_RUNS", "10"))
IDLE_S = float(os.environ.get("BENCH_IDLE_S", "30"))
WAVE_S = float(os.environ.get("BENCH_WAVE_S", "5"))
LIVENESS_S = float(os.environ.get("BENCH_LIVENESS_S", "30"))
GUARANTEE: Guarantee = (
    "at_least_once" if os.environ.get("BENCH_GUARANTEE") == "at_least_once" else "exactly_once"
)


def _plan(seed: int, instances: int) -> Plan:
    return Plan(
        guarantee=GUARANTEE,
        instances=instances,
        seed=seed,
        wave_s=WAVE_S,
        liveness_timeout_s=LIVENESS_S,
        idle_s=IDLE_S,
    )


def _wrong_sessions(result: RunResult) -> int:
    return len(result.check.missing) + len(result.check.unexpected)


def _line(label: str, result: RunResult) -> str:
    delays = sorted(result.close_delays_ms)
    delay = (
        f"median {median(delays) / 1000:.2f} s, max {delays[-1] / 1000:.2f} s" if delays else "-"
    )
    return (
        f"  {label}: {result.clicks} clicks, {len(result.expected)} sessions; "
        f"lost {result.check.records_lost} records, {_wrong_sessions(result)} sessions wrong; "
        f"behind a tick: {len(result.behind_repartition)} repartition, "
        f"{len(result.behind_out)} out; late drops {result.late_drops:.0f}; "
        f"idle ticks {result.idle_ticks} ({result.ticks_per_idle_partition_hour:.0f} per "
        f"partition-hour); close delay {delay}; all closed on ticks: "
        f"{result.all_closed_on_ticks}"
    )


def _run(seed: int, bootstrap: str, workdir: Path) -> tuple[RunResult, RunResult]:
    started = time.monotonic()
    cluster = run_scenario("kill-then-pause", bootstrap, workdir / "three", _plan(seed, 3))
    single = run_scenario("plain", bootstrap, workdir / "one", _plan(seed, 1))
    print(f"run seed={seed} ({time.monotonic() - started:.0f} s)")
    print(_line("3 instances", cluster))
    print(_line("1 instance ", single), flush=True)
    for b in (cluster.behind_repartition + cluster.behind_out)[:3]:
        print(f"    e.g. {b}")
    return cluster, single


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _summary(results: Sequence[tuple[RunResult, RunResult]]) -> None:
    clusters = [c for c, _ in results]
    singles = [s for _, s in results]
    n = len(results)
    lost = [c.check.records_lost for c in clusters]
    print(
        f"{n} of {RUNS} runs, {GUARANTEE}, waves {WAVE_S:.0f} s, idle phase {IDLE_S:.0f} s; "
        f"3 instances with a SIGKILL and a 12 s SIGSTOP:"
    )
    print(
        f"  records lost: {sum(lost)} of {sum(c.clicks for c in clusters)} "
        f"(runs with a loss: {sum(1 for x in lost if x)}, per run {lost})"
    )
    wrong = [_wrong_sessions(c) for c in clusters]
    print(
        f"  sessions wrong: {sum(wrong)} of {sum(len(c.expected) for c in clusters)} "
        f"(per run {wrong})"
    )
    print(
        f"  records behind an earlier tick: repartition "
        f"{sum(len(c.behind_repartition) for c in clusters)}, out "
        f"{sum(len(c.behind_out) for c in clusters)} "
        f"(1 instance: {sum(len(s.behind_repartition) + len(s.behind_out) for s in singles)})"
    )
    print(
        f"  late drops: {sum(c.late_drops for c in clusters):.0f} "
        f"(1 instance: {sum(s.late_drops for s in singles):.0f})"
    )
    print(
        f"  every session closed on ticks: {sum(c.all_closed_on_ticks for c in clusters)} of "
        f"{n} runs (1 instance: {sum(s.all_closed_on_ticks for s in singles)})"
    )
    rate3 = median(c.ticks_per_idle_partition_hour for c in clusters)
    rate1 = median(s.ticks_per_idle_partition_hour for s in singles)
    print(
        f"  ticks per idle partition-hour (median): 3 instances {rate3:.0f}, 1 instance "
        f"{rate1:.0f}; 3/1 = {_ratio(rate3, rate1):.2f}"
    )
    d3 = sorted(d for c in clusters for d in c.close_delays_ms)
    d1 = sorted(d for s in singles for d in s.close_delays_ms)
    if d3 and d1:
        print(
            f"  window-close delay after the data stops (median, max over "
            f"{len(d3)} and {len(d1)} sessions): 3 instances {median(d3) / 1000:.2f} s, "
            f"{d3[-1] / 1000:.2f} s; 1 instance {median(d1) / 1000:.2f} s, {d1[-1] / 1000:.2f} s; "
            f"3/1 = {_ratio(median(d3), median(d1)):.2f}"
        )


def main() -> None:
    results: list[tuple[RunResult, RunResult]] = []
    with (
        bootstrap_servers() as bootstrap,
        tempfile.TemporaryDirectory(prefix="bench-promise-") as tmp,
    ):
        for seed in range(1, RUNS + 1):
            workdir = Path(tmp) / f"seed-{seed}"
            for sub in ("three", "one"):
                (workdir / sub).mkdir(parents=True)
            try:
                results.append(_run(seed, bootstrap, workdir))
            except Exception as exc:  # one failed run must not stop the others
                print(f"run seed={seed}: FAILED {type(exc).__name__}: {exc}", flush=True)
    if results:
        _summary(results)


if __name__ == "__main__":
    main()
