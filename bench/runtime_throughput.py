"""Streams runtime throughput on a real broker: session windows vs a plain consume->produce loop.

The input topic (4 partitions) is pre-loaded, off the clock, with ``BENCH_EVENTS`` (default
1,000,000) click events: key ``user-<i % 10,000>``, a small JSON value, timestamps 1 ms apart
(each user clicks every 10 s), with a 120 s pause after every block of ``BENCH_SESSION_CLICKS``
(default 10) clicks per user, so each user's session closes once the next block starts (gap 60 s).

Three variants, each reading all the events from a fresh consumer group:

(a) plain ``confluent_kafka`` loop: one ``Consumer``, ``consume(1000)`` batches, every record's key
    and value produced (idempotent, acks=all, as the runtime's producer) to an output topic,
    ``flush()`` at the end;
(b) the runtime, at_least_once (commit interval 1 s): ``group_by_key().windowed_by(SessionWindows(
    gap_ms=60_000)).count().suppress(until_window_closes()).to_stream().map(...).to(out)``;
(c) the same topology, exactly_once (commit interval 100 ms, the default);
(d) (b) with the count written as the user's own ``aggregate(initializer, aggregator, merger)``
    (the same sessions and counts), which the native core runs calling those functions;
(e) (d) processor by processor (``native_core=False``): the chain the native core replaces.

(a) is timed from the consumer's creation until ``flush()`` returns; (b) and (c) from
``app.start()`` until the runtime's ``streams_records_processed_total`` reaches the event count
(group join and task creation included in all three). The runtime's output (sessions emitted,
ticks excluded) is counted after ``close()`` and checked against the expected sessions. A runtime
variant whose app stops before processing anything (a start-up race) is retried once with a
fresh application id.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bench._clicks import GAP_MS, PARTITIONS, USERS, Clicks, count_output
from bench._kafka import create_topic, end_offsets, unique_name
from bench._plain_loop import consume_produce
from harness.sessions_app import session_counts
from progress_control_apps.dev.broker import EmbeddedKafkaBroker
from streams_runtime import App, SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Integer, Json, String

SESSION_CLICKS = int(os.environ.get("BENCH_SESSION_CLICKS", "10"))  # per user per session
TIMEOUT_S = 1_800.0  # per variant

VARIANTS = {
    "a": "plain consume->produce loop",
    "b": "runtime, at_least_once",
    "c": "runtime, exactly_once",
    "d": "user aggregate, native",
    "e": "user aggregate, chain",
}


def _user_counts(source: str, sink: str) -> StreamsBuilder:
    """Per-user session counts by the user's own functions (as (b) counts them)."""
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=GAP_MS))
        .aggregate(
            lambda: 0, lambda _k, _v, n: n + 1, lambda _k, a, b: a + b, value_serde=Integer()
        )
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(sink, key_serde=String(), value_serde=Json())
    )
    return builder


def _plain_loop(bootstrap_servers: str, source: str, events: int) -> float:
    """(a): consume every event and produce its key and value; returns records per second."""
    sink = create_topic(bootstrap_servers, unique_name("bench-runtime-plain-out"), PARTITIONS)
    started = time.perf_counter()

    def done(seen: int) -> bool:
        if time.perf_counter() - started > TIMEOUT_S:
            raise RuntimeError(f"(a) only {seen} of {events} records in {TIMEOUT_S} s")
        return seen >= events

    group = unique_name("bench-runtime-plain")
    consume_produce(bootstrap_servers, source, sink, group, done)
    elapsed = time.perf_counter() - started
    on_broker = sum(end_offsets(bootstrap_servers, sink, PARTITIONS))
    if on_broker != events:
        raise RuntimeError(f"(a) {on_broker} records in the output, expected {events}")
    return events / elapsed


class StartupError(RuntimeError):
    """The app stopped before processing any record."""


