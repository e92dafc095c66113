"""Spark sessionization, part 2: the cost of control-record validation (see
:mod:`bench.spark_sessionization`, which runs it).

Batch, on ``local[2]``: ``BENCH_VALIDATION_EVENTS`` (default
2,000,000; 0 skips) raw Kafka-shaped rows generated in Spark (JSON click values, one row in 1,000
a signed v2 control record with a valid HMAC), through the job's whole path, ``parse_records`` +
``sessionize_events``, in interleaved order, median of ``BENCH_REPEATS``:

(c) the default trust policy (structure, negative and future timestamps checked);
(d) with a verification key (every control record's HMAC-SHA256 recomputed in Spark SQL);
(e) the same rows with the ``headers`` column nulled: no control-record handling at all (the
    ticks' rows are then plain clicks), the floor the validation is measured against.

Then, to price one verification: ``BENCH_VALIDATION_TICKS`` (default 1,000,000) rows that are all
signed control records, verdicts computed without and with the key (``noop`` sink); the difference
divided by the rows is the HMAC's cost per control record.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as sf

from bench._timing import interleaved
from bench.spark_sessionization import (
    BASE_MS,
    EVENTS_PER_SESSION,
    EVENTS_PER_USER,
    GAP_MS,
    MASTER,
    PARTITIONS,
    PAUSE_MS,
    STEP_MS,
)
from progress_control.protocol import ControlMarker
from progress_control.trust import SigningKey, TrustPolicy, sign
from progress_control_apps.spark import parse_records, sessionize_events
from progress_control_apps.spark.source import record_counts
from progress_control_apps.spark.trust import with_control_verdict

__all__ = ["validation_benchmark"]

BENCH_KEY = SigningKey("bench", b"bench-secret-0123456789abcdef")
VALIDATION_VARIANTS = {
    "c": "default trust policy",
    "d": "with a verification key (HMAC)",
    "e": "no control-record handling (floor)",
}
_BENCH_TOPIC = "bench-clicks"
_TICK_SHAPES = 64  # distinct pre-signed control records the generated ticks cycle through


def _signed_ticks() -> list[tuple[int, int, bytes]]:
    """(partition, timestamp ms, signed marker) of the control records the generator uses."""
    ticks = []
    for i in range(_TICK_SHAPES):
        partition, at = i % PARTITIONS, BASE_MS + i * 1_000
        marker = sign(ControlMarker("bench", i), _BENCH_TOPIC, partition, at, BENCH_KEY)
        ticks.append((partition, at, marker.encode()))
    return ticks


def generate_raw(spark: SparkSession, events: int, tick_every: int) -> DataFrame:
    """Rows shaped like Spark's Kafka source (with headers): JSON clicks, and every
    ``tick_every``-th row (by hash) a signed control record."""
    users = max(1, events // EVENTS_PER_USER)
    nth = sf.floor(sf.col("id") / users)
    jitter = sf.pmod(sf.xxhash64("id"), sf.lit(5_000))
    millis = (
        sf.lit(BASE_MS) + nth * STEP_MS + sf.floor(nth / EVENTS_PER_SESSION) * PAUSE_MS + jitter
    )
    ticks = _signed_ticks()
    which = (sf.pmod(sf.col("id"), sf.lit(_TICK_SHAPES)) + 1).cast("int")
    tick_ts = sf.element_at(sf.array(*(sf.lit(t) for _, t, _ in ticks)), which)
    tick_part = sf.element_at(sf.array(*(sf.lit(p) for p, _, _ in ticks)), which)
    tick_marker = sf.element_at(sf.array(*(sf.lit(bytearray(m)) for _, _, m in ticks)), which)
    is_tick = sf.pmod(sf.xxhash64(sf.col("id"), sf.lit("control")), sf.lit(tick_every)) == 0
    user = sf.concat(sf.lit("user-"), sf.col("id") % users)
    value = sf.to_json(
        sf.struct(user.alias("user"), sf.lit("/page").alias("page"), millis.alias("ts"))
    )
    header = sf.struct(sf.lit("progress-control").alias("key"), tick_marker.alias("value"))
    return spark.range(events).select(
        sf.when(is_tick, sf.lit(None)).otherwise(user).cast("binary").alias("key"),
        value.cast("binary").alias("value"),
        sf.lit(_BENCH_TOPIC).alias("topic"),
        sf.when(is_tick, tick_part)
        .otherwise(sf.col("id") % PARTITIONS)
        .cast("int")
        .alias("partition"),
        sf.col("id").alias("offset"),
        sf.timestamp_millis(sf.when(is_tick, tick_ts).otherwise(millis)).alias("timestamp"),
        sf.lit(0).alias("timestampType"),
        sf.when(is_tick, sf.array(header)).alias("headers"),
    )


_KEYED = TrustPolicy(verification_keys={BENCH_KEY.key_id: BENCH_KEY.secret})


_scratch: list[tempfile.TemporaryDirectory[str]] = []


def _materialized(spark: SparkSession, frame: DataFrame) -> DataFrame:
    """``frame`` written to Parquet once and read back: the job reads its rows from a source,
    whereas a generated frame's expressions would be inlined into the measured plan."""
    scratch = tempfile.TemporaryDirectory(prefix="bench-raw-")
    _scratch.append(scratch)
    frame.write.parquet(f"{scratch.name}/raw")
    return spark.read.parquet(f"{scratch.name}/raw")


