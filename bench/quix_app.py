"""The Quix Streams engine of the engines benchmark, run by the Python of the Quix Streams
virtualenv that ``progress_control_apps/dev/quix.py`` installs (nothing of this project is
importable there):

    python quix_app.py SPEC.json

The spec is as for ``bench/_engine_main.py``. Session workload: ``session_window(gap)``,
``count()``, ``final()`` (Quix's default closing strategy, per key: with this input every session
closes as in Kafka Streams); tumbling: ``tumbling_window(size)``, ``count()``,
``final(closing_strategy="partition")`` (a window closes when its partition's stream time passes
its end, as in Kafka Streams). Orders (``bench/_orders.py``): ``filter``, ``group_by(user)`` (its
repartition), ``join_asof`` with the users topic (every user is stamped before the first order, so
it is the table join of the other engines), ``apply``, ``session_window(gap)``, ``reduce`` (Quix
merges sessions itself: no merger), ``final()``. Output as the runtime's: key the input key, value
JSON ``{start, end, count}`` (orders: and ``total``). Runs until SIGTERM; everything else is Quix
Streams' default (RocksDB state, changelog topics).
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
    if spec["workload"] == "orders":
        sdf = _orders(app, sdf, spec)
    elif spec["workload"] == "session":
        sdf = sdf.session_window(spec["window_ms"]).count().final()
    else:
        sdf = sdf.tumbling_window(spec["window_ms"]).count().final(closing_strategy="partition")
    if spec["workload"] != "orders":
        sdf = sdf.apply(lambda w: {"start": w["start"], "end": w["end"], "count": w["value"]})
    sdf.to_topic(sink)
    app.run()


def _orders(app: Application, sdf: Any, spec: dict[str, Any]) -> Any:
    users_topic = app.topic(spec["users"], key_deserializer="str", value_deserializer="json")
    users = app.dataframe(users_topic)
    sdf = sdf.filter(lambda order: order["status"] != "cancelled")
    sdf = sdf.group_by(lambda order: order["user"], name="user")
    sdf = sdf.join_asof(
        users, on_merge=lambda order, user: {"amount": order["amount"], "region": user["region"]}
    )
    sdf = sdf.apply(lambda sale: {**sale, "net": sale["amount"] * 0.8})
    sdf = (
        sdf.session_window(spec["window_ms"], grace_ms=spec["grace_ms"])
        .reduce(
            reducer=lambda agg, sale: {
                "count": agg["count"] + 1,
                "total": agg["total"] + sale["amount"],
            },
            initializer=lambda sale: {"count": 1, "total": sale["amount"]},
        )
        .final()
    )
    return sdf.apply(lambda w: {"start": w["start"], "end": w["end"], **w["value"]})


if __name__ == "__main__":
    main()