def _runtime(
    variant: str, bootstrap_servers: str, source: str, events: int, state_dir: Path
) -> tuple[float, float, int, int]:
    """(b) to (e): returns records per second from start, records per second from the first
    processed record, sessions emitted and the clicks they count."""
    sink = create_topic(bootstrap_servers, unique_name(f"bench-runtime-{variant}-out"), PARTITIONS)
    settings: dict[str, Any] = (
        {"processing_guarantee": "exactly_once"}
        if variant == "c"
        else {"processing_guarantee": "at_least_once", "commit_interval_ms": 1_000}
    )
    if variant == "e":
        settings["native_core"] = False
    app_id = unique_name(f"bench-runtime-{variant}")
    app = App(
        _user_counts(source, sink)
        if variant in {"d", "e"}
        else session_counts(source, sink, GAP_MS, value_serde=Json()),
        application_id=app_id,
        bootstrap_servers=bootstrap_servers,
        state_dir=state_dir / app_id,
        **settings,
    )
    try:
        started = time.perf_counter()
        first: float | None = None
        app.start()
        while True:
            processed = int(app.metrics.total("streams_records_processed"))
            now = time.perf_counter()
            if first is None and processed:
                first = now
            if processed >= events:
                break
            if app.error is not None or app.state in {"ERROR", "NOT_RUNNING"}:
                error = f"({variant}) app stopped: {app.state} {app.error!r}"
                raise (RuntimeError if processed else StartupError)(error)
            if now - started > TIMEOUT_S:
                raise RuntimeError(f"({variant}) only {processed} of {events} in {TIMEOUT_S} s")
            time.sleep(0.05)
        elapsed = now - started
    finally:
        app.close()
    if app.error is not None:
        raise RuntimeError(f"({variant}) app failed: {app.error!r}")
    steady = events / (now - first) if first is not None and now > first else float("nan")
    sessions, clicks = count_output(bootstrap_servers, sink)
    return events / elapsed, steady, sessions, clicks


def main() -> None:
    events = int(os.environ.get("BENCH_EVENTS", "1000000"))
    workload = Clicks.ending_now(events, SESSION_CLICKS)
    expected = workload.expected_sessions()  # sessions, clicks
    rates: dict[str, float] = {}
    steady: dict[str, float] = {}
    outputs: dict[str, tuple[int, int]] = {}
    with (
        EmbeddedKafkaBroker() as broker,
        tempfile.TemporaryDirectory(prefix="bench-runtime-") as tmp,
    ):
        bootstrap = broker.bootstrap_servers
        source = create_topic(bootstrap, unique_name("bench-runtime-clicks"), PARTITIONS)
        started = time.perf_counter()
        workload.preload(bootstrap, source)
        print(f"pre-loaded {events:,} events in {time.perf_counter() - started:.1f} s", flush=True)
        rates["a"] = _plain_loop(bootstrap, source, events)
        print(f"(a) done: {rates['a']:,.0f} records/s", flush=True)
        for variant in ("b", "c", "d", "e"):
            try:
                result = _runtime(variant, bootstrap, source, events, Path(tmp))
            except StartupError as exc:
                # A start-up race in the runtime (e.g. a fresh changelog topic without a leader
                # yet); a fresh application id gets fresh internal topics.
                print(f"{exc}; retrying once with a fresh application id", flush=True)
                result = _runtime(variant, bootstrap, source, events, Path(tmp))
            rate, steady_rate, sessions, clicks = result
            rates[variant], steady[variant] = rate, steady_rate
            outputs[variant] = (sessions, clicks)
            print(f"({variant}) done: {rate:,.0f} records/s", flush=True)
    print(
        f"{events:,} events, {PARTITIONS} partitions, {USERS:,} users, sessions of "
        f"{SESSION_CLICKS} clicks (gap {GAP_MS // 1000} s); expected output: "
        f"{expected[0]:,} closed sessions counting {expected[1]:,} clicks"
    )
    for name, label in VARIANTS.items():
        line = f"({name}) {label:<28} {rates[name]:>11,.0f} records/s"
        if name in steady:
            sessions, clicks = outputs[name]
            line += (
                f"  (from first record: {steady[name]:,.0f}/s; "
                f"emitted {sessions:,} sessions, {clicks:,} clicks)"
            )
            if (sessions, clicks) != expected:
                line += "  ** OUTPUT MISMATCH **"
        print(line)
    print(f"(b)/(a) runtime ALOS / plain loop: {rates['b'] / rates['a']:.3f}")
    print(f"(c)/(b) EOS / ALOS:                {rates['c'] / rates['b']:.3f}")
    print(f"(d)/(e) user aggregate, native / chain: {rates['d'] / rates['e']:.3f}")
    print(f"(d)/(b) user aggregate / built-in count: {rates['d'] / rates['b']:.3f}")


if __name__ == "__main__":
    main()
