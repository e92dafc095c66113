"""The soak benchmark's application, in its own process (so its RSS is its own):

    python -m bench._soak_app SPEC.json

``SPEC.json`` names ``bootstrap_servers``, ``clicks`` (the input), ``sessions`` and ``pages`` (the
outputs), ``application_id``, ``state_engine``, ``state_dir``, and ``settings`` (more runtime
settings, passed on as they are). Two sub-topologies, as a production sessionization runs them:
per-user sessions (gap ``gap_ms``) counted and suppressed until they close, and per-page counts
through a repartition topic (the clicks re-keyed by page). Exactly-once. Runs until SIGTERM.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def _topology(spec: dict[str, Any]) -> Any:
    from streams_runtime import SessionWindows, StreamsBuilder, until_window_closes
    from streams_runtime.serdes import Integer, Json, String

    builder = StreamsBuilder(default_key_serde=String(), default_value_serde=Json())
    clicks = builder.stream(spec["clicks"])
    (
        clicks.group_by_key()
        .windowed_by(SessionWindows(gap_ms=spec["gap_ms"]))
        .count()
        .suppress(until_window_closes())
        .to_stream()
        .map(lambda w, n: (w.key, {"start": w.start, "end": w.end, "clicks": n}))
        .to(spec["sessions"])
    )
    (
        clicks.select_key(lambda _user, click: click["page"])
        .group_by_key()
        .count()
        .to_stream()
        .to(spec["pages"], value_serde=Integer())
    )
    return builder


def main() -> None:
    from progress_control.logging import configure_logging
    from streams_runtime import App

    spec = json.loads(Path(sys.argv[1]).read_text())
    configure_logging("WARNING", json=True)
    App(
        _topology(spec),
        application_id=spec["application_id"],
        bootstrap_servers=spec["bootstrap_servers"],
        state_dir=Path(spec["state_dir"]),
        state_engine=spec["state_engine"],
        processing_guarantee="exactly_once",
        **spec.get("settings", {}),
    ).run()


if __name__ == "__main__":
    main()
