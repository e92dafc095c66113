"""Creates and checks the topics a topology needs besides its inputs: repartition topics,
store changelogs, the dead-letter topic and (with standbys or a query endpoint) the membership
topic; validates co-partitioning."""

from __future__ import annotations

import logging
import time

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic

from streams_runtime.processing.repartition_purge import REPARTITION_TOPIC_CONFIG
from streams_runtime.settings import BadRecordPolicy, GroupProtocol, RuntimeSettings
from streams_runtime.state import changelog_topic, changelog_topic_config
from streams_runtime.topology import Subtopology, Topology, TopologyError

__all__ = ["prepare_topics"]

logger = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
_INPUT_WAIT_S = 10.0


def _wait_for_topics(
    admin: AdminClient, topics: set[str], timeout_s: float, *, require: bool
) -> dict[str, int]:
    """Partition counts of every topic, once each of ``topics`` exists with a leader for every
    partition (or ``timeout_s`` passed: then a TopologyError when ``require``)."""
    deadline = time.monotonic() + timeout_s
    while True:
        metadata = admin.list_topics(timeout=_TIMEOUT_S).topics
        ready = {
            name: len(meta.partitions)
            for name, meta in metadata.items()
            if meta.error is None and all(p.leader >= 0 for p in meta.partitions.values())
        }
        missing = topics - ready.keys()
        if not missing:
            return ready
        if time.monotonic() >= deadline:
            if require:
                raise TopologyError(f"topics not ready after {timeout_s:.0f}s: {sorted(missing)}")
            return ready
        time.sleep(0.1)


class _TopicPlan:
    """Partition counts of existing and wanted topics, and the topics to create."""

    def __init__(self, existing: dict[str, int], settings: RuntimeSettings) -> None:
        self.existing = existing
        self.settings = settings
        self.counts: dict[str, int] = {}
        self.create: list[NewTopic] = []

    def internal(self, topic: str, partitions: int, config: dict[str, str]) -> None:
        """Want ``topic`` with ``partitions``: create it, or check the existing one."""
        if topic not in self.existing:
            self.create.append(
                NewTopic(
                    topic,
                    num_partitions=partitions,
                    replication_factor=self.settings.replication_factor,
                    config=config,
                )
            )
        elif self.existing[topic] != partitions:
            raise TopologyError(
                f"internal topic {topic} has {self.existing[topic]} partitions, "
                f"the topology needs {partitions}"
            )
        self.counts[topic] = partitions


def prepare_topics(topology: Topology, settings: RuntimeSettings) -> dict[str, int]:
    """Create missing internal topics; return the partition count of every topic involved.

    Raises :class:`TopologyError` for a missing input topic, inputs of one task that are not
    co-partitioned, or an existing internal topic with the wrong partition count.
    """
    admin = AdminClient({**settings.client_config()})
    # Inputs created a moment ago may not be in the metadata yet: wait a little for them.
    inputs = {t for t in topology.source_topics if t not in topology.repartition_topics}
    existing = _wait_for_topics(admin, inputs, _INPUT_WAIT_S, require=False)
    missing = sorted(inputs - existing.keys())
    if missing:
        raise TopologyError(_missing_inputs_message(missing, settings.bootstrap_servers))
    plan = _TopicPlan(existing, settings)
    # A repartition topic takes its upstream sub-topology's partition count: resolve in order.
    pending = list(topology.subtopologies)
    while pending:
        ready = [s for s in pending if _plan_subtopology(s, topology, plan)]
        if not ready:
            raise TopologyError("repartition topics form a cycle")
        pending = [s for s in pending if s not in ready]
    if settings.bad_record_policy is BadRecordPolicy.DEAD_LETTER and settings.dead_letter_topic:
        dlq = settings.dead_letter_topic
        plan.internal(dlq, plan.existing.get(dlq, 1), {})
    if (
        settings.group_protocol is not GroupProtocol.CLASSIC
        and len([sub for sub in topology.subtopologies if sub.source_topics]) > 1
    ):
        # The lanes' placeholder (streams_runtime/processing/lanes.py): one empty partition.
        plan.internal(settings.lanes_topic, 1, {})
    if settings.membership_enabled:
        # One partition, so every instance reads every membership record in order; compacted,
        # so the latest record (or tombstone) per instance is all that is kept.
        plan.internal(
            settings.membership_topic,
            1,
            {"cleanup.policy": "compact", "segment.ms": "600000"},
        )
    for sub in topology.subtopologies:
        for topic in sub.sink_topics:
            if topic in plan.existing:
                plan.counts.setdefault(topic, plan.existing[topic])
    _create(admin, plan.create)
    # Clients fail on partitions without a leader: wait until the new topics have them.
    _wait_for_topics(admin, {t.topic for t in plan.create}, _TIMEOUT_S, require=True)
    return plan.counts


