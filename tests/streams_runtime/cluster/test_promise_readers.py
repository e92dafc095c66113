"""Readers we do not control, on the output of a runtime running as 3 processes through a
fault: with the runtime's ticks they give the same results as without them, only earlier
(issue 24, docs/concepts/promise.md, docs/spark.md).

The runtime is issue 24's application run by ``harness/session_cluster/`` (``select_key(user)
→ group_by_key → session count (gap 2 s, grace 1 s) → suppress(until_window_closes) → to(out)``,
exactly-once, one standby, 3 instances), through its ``pause`` scenario: input on every partition,
then one instance SIGSTOPped for 12 s while the others' inputs go idle and get ticks, then input
again (the runtime's own checks of that run are ``test_promise.py``'s). Once it stopped, two
readers read ``out``, each twice: (i) as written, ticks included, and (ii) a copy holding its data
records only (same partitions, keys, values, timestamps, offset order). Both runs then get one
far-future data record on every partition, which closes every window in the run without ticks.

- **Kafka Streams** (the conformance app's ``results-tumbling-sum``): per user, tumbling 1 s
  windows (no grace) over the results' timestamps (session ends), counting the results and
  summing their counts, suppressed until the windows close. It knows nothing of ticks: it reads
  each as a record keyed ``__progress_control__`` with a null value, which moves its stream
  time. One task per partition, so a replay after the fact is exactly what a live reader gets.
  A result behind a tick on its partition is lost exactly when a window boundary lies between
  them: short windows make that likely for lags of a fraction of a second.
- **The Spark streaming job**, sessionizing (gap 250 ms) each user's session ends. Its input schema
  is a click ``{"user", "page", "ts"}``, which the runtime's ``{"start", "end", "count"}`` is not
  (every result would be a malformed record, neither data nor time, and no session would ever
  form), so it reads a record-for-record mapping of ``out``
  (:func:`~tests.streams_runtime.cluster.downstream_readers.session_clicks`: partition, key,
  timestamp and order kept, ticks untouched). Its watermark is one per query, over every
  partition, so what is late depends on when records became readable: the order they became
  readable on ``out`` is noted while the runtime runs, and the job is fed in the micro-batches a
  live job could have had that make ticks matter most
  (:func:`~tests.streams_runtime.cluster.downstream_readers.live_batches`); the run without ticks
  gets the same micro-batches without the ticks. Spark drops a late row only once its own
  session window (``[t, t + gap)``) is behind the watermark, so it tolerates lags below the gap:
  a user's results are more than 2 s apart (the runtime's gap), so any gap below that makes one
  Spark session per result, and a short one keeps the tolerance short.

Asserted for each reader: the final results are equal (Kafka Streams' windows of the sentinel key
and of our flush records left out); nothing was lost in the run without ticks (so the two are not
equal by being empty); and ticks mattered: before the flush, the windows that the latest record
on their partition closes (Spark: on any partition) are out, with ticks more than without.

CI runs the pause once (about 75 s on 2 idle cores, the Kafka Streams JVM and the Spark session
shared with the session). ``PROGRESS_CONTROL_LONG_TESTS=1`` adds the SIGKILL failover and three
seeds of each.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from harness.session_cluster import scenarios
from harness.session_cluster.app import INPUT_PARTITIONS
from harness.session_cluster.plan import Plan, RunResult, ScenarioName
from harness.session_cluster.reader import OutWatcher
from harness.session_cluster.scenarios import run_scenario
from tests.conformance.compare import OutputRecord
from tests.conformance.kstreams import KafkaStreamsApps, build_conformance_app
from tests.streams_runtime.cluster.downstream_readers import (
    FLUSH_USER,
    MODES,
    Arrival,
    ArrivalRecorder,
    ReaderResults,
    WindowResult,
    behind_earlier_ticks,
    copy_records,
    flush_records,
    kafka_streams_results,
    live_batches,
    session_clicks,
    spark_results,
    without_ticks,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.broker, pytest.mark.network]

LONG = os.environ.get("PROGRESS_CONTROL_LONG_TESTS") == "1"
CASES: list[tuple[ScenarioName, int]] = (
    [(scenario, seed) for scenario in ("pause", "kill") for seed in (1, 2, 3)]
    if LONG
    else [("pause", 24)]
)
# Every session is out on ticks before the scenario's idle phase; during it, time moves on on
# ticks alone, past the windows (1 s) of the last results: through two sub-topologies and their
# exactly-once commits, which under CI's whole load took more than 3 s once.
PLAN = Plan(guarantee="exactly_once", instances=3, idle_s=6.0)
KSTREAMS_WINDOW_MS = 1_000
SPARK_GAP_MS = 250
SETTLE_S = 0.1
"""A record readable this long before another surely was readable first (records polled
together may have become readable in either order)."""
FLUSH_AFTER_MS = 600_000  # our flush records: ten minutes after the last record, past every window


@pytest.fixture(scope="module")
def kafka_streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaStreamsApps]:
    with KafkaStreamsApps(build_conformance_app(), tmp_path_factory.mktemp("kstreams")) as apps:
        yield apps


def _run_recording_arrivals(
    monkeypatch: pytest.MonkeyPatch, bootstrap: str, workdir: Path, case: tuple[ScenarioName, int]
) -> tuple[RunResult, list[Arrival]]:
    """``run_scenario`` of ``case`` (scenario, seed), and every record of its ``out`` topic in
    the order they became readable.

    An adapter (the harness is not ours to change): the harness watches ``out`` for results
    only, with one watcher per run created before any instance starts; ours starts beside it
    and reads on after the run.
    """
    recorders: list[ArrivalRecorder] = []

    class RecordingOutWatcher(OutWatcher):
        def __init__(self, bootstrap: str, topic: str) -> None:
            recorders.append(ArrivalRecorder(bootstrap, topic))
            super().__init__(bootstrap, topic)

    monkeypatch.setattr(scenarios, "OutWatcher", RecordingOutWatcher)
    try:
        scenario, seed = case
        result = run_scenario(scenario, bootstrap, workdir, replace(PLAN, seed=seed))
        assert [r.topic for r in recorders] == [result.topics["out"]], "out recorded"
        return result, recorders[0].finish()
    finally:
        for recorder in recorders:
            recorder.close()


def _partition_latest(records: list[OutputRecord]) -> dict[int, int]:
    latest: dict[int, int] = {}
    for r in records:
        latest[r.partition] = max(latest.get(r.partition, r.timestamp), r.timestamp)
    return latest


def _runtime_results(records: list[OutputRecord]) -> list[dict[str, int]]:
    return [json.loads(r.value or b"null") for r in without_ticks(records)]


def _differences(reader: str, run: dict[str, ReaderResults]) -> list[str]:
    """What differs between the final results with and without ticks (empty: equal)."""
    with_ticks, clean = run["ticks"], run["clean"]
    if with_ticks.final == clean.final:
        return []
    return [
        f"{reader}: results without ticks, lost with them: {sorted(clean.final - with_ticks.final)}"
        f"; with ticks only: {sorted(with_ticks.final - clean.final)}"
    ]


def _check_kafka_streams(run: dict[str, ReaderResults], records: list[OutputRecord]) -> None:
    clean = run["clean"]
    # Nothing lost without ticks: every result of the runtime counted once.
    results = _runtime_results(records)
    assert sum(w.results for w in clean.final) == len(results)
    assert sum(w.events for w in clean.final) == sum(v["count"] for v in results)
    # Before the flush, each task's stream time is the latest timestamp on its partition: the
    # windows it closed are out, with ticks more of them than the data alone closed.
    partition_of = {(r.key or b"").decode(): r.partition for r in without_ticks(records)}
    for mode, read in (("ticks", records), ("clean", without_ticks(records))):
        latest = _partition_latest(read)
        closed = {w for w in run[mode].final if w.end <= latest[partition_of[w.user]]}
        assert run[mode].before_flush == closed, mode
    assert clean.before_flush < run["ticks"].before_flush, "ticks closed nothing early"


def _check_spark(run: dict[str, ReaderResults], records: list[OutputRecord]) -> None:
    clean = run["clean"]
    assert sum(s.events for s in clean.final) == len(without_ticks(records))
    # Before the flush, the watermark is the latest timestamp read on any partition.
    for mode, read in (("ticks", records), ("clean", without_ticks(records))):
        latest = max(r.timestamp for r in read)
        closed = {s for s in run[mode].final if s.end <= latest}
        assert run[mode].before_flush == closed, mode
    assert clean.before_flush < run["ticks"].before_flush, "ticks closed nothing early"


def _summary(run: dict[str, ReaderResults]) -> str:
    def count(results: frozenset[WindowResult]) -> str:
        return f"{len(results)} windows ({sum(w.events for w in results)} events)"

    return ", ".join(f"{m}: {count(r.before_flush)} -> {count(r.final)}" for m, r in run.items())


@pytest.mark.parametrize("case", CASES, ids=lambda case: f"{case[0]}-seed{case[1]}")
def test_kafka_streams_and_spark_give_the_same_results_with_and_without_ticks(
    case: tuple[ScenarioName, int],
    *,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    kafka_streams: KafkaStreamsApps,
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (tmp_path / "cluster").mkdir()
    scenario, arrivals = _run_recording_arrivals(
        monkeypatch, kafka_bootstrap, tmp_path / "cluster", case
    )
    out = scenario.topics["out"]
    records = [arrival.record for arrival in arrivals]
    partitions = INPUT_PARTITIONS
    data = without_ticks(records)
    assert data, "the runtime wrote results"
    assert len(data) < len(records), "the runtime wrote ticks"
    behind = behind_earlier_ticks(records)
    own_checks = [problem[:300] for problem in scenario.failures()] or "passed"
    context = (
        f"{len(data)} results on out, {len(behind)} behind an earlier tick there "
        f"(partition, user, ts, tick): {behind[:10]}; the run's own checks: {own_checks}; "
        f"steps: {scenario.events}"
    )
    flush_at = max(r.timestamp for r in records) + FLUSH_AFTER_MS

    # Kafka Streams reads `out` itself and a copy without ticks; the Spark job reads both as
    # clicks, in rounds. Each reader in its own JVM: both at once.
    clean = create_topic("promise-out-clean", partitions=partitions)
    copy_records(kafka_bootstrap, clean, data)
    clicks = session_clicks(records)
    click_arrivals = [replace(a, record=c) for a, c in zip(arrivals, clicks, strict=True)]
    fed = {"ticks": live_batches(click_arrivals, SETTLE_S)}
    fed["clean"] = [without_ticks(batch) for batch in fed["ticks"]]
    result_value = json.dumps({"start": flush_at, "end": flush_at, "count": 0}).encode()
    click_value = json.dumps({"user": FLUSH_USER, "page": "flush", "ts": flush_at}).encode()
    with ThreadPoolExecutor(1) as pool:
        kstreams_run = pool.submit(
            kafka_streams_results,
            kafka_streams,
            kafka_bootstrap,
            {"ticks": out, "clean": clean},
            {mode: create_topic(f"promise-kstreams-{mode}") for mode in MODES},
            {mode: flush_records(partitions, flush_at, result_value) for mode in MODES},
            window_ms=KSTREAMS_WINDOW_MS,
            state_dir=tmp_path / "kstreams",
        )
        spark_run = spark_results(
            spark,
            kafka_bootstrap,
            {mode: create_topic(f"promise-spark-{mode}", partitions=partitions) for mode in MODES},
            fed,
            {mode: flush_records(partitions, flush_at, click_value) for mode in MODES},
            gap_ms=SPARK_GAP_MS,
            work=tmp_path / "spark",
        )
        kstreams = kstreams_run.result()
    summary = f"Kafka Streams {_summary(kstreams)}; Spark {_summary(spark_run)}"
    print(f"{summary}; {len(fed['ticks'])} Spark micro-batches; {context}")
    # The promise, seen by readers we do not control: the same results with ticks as without.
    differences = _differences("Kafka Streams", kstreams) + _differences("Spark", spark_run)
    assert not differences, "\n".join([*differences, summary, context])
    _check_kafka_streams(kstreams, records)
    _check_spark(spark_run, records)
