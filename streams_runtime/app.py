"""``App``: runs a topology (Kafka Streams' ``KafkaStreams``)."""

from __future__ import annotations

import functools
import logging
import signal
import sys
import threading
import uuid
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from progress_control.settings import ConfigurationError, load_settings
from streams_runtime.app_state import AppState
from streams_runtime.cluster.membership import LagInfo
from streams_runtime.cluster.store_provider import LocalStoreProvider
from streams_runtime.dsl import StreamsBuilder
from streams_runtime.errors import as_exception
from streams_runtime.health import Heartbeat, InstanceHealth, TaskView, serve_metrics_and_health
from streams_runtime.metrics import RuntimeMetrics
from streams_runtime.processing.commit_strategy import OffsetCommitHook
from streams_runtime.processing.internal_topics import prepare_topics
from streams_runtime.processing.stream_thread import StreamThread
from streams_runtime.queries.reads import KeyRange, SessionKeyRead, WindowKeyRead, WindowStartRange
from streams_runtime.queries.results import (
    InvalidKeyError,
    KeyQueryMetadata,
    NotAvailableError,
    QueryResult,
    RangeResult,
)
from streams_runtime.queries.router import InteractiveQueries
from streams_runtime.queries.security import query_address
from streams_runtime.serdes import Serde
from streams_runtime.settings import RuntimeSettings
from streams_runtime.state import bound_engine_memory
from streams_runtime.state.directory import application_directory
from streams_runtime.state.stores import EARLIEST, LATEST
from streams_runtime.topology import Topology

if TYPE_CHECKING:  # imported where used: most apps run neither (start-up time, issue 37)
    from streams_runtime.cluster.replicator import Replicator
    from streams_runtime.queries.server import QueryServer

__all__ = ["App"]

logger = logging.getLogger(__name__)

# consume() moves the position past partition-EOF events only from 2.13.2 on; the runtime's
# consumers run with enable.partition.eof. The core installs older releases (beside Quix
# Streams), so the runtime's extra carries the floor and the app checks it.
_CONFLUENT_KAFKA_FLOOR = (2, 13, 2)


def _require_confluent_kafka() -> None:
    installed = metadata.version("confluent-kafka")
    release = tuple(int(part) for part in installed.split(".")[:3] if part.isdigit())
    if release < _CONFLUENT_KAFKA_FLOOR:
        raise ConfigurationError(
            f"the streams runtime needs confluent-kafka>=2.13.2 (installed: {installed}); "
            "install kafka-progress-control[runtime]"
        )


def _bound(queries: InteractiveQueries, store: str, key: object) -> bytes | None:
    return None if key is None else queries.serialize_key(store, key)


def _time(name: str, time: int | None, default: int) -> int:
    if time is None:
        return default
    if not isinstance(time, int) or isinstance(time, bool):
        raise InvalidKeyError(f"{name} must be an integer (ms), got {type(time).__name__}")
    return time