def _validation_variant(raw: DataFrame, name: str) -> DataFrame:
    if name == "e":
        raw = raw.withColumn("headers", sf.lit(None).cast(raw.schema["headers"].dataType))
    parsed = parse_records(raw, _KEYED if name == "d" else TrustPolicy())
    # As the jobs do: the counts observed before the filters (also a barrier for them).
    counted = parsed.observe(f"bench_{name}_{uuid.uuid4().hex[:8]}", *record_counts())
    return sessionize_events(counted, GAP_MS)


def _validation_counts(raw: DataFrame, name: str) -> tuple[int, ...]:
    parsed = parse_records(raw, _KEYED if name == "d" else TrustPolicy())
    row = parsed.agg(
        sf.count_if(sf.col("control") == "accepted"),
        sf.count_if(sf.col("control").isNotNull() & (sf.col("control") != "accepted")),
        sf.count_if(~sf.col("is_control") & sf.col("error").isNull()),
    ).first()
    assert row is not None
    return tuple(int(value) for value in row)


def validation_benchmark(spark: SparkSession, events: int, ticks: int, repeats: int) -> None:
    names = list(VALIDATION_VARIANTS)
    raw = _materialized(spark, generate_raw(spark, events, 1_000))

    def run(name: str) -> float:
        sessions = _validation_variant(raw, name)
        started = time.perf_counter()
        sessions.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    times = interleaved(run, names, repeats, warm_up=True)
    default, keyed = _validation_counts(raw, "c"), _validation_counts(raw, "d")
    if default != keyed or default[1] != 0:
        raise RuntimeError(f"every generated tick must be accepted: {default} vs {keyed}")
    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"{events:,} raw Kafka-shaped rows ({default[0]:,} signed control records, all "
        f"accepted with and without the key; {default[2]:,} clicks), parse_records + "
        f"sessionize_events, {MASTER}, median of {repeats} (interleaved)"
    )
    for name in names:
        runs = [round(t, 2) for t in times[name]]
        rate = events / median[name]
        label = VALIDATION_VARIANTS[name]
        print(f"({name}) {label:<40} {median[name]:>7.2f} s  {rate:>11,.0f} rows/s  {runs}")
    print(
        f"(c)/(e): {median['c'] / median['e']:.3f}  (d)/(e): {median['d'] / median['e']:.3f}  "
        f"(d)/(c): {median['d'] / median['c']:.3f}"
    )
    if ticks > 0:
        _verification_cost(spark, ticks, repeats)


def _verification_cost(spark: SparkSession, ticks: int, repeats: int) -> None:
    """Every row a signed control record: verdicts without and with the key."""

    raw_ticks = _materialized(spark, generate_raw(spark, ticks, 1))

    def run(policy: TrustPolicy) -> float:
        verdicts = with_control_verdict(raw_ticks, policy).select("control")
        started = time.perf_counter()
        verdicts.write.format("noop").mode("overwrite").save()
        return time.perf_counter() - started

    policies = {"default": TrustPolicy(), "key": _KEYED}
    times = interleaved(lambda name: run(policies[name]), list(policies), repeats, warm_up=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    per_tick_us = (median["key"] - median["default"]) / ticks * 1e6
    print(
        f"{ticks:,} rows, all signed control records, verdicts only: default "
        f"{median['default']:.2f} s, with the key {median['key']:.2f} s -> HMAC verification "
        f"~{per_tick_us:.2f} us per control record ({MASTER}, median of {repeats})"
    )
