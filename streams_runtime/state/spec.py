"""What a processor asks for: a named store (:class:`StoreSpec`), and the configuration of the
changelog topic that backs it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["StoreSpec", "changelog_topic_config"]

# Changelog records newer than this are never compacted away (see changelog_topic_config).
_MIN_COMPACTION_LAG_MS = 60 * 60 * 1000


@dataclass(frozen=True)
class StoreSpec:
    """What a processor asks for: a named key-value, session or window store, logged by default.

    ``retention_ms`` (session and window stores) is how long, in stream time, an entry is kept
    after its end. ``cached``: writes go through the record cache
    (:mod:`streams_runtime.state.caching`) when it is on, as Kafka Streams caches the stores of
    aggregations and materialised tables by default.
    """

    name: str
    kind: Literal["key_value", "session", "window"]
    logged: bool = True
    retention_ms: int | None = None
    cached: bool = False

    def __post_init__(self) -> None:
        # The name ends up in a file name and a topic name: keep to Kafka's topic alphabet.
        if not self.name or not all(c.isascii() and (c.isalnum() or c in "._-") for c in self.name):
            raise ValueError(f"store name must be non-empty [A-Za-z0-9._-], got {self.name!r}")
        if self.name in {".", ".."}:
            raise ValueError(f"invalid store name {self.name!r}")
        if self.kind not in ("key_value", "session", "window"):
            raise ValueError(f"store kind must be key_value, session or window, got {self.kind!r}")
        if self.retention_ms is not None and self.retention_ms < 0:
            raise ValueError(f"retention_ms must be >= 0, got {self.retention_ms}")


def changelog_topic_config(spec: StoreSpec) -> dict[str, str]:
    """Topic configuration for the changelog of ``spec`` (the runtime creates the topic).

    Compacted, for every kind: expired sessions and windows are removed with tombstones. Not
    time-based deletion, which acts on record timestamps and would drop the changelog of live
    sessions when old data is replayed.
    """
    if spec.kind != "key_value" and spec.retention_ms is None:
        raise ValueError(f"{spec.kind} store {spec.name!r} needs retention_ms for its changelog")
    config = {"cleanup.policy": "compact"}
    # Restore skips records caused by input that was not committed. If the cleaner compacted a
    # key while such a newer, uncommitted version sits in the log, it would delete the committed
    # older version, and a restarted task would restore neither. Keeping the last hour out of
    # compaction leaves the committed version in place until the input is committed (commit
    # intervals are seconds) or the task has restored and logged a correction.
    config["min.compaction.lag.ms"] = str(_MIN_COMPACTION_LAG_MS)
    return config
