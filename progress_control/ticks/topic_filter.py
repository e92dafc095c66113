"""Which topics get ticks: include and exclude regexes, and the internal topics never ticked."""

from __future__ import annotations

import re

__all__ = ["DEFAULT_INTERNAL_TOPICS", "TopicFilter"]

DEFAULT_INTERNAL_TOPICS: tuple[str, ...] = (
    r"__.*",  # Kafka's own: __consumer_offsets, __transaction_state, __cluster_metadata, ...
    r"_schemas.*",  # Schema Registry
    r"_confluent.*",  # Confluent Platform: metrics, license, command, ksqlDB internals
    r"(.*[-_.])?connect[-_.](.*[-_.])?(offsets|configs|status)",  # Kafka Connect workers
    r".*\.internal",  # MirrorMaker 2: mm2-offsets.<alias>.internal, <alias>.checkpoints.internal
    r".*-changelog",  # Kafka Streams, Faust and our runtime's state store changelogs
    r".*-repartition",  # Kafka Streams and our runtime's repartition topics
    r".*-SUBSCRIPTION-(REGISTRATION|RESPONSE)-[0-9]+-topic",  # Kafka Streams foreign-key joins
    r"(changelog|repartition)__.*",  # Quix Streams
    r".*ksql_processing_log",  # ksqlDB
    r".*-membership",  # our runtime's membership topic
    r".*-dlq",  # dead-letter topics (our runtime's default name)
)
"""Topics never ticked by default (``topics.internal``): internal and system topics of Kafka and
the tools around it. A tick there would be a record no one asked for in another tool's state."""

_MAX_CACHED_TOPICS = 100_000


class TopicFilter:
    """Which topics get progress control, decided once per topic name and cached."""

    def __init__(self, include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
        self._include = [re.compile(p) for p in include]
        self._exclude = [re.compile(p) for p in exclude]
        self._decided: dict[str, bool] = {}

    @classmethod
    def matching_any(cls, patterns: tuple[str, ...]) -> TopicFilter:
        """Topics that fully match one of ``patterns``; no topic when there are none."""
        return cls(patterns, ()) if patterns else cls((), (r".*",))

    def __call__(self, topic: str) -> bool:
        decided = self._decided.get(topic)
        if decided is None:
            included = not self._include or any(p.fullmatch(topic) for p in self._include)
            decided = included and not any(p.fullmatch(topic) for p in self._exclude)
            if len(self._decided) < _MAX_CACHED_TOPICS:  # names may come from untrusted reports
                self._decided[topic] = decided
        return decided
