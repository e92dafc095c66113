"""The Quix Streams engine of the engines benchmark, run by the Python of the Quix Streams
virtualenv that ``progress_control_apps/dev/quix.py`` installs (nothing of this project is
importable there):

    python quix_app.py SPEC.json

The spec is as for ``bench/_engine_main.py``. Session workload: ``session_window(gap)``,
``count()``, ``final()`` (Quix's default closing strategy, per key: with this input every
session closes as in Kafka Streams); tumbling: ``tumbling_window(size)``, ``count()``,
``final(closing_strategy="partition")`` (a window closes when its partition's stream time passes
its end, as in Kafka Streams). Output as the runtime's: key the input key, value JSON
``{start, end, count}``. Runs until SIGTERM; everything else is Quix Streams' default
(RocksDB state, changelog topics).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from quixstreams import Application


def main() -> None:
    spec = json.loads(Path(sys.argv[1]).read_text())
    app = Application(
        broker_address=spec["bootstrap_servers"],
        consumer_group=spec["group"],
        auto_offset_reset="earliest",
        commit_interval=spec["commit_interval_ms"] / 1000,
        processing_guarantee=spec["guarantee"].replace("_", "-"),
        state_dir=spec["state_dir"],
    )
    source = app.topic(spec["source"], key_deserializer="str", value_deserializer="json")
    sink = app.topic(spec["sink"], key_serializer="str", value_serializer="json")
    sdf: Any = app.dataframe(source)
    if spec["workload"] == "session":
        sdf = sdf.session_window(spec["window_ms"]).count().final()
    else:
        sdf = sdf.tumbling_window(spec["window_ms"]).count().final(closing_strategy="partition")
    sdf = sdf.apply(lambda w: {"start": w["start"], "end": w["end"], "count": w["value"]})
    sdf.to_topic(sink)
    app.run()


if __name__ == "__main__":
    main()
