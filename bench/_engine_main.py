"""One engine of the engines benchmark, in its own process (so its peak RSS is its own):

    python -m bench._engine_main SPEC.json

``SPEC.json`` names the ``engine`` (``plain`` or ``runtime``), ``bootstrap_servers``,
``source``, ``sink``, ``group`` (consumer group / application id), ``workload`` (``session`` or
``tumbling``), ``window_ms``, ``guarantee`` (``at_least_once`` or ``exactly_once``),
``commit_interval_ms``, and for the runtime ``state_engine`` and ``state_dir``. Runs until
SIGTERM; the benchmark watches the group's committed offsets.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from bench._plain_loop import consume_produce
from streams_runtime import App, SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Json, String


def _windows(spec: dict[str, Any]) -> SessionWindows | TimeWindows:
    """Sessions with a gap of ``window_ms``, or tumbling windows of that size."""
    if spec["workload"] == "session":
        return SessionWindows(gap_ms=spec["window_ms"])
    return TimeWindows(spec["window_ms"])


def _window_counts(spec: dict[str, Any]) -> StreamsBuilder:
    """Per-key window counts, final results only, as JSON ``{start, end, count}``; the input's
    values are parsed as JSON and otherwise ignored (as in the Quix Streams and Kafka Streams
    twins of this topology)."""
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


def _run_plain(spec: dict[str, Any]) -> None:
    stopping = False

    def stop(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consume_produce(
        spec["bootstrap_servers"],
        spec["source"],
        spec["sink"],
        spec["group"],
        lambda _seen: stopping,
        decode=True,
        commit_interval_s=spec["commit_interval_ms"] / 1000,
    )


def _run_runtime(spec: dict[str, Any]) -> None:
    App(
        _window_counts(spec),
        application_id=spec["group"],
        bootstrap_servers=spec["bootstrap_servers"],
        state_dir=Path(spec["state_dir"]),
        state_engine=spec["state_engine"],
        processing_guarantee=spec["guarantee"],
        commit_interval_ms=spec["commit_interval_ms"],
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
