"""One engine of the engines benchmark, in its own process (so its peak RSS is its own):

    python -m bench._engine_main SPEC.json

``SPEC.json`` names the ``engine`` (``plain`` or ``runtime``), ``bootstrap_servers``, ``source``,
``sink``, ``group`` (consumer group / application id), ``workload`` (``session``, ``tumbling`` or
``orders``; ``orders`` also names its ``users`` table topic), ``window_ms``, ``guarantee``
(``at_least_once`` or ``exactly_once``), ``commit_interval_ms``, and for the runtime
``state_engine``, ``state_dir`` and ``native_core`` (default true; passed on only where the runtime
has that setting). Runs until SIGTERM; the benchmark watches the group's committed offsets.

Both engines log JSON lines: the runtime its own (its ``first record processed`` and ``input
drained`` lines among them, :mod:`streams_runtime.processing.milestones`); the plain loop lines
of the same shape, so the benchmark reads when each processed its first and last record. Each
imports only its own engine: the import time is part of the fixed cost measured.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streams_runtime import SessionWindows, StreamsBuilder, TimeWindows


def _windows(spec: dict[str, Any]) -> SessionWindows | TimeWindows:
    """Sessions with a gap of ``window_ms``, or tumbling windows of that size."""
    from streams_runtime import SessionWindows, TimeWindows

    if spec["workload"] == "session":
        return SessionWindows(gap_ms=spec["window_ms"])
    return TimeWindows(spec["window_ms"])


def _window_counts(spec: dict[str, Any]) -> StreamsBuilder:
    """Per-key window counts, final results only, as JSON ``{start, end, count}``; the input's
    values are parsed as JSON and otherwise ignored (as in the Quix Streams and Kafka Streams
    twins of this topology)."""
    from streams_runtime import StreamsBuilder, until_window_closes
    from streams_runtime.serdes import Json, String

    builder = StreamsBuilder()
    (
        builder.stream(spec["source"], key_serde=String(), value_serde=Json())
        .group_by_key()
        .windowed_by(_windows(spec))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(spec["sink"], key_serde=String(), value_serde=Json())
    )
    return builder


def _orders(spec: dict[str, Any]) -> StreamsBuilder:
    """Issue 53's realistic topology (``bench/_orders.py``): paid orders re-keyed by user (a
    repartition), joined with the users table, summed per user session with the user's own
    initializer, adder and merger, final results only, as JSON ``{start, end, count, total}``."""
    from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
    from streams_runtime.serdes import Json, String

    # The join's repartition writes user keys as the users topic holds them (plain strings).
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    users = builder.table(spec["users"], key_serde=String(), value_serde=Json())
    (
        builder.stream(spec["source"], key_serde=String(), value_serde=Json())
        .filter(lambda _, order: order["status"] != "cancelled")
        .select_key(lambda _, order: order["user"])
        .join(users, lambda order, user: {"amount": order["amount"], "region": user["region"]})
        .map_values(lambda sale: {**sale, "net": sale["amount"] * 0.8})
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=spec["window_ms"], grace_ms=spec["grace_ms"]))
        .aggregate(
            lambda: {"count": 0, "total": 0},
            lambda _, sale, agg: {
                "count": agg["count"] + 1,
                "total": agg["total"] + sale["amount"],
            },
            lambda _, a, b: {"count": a["count"] + b["count"], "total": a["total"] + b["total"]},
            value_serde=Json(),
        )
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, agg: (w.key, {"start": w.start, "end": w.end, **agg}))
        .to(spec["sink"], key_serde=String(), value_serde=Json())
    )
    return builder


def _log_line(event: str, at: float, **fields: float | None) -> None:
    """A JSON line of the shape the runtime logs, stamped ``at`` (wall clock)."""
    stamp = datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    print(json.dumps({"event": event, "timestamp": stamp, **fields}), flush=True)


def _run_plain(spec: dict[str, Any]) -> None:
    from bench._plain_loop import consume_produce

    stopping = False
    seen_before = 0
    first_at: float | None = None
    last_at = 0.0

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    def done(seen: int) -> bool:
        # Called after every batch: the batch that moved ``seen`` ended just now.
        nonlocal seen_before, first_at, last_at
        if seen != seen_before:
            seen_before, last_at = seen, time.time()
            if first_at is None:
                first_at = last_at
                _log_line("first record processed", first_at, since_start_s=None)
        return stopping

    signal.signal(signal.SIGTERM, stop)
    consume_produce(
        spec["bootstrap_servers"],
        spec["source"],
        spec["sink"],
        spec["group"],
        done,
        decode=True,
        commit_interval_s=spec["commit_interval_ms"] / 1000,
    )
    if first_at is not None:
        _log_line("last record processed", last_at, since_last_record_s=0.0)


def _run_runtime(spec: dict[str, Any]) -> None:
    from progress_control.logging import configure_logging
    from streams_runtime import App
    from streams_runtime.settings import RuntimeSettings

    configure_logging("INFO", json=True)  # the milestones the benchmark reads
    options: dict[str, Any] = {}
    if "native_core" in RuntimeSettings.model_fields:  # not in every version of the runtime
        options["native_core"] = spec.get("native_core", True)
    App(
        _orders(spec) if spec["workload"] == "orders" else _window_counts(spec),
        application_id=spec["group"],
        bootstrap_servers=spec["bootstrap_servers"],
        state_dir=Path(spec["state_dir"]),
        state_engine=spec["state_engine"],
        processing_guarantee=spec["guarantee"],
        commit_interval_ms=spec["commit_interval_ms"],
        **options,
    ).run()


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    if spec["engine"] == "plain":
        _run_plain(spec)
    elif spec["engine"] == "runtime":
        _run_runtime(spec)
    else:
        raise SystemExit(f"unknown engine {spec['engine']!r}")


if __name__ == "__main__":
    main()
