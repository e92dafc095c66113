"""The stream thread's group membership: one consumer, or two **lanes** that balance each
instance's total tasks as well as every sub-topology's (docs/runtime/scaling.md).

The range assignor (the broker's, KIP-848) cuts every topic among the members subscribed to it,
in one order: static members by ``group.instance.id``, then the others by member id; the first
``partitions % members`` get one partition more. With one member per instance, every topic's
extra partitions go to the same first instances, and an instance's total can be ahead by as
many tasks as there are sub-topologies. With lanes, each instance is two members:

- the **front lane**, a static member whose ``group.instance.id`` is ``-<instance id>.<random>``
  (``-`` sorts before any other id: fronts come first; random per process, so a restarted
  instance never waits for its killed predecessor's session to end);
- the **back lane**, the member it would be without lanes.

For each sub-topology, the instances that should take one task more than the others
(:func:`~streams_runtime.cluster.assignment.extra_holders`: a rotation, so every instance takes
about as many extras as every other) subscribe its topics on their front lane, the others on
their back lane. The assignor then gives exactly those instances the extra tasks. Which
instances are in the group is read from the coordinator (``describe_consumer_groups``) every
second; a change moves subscriptions, and KIP-848 rebalances incrementally. Both lanes are also
subscribed to a one-partition placeholder topic (``<application_id>-lanes``, never read), as a
subscription cannot be empty: a front lane with nothing to do keeps only that.

Lanes need KIP-848 and at least two sub-topologies (with one, every sub-topology's balance is the
total's); otherwise :class:`ConsumerLanes` is one consumer. Calls about a partition go to the
lane that owns it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import Future

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, ClusterMetadata

from streams_runtime.cluster.assignment import (
    extra_holders,
    front_instance_id,
    front_lane_instance,
)

__all__ = ["ConsumerLanes"]

logger = logging.getLogger(__name__)

RebalanceCallback = Callable[[Consumer, list[TopicPartition]], None]
_Callbacks = tuple[RebalanceCallback, RebalanceCallback, RebalanceCallback]
"""The stream thread's on_assign, on_revoke and on_lost."""

_REFRESH_S = 1.0
_DESCRIBE_TIMEOUT_S = 10.0
# How long a stopping instance waits for its front lane's tasks to be taken away before it
# leaves (a static member's leave keeps its partitions until its session times out).
_RELEASE_WAIT_S = 10.0


