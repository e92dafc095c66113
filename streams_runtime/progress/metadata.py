"""What a task commits beside each input offset (:class:`TaskCommitMetadata`: its partition's
time and its bound per output topic), and how the bounds of several commits merge."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from streams_runtime.processors import NO_PROGRESS

__all__ = ["TaskCommitMetadata", "merged_bounds"]

logger = logging.getLogger(__name__)

_V1 = "pc1:"  # partition time only
_V2 = "pc2:"  # partition time and the task's bounds
_MAX_METADATA = 4000  # the broker's offset.metadata.max.bytes defaults to 4096


@dataclass(frozen=True)
class TaskCommitMetadata:
    """What a task commits beside each input offset: the partition's time (so it survives
    restarts and rebalances) and the task's bound per output topic."""

    partition_time: int = -1
    bounds: Mapping[str, int] = field(default_factory=dict)

    def encode(self) -> str:
        """The commit metadata string; without the bounds when they would not fit (the topic
        is then held back, never promised beyond what was committed before)."""
        bounds = {topic: bound for topic, bound in self.bounds.items() if bound > NO_PROGRESS}
        encoded = _V2 + json.dumps([self.partition_time, bounds], separators=(",", ":"))
        if len(encoded) > _MAX_METADATA:
            logger.warning(
                "task bounds do not fit in commit metadata (%(size)d bytes); the topics it "
                "writes are not ticked beyond earlier commits",
                {"size": len(encoded)},
            )
            return f"{_V1}{self.partition_time}"
        return encoded

    @classmethod
    def decode(cls, metadata: str | None) -> TaskCommitMetadata:
        """The metadata of a commit; empty (time -1, no bounds) when absent or foreign."""
        try:
            if metadata and metadata.startswith(_V2):
                partition_time, bounds = json.loads(metadata[len(_V2) :])
                return cls(int(partition_time), {str(t): int(b) for t, b in dict(bounds).items()})
            if metadata and metadata.startswith(_V1):
                return cls(int(metadata[len(_V1) :]))
        except (ValueError, TypeError):
            pass
        return cls()


def merged_bounds(found: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """A task's bounds from several commits' (its inputs' metadata): per topic the largest (an
    input that did not move since an earlier commit keeps that commit's, lower, bound)."""
    bounds: dict[str, int] = {}
    for item in found:
        for topic, bound in item.items():
            bounds[topic] = max(bounds.get(topic, NO_PROGRESS), bound)
    return bounds
