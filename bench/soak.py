"""Memory and state over a long run: does the runtime's footprint stay flat?

The application of ``bench/_soak_app.py`` (a session count with a suppression, and a page count
through a repartition topic, exactly-once) runs in its own process, once per state engine, while
this process writes ``BENCH_SOAK_RATE`` clicks a second (default 2,000) in real time from
churning users: each minute brings ``BENCH_SOAK_USERS`` new users (default 3,000) and retires as
many, so sessions keep opening and closing and keys keep coming and going, as in production.
Every ``BENCH_SOAK_SAMPLE_S`` seconds (default 10) it samples the process's RSS and the size of
its state directory.

Each engine runs ``BENCH_SOAK_MINUTES`` (default 12); the first ``BENCH_SOAK_WARMUP_MINUTES``
(default 3) are warm-up. Printed per engine: RSS and state size at the end of warm-up and at the
end, their growth per minute after warm-up (least squares over the samples), the clicks the
application kept up with, and the growth over the in-memory engine's, measured in the same run
(the baseline: it holds its state in the process too, so its RSS covers the state; what grows
beyond it is the engine's own). ``BENCH_SOAK_ENGINES`` (comma list, default
``memory,rocksdb,rocksdb-unbounded,sqlite``) chooses; ``rocksdb-unbounded`` is RocksDB with
``rocksdb_memory_bytes=0`` (RocksDB's defaults per store, as before the bound).
``BENCH_SOAK_SETTINGS`` (JSON) adds runtime settings to every engine.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from bench._kafka import bootstrap_servers, create_topic, end_offsets, unique_name

PARTITIONS = 4
PAGES = 200
GAP_MS = 30_000


@dataclass
class Samples:
    """One engine's run: ``(minutes since start, RSS MB, state MB)`` every sample."""

    engine: str
    points: list[tuple[float, float, float]] = field(default_factory=list)
    produced: int = 0
    behind: int = 0
    """Clicks not yet processed when the run ended (committed input offsets' lag)."""


def _env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _size_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # compacted away meanwhile
                total += (Path(root) / name).stat().st_size
    return total / 2**20


def _write_clicks(
    bootstrap: str, topic: str, rate: int, users_per_minute: int, stop: threading.Event
) -> int:
    """Clicks at ``rate`` a second until ``stop``, from a window of ``users_per_minute`` users
    that slides by as many a minute (each user is active about a minute); how many."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "all"})
    rng = random.Random(7)  # noqa: S311 - a workload, not a secret
    started = time.monotonic()
    sent = 0
    while not stop.is_set():
        elapsed = time.monotonic() - started
        due = int(elapsed * rate)
        first_user = int(elapsed / 60 * users_per_minute)
        for _ in range(due - sent):
            user = f"user-{first_user + rng.randrange(users_per_minute)}"
            click = {"page": f"/page/{rng.randrange(PAGES)}", "at": sent}
            producer.produce(topic, json.dumps(click).encode(), user.encode())
            sent += 1
        producer.poll(0)
        time.sleep(0.01)
    producer.flush(30)
    return sent


def _committed_lag(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        committed = consumer.committed(parts, timeout=30)
        ends = end_offsets(bootstrap, topic, PARTITIONS)
        return sum(end - max(tp.offset, 0) for tp, end in zip(committed, ends, strict=True))
    finally:
        consumer.close()


# Engines besides the state_engine values: (state_engine, the settings they add).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "rocksdb-unbounded": ("rocksdb", {"rocksdb_memory_bytes": 0}),
}


def _soak(bootstrap: str, engine: str, minutes: float, sample_s: float) -> Samples:
    clicks = create_topic(bootstrap, unique_name("soak-clicks"), PARTITIONS)
    app_id = unique_name(f"soak-{engine}")
    state_engine, variant = VARIANTS.get(engine, (engine, {}))
    state_dir = Path(tempfile.mkdtemp(prefix="soak-state-"))
    spec_file = state_dir.with_suffix(".json")
    spec = {
        "bootstrap_servers": bootstrap,
        "clicks": clicks,
        "sessions": unique_name("soak-sessions"),
        "pages": unique_name("soak-pages"),
        "application_id": app_id,
        "state_engine": state_engine,
        "state_dir": str(state_dir),
        "gap_ms": GAP_MS,
        "settings": {**json.loads(_env("BENCH_SOAK_SETTINGS", "{}")), **variant},
    }
    spec_file.write_text(json.dumps(spec))
    for topic in (spec["sessions"], spec["pages"]):
        create_topic(bootstrap, topic, PARTITIONS)
    samples = Samples(engine)
    stop = threading.Event()
    sent: list[int] = []
    writer = threading.Thread(
        target=lambda: sent.append(
            _write_clicks(
                bootstrap,
                clicks,
                int(_env("BENCH_SOAK_RATE", "2000")),
                int(_env("BENCH_SOAK_USERS", "3000")),
                stop,
            )
        ),
        daemon=True,
    )
    app = subprocess.Popen([sys.executable, "-m", "bench._soak_app", str(spec_file)])
    started = time.monotonic()
    writer.start()
    try:
        while (elapsed := (time.monotonic() - started) / 60) < minutes:
            if app.poll() is not None:
                raise RuntimeError(f"the {engine} application exited with {app.returncode}")
            samples.points.append((elapsed, _rss_mb(app.pid), _size_mb(state_dir)))
            time.sleep(sample_s)
    finally:
        stop.set()
        writer.join(60)
        samples.behind = _committed_lag(bootstrap, app_id, clicks)
        app.terminate()
        app.wait(60)
        shutil.rmtree(state_dir, ignore_errors=True)
        spec_file.unlink(missing_ok=True)
    samples.produced = sent[0] if sent else 0
    return samples


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares growth per minute."""
    if len(points) < 2:
        return 0.0
    xs, ys = [x for x, _ in points], [y for _, y in points]
    return statistics.linear_regression(xs, ys).slope


