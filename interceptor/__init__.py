"""Producer-side progress control, attached to confluent-kafka producers by configuration.

Three ways to attach (see the README): :class:`Producer` / :class:`SerializingProducer` with
``progress.control.*`` keys; zero-code via ``progress-control run -- python app.py``; or report mode
(``progress.control.mode=report``), which ships acks to a sidecar instead of sending ticks.
"""

from interceptor.producer import Producer, SerializingProducer
from interceptor.settings import InterceptorSettings, Mode
from progress_control.ticks.metrics import MetricsSnapshot

__all__ = ["InterceptorSettings", "MetricsSnapshot", "Mode", "Producer", "SerializingProducer"]
