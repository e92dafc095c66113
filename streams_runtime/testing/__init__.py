"""Testing a topology without a broker: :class:`TopologyTestDriver` (Kafka Streams' driver of the
same name) with its typed topics and store views (docs/runtime/testing.md)."""

from streams_runtime.testing.driver import TopologyTestDriver
from streams_runtime.testing.stores import KeyValueStoreView, SessionStoreView, WindowStoreView
from streams_runtime.testing.topics import TestInputTopic, TestOutputTopic, TestRecord, Tick

__all__ = [
    "KeyValueStoreView",
    "SessionStoreView",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "Tick",
    "TopologyTestDriver",
    "WindowStoreView",
]