def _report(runs: list[Samples], warmup: float) -> None:
    print(
        f"{'engine':<17} {'RSS MB warm→end':>16} {'RSS MB/min':>10} {'vs memory':>9} "
        f"{'state MB warm→end':>18} {'state MB/min':>12} {'clicks':>8} {'behind':>7}"
    )
    growth: dict[str, float] = {}
    for run in runs:
        after = [p for p in run.points if p[0] >= warmup] or run.points[-1:]
        rss = _slope([(t, r) for t, r, _ in after])
        state = _slope([(t, s) for t, _, s in after])
        growth[run.engine] = rss
        base = growth.get("memory")
        ratio = f"{rss - base:+9.1f}" if base is not None and run.engine != "memory" else "-"
        print(
            f"{run.engine:<17} {after[0][1]:7.0f}→{after[-1][1]:<7.0f} {rss:10.2f} {ratio:>9} "
            f"{after[0][2]:8.1f}→{after[-1][2]:<8.1f} {state:12.2f} {run.produced:8d} "
            f"{run.behind:7d}"
        )
    print("(vs memory: RSS growth per minute beyond the in-memory engine's, MB/min)")


def main() -> None:
    default = "memory,rocksdb,rocksdb-unbounded,sqlite"
    engines = [e for e in _env("BENCH_SOAK_ENGINES", default).split(",") if e]
    minutes = float(_env("BENCH_SOAK_MINUTES", "12"))
    warmup = float(_env("BENCH_SOAK_WARMUP_MINUTES", "3"))
    sample_s = float(_env("BENCH_SOAK_SAMPLE_S", "10"))
    settings = _env("BENCH_SOAK_SETTINGS", "{}")
    print(
        f"soak: {minutes:g} min per engine ({warmup:g} warm-up), "
        f"{_env('BENCH_SOAK_RATE', '2000')} clicks/s, settings {settings}",
        flush=True,
    )
    runs: list[Samples] = []
    with bootstrap_servers() as bootstrap:
        for engine in engines:
            runs.append(_soak(bootstrap, engine, minutes, sample_s))
            print(f"  {engine}: done", flush=True)
    _report(runs, warmup)


if __name__ == "__main__":
    main()
