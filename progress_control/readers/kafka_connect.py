"""Kafka Connect: the sink-connector settings that drop control records (docs:
readers/kafka-connect.md).

Connect ships what is needed: the ``Filter`` transform drops a record when its predicate holds,
and the ``HasHeaderKey`` predicate holds when a record carries a header of the given name: our
``progress-control`` marker. Nothing to install; the lines go into any sink connector's
configuration (properties file or REST JSON). Sinks have no event-time windows to advance, so
dropping is all a sink needs; a tick whose header is malformed is dropped too (the header's
presence is what marks a control record, never data). Kafka Connect's counterparts:
``org.apache.kafka.connect.transforms.Filter``,
``org.apache.kafka.connect.transforms.predicates.HasHeaderKey``.
"""

from __future__ import annotations

from progress_control.protocol import CONTROL_HEADER

__all__ = ["SINK_DROP_TICKS", "sink_drop_ticks"]

SINK_DROP_TICKS: dict[str, str] = {
    "transforms": "dropTicks",
    "transforms.dropTicks.type": "org.apache.kafka.connect.transforms.Filter",
    "transforms.dropTicks.predicate": "isTick",
    "predicates": "isTick",
    "predicates.isTick.type": "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
    "predicates.isTick.name": CONTROL_HEADER,
}
"""The recipe, for a connector with no transforms of its own (else see :func:`sink_drop_ticks`)."""


def sink_drop_ticks(connector: dict[str, str]) -> dict[str, str]:
    """``connector``'s configuration with the recipe added, ``dropTicks`` running first (before
    the connector's own transforms, which need not expect a null value)."""
    merged = dict(connector)
    for list_key in ("transforms", "predicates"):
        own = [name.strip() for name in connector.get(list_key, "").split(",") if name.strip()]
        name = SINK_DROP_TICKS[list_key]
        if name in own:
            raise ValueError(f"the connector already defines {list_key} {name!r}")
        merged[list_key] = ",".join([name, *own])
    merged.update(
        {k: v for k, v in SINK_DROP_TICKS.items() if k not in ("transforms", "predicates")}
    )
    return merged