class App:
    """Runs the topology of ``builder`` with ``settings`` (or settings given as keywords, which
    override ``PROGRESS_CONTROL_RUNTIME_*`` env variables)::

        app = App(builder, application_id="sessions", bootstrap_servers="localhost:9092")
        app.run()  # until SIGTERM / Ctrl-C, or app.close() from another thread

    ``before_offset_commit`` is a fault-injection point for crash tests
    (:data:`~streams_runtime.processing.commit_strategy.OffsetCommitHook`); leave it unset
    otherwise.
    """

    def __init__(
        self,
        builder: StreamsBuilder,
        settings: RuntimeSettings | None = None,
        *,
        before_offset_commit: OffsetCommitHook | None = None,
        **overrides: Any,
    ) -> None:
        _require_confluent_kafka()
        self._before_offset_commit = before_offset_commit
        self.settings = settings or load_settings(RuntimeSettings, **overrides)
        self.topology: Topology = builder.build(self.settings.application_id, self.settings)
        bound_engine_memory(self.settings.state_engine.value, self.settings.rocksdb_memory_bytes)
        problem = self.settings.signing_problem(
            has_repartition_topics=bool(self.topology.repartition_topics)
        )
        if problem is not None:
            raise ConfigurationError(problem)
        self.metrics = RuntimeMetrics(self.settings.application_id)
        self.state = AppState.CREATED
        self._state_changed = threading.Condition()
        self._thread: StreamThread | None = None
        self._runner: threading.Thread | None = None
        self._stop_requested = threading.Event()
        self.error: BaseException | None = None
        self.metrics_port: int | None = None
        """The port ``/metrics`` (and the health probes) are served on (set once running, with
        ``metrics_port`` set)."""
        self._heartbeat = Heartbeat()
        self.health = InstanceHealth(
            lambda: self.state,
            self._heartbeat,
            self._task_view,
            deadline_s=self.settings.liveness_deadline_s,
        )
        """``/health/live`` and ``/health/ready`` (:mod:`streams_runtime.health`)."""
        self.replicator: Replicator | None = None
        self.queries: InteractiveQueries | None = None
        self.query_endpoint: str | None = None
        """The advertised ``host:port`` of the query server (set once running, with
        ``application_server`` set; port 0 there becomes the bound port here)."""

    @functools.cached_property
    def instance_id(self) -> str:
        """This instance's id, kept in the state directory across restarts (it names the
        transactional id, so a restarted instance fences and aborts its predecessor's open
        transaction at once). Read, and the directories made private, once."""
        directory = application_directory(
            Path(self.settings.state_dir), self.settings.application_id
        )
        path = directory / "instance.id"
        if not path.exists():
            path.write_text(uuid.uuid4().hex[:12])
        return path.read_text().strip()

    def _task_view(self) -> TaskView:
        thread = self._thread
        if thread is None:
            return TaskView(frozenset(), frozenset())
        return TaskView(thread.active_tasks, thread.restoring_tasks)

    def run(self) -> None:
        """Process until :meth:`close` (or SIGTERM/SIGINT on the main thread); raises the error
        that stopped the app, if any (also kept in :attr:`error`): a script running the app
        exits non-zero then, and with 0 after a clean stop."""
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, self._on_signal)
        from streams_runtime.processing.global_thread import GlobalStreamThread

        self._set_state(AppState.STARTING)
        self._heartbeat.beat()
        server = None
        query_server: QueryServer | None = None

        def global_thread_failed(_error: BaseException) -> None:
            self._stop_requested.set()  # raised below once the stream thread stopped
            if self._thread is not None:
                self._thread.stop()

        # Global tables (none: it starts nothing) are read to their topics' ends first, as
        # Kafka Streams' global thread bootstraps before the stream threads start.
        global_thread = GlobalStreamThread(
            self.topology, self.settings, metrics=self.metrics, on_error=global_thread_failed
        )
        try:
            if self.settings.metrics_port is not None:
                server = serve_metrics_and_health(
                    self.settings.metrics_host,
                    self.settings.metrics_port,
                    self.metrics.registry,
                    self.health,
                )
                self.metrics_port = server.port
            partition_counts = prepare_topics(self.topology, self.settings)
            global_thread.start(cancelled=self._stop_requested, heartbeat=self._heartbeat.beat)
            self._thread = StreamThread(
                self.topology,
                self.settings,
                instance_id=self.instance_id,
                metrics=self.metrics,
                partition_counts=partition_counts,
                on_state=self._set_state,
                before_offset_commit=self._before_offset_commit,
                heartbeat=self._heartbeat,
            )
            query_server = self._start_queries(self._thread, partition_counts)
            if self._stop_requested.is_set():
                self._thread.stop()
            self._thread.run()
            global_thread.raise_error()
        except:  # noqa: E722 - a bare KafkaError escapes every typed clause (see as_exception)
            self.error = as_exception(sys.exc_info()[1])
            self._set_state(AppState.ERROR)
            raise self.error  # noqa: B904 - the original, or its real-exception form
        finally:
            if self.replicator is not None:
                self.replicator.stop()
            if query_server is not None:
                query_server.stop()
            if self.queries is not None:
                self.queries.close()  # after the server: its workers may still be forwarding
            global_thread.stop()  # after its readers: the stream thread and the queries
            if server is not None:
                server.stop()
            if self.state != AppState.ERROR:
                self._set_state(AppState.NOT_RUNNING)

    def _start_queries(
        self, thread: StreamThread, partition_counts: dict[str, int]
    ) -> QueryServer | None:
        """Membership, standbys and the query server, when configured (KIP-535)."""
        settings = self.settings
        instance_id = self.instance_id
        if settings.membership_enabled:
            from streams_runtime.cluster.replicator import Replicator

            self.replicator = Replicator(
                self.topology,
                settings,
                instance_id=instance_id,
                partition_counts=partition_counts,
                metrics=self.metrics,
                active_tasks=lambda: thread.active_tasks,
                restoring_tasks=lambda: thread.restoring_tasks,
                group_member=thread.group_member,
            )
        self.queries = InteractiveQueries(
            self.topology,
            settings,
            instance_id=instance_id,
            partition_counts=partition_counts,
            stores=LocalStoreProvider(thread, self.replicator),
            replicator=self.replicator,
            metrics=self.metrics,
        )
        query_server = None
        address = query_address(settings)
        if address is not None:
            from streams_runtime.queries.server import QueryServer

            query_server = QueryServer(
                self.queries, address.bind_host, address.port, settings, self.health
            )
            self.query_endpoint = f"{address.advertised_host}:{query_server.port}"
            query_server.start()
        if self.replicator is not None:
            self.replicator.endpoint = self.query_endpoint
            thread.assignment_listener = self.replicator.wake
            thread.warm_stores = self.replicator.warm_stores
            thread.join_gate = self.replicator.ready_to_join
            self.replicator.start()
        return query_server

    # -- interactive queries (KIP-535) ----------------------------------------------------------

    def _running_queries(self) -> InteractiveQueries:
        if self.queries is None:
            raise NotAvailableError(
                f"the app is not running (state {self.state}): queries need a running app; "
                "call app.start() and app.wait_until('RUNNING') first, or query from another "
                "thread while app.run() runs"
            )
        return self.queries

    def query_metadata_for_key(self, store: str, key: object) -> KeyQueryMetadata:
        """Active host, standby hosts and partition of ``key`` in ``store`` (the partition is
        Kafka's murmur2 partitioner over the serialized key, as the producers compute it)."""
        return self._running_queries().query_metadata_for_key(store, key)

    def all_local_store_partition_lags(self) -> dict[str, dict[int, LagInfo]]:
        """``{store: {partition: LagInfo}}`` for every local copy: actives (lag 0), restoring
        actives and standbys. Empty without membership (no standbys, no application_server)."""
        return self._running_queries().all_local_store_partition_lags()

    def get(
        self, store: str, key: object, *, allow_stale: bool = False, max_lag: int | None = None
    ) -> QueryResult:
        """The value of ``key`` in ``store``, from the live active copy wherever it runs, or
        with ``allow_stale`` from the most caught-up copy within ``max_lag`` records; raises
        :class:`~streams_runtime.queries.results.QueryError` subclasses (unknown store, bad key,
        none within the bound)."""
        return self._running_queries().get(store, key, allow_stale=allow_stale, max_lag=max_lag)

    def range(
        self,
        store: str,
        lower: object = None,
        upper: object = None,
        *,
        descending: bool = False,
        partitions: Iterable[int] | None = None,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> RangeResult:
        """The entries of the key-value store ``store`` with ``lower <= key <= upper`` (``None``:
        unbounded), compared as serialized bytes, ascending or ``descending`` (IQv2's
        ``RangeQuery``, ``withDescendingKeys``); none when ``lower > upper``. Every partition
        (or those of ``partitions``) is read from its live active copy, or with
        ``allow_stale`` from the most caught-up copy within ``max_lag``, and their entries are
        merged in key order; a partition that no copy answers fails the read."""
        queries = self._running_queries()
        read = KeyRange(_bound(queries, store, lower), _bound(queries, store, upper), descending)
        return queries.query_range(
            store, read, partitions, allow_stale=allow_stale, max_lag=max_lag
        )

    def all(
        self,
        store: str,
        *,
        descending: bool = False,
        partitions: Iterable[int] | None = None,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> RangeResult:
        """Every entry of the key-value store ``store`` (Kafka Streams' ``all``/``reverseAll``):
        :meth:`range` without bounds."""
        return self.range(
            store,
            descending=descending,
            partitions=partitions,
            allow_stale=allow_stale,
            max_lag=max_lag,
        )

    def prefix_scan(
        self,
        store: str,
        prefix: object,
        prefix_serde: Serde[Any] | None = None,
        *,
        partitions: Iterable[int] | None = None,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> RangeResult:
        """The entries of the key-value store ``store`` whose serialized key starts with
        ``prefix`` serialized by ``prefix_serde`` (default: the store's key serde), ascending
        (Kafka Streams' ``prefixScan(prefix, prefixKeySerializer)``); routed as :meth:`range`."""
        queries = self._running_queries()
        raw = queries.serialize_key(store, prefix, prefix_serde)
        return queries.query_range(
            store, KeyRange(prefix=raw), partitions, allow_stale=allow_stale, max_lag=max_lag
        )

    def fetch_windows(
        self,
        store: str,
        key: object,
        time_from: int | None = None,
        time_to: int | None = None,
        *,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> QueryResult:
        """The windows of ``key`` in the window store ``store`` whose start is in ``[time_from,
        time_to]`` (``None``: unbounded), ascending by start (IQv2's ``WindowKeyQuery``,
        ``ReadOnlyWindowStore.fetch(key, timeFrom, timeTo)``); none when ``time_from >
        time_to``. The value is the list of ``{"start", "end", "value"}``, routed as :meth:`get`."""
        read = WindowKeyRead(
            _time("time_from", time_from, EARLIEST), _time("time_to", time_to, LATEST)
        )
        return self._running_queries().get(
            store, key, allow_stale=allow_stale, max_lag=max_lag, read=read
        )

    def fetch_all_windows(
        self,
        store: str,
        time_from: int | None = None,
        time_to: int | None = None,
        *,
        partitions: Iterable[int] | None = None,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> RangeResult:
        """Every key's windows in the window store ``store`` whose start is in ``[time_from,
        time_to]`` (IQv2's ``WindowRangeQuery.withWindowStartRange``, ``fetchAll``), each
        ``{"key", "start", "end", "value"}``, by start, then key bytes, then end; routed as
        :meth:`range`."""
        read = WindowStartRange(
            _time("time_from", time_from, EARLIEST), _time("time_to", time_to, LATEST)
        )
        return self._running_queries().query_range(
            store, read, partitions, allow_stale=allow_stale, max_lag=max_lag
        )

    def fetch_sessions(
        self,
        store: str,
        key: object,
        earliest_session_end: int | None = None,
        latest_session_start: int | None = None,
        *,
        descending: bool = False,
        allow_stale: bool = False,
        max_lag: int | None = None,
    ) -> QueryResult:
        """The sessions of ``key`` in the session store ``store`` (Kafka Streams'
        ``ReadOnlySessionStore.fetch(key)``), or with bounds those ending at or after
        ``earliest_session_end`` and starting at or before ``latest_session_start``
        (``findSessions``), by end then start (``descending``: the ``backward`` reads). The
        value is the list of ``{"start", "end", "value"}``, routed as :meth:`get`."""
        read = SessionKeyRead(
            _time("earliest_session_end", earliest_session_end, EARLIEST),
            _time("latest_session_start", latest_session_start, LATEST),
            descending,
        )
        return self._running_queries().get(
            store, key, allow_stale=allow_stale, max_lag=max_lag, read=read
        )

    def start(self) -> None:
        """Run in a background thread (errors end up in :attr:`error`)."""

        def target() -> None:
            try:
                self.run()
            except BaseException:  # run() raises real exceptions only (see as_exception)
                logger.exception("streams app stopped with an error")

        self._runner = threading.Thread(target=target, name="streams-app", daemon=True)
        self._runner.start()

    def close(self, timeout_s: float = 60.0) -> None:
        """Stop processing, commit, and release every resource."""
        self._stop_requested.set()
        if self._thread is not None:
            self._thread.stop()
        if self._runner is not None and self._runner is not threading.current_thread():
            self._runner.join(timeout_s)

    def wait_until(self, state: AppState | str, timeout_s: float = 60.0) -> bool:
        """Block until the app reaches ``state`` (e.g. ``AppState.RUNNING`` or "RUNNING"); False
        on timeout or error."""
        with self._state_changed:
            return (
                self._state_changed.wait_for(
                    lambda: self.state in {state, AppState.ERROR}, timeout_s
                )
                and self.state == state
            )

    def _set_state(self, state: AppState) -> None:
        with self._state_changed:
            self.state = state
            self._state_changed.notify_all()
        logger.info(
            "streams app %(application_id)s: %(state)s",
            {"application_id": self.settings.application_id, "state": state},
        )

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        logger.info("signal %(signal)d: stopping", {"signal": signum})
        self.close()

    def __enter__(self) -> App:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
