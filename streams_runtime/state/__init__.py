"""State stores for the stream runtime (docs/runtime/state.md), split as Kafka Streams splits them:

- ``spec``: what a processor asks for (:class:`StoreSpec`) and its changelog topic's config;
- ``engines`` (memory, SQLite) and ``stores``: changelogged key-value and session stores;
- ``changelog``: changelog topic names, the writer and the source header of every record;
- ``directory``: a task's state directory, its lock and the checkpoint file;
- ``restore``: the one changelog restore path of active tasks and standbys, with the
  committed-input rule (:func:`input_committed`) and the corrections; ``changelog_readers``:
  the consumers a restoring thread keeps from one task to the next;
- ``caching``, ``caching_windows``, ``task_caches``: the record cache and the stores read and
  written through it;
- ``manager``: :class:`TaskStateManager`, one task's stores and their flush/commit lifecycle.
"""

from streams_runtime.state.caching import CachingKeyValueStore, ThreadCache
from streams_runtime.state.caching_windows import CachingSessionStore, CachingWindowStore
from streams_runtime.state.changelog import (
    SOURCE_HEADER,
    ChangelogWriter,
    ChangelogWrites,
    RecordSink,
    SourcePosition,
    changelog_topic,
    decode_source,
    encode_source,
    record_source,
    session_changelog_key,
    split_session_changelog_key,
)
from streams_runtime.state.directory import Checkpoint, StateDirectoryLockedError
from streams_runtime.state.engines import (
    EngineKind,
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueEngine,
    SessionEngine,
    bound_engine_memory,
    make_kv_engine,
    make_session_engine,
)
from streams_runtime.state.manager import TaskStateManager
from streams_runtime.state.restore import (
    RestoreCancelledError,
    RestoreError,
    RestoreResult,
    RestoreTimeoutError,
    WarmStore,
    input_committed,
)
from streams_runtime.state.spec import StoreSpec, changelog_topic_config
from streams_runtime.state.sqlite_engines import SqliteKeyValueEngine, SqliteSessionEngine
from streams_runtime.state.stores import KeyValueStore, SessionStore, WindowStore, open_store
from streams_runtime.state.task_caches import TaskCaches

__all__ = [
    "SOURCE_HEADER",
    "CachingKeyValueStore",
    "CachingSessionStore",
    "CachingWindowStore",
    "ChangelogWriter",
    "ChangelogWrites",
    "Checkpoint",
    "EngineKind",
    "InMemoryKeyValueEngine",
    "InMemorySessionEngine",
    "KeyValueEngine",
    "KeyValueStore",
    "RecordSink",
    "RestoreCancelledError",
    "RestoreError",
    "RestoreResult",
    "RestoreTimeoutError",
    "SessionEngine",
    "SessionStore",
    "SourcePosition",
    "SqliteKeyValueEngine",
    "SqliteSessionEngine",
    "StateDirectoryLockedError",
    "StoreSpec",
    "TaskCaches",
    "TaskStateManager",
    "ThreadCache",
    "WarmStore",
    "WindowStore",
    "bound_engine_memory",
    "changelog_topic",
    "changelog_topic_config",
    "decode_source",
    "encode_source",
    "input_committed",
    "make_kv_engine",
    "make_session_engine",
    "open_store",
    "record_source",
    "session_changelog_key",
    "split_session_changelog_key",
]
