"""Rebind confluent-kafka's producer classes to the instrumented ones, process-wide.

The C type itself cannot be patched, so, like OpenTelemetry's confluent-kafka instrumentation, we
replace the names applications import. It must run before the application imports them:
``progress-control run -- python app.py`` arranges that through a ``sitecustomize`` hook, or set
``PYTHONPATH=$(progress-control autoload-path)`` and ``PROGRESS_CONTROL_AUTOLOAD=1`` yourself.
Settings come from ``PROGRESS_CONTROL_*`` env variables (and ``progress.control.*`` config keys).

Other libraries rebind the same names (OpenTelemetry's ``ConfluentKafkaInstrumentor`` binds
``confluent_kafka.Producer`` to its subclass on ``instrument()`` and restores what it found on
``uninstrument()``). So that neither silently removes the other, whatever order they run in, ours
composes: a producer class bound before :func:`install`, or by anyone after it, gets our mixin put
in front of it, unless it already has it (a subclass of ours).
"""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import confluent_kafka
from confluent_kafka.cimpl import Producer as KafkaProducer
from confluent_kafka.serializing_producer import SerializingProducer as KafkaSerializingProducer

from interceptor.producer import Producer, SerializingProducer, _ProgressControlled

__all__ = ["install", "is_installed", "site_dir"]

_NAMES = frozenset({"Producer", "SerializingProducer"})
_OURS: dict[type, type] = {KafkaProducer: Producer, KafkaSerializingProducer: SerializingProducer}
_composed: dict[type, type] = {}


class _Composed(_ProgressControlled):
    """Our mixin in front of another library's producer subclass. Its ``produce()`` is where
    instrumentations add spans and headers, so it is called, not librdkafka's directly;
    ``poll()``, ``flush()`` and ``produce_batch()`` are the mixin's, which call librdkafka's
    (OpenTelemetry overrides none of them)."""

    def produce(self, *args: Any, **kwargs: Any) -> Any:
        wrap = self._wrap
        if wrap is not None:  # acks recorded in Python: the call's callback must record them
            # Positions 4 and 5: Producer's on_delivery and callback, SerializingProducer's
            # on_delivery (its 5 is the timestamp, never callable).
            args = tuple(wrap(a) if i in {4, 5} and callable(a) else a for i, a in enumerate(args))
            for name in ("on_delivery", "callback"):
                if kwargs.get(name) is not None:
                    kwargs[name] = wrap(kwargs[name])
        return super().produce(*args, **kwargs)  # type: ignore[misc]


def _with_progress_control(cls: Any) -> Any:
    """``cls`` with progress control: itself when it has it already (or is no producer class),
    our class for confluent-kafka's own, else a subclass of it with our mixin in front."""
    if not isinstance(cls, type) or not issubclass(cls, KafkaProducer):
        return cls
    if issubclass(cls, _ProgressControlled):
        return cls
    if cls in _OURS:
        return _OURS[cls]
    composed = _composed.get(cls)
    if composed is None:
        name = f"ProgressControlled{cls.__name__}"
        composed = type(name, (_Composed, cls), {"__module__": __name__})
        _composed[cls] = composed
    return composed


class _ProgressControlledModule(types.ModuleType):
    """The type of the ``confluent_kafka`` module once we are installed: a producer class bound
    to one of the names later (another instrumentation's, or the original it restores) is composed
    with ours, so binding it never removes us."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _NAMES:
            value = _with_progress_control(value)
        super().__setattr__(name, value)


def install() -> None:
    """Make ``confluent_kafka.Producer`` and ``SerializingProducer`` have progress control, and
    keep them so when another library rebinds them later. Idempotent."""
    # Not confluent_kafka.serializing_producer's name: SerializingProducer's own methods call
    # super(SerializingProducer, self) through it, which a subclass bound there breaks.
    if type(confluent_kafka) is types.ModuleType:  # not if someone else has changed it
        confluent_kafka.__class__ = _ProgressControlledModule
    for name in _NAMES:
        setattr(confluent_kafka, name, _with_progress_control(getattr(confluent_kafka, name)))


def is_installed() -> bool:
    """Whether ``confluent_kafka.Producer`` has progress control (ours, or composed with ours)."""
    bound = confluent_kafka.Producer
    return isinstance(bound, type) and issubclass(bound, _ProgressControlled)


def site_dir() -> Path:
    """The directory holding our ``sitecustomize`` hook, for ``PYTHONPATH``."""
    return Path(__file__).resolve().parent / "_site"
