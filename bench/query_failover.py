"""Interactive-query failover on a real broker: SIGKILL the active of a key while it is queried.

Three runtime processes (this module run with ``--instance``: a String table of a 3-partition
topic in the store ``store``, one standby replica per partition, commit interval 100 ms, session
timeout 6 s, heartbeats every 500 ms, a query token) share one application id. Each of
``BENCH_REPEATS`` (default 3) runs uses a fresh topic of 30 rows, a fresh application id and fresh
processes and state dirs:

1. wait (at most 180 s) until every instance answers, agrees on an active and a standby of every
   partition, the standby of ``key-7`` is caught up (offset lag 0) and the key's active answers,
   with the same active and standby of the key in 5 polls in a row (0.5 s apart);
2. baseline, ``BENCH_MEASURE_S`` (default 3) seconds each, one client in a closed loop, a new HTTP
   connection per query: *local* queries (the client asks the instance holding the key's active
   copy) vs *routed* queries (the client asks the third instance, neither active nor standby,
   which forwards to the active); queries/s and p50/p99 latency of the answers from that active,
   and routed/local (measured again, up to 3 times, if the key's placement moved meanwhile);
3. the client queries the third instance in a loop (``allow_stale=true&max_lag=2``, a pause of
   ``BENCH_QUERY_INTERVAL_S``, default 0.02 s, between queries) while the active's process gets
   SIGKILL; the loop stops after 20 answers in a row from a new active (at most 180 s after the
   kill). Counted over the queries sent after the kill: answered (200) ratio, answers from the
   standby (stale) and their max offset lag, failures (status and body, first few), wrong values,
   query latency (p50, max), and the time from the kill to the first answer served by the standby
   and to the first answer from the new active (the end of that query).

A run that fails (no placement in time, an instance dying, ...) prints why and the next run
starts.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any, TypeVar

from confluent_kafka import Producer

from bench._kafka import create_topic, unique_name
from progress_control.broker import EmbeddedKafkaBroker

T = TypeVar("T")

PARTITIONS = 3
ROWS = {f"key-{i}": f"value-{i}" for i in range(30)}
KEY = "key-7"
STORE = "store"
TOKEN = "bench-token"  # noqa: S105 - a local benchmark's query token
MAX_LAG = 2  # below the changelog length: a fresh, empty standby is not within it
PLACEMENT_TIMEOUT_S = 180.0
NEW_ACTIVE_TIMEOUT_S = 180.0
NEW_ACTIVE_STREAK = 20
STABLE_POLLS = 5  # 0.5 s apart
BASELINE_ATTEMPTS = 3
SHOW_FAILURES = 5
REPEATS = int(os.environ.get("BENCH_REPEATS", "3"))
MEASURE_S = float(os.environ.get("BENCH_MEASURE_S", "3"))
QUERY_INTERVAL_S = float(os.environ.get("BENCH_QUERY_INTERVAL_S", "0.02"))
ROOT = Path(__file__).resolve().parent.parent


class RunFailedError(RuntimeError):
    """One run could not complete; the message says why."""


# -- the runtime instance ------------------------------------------------------------------------


def _instance_main(source: str, store: str) -> None:
    """One runtime process: a table of ``source`` in ``store``; every setting comes from
    PROGRESS_CONTROL_RUNTIME_* env vars."""
    import faulthandler

    from progress_control.logging import configure_logging
    from streams_runtime import App, StreamsBuilder
    from streams_runtime.serdes import String

    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=String())
    builder.table(source, store_name=store)
    App(builder).run()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _http_get(url: str, timeout: float = 5.0) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(url)  # noqa: S310 - a local query server
    request.add_header("Authorization", f"Bearer {TOKEN}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        try:
            return exc.code, json.loads(raw)
        except ValueError:
            return exc.code, {"raw": raw[:200].decode(errors="replace")}


def _query(url: str) -> tuple[int, dict[str, Any]]:
    """``_http_get`` with transport errors as status 599."""
    try:
        return _http_get(url)
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return 599, {"error": type(exc).__name__, "message": str(exc)}


class Instance:
    """One runtime process with its own query endpoint, state dir and log file."""

    def __init__(self, env: dict[str, str], source: str, log: Path) -> None:
        self.port = _free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.log_path = log
        self.log = log.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.query_failover", "--instance", source, STORE],
            env={**env, "PROGRESS_CONTROL_RUNTIME_APPLICATION_SERVER": self.endpoint},
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=self.log,
        )
        self.instance_id = ""
        self.killed = False

    def url(self, path: str) -> str:
        return f"http://{self.endpoint}{path}"

    def healthy(self) -> bool:
        try:
            status, body = _http_get(self.url("/health"))
        except (OSError, http.client.HTTPException, ValueError):
            return False
        self.instance_id = body.get("instance_id", "")
        return status == 200

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None and not self.killed:
            raise RunFailedError(
                f"instance {self.endpoint} exited with {code}; log tail: {self.log_tail()!r}"
            )

    def log_tail(self, lines: int = 3) -> list[str]:
        self.log.flush()
        text = self.log_path.read_text(errors="replace").splitlines()
        return [line[-300:] for line in text[-lines:]]

    def kill(self) -> None:
        self.killed = True
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()

    def wait_stopped(self) -> None:
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()


# -- measuring -----------------------------------------------------------------------------------


def _wait(
    condition: Callable[[], T | None],
    timeout_s: float,
    what: str,
    instances: list[Instance],
    *,
    interval_s: float = 0.5,
    since: float | None = None,
) -> T:
    """Poll ``condition`` until it returns a truthy value; ``RunFailedError`` after
    ``timeout_s`` (its message counts from ``since``, the call by default)."""
    since = time.monotonic() if since is None else since
    deadline = time.monotonic() + timeout_s
    while True:
        for inst in instances:
            inst.check_alive()
        result = condition()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise RunFailedError(f"no {what} after {time.monotonic() - since:.0f} s")
        time.sleep(interval_s)


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
        status, body = _query(url)
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
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "rate": len(latencies) / elapsed,
        "p50": _percentile(latencies, 0.50) * 1000,
        "p99": _percentile(latencies, 0.99) * 1000,
        "ok": len(latencies),
        "errors": errors,
    }


def _produce_rows(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2_random"})
    for key, value in ROWS.items():
        producer.produce(topic, key=key.encode(), value=value.encode())
    if producer.flush(30):
        raise RunFailedError("rows still queued after flush")


def _placement(instances: list[Instance]) -> dict[str, Any] | None:
    """The key's metadata once every instance agrees on an active and a standby of every
    partition, the key's standby is caught up and the key's active answers; otherwise
    ``None``."""
    by_endpoint = {i.endpoint: i for i in instances}
    try:
        for inst in instances:
            for p_key in ("key-0", "key-1", "key-2", KEY):
                status, meta = _http_get(inst.url(f"/metadata/{STORE}/{p_key}"))
                if status != 200 or not meta["active_host"] or not meta["standby_hosts"]:
                    return None
        status, meta = _http_get(instances[0].url(f"/metadata/{STORE}/{KEY}"))
        if status != 200 or meta["active_host"] not in by_endpoint:
            return None
        standby = by_endpoint.get(meta["standby_hosts"][0])
        if standby is None or standby.endpoint == meta["active_host"]:
            return None
        status, lags = _http_get(standby.url("/lags"))
        lag = lags.get("lags", {}).get(STORE, {}).get(str(meta["partition"]))
        if status != 200 or not lag or lag["offset_lag"] != 0 or lag["end_offset"] == 0:
            return None
        status, body = _http_get(instances[0].url(f"/stores/{STORE}/keys/{KEY}"))
    except (OSError, http.client.HTTPException, ValueError, KeyError, IndexError):
        return None
    answered = (
        status == 200
        and body.get("value") == ROWS[KEY]
        and body.get("served_by") == "active"
        and body.get("instance_id") == by_endpoint[meta["active_host"]].instance_id
    )
    return meta if answered else None


def _roles(meta: dict[str, Any]) -> tuple[str, str]:
    return meta["active_host"], meta["standby_hosts"][0]


def _stable_placement(
    instances: list[Instance], timeout_s: float, since: float | None = None
) -> dict[str, Any]:
    """``_placement`` with the same active and standby of the key in ``STABLE_POLLS`` polls in a
    row: tasks keep moving for a while after the instances joined."""
    streak: list[tuple[str, str]] = []

    def stable() -> dict[str, Any] | None:
        meta = _placement(instances)
        if meta is None:
            streak.clear()
            return None
        if streak and streak[-1] != _roles(meta):
            streak.clear()
        streak.append(_roles(meta))
        return meta if len(streak) >= STABLE_POLLS else None

    what = "stable actives and caught-up standbys"
    return _wait(stable, timeout_s, what, instances, since=since)


def _failover(
    active: Instance, standby: Instance, client: Instance, instances: list[Instance]
) -> dict[str, Any]:
    """Kill ``active`` while ``client`` is queried in a loop; the answers after the kill."""
    answers: list[tuple[float, float, int, dict[str, Any]]] = []  # sent, answered, status, body
    stop = threading.Event()
    url = client.url(f"/stores/{STORE}/keys/{KEY}?allow_stale=true&max_lag={MAX_LAG}")

    def query_loop() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            status, body = _query(url)
            answers.append((sent, time.monotonic(), status, body))
            time.sleep(QUERY_INTERVAL_S)

    querier = threading.Thread(target=query_loop, name="bench-querier", daemon=True)
    querier.start()
    time.sleep(1.0)
    killed_at = time.monotonic()
    active.kill()
    before = [(status, body) for sent, at, status, body in answers if at < killed_at]
    not_from_active = sum(
        status != 200
        or body.get("served_by") != "active"
        or body.get("instance_id") != active.instance_id
        for status, body in before
    )

    def new_active_answers() -> bool:
        recent = [
            (status, body)
            for sent, _, status, body in answers[-NEW_ACTIVE_STREAK:]
            if sent > killed_at
        ]
        return len(recent) == NEW_ACTIVE_STREAK and all(
            status == 200
            and body.get("served_by") == "active"
            and body.get("instance_id") != active.instance_id
            for status, body in recent
        )

    timed_out = None
    try:
        what = f"{NEW_ACTIVE_STREAK} answers in a row from a new active"
        _wait(new_active_answers, NEW_ACTIVE_TIMEOUT_S, what, instances, interval_s=0.2)
    except RunFailedError as exc:
        timed_out = str(exc)
    finally:
        stop.set()
        querier.join(10)
    after = [
        (at - killed_at, status, body) for sent, at, status, body in answers if sent > killed_at
    ]
    latencies = sorted(at - sent for sent, at, _, _ in answers if sent > killed_at)
    ok = [(t, body) for t, status, body in after if status == 200]
    stale = [(t, body) for t, body in ok if body.get("served_by") != "active"]
    new_active = [
        (t, body)
        for t, body in ok
        if body.get("served_by") == "active" and body.get("instance_id") != active.instance_id
    ]
    promoted = new_active[-1][1].get("instance_id") if new_active else None
    return {
        "queries": len(after),
        "ok": len(ok),
        "wrong": sum(body.get("value") != ROWS[KEY] for _, body in ok),
        "stale": len(stale),
        "stale_elsewhere": sum(b.get("instance_id") != standby.instance_id for _, b in stale),
        "stale_max_lag": max((b.get("offset_lag", -1) for _, b in stale), default=None),
        "failures": [(status, body) for _, status, body in after if status != 200],
        "first_stale_s": stale[0][0] if stale else None,
        "first_new_active_s": new_active[0][0] if new_active else None,
        "promoted": {
            standby.instance_id: "the standby",
            client.instance_id: "the queried instance",
        }.get(promoted or "", promoted),
        "timed_out": timed_out,
        "latency_p50": _percentile(latencies, 0.5),
        "latency_max": latencies[-1] if latencies else float("nan"),
        "before": len(before),
        "before_not_from_active": not_from_active,
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
    _produce_rows(bootstrap, source)
    env = {
        **os.environ,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        "PROGRESS_CONTROL_RUNTIME_APPLICATION_ID": unique_name("bench-iq-failover"),
        "PROGRESS_CONTROL_RUNTIME_BOOTSTRAP_SERVERS": bootstrap,
        "PROGRESS_CONTROL_RUNTIME_COMMIT_INTERVAL_MS": "100",
        "PROGRESS_CONTROL_RUNTIME_NUM_STANDBY_REPLICAS": "1",
        "PROGRESS_CONTROL_RUNTIME_QUERY_TOKEN": TOKEN,
        "PROGRESS_CONTROL_RUNTIME_CONSUMER__SESSION_TIMEOUT_MS": "6000",
        "PROGRESS_CONTROL_RUNTIME_CONSUMER__HEARTBEAT_INTERVAL_MS": "500",
    }
    instances: list[Instance] = []
    phase = "starting the instances"
    try:
        for i in range(3):
            state_env = {"PROGRESS_CONTROL_RUNTIME_STATE_DIR": str(tmp / f"run{n}-state-{i}")}
            instances.append(Instance({**env, **state_env}, source, tmp / f"run{n}-{i}.log"))
        started = time.monotonic()
        phase = "waiting for placement"
        _wait(
            lambda: all(i.healthy() for i in instances),
            PLACEMENT_TIMEOUT_S,
            "healthy query servers",
            instances,
        )
        remaining = PLACEMENT_TIMEOUT_S - (time.monotonic() - started)
        meta = _stable_placement(instances, remaining, since=started)
        placed_s = time.monotonic() - started
        by_endpoint = {i.endpoint: i for i in instances}
        path = f"/stores/{STORE}/keys/{KEY}"
        phase = "measuring the baseline"
        for attempt in range(1, BASELINE_ATTEMPTS + 1):
            active = by_endpoint[meta["active_host"]]
            standby = by_endpoint[meta["standby_hosts"][0]]
            client = next(i for i in instances if i not in (active, standby))
            local = _closed_loop(active.url(path), MEASURE_S, active.instance_id)
            routed = _closed_loop(client.url(path), MEASURE_S, active.instance_id)
            after = _placement(instances)
            if after is not None and _roles(after) == _roles(meta):
                break
            # The key's active or standby moved meanwhile: the baseline measured something else.
            if attempt == BASELINE_ATTEMPTS:
                raise RunFailedError(f"the key's placement kept moving ({attempt} baselines)")
            print(f"run {n}: placement moved during the baseline; measuring again", flush=True)
            phase = "waiting for placement again"
            meta = _stable_placement(instances, PLACEMENT_TIMEOUT_S)
            phase = "measuring the baseline"
        phase = "querying around the kill"
        failover = _failover(active, standby, client, instances)
        return {"placed_s": placed_s, "local": local, "routed": routed, **failover}
    except Exception as exc:
        raise RunFailedError(f"while {phase}: {type(exc).__name__}: {exc}") from exc
    finally:
        for inst in instances:
            inst.terminate()
        for inst in instances:
            inst.wait_stopped()


def _report(n: int, result: dict[str, Any]) -> None:
    local, routed = result["local"], result["routed"]
    print(f"run {n}/{REPEATS}: placement agreed after {result['placed_s']:.1f} s")
    for name, label, m in (
        ("local ", "asks the active's instance", local),
        ("routed", "asks an instance that forwards", routed),
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
        f"{_fmt_s(result['first_new_active_s'])}"
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
        f"{QUERY_INTERVAL_S * 1000:.0f} ms + round trip"
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
    for label, field in (
        ("kill -> first standby answer", "first_stale_s"),
        ("kill -> first new-active answer", "first_new_active_s"),
    ):
        values = [r[field] for r in results if r[field] is not None]
        if values:
            print(
                f"{label:<32} median {median(values):.2f} s "
                f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} runs)"
            )

    def median_ratio(field: str) -> float:
        return median(_ratio(r["routed"][field], r["local"][field]) for r in results)

    print(
        f"routed/local (median over runs): throughput {median_ratio('rate'):.3f}, "
        f"p50 latency {median_ratio('p50'):.2f}x, p99 latency {median_ratio('p99'):.2f}x"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--instance"]:
        _instance_main(sys.argv[2], sys.argv[3])
    else:
        main()
