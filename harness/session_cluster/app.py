"""The session application of issue 24 (see :mod:`harness.session_cluster`): its topology, the
numbers it is built on, and running one instance of a topology in this process."""

from __future__ import annotations

import faulthandler
import signal
import threading
import time
from pathlib import Path

from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.serdes import Json, String

INPUT_PARTITIONS = 6
"""Input partitions; the repartition topic and ``out`` have as many."""
GAP_MS = 2_000
GRACE_MS = 1_000
CLOSE_MS = GAP_MS + GRACE_MS
"""A session is final once stream time reaches its end + gap + grace."""


def session_topology(source: str, sink: str) -> StreamsBuilder:
    """Issue 24's topology: per-user sessions of page-keyed clicks, final results only, as
    JSON ``{start, end, count}`` keyed by user."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    (
        builder.stream(source)
        .select_key(lambda _page, click: click["user"])
        .group_by_key()
        .windowed_by(SessionWindows(gap_ms=GAP_MS, grace_ms=GRACE_MS))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(sink)
    )
    return builder


def run_instance(builder: StreamsBuilder, port_file: Path) -> None:
    """Run an app of ``builder``'s topology in this process (settings from the env), writing
    its bound metrics port to ``port_file`` once known."""
    from progress_control.logging import configure_logging
    from streams_runtime import App

    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    app = App(builder)

    def publish_metrics_port() -> None:
        # metrics_port is 0 (any free port): tell the harness which one was bound.
        while app.metrics_port is None:
            time.sleep(0.05)
        partial = port_file.with_suffix(".partial")
        partial.write_text(str(app.metrics_port))
        partial.rename(port_file)

    threading.Thread(target=publish_metrics_port, name="metrics-port", daemon=True).start()
    app.run()
