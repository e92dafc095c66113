"""A Kafka Streams-style stream-processing runtime that consumes control records."""
