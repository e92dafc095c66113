"""The Java readers' test vectors (readers/core, ``ControlVectorsTest``) are what the Python
protocol decides today: the one check that the Kafka Streams and Flink companions, which share
``progress-control-core``, accept exactly what our Python readers accept."""

from __future__ import annotations

from tests.readers.control_vectors import VECTORS_PATH, render


def test_the_java_vectors_are_the_python_protocols() -> None:
    assert VECTORS_PATH.read_text(encoding="utf-8") == render(), (
        "stale vectors: run python -m tests.readers.control_vectors"
    )
