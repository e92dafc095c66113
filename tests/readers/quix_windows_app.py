"""A Quix Streams app for tests/readers/test_quix.py, run by the Python of the Quix Streams
virtualenv (progress_control_apps/dev/quix.py) with the repository on PYTHONPATH:

    python quix_windows_app.py SPEC.json

Two windows over one topic (key str, value JSON ``{"n": int}``), each behind user functions
that fail the app if they ever see anything but data: a tumbling window (``reduce`` with a
reducer and an initializer, Quix's default per-key closing) and a session window (``count``,
per-partition closing). Closed windows go to two sink topics as JSON ``{start, end, value}``.
``spec["helper"]`` picks our ``Application`` or Quix's own. On SIGTERM the app stops and, with
the helper, writes its tick counts to ``spec["stats"]``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SENTINEL = "__progress_control__"


def _data(where: str, value: Any, key: Any = None) -> None:
    """Fail the app when a user function is handed anything but a data record."""
    if not isinstance(value, dict) or "n" not in value or key == SENTINEL:
        raise AssertionError(f"{where} was handed a non-data record: key={key!r} value={value!r}")


def keep(value: Any) -> bool:
    _data("filter", value)
    return bool(value["n"] >= 0)


def initializer(value: Any) -> int:
    _data("initializer", value)
    return int(value["n"])


def reducer(total: int, value: Any) -> int:
    _data("reducer", value)
    return total + int(value["n"])


def tag(value: Any, key: Any, _timestamp: int, _headers: Any) -> Any:
    _data("apply", value, key)
    return value


def result(window: dict[str, Any]) -> dict[str, Any]:
    return {"start": window["start"], "end": window["end"], "value": window["value"]}


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    if spec["helper"]:
        from progress_control.readers.quix import Application
    else:
        from quixstreams import Application
    app = Application(
        broker_address=spec["bootstrap_servers"],
        consumer_group=spec["group"],
        auto_offset_reset="earliest",
        commit_interval=0.2,
        state_dir=spec["state_dir"],
        loglevel="WARNING",
    )
    source = app.topic(spec["source"], key_deserializer="str", value_deserializer="json")
    sdf: Any = app.dataframe(source)
    sdf = sdf.filter(keep).apply(tag, metadata=True)

    tumbling = app.topic(spec["tumbling_sink"], key_serializer="str", value_serializer="json")
    windows = sdf.tumbling_window(spec["tumbling_ms"]).reduce(reducer, initializer).final()
    windows.apply(result).to_topic(tumbling)

    sessions = app.topic(spec["session_sink"], key_serializer="str", value_serializer="json")
    closed = sdf.session_window(spec["gap_ms"]).count().final(closing_strategy="partition")
    closed.apply(result).to_topic(sessions)

    app.run()
    if spec["helper"]:
        stats = app.tick_stats
        rejected = {str(reason): count for reason, count in stats.rejected.items()}
        Path(spec["stats"]).write_text(json.dumps({"ticks": stats.ticks, "rejected": rejected}))


if __name__ == "__main__":
    main()
