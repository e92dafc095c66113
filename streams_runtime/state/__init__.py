"""State stores for the stream runtime: engines (memory, SQLite), changelogged key-value and
session stores, and the per-task manager that restores them without ever getting ahead of the
committed input (DESIGN §5)."""

from streams_runtime.state.changelog import (
    SOURCE_HEADER,
    ChangelogWriter,
    RecordSink,
    SourcePosition,
    changelog_topic,
    decode_source,
    encode_source,
    record_source,
    session_changelog_key,
    split_session_changelog_key,
)
from streams_runtime.state.engines import (
    EngineKind,
    InMemoryKeyValueEngine,
    InMemorySessionEngine,
    KeyValueEngine,
    SessionEngine,
    SqliteKeyValueEngine,
    SqliteSessionEngine,
    make_kv_engine,
    make_session_engine,
)
from streams_runtime.state.manager import (
    Checkpoint,
    RestoreError,
    RestoreResult,
    RestoreTimeoutError,
    StateDirectoryLockedError,
    StoreSpec,
    TaskStateManager,
    WarmStore,
    changelog_topic_config,
)
from streams_runtime.state.stores import KeyValueStore, SessionStore

__all__ = [
    "SOURCE_HEADER",
    "ChangelogWriter",
    "Checkpoint",
    "EngineKind",
    "InMemoryKeyValueEngine",
    "InMemorySessionEngine",
    "KeyValueEngine",
    "KeyValueStore",
    "RecordSink",
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
    "TaskStateManager",
    "WarmStore",
    "changelog_topic",
    "changelog_topic_config",
    "decode_source",
    "encode_source",
    "make_kv_engine",
    "make_session_engine",
    "record_source",
    "session_changelog_key",
    "split_session_changelog_key",
]
