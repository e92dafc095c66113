"""PySpark sessionization jobs over the runtime's output, via Spark's Kafka connector."""
