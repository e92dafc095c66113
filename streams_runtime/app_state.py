"""The states of a running app (Kafka Streams' ``KafkaStreams.State``, fewer of them)."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["AppState"]


class AppState(StrEnum):
    """Where an :class:`~streams_runtime.App` is in its life. A ``StrEnum``: each state equals
    its name as a string, so ``app.state == "RUNNING"`` and ``app.wait_until("RUNNING")`` work.

    ``CREATED`` -> ``STARTING`` (topics, clients) -> ``REBALANCING`` (joining the group, tasks
    assigned and restoring) <-> ``RUNNING`` (every active task restored and processing) ->
    ``PENDING_SHUTDOWN`` (committing, closing) -> ``NOT_RUNNING``; ``ERROR`` from any state
    once an error stopped the app. As in Kafka Streams, every rebalance goes back to
    ``REBALANCING`` until the new assignment's tasks are restored."""

    CREATED = "CREATED"
    STARTING = "STARTING"
    REBALANCING = "REBALANCING"
    RUNNING = "RUNNING"
    PENDING_SHUTDOWN = "PENDING_SHUTDOWN"
    NOT_RUNNING = "NOT_RUNNING"
    ERROR = "ERROR"
