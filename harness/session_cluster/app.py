"""The session application of issue 24 (see :mod:`harness.session_cluster`): its topology, the
numbers it is built on, and running one instance of a topology in this process. The same
sessions written with the Processor API (issue 51: a user processor with a session store and a
stream-time punctuator, which ticks fire) are :func:`processor_session_topology`."""

from __future__ import annotations

import faulthandler
import signal
import threading
import time
from pathlib import Path
from typing import Any, ClassVar

from harness.session_cluster.config import TopologyName
from streams_runtime import Record, SessionWindows, StreamsBuilder, until_window_closes
from streams_runtime.processor import (
    Processor,
    ProcessorContext,
    Progress,
    PunctuationType,
    Stores,
    TypedSessionStore,
)
from streams_runtime.serdes import Integer, Json, String

INPUT_PARTITIONS = 6
"""Input partitions; the repartition topic and ``out`` have as many."""
GAP_MS = 2_000
GRACE_MS = 1_000
CLOSE_MS = GAP_MS + GRACE_MS
"""A session is final once stream time reaches its end + gap + grace."""
PUNCTUATE_MS = 500
"""How often (in stream time) the Processor API's sessionizer emits the sessions that closed."""


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


class Sessionizer(Processor[str, Any, str, Any]):
    """Per-user sessions (gap 2 s, grace 1 s) as a user would write them with the Processor
    API: each record merges the sessions of its key within a gap in the session store; every
    :data:`PUNCTUATE_MS` of stream time, the sessions that closed go out as ``{start, end,
    count}`` stamped with their end, and leave the store. As in the DSL's session windows, a
    record is late, and dropped, when the session it would make ends before stream time - gap
    - grace."""

    # A session goes out at most CLOSE_MS + PUNCTUATE_MS of stream time after its end.
    progress: ClassVar[Progress | None] = Progress.trails_by(CLOSE_MS + PUNCTUATE_MS)

    def init(self, context: ProcessorContext[str, Any]) -> None:
        self.context = context
        self.sessions: TypedSessionStore[str, int] = context.get_state_store("open-sessions")
        context.schedule(PUNCTUATE_MS, PunctuationType.STREAM_TIME, self.emit_closed)

    def process(self, record: Record[str, Any]) -> None:
        t = record.timestamp
        if record.key is None:
            return
        merged = self.sessions.find_sessions(record.key, t - GAP_MS, t + GAP_MS)
        start = min([t, *(s for s, _, _ in merged)])
        end = max([t, *(e for _, e, _ in merged)])
        if end + CLOSE_MS < self.context.current_stream_time_ms():
            return
        for s, e, _ in merged:
            self.sessions.remove(record.key, s, e)
        self.sessions.put(record.key, start, end, 1 + sum(n for *_, n in merged))

    def emit_closed(self, stream_time: int) -> None:
        closed = [s for s in self.sessions.all() if s[2] + CLOSE_MS <= stream_time]
        for user, start, end, count in closed:
            self.sessions.remove(user, start, end)
            value = {"start": start, "end": end, "count": count}
            self.context.forward(Record(user, value, end))


def processor_session_topology(source: str, sink: str) -> StreamsBuilder:
    """The sessions of :func:`session_topology`, through a :class:`Sessionizer` after an
    explicit repartition by user."""
    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    builder.add_state_store(
        Stores.session_store_builder(
            "open-sessions", retention_ms=CLOSE_MS, key_serde=String(), value_serde=Integer()
        )
    )
    (
        builder.stream(source)
        .select_key(lambda _page, click: click["user"])
        .repartition()
        .process(Sessionizer, "open-sessions")
        .to(sink)
    )
    return builder


def topology(name: TopologyName, source: str, sink: str) -> StreamsBuilder:
    """The topology ``name`` between ``source`` and ``sink``."""
    if name == "processor":
        return processor_session_topology(source, sink)
    return session_topology(source, sink)


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
