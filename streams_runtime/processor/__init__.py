"""The Processor API (Kafka Streams' ``processor.api``): a user's own processors with state
stores and punctuators, plugged into a DSL topology with ``Stream.process`` and
``Stream.process_values``. Stream-time punctuators fire on ticks too: periodic work on stream
time goes on while an input is quiet (docs/runtime/processor-api.md).

    from streams_runtime.processor import Processor, PunctuationType, Stores
"""

from streams_runtime.processor.api import (
    FixedKeyProcessor,
    Processor,
    ProcessorContext,
    Progress,
    Punctuator,
    RecordMetadata,
)
from streams_runtime.processor.punctuation import Cancellable, PunctuationType
from streams_runtime.processor.stores import (
    StoreBuilder,
    Stores,
    TypedKeyValueStore,
    TypedSessionStore,
    TypedWindowStore,
)

__all__ = [
    "Cancellable",
    "FixedKeyProcessor",
    "Processor",
    "ProcessorContext",
    "Progress",
    "PunctuationType",
    "Punctuator",
    "RecordMetadata",
    "StoreBuilder",
    "Stores",
    "TypedKeyValueStore",
    "TypedSessionStore",
    "TypedWindowStore",
]