class ConsumerLanes:
    """One consumer, or a front and a back lane (see the module docstring), as one consumer to
    the stream thread: per-partition calls go to the owning lane."""

    def __init__(
        self,
        config: Mapping[str, object],
        *,
        lanes: bool,
        instance_id: str,
        subtopology_topics: Mapping[int, Sequence[str]],
        partitions: Mapping[int, int],
        placeholder: str,
        admin_config: Mapping[str, str],
    ) -> None:
        self.back = Consumer(dict(config))
        self.front: Consumer | None = None
        self._instance_id = instance_id
        self._topics = subtopology_topics
        self._partitions = partitions
        self._placeholder = placeholder
        self._group_id = str(config["group.id"])
        self._owner: dict[tuple[str, int], Consumer] = {}
        self._callbacks: _Callbacks | None = None
        self._subscribed: dict[Consumer, tuple[str, ...]] = {}
        self._instances: frozenset[str] = frozenset({instance_id})
        self._admin: AdminClient | None = None
        self._described: Future[object] | None = None
        self._next_refresh = 0.0
        self._closing = False  # close() runs: librdkafka gives everything back itself
        if lanes:
            front_id = front_instance_id(instance_id, uuid.uuid4().hex[:8])
            self.front = Consumer({**config, "group.instance.id": front_id})
            self._admin = AdminClient(dict(admin_config))

    @property
    def lanes(self) -> bool:
        return self.front is not None

    @property
    def consumers(self) -> list[Consumer]:
        return [self.back] if self.front is None else [self.front, self.back]

    def memberid(self) -> str | None:
        """The back lane's member id (how the assignor orders it among the dynamic members)."""
        return self.back.memberid() or None

    # -- subscriptions ---------------------------------------------------------------------

    def subscribe(
        self,
        on_assign: RebalanceCallback,
        on_revoke: RebalanceCallback,
        on_lost: RebalanceCallback,
    ) -> None:
        """Subscribe every lane to its topics (with lanes, as the group's instances stand)."""
        self._callbacks = (on_assign, on_revoke, on_lost)
        self._subscribed.clear()
        if self.front is None:
            topics = tuple(t for ts in self._topics.values() for t in ts)
            self._subscribe(self.back, topics)
            return
        self._instances = self._describe_now() | {self._instance_id}
        self._apply()

    def refresh(self) -> None:
        """Every second (the loop calls this each turn): the group's instances as the
        coordinator describes them; subscriptions follow a change."""
        if self._admin is None:
            return
        described = self._described
        if described is not None and described.done():
            self._described = None
            instances = _instances_of(described)
            if instances is not None:
                instances |= {self._instance_id}
                if instances != self._instances:
                    logger.info(
                        "the group's instances are now %(instances)s; lanes follow",
                        {"instances": sorted(instances)},
                    )
                    self._instances = frozenset(instances)
                    self._apply()
        now = time.monotonic()
        if self._described is None and now >= self._next_refresh:
            self._next_refresh = now + _REFRESH_S
            futures = self._admin.describe_consumer_groups(
                [self._group_id], request_timeout=_DESCRIBE_TIMEOUT_S
            )
            self._described = futures[self._group_id]

    def _describe_now(self) -> frozenset[str]:
        assert self._admin is not None
        futures = self._admin.describe_consumer_groups(
            [self._group_id], request_timeout=_DESCRIBE_TIMEOUT_S
        )
        return frozenset(_instances_of(futures[self._group_id], wait=True) or ())

    def _apply(self) -> None:
        assert self.front is not None
        subs = sorted(self._topics)
        holders = extra_holders(sorted(self._instances), [self._partitions[s] for s in subs])
        front: list[str] = []
        back: list[str] = []
        for sub, held in zip(subs, holders, strict=True):
            (front if self._instance_id in held else back).extend(self._topics[sub])
        self._subscribe(self.front, (self._placeholder, *front))
        self._subscribe(self.back, (self._placeholder, *back))

    def _subscribe(self, lane: Consumer, topics: tuple[str, ...]) -> None:
        if self._subscribed.get(lane) == topics:
            return
        self._subscribed[lane] = topics
        lane.subscribe(
            list(topics),
            on_assign=self._assigned,
            on_revoke=lambda c, ps: self._released(c, ps, lost=False),
            on_lost=lambda c, ps: self._released(c, ps, lost=True),
        )

    def _assigned(self, lane: Consumer, partitions: list[TopicPartition]) -> None:
        assert self._callbacks is not None
        if self._closing:
            return
        data = [tp for tp in partitions if tp.topic != self._placeholder]
        for tp in data:
            self._owner[(tp.topic, tp.partition)] = lane
        placeholder = [tp for tp in partitions if tp.topic == self._placeholder]
        if placeholder:  # owned, never read
            lane.incremental_assign(placeholder)
            lane.pause(placeholder)
        if data or not placeholder:
            self._callbacks[0](lane, data)

    def _released(self, lane: Consumer, partitions: list[TopicPartition], *, lost: bool) -> None:
        assert self._callbacks is not None
        if self._closing:
            # Called from close(): the handle is going away (asking it for its assignment
            # fails), every task is closed already, and librdkafka gives the partitions back.
            return
        data = [tp for tp in partitions if tp.topic != self._placeholder]
        placeholder = [tp for tp in partitions if tp.topic == self._placeholder]
        if data or not placeholder:
            self._callbacks[2 if lost else 1](lane, data)
        if self.front is not None:
            # The stream thread leaves a closing consumer's partitions to librdkafka; the
            # placeholder is ours to give back, and then so is the rest.
            held = {(tp.topic, tp.partition) for tp in lane.assignment()}
            rest = [tp for tp in partitions if (tp.topic, tp.partition) in held]
            if rest:
                lane.incremental_unassign(rest)
        for tp in data:
            if self._owner.get((tp.topic, tp.partition)) is lane:
                del self._owner[(tp.topic, tp.partition)]

    # -- the loop's calls ------------------------------------------------------------------

    def consume(self, count: int, timeout_s: float) -> list[Message]:
        """Up to ``count`` messages from every lane, waiting at most about ``timeout_s`` when
        there are none."""
        if self.front is None:
            return self.back.consume(count, timeout_s)
        messages = self.front.consume(count, 0)
        messages += self.back.consume(count, 0 if messages else timeout_s / 2)
        if not messages:
            messages = self.front.consume(count, timeout_s / 2)
        return messages

    def _lane(self, topic: str, partition: int) -> Consumer:
        return self._owner.get((topic, partition), self.back)

    def _by_lane(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[Consumer, list[TopicPartition]]:
        out: dict[Consumer, list[TopicPartition]] = {}
        for tp in partitions:
            out.setdefault(self._lane(tp.topic, tp.partition), []).append(tp)
        return out

    def pause(self, partitions: list[TopicPartition]) -> None:
        for lane, tps in self._by_lane(partitions).items():
            lane.pause(tps)

    def resume(self, partitions: list[TopicPartition]) -> None:
        for lane, tps in self._by_lane(partitions).items():
            lane.resume(tps)

    def seek(self, partition: TopicPartition) -> None:
        self._lane(partition.topic, partition.partition).seek(partition)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        found = {
            (tp.topic, tp.partition): tp
            for lane, tps in self._by_lane(partitions).items()
            for tp in lane.position(tps)
        }
        return [found[(tp.topic, tp.partition)] for tp in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float) -> list[TopicPartition]:
        found = {
            (tp.topic, tp.partition): tp
            for lane, tps in self._by_lane(partitions).items()
            for tp in lane.committed(tps, timeout=timeout)
        }
        return [found[(tp.topic, tp.partition)] for tp in partitions]

    def get_watermark_offsets(
        self, partition: TopicPartition, cached: bool = False
    ) -> tuple[int, int]:
        lane = self._lane(partition.topic, partition.partition)
        low, high = lane.get_watermark_offsets(partition, cached=cached)
        return low, high

    def list_topics(self, topic: str, timeout: float) -> ClusterMetadata:
        metadata: ClusterMetadata = self.back.list_topics(topic, timeout=timeout)
        return metadata

    def commit_by_lane(
        self, offsets: Sequence[TopicPartition]
    ) -> list[tuple[Consumer, list[TopicPartition]]]:
        """``offsets`` by the lane that owns each partition (commits go through it: under
        exactly-once, with its group metadata)."""
        return list(self._by_lane(offsets).items())

    # -- leaving ---------------------------------------------------------------------------

    def unsubscribe(self) -> None:
        for lane in self.consumers:
            lane.unsubscribe()
        self._subscribed.clear()

    def close(self, *, release: bool = True) -> None:
        """Close every lane. With ``release``, the front lane first keeps only the
        placeholder until its tasks are taken away (at most a few seconds): a static member
        that leaves keeps its partitions until its session times out."""
        if self.front is not None and release and self._callbacks is not None:
            self._subscribe(self.front, (self._placeholder,))
            deadline = time.monotonic() + _RELEASE_WAIT_S
            while time.monotonic() < deadline and any(
                tp.topic != self._placeholder for tp in self.front.assignment()
            ):
                self.front.poll(0.1)
                self.back.poll(0)
        self._closing = True
        for lane in self.consumers:
            lane.close()


def _instances_of(described: Future[object], *, wait: bool = False) -> frozenset[str] | None:
    """The instances whose front lanes a group description lists; None when it failed."""
    try:
        description = described.result(_DESCRIBE_TIMEOUT_S if wait else 0)
    except Exception as exc:  # a broker away, a group not created yet: try again next time
        logger.debug("describing the group failed: %(error)s", {"error": str(exc)})
        return None
    members = getattr(description, "members", ())
    found = (front_lane_instance(m.group_instance_id) for m in members)
    return frozenset(i for i in found if i is not None)
