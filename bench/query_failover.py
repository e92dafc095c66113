"""Interactive-query failover on a real broker: SIGKILL the active of a key while it is queried.

Three runtime processes (``harness/table_cluster.py``: a String table of a 3-partition topic
in the store ``store``, one standby replica per partition, commit interval 100 ms, session
timeout 6 s, a query token; here also the table's updates written to an output topic) share one
application id; the failover test drives the same cluster.
Each of ``BENCH_REPEATS`` (default 3) runs uses a fresh topic of 30 rows, a fresh application id
and fresh processes and state dirs:

1. wait (at most 180 s) until every instance answers, agrees on an active and a standby of every
   partition, the standby of ``key-7`` is caught up (offset lag 0) and the key's active answers,
   with the same active and standby of the key in 5 polls in a row (0.5 s apart);
2. baseline, ``BENCH_MEASURE_S`` (default 3) seconds each, one client in a closed loop, a new HTTP
   connection per query: *local* queries (the client asks the instance holding the key's active
   copy) vs *routed* queries (the client asks the third instance, neither active nor standby,
   which forwards to the active); queries/s and p50/p99 latency of the answers from that active,
   and routed/local (measured again, up to 3 times, if the key's placement moved meanwhile).
   The forwarding instance keeps its connections to the active alive
   (:class:`~streams_runtime.queries.client.QueryForwarder`); the hop alone is measured too: the
   same closed loop to the active with ``local=true``, as forwards ask, through a
   ``QueryForwarder`` (pooled, kept alive) vs with a new connection per query (as forwards
   were made before);
3. the client queries the third instance in a loop (``allow_stale=true&max_lag=2``, a pause of
   ``BENCH_QUERY_INTERVAL_S``, default 0.02 s, between queries) while the active's process gets
   SIGKILL; the loop stops after 20 answers in a row from a new active (at most 180 s after the
   kill). Counted over the queries sent after the kill: answered (200) ratio, answers from the
   standby (stale) and their max offset lag, failures (status and body, first few), wrong values,
   query latency (p50, max), and the time from the kill to the first answer served by the standby
   and to the first answer from the new active (the end of that query). Meanwhile a feeder
   writes an update of one key of every partition every ``BENCH_FEED_INTERVAL_S`` (default
   0.02 s) and a consumer reads the output topic: the time from the kill to the first output
   record caused by input sent after the kill, on each partition the killed instance was active
   for (at most ``OUTPUT_TIMEOUT_S`` after the new active's answers). The consumer session timeout
   is printed beside these figures: the group notices the kill only when it expires.

A run that fails (no placement in time, an instance dying, ...) prints why and the next run
starts.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from statistics import median
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from bench._kafka import create_topic, unique_name
from harness.table_cluster import (
    KEY,
    MAX_LAG,
    PARTITIONS,
    ROWS,
    SESSION_TIMEOUT_MS,
    STORE,
    TOKEN,
    Failover,
    TableCluster,
    http_get,
    query,
)
from progress_control_apps.dev.broker import EmbeddedKafkaBroker
from streams_runtime.murmur2 import partition_for_key
from streams_runtime.queries.client import ForwardError, QueryForwarder

PLACEMENT_TIMEOUT_S = 180.0
BASELINE_ATTEMPTS = 3
SHOW_FAILURES = 5
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
MEASURE_S = float(os.environ.get("BENCH_MEASURE_S", "3"))
QUERY_INTERVAL_S = float(os.environ.get("BENCH_QUERY_INTERVAL_S", "0.02"))
FEED_INTERVAL_S = float(os.environ.get("BENCH_FEED_INTERVAL_S", "0.02"))
OUTPUT_TIMEOUT_S = 60.0
SESSION_TIMEOUT = f"session timeout {SESSION_TIMEOUT_MS / 1000:.1f} s"


class OutputProbe:
    """Feeds one key of every source partition (values count up) and reads the output topic:
    when output caused by input sent after a given time first arrived, per partition."""

    def __init__(self, bootstrap: str, source: str, output: str) -> None:
        self.keys: dict[str, int] = {}
        n = 0
        while len(self.keys) < PARTITIONS:
            key = f"feed-{n}"
            if partition_for_key(key.encode(), PARTITIONS) not in self.keys.values():
                self.keys[key] = partition_for_key(key.encode(), PARTITIONS)
            n += 1
        self._bootstrap, self._source, self._output = bootstrap, source, output
        self._sent: dict[int, float] = {}  # sequence number -> time.monotonic() when sent
        self._received: list[tuple[float, int, int]] = []  # (time, partition, sequence)
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._feed, name="bench-feeder", daemon=True),
            threading.Thread(target=self._read, name="bench-output", daemon=True),
        ]

    def __enter__(self) -> OutputProbe:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def _feed(self) -> None:
        producer = Producer(
            {
                "bootstrap.servers": self._bootstrap,
                "partitioner": "murmur2_random",
                "linger.ms": 0,
            }
        )
        seq = 0
        while not self._stop.is_set():
            for key in self.keys:
                self._sent[seq] = time.monotonic()
                producer.produce(self._source, key=key.encode(), value=str(seq).encode())
                seq += 1
            producer.poll(0)
            time.sleep(FEED_INTERVAL_S)
        producer.flush(10)

    def _read(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self._bootstrap,
                "group.id": unique_name("bench-output"),
                "enable.auto.commit": False,
                "fetch.wait.max.ms": 10,
            }
        )
        consumer.assign(
            [TopicPartition(self._output, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        )
        try:
            while not self._stop.is_set():
                for msg in consumer.consume(100, 0.05):
                    key, value = msg.key(), msg.value()
                    if msg.error() is not None or key is None or value is None:
                        continue
                    partition = self.keys.get(key.decode())
                    if partition is not None:
                        self._received.append((time.monotonic(), partition, int(value)))
        finally:
            consumer.close()

    def first_output(self, partition: int, after: float) -> float | None:
        """When the first output record of ``partition`` caused by input sent after ``after``
        arrived (``None``: none yet)."""
        return next(
            (
                at
                for at, p, seq in list(self._received)
                if p == partition and self._sent.get(seq, 0.0) > after
            ),
            None,
        )

    def owned_by(self, cluster: TableCluster, endpoint: str) -> list[int]:
        """The partitions whose active is ``endpoint``, as the first instance sees them."""
        owned = []
        for key, partition in self.keys.items():
            status, meta = http_get(cluster.instances[0].url(f"/metadata/{STORE}/{key}"))
            if status == 200 and meta["active_host"] == endpoint:
                owned.append(partition)
        return sorted(owned)


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.5) - 1))
    return sorted_values[index]


def _closed_loop(url: str, seconds: float, active_id: str) -> dict[str, Any]:
    """Query ``url`` back to back for ``seconds``: queries/s, p50 and p99 latency (ms) of the
    correct answers (200 with the key's value from the active copy on ``active_id``), and the
    other answers."""
    latencies: list[float] = []
    errors: list[tuple[int, dict[str, Any]]] = []
    started = time.perf_counter()
    end = started + seconds
    while (now := time.perf_counter()) < end:
        status, body = query(url)
        done = time.perf_counter()
        if (
            status == 200
            and body.get("value") == ROWS[KEY]
            and body.get("served_by") == "active"
            and body.get("instance_id") == active_id
        ):
            latencies.append(done - now)
        else:
            errors.append((status, body))
    return _rates(latencies, errors, time.perf_counter() - started)


def _rates(
    latencies: list[float], errors: list[tuple[int, dict[str, Any]]], elapsed: float
) -> dict[str, Any]:
    """Answers per second, p50 and p99 in ms, the answers and the errors of one closed loop."""
    latencies.sort()
    return {
        "rate": len(latencies) / elapsed,
        "p50": _percentile(latencies, 0.50) * 1000,
        "p99": _percentile(latencies, 0.99) * 1000,
        "ok": len(latencies),
        "errors": errors,
    }


def _pooled_loop(endpoint: str, seconds: float, active_id: str) -> dict[str, Any]:
    """:func:`_closed_loop` of the forward hop alone: ``local=true`` queries to ``endpoint``
    through one :class:`QueryForwarder` (one connection, kept alive)."""
    forwarder = QueryForwarder(
        ssl_context=None, token=TOKEN, timeout_s=5.0, connections_per_member=1
    )
    latencies: list[float] = []
    errors: list[tuple[int, dict[str, Any]]] = []
    started = time.perf_counter()
    end = started + seconds
    try:
        while (now := time.perf_counter()) < end:
            try:
                answer = forwarder.forward(endpoint, STORE, KEY, False, None)
            except ForwardError as exc:
                errors.append((599, {"message": str(exc)}))
                continue
            if answer.value == ROWS[KEY] and answer.instance_id == active_id:
                latencies.append(time.perf_counter() - now)
            else:
                errors.append((200, answer.to_json()))
    finally:
        forwarder.close()
    return _rates(latencies, errors, time.perf_counter() - started)


def _summary(run: Failover, partition: int) -> dict[str, Any]:
    latencies = sorted(took for _, took, _, _ in run.after)
    stale, new = run.stale, run.from_new_active
    promoted = run.promoted
    warm = promoted is not None and promoted.restored_from_standby(partition)
    return {
        "queries": len(run.after),
        "ok": len(run.answered),
        "wrong": sum(body.get("value") != ROWS[KEY] for _, body in run.answered),
        "stale": len(stale),
        "stale_elsewhere": sum(b.get("instance_id") != run.standby.instance_id for _, b in stale),
        "stale_max_lag": max((b.get("offset_lag", -1) for _, b in stale), default=None),
        "failures": run.failures,
        "first_stale_s": stale[0][0] if stale else None,
        "first_new_active_s": new[0][0] if new else None,
        "promoted": None
        if promoted is None
        else ("the standby" if promoted is run.standby else "the queried instance")
        + (", from the standby's copy" if warm else ", from the changelog"),
        "timed_out": run.timed_out,
        "latency_p50": _percentile(latencies, 0.5),
        "latency_max": latencies[-1] if latencies else float("nan"),
        "before": len(run.before),
        "before_not_from_active": sum(
            status != 200
            or body.get("served_by") != "active"
            or body.get("instance_id") != run.killed.instance_id
            for status, body in run.before
        ),
    }


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def _fmt_s(value: float | None) -> str:
    return "never" if value is None else f"{value:.2f} s"


def _short(body: dict[str, Any]) -> str:
    text = json.dumps(body, separators=(",", ":"))
    return text if len(text) <= 200 else text[:197] + "..."


def _run(n: int, bootstrap: str, tmp: Path) -> dict[str, Any]:
    source = create_topic(bootstrap, unique_name("bench-iq-table"), PARTITIONS)
    output = create_topic(bootstrap, unique_name("bench-iq-output"), PARTITIONS)
    workdir = tmp / f"run{n}"
    workdir.mkdir()
    started = time.monotonic()
    phase = "starting the instances"
    cluster = TableCluster(
        bootstrap, source, unique_name("bench-iq-failover"), workdir, output=output
    )
    try:
        phase = "waiting for placement"
        meta = cluster.stable_placement(PLACEMENT_TIMEOUT_S)
        placed_s = time.monotonic() - started
        path = f"/stores/{STORE}/keys/{KEY}"
        phase = "measuring the baseline"
        for attempt in range(1, BASELINE_ATTEMPTS + 1):
            active, _standby, client = cluster.roles(meta)
            local = _closed_loop(active.url(path), MEASURE_S, active.instance_id)
            routed = _closed_loop(client.url(path), MEASURE_S, active.instance_id)
            hop = _closed_loop(active.url(f"{path}?local=true"), MEASURE_S, active.instance_id)
            pooled = _pooled_loop(active.endpoint, MEASURE_S, active.instance_id)
            after = cluster.placement()
            if after is not None and cluster.roles(after)[:2] == cluster.roles(meta)[:2]:
                break
            # The key's active or standby moved meanwhile: the baseline measured something else.
            if attempt == BASELINE_ATTEMPTS:
                raise RuntimeError(f"the key's placement kept moving ({attempt} baselines)")
            print(f"run {n}: placement moved during the baseline; measuring again", flush=True)
            phase = "waiting for placement again"
            meta = cluster.stable_placement(PLACEMENT_TIMEOUT_S)
            phase = "measuring the baseline"
        with OutputProbe(bootstrap, source, output) as probe:
            phase = "waiting for output from every partition"
            fed = time.monotonic()
            cluster.wait(
                lambda: all(probe.first_output(p, fed) for p in range(PARTITIONS)),
                PLACEMENT_TIMEOUT_S,
                "output from every partition",
            )
            owned = probe.owned_by(cluster, cluster.roles(meta)[0].endpoint)
            phase = "querying around the kill"
            run = cluster.failover(meta, interval_s=QUERY_INTERVAL_S)
            phase = "waiting for output from the killed instance's partitions"
            deadline = time.monotonic() + OUTPUT_TIMEOUT_S
            while time.monotonic() < deadline and not all(
                probe.first_output(p, run.killed_at) for p in owned
            ):
                time.sleep(0.1)
            resumed = {p: probe.first_output(p, run.killed_at) for p in owned}
        output_s = {p: None if at is None else at - run.killed_at for p, at in resumed.items()}
        return {
            "placed_s": placed_s,
            "local": local,
            "routed": routed,
            "hop": hop,
            "pooled": pooled,
            **_summary(run, meta["partition"]),
            "output_s": output_s,
        }
    except Exception as exc:
        raise RuntimeError(f"while {phase}: {type(exc).__name__}: {exc}") from exc
    finally:
        cluster.stop()


def _report(n: int, result: dict[str, Any]) -> None:
    local, routed = result["local"], result["routed"]
    hop, pooled = result["hop"], result["pooled"]
    print(f"run {n}/{REPEATS}: placement agreed after {result['placed_s']:.1f} s")
    for name, label, m in (
        ("local ", "asks the active's instance", local),
        ("routed", "asks an instance that forwards", routed),
        ("hop   ", "local=true, new connection", hop),
        ("pooled", "local=true, kept alive", pooled),
    ):
        line = (
            f"  {name} ({label:<30}) {m['rate']:>7,.0f} queries/s  "
            f"p50 {m['p50']:6.2f} ms  p99 {m['p99']:6.2f} ms"
        )
        if m["errors"]:
            line += f"  ({len(m['errors'])} bad answers, first: {m['errors'][0][0]} "
            line += f"{_short(m['errors'][0][1])})"
        print(line)
    print(
        f"  routed/local: throughput {_ratio(routed['rate'], local['rate']):.3f}, "
        f"p50 latency {_ratio(routed['p50'], local['p50']):.2f}x, "
        f"p99 latency {_ratio(routed['p99'], local['p99']):.2f}x"
    )
    print(
        f"  forward hop (local=true to the active), kept alive / new connection per query: "
        f"throughput {_ratio(pooled['rate'], hop['rate']):.3f}"
    )
    queries, ok = result["queries"], result["ok"]
    ratio = ok / queries if queries else float("nan")
    lag = result["stale_max_lag"]
    print(
        f"  after the kill: {queries} queries, {ok} answered ({ratio:.4f}), "
        f"{result['stale']} from the standby (stale, max offset lag "
        f"{'-' if lag is None else lag}), {len(result['failures'])} failures; latency "
        f"p50 {result['latency_p50'] * 1000:.1f} ms, max {result['latency_max'] * 1000:.0f} ms"
        + (f", {result['wrong']} WRONG VALUES" if result["wrong"] else "")
        + (
            f", {result['stale_elsewhere']} stale from another instance"
            if result["stale_elsewhere"]
            else ""
        )
    )
    if result["before_not_from_active"]:
        print(
            f"  ** {result['before_not_from_active']} of {result['before']} answers in the second "
            "before the kill did not come from the killed active **"
        )
    for status, body in result["failures"][:SHOW_FAILURES]:
        print(f"    {status} {_short(body)}")
    if len(result["failures"]) > SHOW_FAILURES:
        print(f"    ... and {len(result['failures']) - SHOW_FAILURES} more")
    print(
        f"  kill -> first answer from the standby: {_fmt_s(result['first_stale_s'])}; "
        f"kill -> first answer from the new active ({result['promoted'] or 'none'}): "
        f"{_fmt_s(result['first_new_active_s'])}; {SESSION_TIMEOUT}"
    )
    outputs = ", ".join(f"partition {p}: {_fmt_s(s)}" for p, s in result["output_s"].items())
    print(
        f"  kill -> first output from input sent after the kill, on the killed instance's "
        f"partitions: {outputs or 'none owned'}; {SESSION_TIMEOUT}"
    )
    if result["timed_out"]:
        print(f"  FAILED after the kill: {result['timed_out']}")


def main() -> None:
    results: list[dict[str, Any]] = []
    with (
        EmbeddedKafkaBroker() as broker,
        tempfile.TemporaryDirectory(prefix="bench-query-failover-") as tmp,
    ):
        for n in range(1, REPEATS + 1):
            try:
                result = _run(n, broker.bootstrap_servers, Path(tmp))
            except Exception as exc:  # one failed run must not stop the others
                print(f"run {n}/{REPEATS}: FAILED {exc}", flush=True)
                continue
            _report(n, result)
            sys.stdout.flush()
            results.append(result)
    complete = [r for r in results if not r["timed_out"]]
    print(
        f"{len(complete)} of {REPEATS} runs complete; {PARTITIONS} partitions, 1 standby, "
        f"queries for {KEY} with allow_stale=true&max_lag={MAX_LAG} every "
        f"{QUERY_INTERVAL_S * 1000:.0f} ms + round trip, input to every partition every "
        f"{FEED_INTERVAL_S * 1000:.0f} ms, {SESSION_TIMEOUT}"
    )
    if not results:
        return
    queries = sum(r["queries"] for r in results)
    answered = sum(r["ok"] for r in results)
    failures = sum(len(r["failures"]) for r in results)
    print(
        f"after the kill, all runs: {queries} queries, {answered} answered "
        f"({answered / queries if queries else float('nan'):.4f}), {failures} failures"
    )
    figures = {
        "kill -> first standby answer": [r["first_stale_s"] for r in results],
        "kill -> first new-active answer": [r["first_new_active_s"] for r in results],
        # The slowest of the killed instance's partitions: when all of its output resumed.
        "kill -> output resumed": [
            None if None in r["output_s"].values() else max(r["output_s"].values(), default=None)
            for r in results
        ],
    }
    for label, maybe in figures.items():
        values = [v for v in maybe if v is not None]
        if values:
            print(
                f"{label:<32} median {median(values):.2f} s "
                f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} runs; "
                f"{SESSION_TIMEOUT})"
            )

    def median_ratio(field: str) -> float:
        return median(_ratio(r["routed"][field], r["local"][field]) for r in results)

    print(
        f"routed/local (median over runs): throughput {median_ratio('rate'):.3f}, "
        f"p50 latency {median_ratio('p50'):.2f}x, p99 latency {median_ratio('p99'):.2f}x"
    )
    hop = median(_ratio(r["pooled"]["rate"], r["hop"]["rate"]) for r in results)
    print(f"forward hop kept alive / new connection (median over runs): throughput {hop:.3f}")


if __name__ == "__main__":
    main()
