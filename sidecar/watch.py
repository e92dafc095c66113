"""What the broker knows about the watched partitions: end offsets and max timestamps (KIP-734),
which topics exist, and the records at the tail of a partition (data, or ticks after its data)."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from progress_control.protocol import has_control_header
from progress_control.ticks.activity import TopicPartition

__all__ = ["BrokerWatch", "PartitionTail", "WatchStoppedError"]

logger = logging.getLogger(__name__)

_LATEST: Any = OffsetSpec.latest()  # type: ignore[no-untyped-call]
_MAX_TIMESTAMP: Any = OffsetSpec.max_timestamp()  # type: ignore[no-untyped-call]
_MIN_FORCED_REFRESH_S = 1.0  # bound on metadata requests that unknown topics in reports cause
_WAIT_SLICE_S = 0.5  # a blocking broker call waits this long at most before it looks at stop()


class WatchStoppedError(RuntimeError):
    """A broker request abandoned because the watch is stopping."""


@dataclass(frozen=True, slots=True)
class PartitionTail:
    """The last records of a partition, as a restarted sidecar needs them."""

    first_offset: int
    """Offset of the first record read."""
    data_offset: int | None
    """Offset of the last data record read, ``None`` when only control records were read."""
    data_timestamp_ms: int | None
    controls_after: int
    """Control records after that data record (after ``first_offset`` when there was none)."""
    first_control_timestamp_ms: int | None
    """Timestamp of the first of those control records."""


class BrokerWatch:
    """Batched admin requests (one ``list_offsets`` call per question for all partitions), and
    reading the few records appended to a quiet partition to tell data from ticks."""

    def __init__(
        self,
        client_config: dict[str, Any],
        include_topic: Callable[[str], bool],
        *,
        timeout_s: float,
        metadata_refresh_s: float,
        max_partitions: int | None = None,
    ) -> None:
        self._client_config = client_config
        self._admin = AdminClient(client_config)
        self._consumer: Consumer | None = None
        self._include_topic = include_topic
        self._timeout_s = timeout_s
        self._refresh_s = metadata_refresh_s
        self._max_partitions = max_partitions
        self._lock = threading.Lock()  # metadata is refreshed by the watch and report threads
        self._partitions: list[TopicPartition] = []
        self._topics: dict[str, int] = {}
        self._refreshed_at: float | None = None
        self._forced_at: float | None = None
        self._forced_lock = threading.Lock()
        self._forced: threading.Thread | None = None
        self._failed_at: float | None = None
        self._metadata_as_of: float | None = None
        self._truncation_logged = False
        self._stopping = threading.Event()

    def partitions(self) -> list[TopicPartition]:
        """Watched partitions; metadata is re-read every ``metadata_refresh_s`` so new topics and
        partitions are picked up. Internal topics (``__*``) are never watched; beyond
        ``max_partitions`` the rest are not watched (logged once)."""
        now = time.monotonic()
        if self._refreshed_at is None or now - self._refreshed_at >= self._refresh_s:
            self._refresh(now)
        return self._partitions

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` as of the last metadata refresh, ``None`` when unknown."""
        return self._topics.get(topic)

    @property
    def metadata_as_of(self) -> float | None:
        """When the metadata now held was requested (monotonic), ``None`` before the first
        time: a topic created before then is in it."""
        return self._metadata_as_of

    def refresh_soon(self) -> None:
        """Re-read metadata in the background, for topics named in reports but not known yet
        (created since the last periodic refresh, or made up): the caller, the report thread,
        never waits for the broker. At most one request in flight and one attempt a second,
        failed ones included, so a flood of names or a broker outage costs one a second."""
        now = time.monotonic()
        with self._forced_lock:
            if self._forced is not None and self._forced.is_alive():
                return
            if self._forced_at is not None and now - self._forced_at < _MIN_FORCED_REFRESH_S:
                return
            if self._refreshed_at is not None and now - self._refreshed_at < _MIN_FORCED_REFRESH_S:
                return
            self._forced_at = now
            self._forced = threading.Thread(
                target=self._refresh_quietly, args=(now,), name="metadata-refresh", daemon=True
            )
            self._forced.start()

    def _refresh_quietly(self, now: float) -> None:
        try:
            self._refresh(now)
        except Exception as exc:  # broker unreachable: parked reports wait (bounded)
            logger.debug(
                "metadata refresh for reported topics failed: %(error)s", {"error": str(exc)}
            )

    def _refresh(self, now: float) -> None:
        with self._lock:
            # Another thread's request ended while we waited for the lock: its answer stands.
            if self._refreshed_at is not None and now < self._refreshed_at:
                return
            if self._failed_at is not None and now < self._failed_at:
                raise ConnectionError("the broker did not answer a metadata request just now")
            requested = time.monotonic()
            try:
                metadata = self._list_topics()
            except Exception:
                self._failed_at = time.monotonic()
                raise
            topics = {
                name: len(topic.partitions)
                for name, topic in metadata.topics.items()
                if topic.error is None
            }
            watched = sorted(
                (name, partition)
                for name, count in topics.items()
                if not name.startswith("__") and self._include_topic(name)
                for partition in range(count)
            )
            limit = self._max_partitions
            if limit is not None and len(watched) > limit:
                if not self._truncation_logged:
                    self._truncation_logged = True
                    logger.warning(
                        "%(matching)d partitions match the topic filter; watching the first "
                        "%(limit)d (max_tracked_partitions)",
                        {"matching": len(watched), "limit": limit},
                    )
                watched = watched[:limit]
            self._topics, self._partitions = topics, watched  # each one atomic store
            self._refreshed_at = time.monotonic()
            self._metadata_as_of = requested

    def _list_topics(self) -> Any:
        """``list_topics`` within ``timeout_s``. The call blocks in librdkafka, so it runs in a
        daemon thread of its own, and :meth:`stop` need not wait for an unreachable broker."""
        result: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def request() -> None:
            try:
                result.set_result(self._admin.list_topics(timeout=self._timeout_s))
            except BaseException as exc:  # handed to the waiting thread
                result.set_exception(exc)

        threading.Thread(target=request, name="metadata-request", daemon=True).start()
        self._wait([result], time.monotonic() + self._timeout_s + _WAIT_SLICE_S)
        return result.result()

    def _wait(self, futures: Iterable[concurrent.futures.Future[Any]], deadline: float) -> None:
        """Wait for ``futures`` until ``deadline``, in slices, looking at :meth:`stop`."""
        pending = set(futures)
        while pending:
            self._raise_if_stopping()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no answer from the broker within {self._timeout_s} s")
            _done, pending = concurrent.futures.wait(pending, timeout=min(_WAIT_SLICE_S, remaining))

    def stop(self) -> None:
        """Abandon requests in progress (they raise :class:`WatchStoppedError` within
        half a second) and refuse new ones. Thread-safe; :meth:`close` releases the clients."""
        self._stopping.set()

    def _raise_if_stopping(self) -> None:
        if self._stopping.is_set():
            raise WatchStoppedError("the broker watch is stopping")

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Log end offset of each partition."""
        return {key: info.offset for key, info in self._list(partitions, _LATEST)}

    def max_timestamps(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """Largest record timestamp of each non-empty partition (-1 when empty)."""
        return {key: info.timestamp for key, info in self._list(partitions, _MAX_TIMESTAMP)}

    def data_timestamps(
        self, ranges: dict[TopicPartition, tuple[int, int]]
    ) -> dict[TopicPartition, int | None]:
        """Read the records in ``[start, end)`` of each partition: the largest timestamp of a data
        record, or ``None`` when only control records (ours or another replica's) were appended."""
        found: dict[TopicPartition, int | None] = dict.fromkeys(ranges)

        def record(key: TopicPartition, _offset: int, msg: Message) -> None:
            if not has_control_header(msg.headers()):
                current, timestamp_ms = found[key], msg.timestamp()[1]
                found[key] = timestamp_ms if current is None else max(current, timestamp_ms)

        unread = self._scan(ranges, record)
        for key in unread:  # not read in time: assume data (-1: timestamp unknown)
            if found[key] is None:
                found[key] = -1
        return found

    def tails(
        self, ends: dict[TopicPartition, int], window: int
    ) -> dict[TopicPartition, PartitionTail]:
        """Read the last ``window`` records below each partition's end offset: where its last
        data record is and how many control records followed it. Partitions of which nothing
        could be read (all deleted, only transaction markers, or not in time) are left out."""
        records: dict[TopicPartition, list[tuple[int, bool, int]]] = {key: [] for key in ends}

        def record(key: TopicPartition, offset: int, msg: Message) -> None:
            records[key].append((offset, has_control_header(msg.headers()), msg.timestamp()[1]))

        self._scan({key: (max(0, end - window), end) for key, end in ends.items()}, record)
        return {key: tail for key, read in records.items() if (tail := _tail(read)) is not None}

    def _scan(
        self,
        ranges: dict[TopicPartition, tuple[int, int]],
        record: Callable[[TopicPartition, int, Message], None],
    ) -> set[TopicPartition]:
        """Call ``record`` for each record in ``[start, end)`` of each partition, in offset order,
        until every partition was read to its end (or its end of log) or the timeout passed;
        returns the partitions not read to the end."""
        pending = {key for key, (start, end) in ranges.items() if end > start}
        if not pending:
            return pending
        consumer = self._reader()
        consumer.assign([KafkaTopicPartition(t, p, ranges[t, p][0]) for t, p in pending])
        deadline = time.monotonic() + self._timeout_s
        try:
            while pending and time.monotonic() < deadline and not self._stopping.is_set():
                for msg in consumer.consume(500, timeout=0.2):
                    key = (msg.topic() or "", msg.partition() or 0)
                    error = msg.error()
                    if error is not None:
                        if error.code() != KafkaError._PARTITION_EOF:
                            raise KafkaException(error)
                        pending.discard(key)
                        continue
                    offset, end = msg.offset() or 0, ranges[key][1]
                    if offset >= end - 1:
                        pending.discard(key)
                    if offset < end:
                        record(key, offset, msg)
        finally:
            consumer.unassign()
        return pending

    def _reader(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._client_config,
                    "group.id": "progress-control-sidecar",  # never joins: assign() only
                    "enable.auto.commit": False,
                    "enable.partition.eof": True,
                    "auto.offset.reset": "earliest",  # below the log start: read from it
                    "fetch.wait.max.ms": 10,
                }
            )
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()

    def _list(self, partitions: Iterable[TopicPartition], spec: Any) -> list[tuple[Any, Any]]:
        request = {KafkaTopicPartition(topic, partition): spec for topic, partition in partitions}
        if not request:
            return []
        self._raise_if_stopping()
        futures = self._admin.list_offsets(request, request_timeout=self._timeout_s)
        self._wait(futures.values(), time.monotonic() + self._timeout_s)
        return [((tp.topic, tp.partition), future.result()) for tp, future in futures.items()]


def _tail(read: list[tuple[int, bool, int]]) -> PartitionTail | None:
    """Summarise ``(offset, is control record, timestamp)`` in offset order."""
    if not read:
        return None
    data = [i for i, (_offset, control, _ts) in enumerate(read) if not control]
    after = read[data[-1] + 1 :] if data else read
    return PartitionTail(
        first_offset=read[0][0],
        data_offset=read[data[-1]][0] if data else None,
        data_timestamp_ms=read[data[-1]][2] if data else None,
        controls_after=len(after),
        first_control_timestamp_ms=after[0][2] if after else None,
    )
