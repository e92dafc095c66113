"""A streams runtime app for the restart tests (and the topology of the session tests and the
runtime benchmarks): session-window counts (or time-window ones), suppressed until the
windows close, written as JSON. Every setting comes from PROGRESS_CONTROL_RUNTIME_* env vars.

    python sessions_app.py INPUT OUTPUT GAP_MS
"""

import faulthandler
import signal
import sys
from typing import Any

from progress_control.logging import configure_logging
from streams_runtime import App, SessionWindows, StreamsBuilder, TimeWindows, until_window_closes
from streams_runtime.serdes import Integer, Json, Serde, String


def window_counts(
    source: str,
    sink: str,
    windows: SessionWindows | TimeWindows,
    value_serde: Serde[Any] | None = None,
) -> StreamsBuilder:
    """Per-key session or time-window counts, final results only, as JSON ``{start, end,
    count}``; the input's values are read with ``value_serde`` (default: Integer) and otherwise
    ignored."""
    builder = StreamsBuilder()
    (
        builder.stream(source, key_serde=String(), value_serde=value_serde or Integer())
        .group_by_key()
        .windowed_by(windows)
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "count": n}))
        .to(sink, key_serde=String(), value_serde=Json())
    )
    return builder


def session_counts(
    source: str, sink: str, gap_ms: int, value_serde: Serde[Any] | None = None
) -> StreamsBuilder:
    """:func:`window_counts` over sessions with an inactivity gap of ``gap_ms``."""
    return window_counts(source, sink, SessionWindows(gap_ms=gap_ms), value_serde)


def main() -> None:
    source, sink, gap_ms = sys.argv[1], sys.argv[2], int(sys.argv[3])
    configure_logging("INFO", json=False)
    faulthandler.register(signal.SIGUSR1)  # stack dump on demand, for debugging hangs
    App(session_counts(source, sink, gap_ms)).run()


if __name__ == "__main__":
    main()
