"""Rebind confluent-kafka's producer classes to the instrumented ones, process-wide.

The C type itself cannot be patched, so, like OpenTelemetry's confluent-kafka instrumentation, we
replace the names applications import. It must run before the application imports them:
``progress-control run -- python app.py`` arranges that through a ``sitecustomize`` hook, or set
``PYTHONPATH=$(progress-control autoload-path)`` and ``PROGRESS_CONTROL_AUTOLOAD=1`` yourself.
Settings come from ``PROGRESS_CONTROL_*`` env variables (and ``progress.control.*`` config keys).
"""

from __future__ import annotations

from pathlib import Path

import confluent_kafka
import confluent_kafka.serializing_producer

from interceptor.producer import Producer, SerializingProducer

__all__ = ["install", "is_installed", "site_dir"]


def install() -> None:
    """Make ``confluent_kafka.Producer`` and ``SerializingProducer`` the instrumented classes."""
    confluent_kafka.Producer = Producer  # type: ignore[misc]
    confluent_kafka.SerializingProducer = SerializingProducer  # type: ignore[misc]
    confluent_kafka.serializing_producer.SerializingProducer = SerializingProducer  # type: ignore[misc]


def is_installed() -> bool:
    return confluent_kafka.Producer is Producer


def site_dir() -> Path:
    """The directory holding our ``sitecustomize`` hook, for ``PYTHONPATH``."""
    return Path(__file__).resolve().parent / "_site"