def _missing_inputs_message(topics: list[str], bootstrap_servers: str) -> str:
    listed = ", ".join(repr(t) for t in topics)
    example = ", ".join(f"NewTopic({t!r}, num_partitions=3)" for t in topics)
    return (
        f"input topic{'s' if len(topics) > 1 else ''} {listed} not found on {bootstrap_servers} "
        f"after {_INPUT_WAIT_S:.0f}s. Create input topics before starting the application: "
        "like Kafka Streams, the runtime creates its internal topics but never its inputs "
        "(their partition count sets its task count). E.g. "
        f"AdminClient({{'bootstrap.servers': {bootstrap_servers!r}}})"
        f".create_topics([{example}])"
    )


def _plan_subtopology(sub: Subtopology, topology: Topology, plan: _TopicPlan) -> bool:
    """Plan the repartition inputs and changelogs of ``sub``; False while the partition count of
    an unsized repartition input is still unknown.

    An unsized repartition input (no ``num_partitions``, no ``num_repartition_partitions``)
    takes the count of the sub-topology's other inputs, with which its tasks co-partition it
    (Kafka Streams' ``CopartitionedTopicsEnforcer``); without any, its upstream's, the largest
    of the upstream sub-topology's known input counts (``RepartitionTopics``). So a
    sub-topology may read what another one writes back to it (a foreign-key join's tables, a
    cogroup through named repartitions) without a cycle."""
    inputs: dict[str, int] = {}
    unsized: list[str] = []
    for topic in sub.source_topics:
        if topic not in topology.repartition_topics:
            inputs[topic] = plan.existing[topic]
            continue
        count = topology.repartition_topics[topic] or plan.settings.num_repartition_partitions
        if count:
            inputs[topic] = count
        else:
            unsized.append(topic)
    if unsized:
        count = max(inputs.values(), default=None) or _upstream_count(unsized, topology, plan)
        if count is None:
            return False
        inputs.update(dict.fromkeys(unsized, count))
    if len(set(inputs.values())) > 1:
        raise TopologyError(f"inputs of sub-topology {sub.id} are not co-partitioned: {inputs}")
    for topic, count in inputs.items():
        if topic in topology.repartition_topics:
            plan.internal(topic, count, REPARTITION_TOPIC_CONFIG)
        plan.counts[topic] = count
    partitions = next(iter(inputs.values()))
    for spec in sub.stores:
        topic = changelog_topic(plan.settings.application_id, spec.name)
        plan.internal(topic, partitions, changelog_topic_config(spec))
    return True


def _upstream_count(topics: list[str], topology: Topology, plan: _TopicPlan) -> int | None:
    """The largest known input count of the sub-topologies writing ``topics``."""
    counts = [
        plan.counts.get(source, plan.existing.get(source, 0))
        if source in topology.repartition_topics
        else plan.existing[source]
        for sub in topology.subtopologies
        if set(topics).intersection(sub.sink_topics)
        for source in sub.source_topics
    ]
    return max(counts, default=0) or None


def _create(admin: AdminClient, topics: list[NewTopic]) -> None:
    if not topics:
        return
    for name, future in admin.create_topics(topics, operation_timeout=_TIMEOUT_S).items():
        try:
            future.result(timeout=_TIMEOUT_S)
            logger.info("created internal topic %(topic)s", {"topic": name})
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):  # another instance was first
                raise
