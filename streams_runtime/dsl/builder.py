"""``StreamsBuilder``: where a topology starts (Kafka Streams' ``StreamsBuilder``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from streams_runtime import processors as p
from streams_runtime.dsl.global_table import GlobalTable
from streams_runtime.dsl.stream import Stream
from streams_runtime.dsl.table import Table, _SourceSupplier
from streams_runtime.fused import native_available
from streams_runtime.fused.planner import fuse_native_chains
from streams_runtime.processor.stores import StoreBuilder
from streams_runtime.serde_context import SerdeContext, bind
from streams_runtime.serdes import Json, Serde, TimestampedValueSerde
from streams_runtime.state import StoreSpec
from streams_runtime.topology import (
    GlobalStore,
    QueryableStore,
    Topology,
    TopologyBuilder,
    TopologyError,
)

if TYPE_CHECKING:
    from streams_runtime.settings import RuntimeSettings

__all__ = ["StreamsBuilder"]


class StreamsBuilder:
    """Builds a topology. Serdes not given anywhere default to ``default_key_serde`` and
    ``default_value_serde`` (JSON)."""

    def __init__(
        self,
        *,
        default_key_serde: Serde[Any] | None = None,
        default_value_serde: Serde[Any] | None = None,
    ) -> None:
        self.default_key_serde: Serde[Any] = default_key_serde or Json()
        self.default_value_serde: Serde[Any] = default_value_serde or Json()
        self._graph = TopologyBuilder()
        self._user_stores: dict[str, StoreBuilder] = {}
        self._owned_stores: set[str] = set()

    def stream(
        self,
        topics: str | Sequence[str],
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
    ) -> Stream[Any, Any]:
        """A stream of the records of ``topics`` (several topics must be co-partitioned)."""
        names = (topics,) if isinstance(topics, str) else tuple(topics)
        if not names:
            raise TopologyError("stream() needs at least one topic")
        ks, vs = key_serde or self.default_key_serde, value_serde or self.default_value_serde
        node = self._graph.source(names, ks, vs)
        return Stream(self, node, ks, vs)

    def table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
    ) -> Table[Any, Any]:
        """A table of the latest value per key of ``topic``, materialised in the key-value store
        ``store_name`` (auto-named otherwise) backed by a changelog topic; null values delete,
        null keys are dropped and counted.

        Emit-on-change (KIP-557): an update whose serialized value equals the stored one and
        whose timestamp is strictly newer is stored but not forwarded, and counted in
        ``streams_idempotent_update_skip_total``; a changed value, or the same value with an
        equal or older timestamp, is stored and forwarded.

        Only with ``store_name`` is the table queryable in Kafka Streams' sense
        (``Materialized.as``), which decides whether filters on it send old values (see
        :meth:`Table.filter`)."""
        ks, vs = key_serde or self.default_key_serde, value_serde or self.default_value_serde
        source = self._graph.source((topic,), ks, vs)
        store = store_name or self._graph.name("KTABLE-SOURCE-STORE")
        # Cached (the record cache) as Kafka Streams caches a source table it materialises;
        # one materialised only for a join or old values is not cached here.
        spec = StoreSpec(name=store, kind="key_value", cached=store_name is not None)
        sks = self._graph.store_serde(ks, store, "key")
        svs = self._graph.store_serde(vs, store, "value")
        node = self._graph.add(
            "KTABLE-SOURCE",
            lambda: p.TableSourceProcessor(store, sks, svs),
            [source],
            stores=(spec,),
        )
        self._graph.add_queryable(QueryableStore(store, "key_value", sks, svs))
        # Kafka Streams materialises a source table only when asked: by a store name
        # (Materialized.as), by a join reading it, or by a table needing its old values.
        supplier = _SourceSupplier(queryable=store_name is not None)
        return Table(self, node, ks, vs, store_name=store, store_value_serde=vs, supplier=supplier)

    def global_table(
        self,
        topic: str,
        *,
        key_serde: Serde[Any] | None = None,
        value_serde: Serde[Any] | None = None,
        store_name: str | None = None,
    ) -> GlobalTable[Any, Any]:
        """A table of every partition of ``topic`` on every instance (Kafka Streams'
        ``globalTable``), in the key-value store ``store_name`` (else
        ``<topic>-STATE-STORE-<n>``, as Kafka Streams names it). Each instance reads the whole
        topic before its stream threads start and keeps reading it while it runs; the topic is
        the store's changelog (no changelog topic of its own), and a restart with a persistent
        engine resumes from the store's checkpoint. Null values delete, null keys are dropped
        and counted, control records are skipped; records the serdes refuse meet the
        bad-record policy. Streams join it with a key mapper (:meth:`Stream.join`,
        :meth:`Stream.left_join`); queries read it on every instance, locally."""
        ks, vs = key_serde or self.default_key_serde, value_serde or self.default_value_serde
        graph = self._graph
        store = store_name or graph.name(f"{topic}-STATE-STORE")
        # Kafka Streams' global source and table source nodes take a number each.
        graph.name("KSTREAM-SOURCE")
        graph.name("KTABLE-SOURCE")
        # Stored as the topic holds them: context-aware serdes bound to the topic, the store's
        # changelog (Kafka Streams' global StateSerdes).
        spec = GlobalStore(
            store,
            topic,
            bind(ks, SerdeContext(topic, "key")),
            bind(vs, SerdeContext(topic, "value")),
        )
        graph.add_global_store(spec)
        return GlobalTable(spec)

    def add_state_store(self, store: StoreBuilder) -> StreamsBuilder:
        """Add a store for user processors (Kafka Streams' ``addStateStore``): connected to
        each processor that names it in ``process(..., name)``, logged, restored, kept on
        standbys and queryable like the DSL's stores."""
        if store.name in self._user_stores:
            raise TopologyError(f"store {store.name!r} was added already")
        graph = self._graph
        bound = StoreBuilder(
            store.name,
            store.kind,
            graph.store_serde(store.key_serde, store.name, "key"),
            graph.store_serde(store.value_serde, store.name, "value"),
            store.retention_ms,
            store.window_size_ms,
            store.logged,
            store.cached,
        )
        self._user_stores[store.name] = bound
        values = bound.value_serde
        graph.add_queryable(
            QueryableStore(
                store.name,
                store.kind,
                bound.key_serde,
                # Key-value values are read as a table's (ValueAndTimestamp); windows' through
                # the serde, as a windowed aggregation's.
                TimestampedValueSerde(values) if store.kind == "window" else values,
            )
        )
        return self

    def _connect_stores(self, names: Sequence[str]) -> dict[str, StoreBuilder]:
        """The user stores ``names``, each added by :meth:`add_state_store`."""
        missing = [name for name in names if name not in self._user_stores]
        if missing:
            raise TopologyError(
                f"no store {', '.join(map(repr, missing))}: add it with add_state_store first"
            )
        return {name: self._user_stores[name] for name in names}

    def _store_owners(self, names: Sequence[str]) -> tuple[tuple[StoreSpec, ...], tuple[str, ...]]:
        """A processor node's ``stores`` (those it is the first to name, which it owns) and
        ``uses_stores`` (owned by an earlier one: the two share a sub-topology)."""
        owned = tuple(self._user_stores[n].spec() for n in names if n not in self._owned_stores)
        self._owned_stores.update(names)
        return owned, tuple(n for n in names if n not in {s.name for s in owned})

    def build(self, application_id: str, settings: RuntimeSettings | None = None) -> Topology:
        """Resolve internal topic names and split the graph into sub-topologies. With
        ``settings`` whose ``native_core`` is on, and the native core built, every chain it has
        an operator for becomes one node (:mod:`streams_runtime.fused.planner`), as
        ``Topology.describe()`` shows; the app and the test driver build so."""
        if settings is None or not settings.native_core or not native_available():
            return self._graph.build(application_id)
        rewrite = fuse_native_chains(settings.statestore_cache_max_bytes)
        return self._graph.build(application_id, rewrite)
