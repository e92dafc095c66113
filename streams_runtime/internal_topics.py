"""Creates and checks the topics a topology needs besides its inputs: repartition topics,
store changelogs and the dead-letter topic; validates co-partitioning."""

from __future__ import annotations

import logging

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streams_runtime.settings import BadRecordPolicy, RuntimeSettings
from streams_runtime.state import changelog_topic, changelog_topic_config
from streams_runtime.topology import Topology, TopologyError

__all__ = ["prepare_topics"]

logger = logging.getLogger(__name__)

_TIMEOUT_S = 30.0


def prepare_topics(topology: Topology, settings: RuntimeSettings) -> dict[str, int]:
    """Create missing internal topics; return the partition count of every topic involved.

    Raises :class:`TopologyError` for a missing input topic, inputs of one task that are not
    co-partitioned, or an existing internal topic with the wrong partition count.
    """
    admin = AdminClient(settings.client_config())
    existing = {
        name: len(meta.partitions)
        for name, meta in admin.list_topics(timeout=_TIMEOUT_S).topics.items()
        if meta.error is None
    }
    counts: dict[str, int] = {}
    wanted: list[NewTopic] = []
    pending = list(topology.subtopologies)
    # Repartition topics take their upstream sub-topology's partition count: resolve in order.
    while pending:
        progressed = False
        for sub in list(pending):
            inputs: dict[str, int] = {}
            for topic in sub.source_topics:
                if topic in topology.repartition_topics:
                    upstream = next(s for s in topology.subtopologies if topic in s.sink_topics)
                    base = counts.get(upstream.source_topics[0])
                    fixed = (
                        topology.repartition_topics[topic] or settings.num_repartition_partitions
                    )
                    if fixed is None and base is None:
                        break
                    count = fixed or base or 1
                    if topic not in existing:
                        wanted.append(_new_topic(topic, count, settings, {}))
                    elif existing[topic] != count:
                        raise TopologyError(
                            f"repartition topic {topic} has {existing[topic]} partitions, "
                            f"the topology needs {count}"
                        )
                    inputs[topic] = count
                else:
                    if topic not in existing:
                        raise TopologyError(f"input topic {topic!r} does not exist")
                    inputs[topic] = existing[topic]
            else:
                if len(set(inputs.values())) > 1:
                    raise TopologyError(
                        f"inputs of sub-topology {sub.id} are not co-partitioned: {inputs}"
                    )
                counts.update(inputs)
                partitions = next(iter(inputs.values()))
                for spec in sub.stores:
                    topic = changelog_topic(settings.application_id, spec.name)
                    if topic not in existing:
                        wanted.append(
                            _new_topic(topic, partitions, settings, changelog_topic_config(spec))
                        )
                    elif existing[topic] != partitions:
                        raise TopologyError(
                            f"changelog {topic} has {existing[topic]} partitions, "
                            f"the store needs {partitions}"
                        )
                    counts[topic] = partitions
                pending.remove(sub)
                progressed = True
        if not progressed:
            raise TopologyError("repartition topics form a cycle")
    if settings.bad_record_policy is BadRecordPolicy.DEAD_LETTER and settings.dead_letter_topic:
        if settings.dead_letter_topic not in existing:
            wanted.append(_new_topic(settings.dead_letter_topic, 1, settings, {}))
    for topic in {t for s in topology.subtopologies for t in s.sink_topics}:
        if topic in existing:
            counts.setdefault(topic, existing[topic])
    if wanted:
        futures = admin.create_topics(wanted, operation_timeout=_TIMEOUT_S)
        for name, future in futures.items():
            try:
                future.result(timeout=_TIMEOUT_S)
                logger.info("created internal topic %s", name)
            except KafkaException as exc:
                if "TOPIC_ALREADY_EXISTS" not in str(exc):  # another instance was first
                    raise
        for topic in wanted:
            counts[topic.topic] = topic.num_partitions
    return counts


def _new_topic(
    name: str, partitions: int, settings: RuntimeSettings, config: dict[str, str]
) -> NewTopic:
    return NewTopic(
        name,
        num_partitions=partitions,
        replication_factor=settings.replication_factor,
        config=config,
    )
