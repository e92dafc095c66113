"""How the stream thread's consumer joins its group (docs/runtime/scaling.md).

Kafka Streams' own assignor cannot run in librdkafka, so the runtime uses the one assignor that
has the properties it needs: **range**. For topics of equal partition counts it gives partition
``p`` of every topic to one member (co-partitioned inputs of a task stay together) and each topic's
partitions in contiguous, even ranges (every sub-topology's tasks differ by at most one between
instances). With KIP-848 (``group.protocol=consumer``, Apache Kafka 4.0 and later) the broker
runs it and rebalances incrementally; on older brokers the classic protocol runs librdkafka's,
eagerly. The assignment is a pure function of the members' ids (``group.instance.id`` under
static membership, else the member id; each instance publishes both in the membership topic):
:mod:`streams_runtime.cluster.assignment` computes the same one, which is how standbys and
warm-ups are placed where tasks will go.

KIP-848 moved the session timeout and heartbeat interval from the client to the group: the
consumer's ``session.timeout.ms`` and ``heartbeat.interval.ms``, when set, are applied as the
group's ``consumer.session.timeout.ms`` and ``consumer.heartbeat.interval.ms``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from streams_runtime.settings import GroupProtocol, RuntimeSettings

__all__ = ["JoinFailure", "classify_join_error", "consumer_group_config", "set_group_timeouts"]

logger = logging.getLogger(__name__)

# Client-side settings of the classic protocol that KIP-848 refuses (the group holds them).
_CLASSIC_ONLY = ("session.timeout.ms", "heartbeat.interval.ms", "group.protocol.type")
# Kafka Streams' heartbeat is a third of its session timeout; the broker's default is 5 s.
_HEARTBEATS_PER_SESSION = 3
_MAX_HEARTBEAT_MS = 5_000


def consumer_group_config(
    settings: RuntimeSettings, protocol: GroupProtocol, instance_id: str
) -> dict[str, str]:
    """The group part of the stream thread's consumer config under ``protocol`` (``CONSUMER``
    or ``CLASSIC``), over the user's consumer properties."""
    config = dict(settings.consumer_config())
    config["group.id"] = settings.application_id
    if settings.static_membership:
        config.setdefault("group.instance.id", instance_id)
    if protocol is GroupProtocol.CONSUMER:
        for key in _CLASSIC_ONLY:
            config.pop(key, None)
        config["group.protocol"] = "consumer"
        config["group.remote.assignor"] = "range"
    else:
        config["group.protocol"] = "classic"
        config["partition.assignment.strategy"] = "range"
    return config


def set_group_timeouts(settings: RuntimeSettings) -> None:
    """Apply the consumer's ``session.timeout.ms`` (and ``heartbeat.interval.ms``, by default
    a third of it, at most 5 s) to the KIP-848 group, whose members take them from the broker.
    A broker that refuses (its ``group.consumer.min.session.timeout.ms`` is higher, say, or no
    ALTER_CONFIGS on the group) leaves the broker's defaults, with a warning that says so."""
    consumer = settings.consumer_config()
    session = consumer.get("session.timeout.ms")
    if session is None:
        return
    heartbeat = consumer.get(
        "heartbeat.interval.ms",
        str(min(_MAX_HEARTBEAT_MS, max(1, int(session) // _HEARTBEATS_PER_SESSION))),
    )
    entries = {"consumer.session.timeout.ms": session, "consumer.heartbeat.interval.ms": heartbeat}
    try:
        _alter_group_config(settings, entries)
    except KafkaException as exc:
        logger.warning(
            "could not set the group's %(entries)s (%(error)s): consumer.session.timeout.ms is "
            "the broker's group.consumer.session.timeout.ms (default 45 s) under group "
            "protocol 'consumer'",
            {"entries": entries, "error": str(exc.args[0] if exc.args else exc)},
        )


def _alter_group_config(settings: RuntimeSettings, entries: Mapping[str, str]) -> None:
    admin = AdminClient({**settings.client_config()})
    resource = ConfigResource(
        ResourceType.GROUP,
        settings.application_id,
        incremental_configs=[
            ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
            for name, value in entries.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


class JoinFailure:
    """What a fatal consumer error before the first assignment means for joining."""

    UNSUPPORTED = "unsupported"
    """The broker has no KIP-848 groups (before Apache Kafka 4.0, or turned off): use classic."""
    INSTANCE_ID_IN_USE = "instance-id-in-use"
    """KIP-848 refuses a static member while a member with its instance id is still in the
    group: this instance's previous process, killed, until its session times out. Retry."""


def classify_join_error(error: KafkaError) -> str | None:
    """A :class:`JoinFailure` for a fatal consumer ``error``, or None (a real failure).
    librdkafka reports the cause only in the fatal error's text."""
    if error.code() != KafkaError._FATAL:
        return None
    text = str(error).lower()
    if "instance id is still used" in text or "unreleased_instance_id" in text:
        return JoinFailure.INSTANCE_ID_IN_USE
    if "unsupported" in text or "not supported" in text:
        return JoinFailure.UNSUPPORTED
    return None
