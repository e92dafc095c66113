"""Progress control and OpenTelemetry's confluent-kafka instrumentation in one process, in
either order: a producer gets both its ticks and its spans, and neither removes the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.serialization import StringSerializer
from confluent_kafka.serializing_producer import SerializingProducer as KafkaSerializingProducer
from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from interceptor import Producer
from interceptor.autoload import install, is_installed
from interceptor.producer import _ProgressControlled
from progress_control.protocol import is_control_record
from tests.helpers import TopicReader, ticks_by_partition, wait_for

pytestmark = pytest.mark.broker

CLI = [sys.executable, "-m", "progress_control_apps.cli"]
ACK_RECORDING = "PROGRESS_CONTROL_ACK_RECORDING"
FAST = {"progress.control.start.ms": 300, "progress.control.backoff.ms": 100}
RECORDS = 4  # two on each of two partitions


@pytest.fixture(autouse=True, scope="module", params=["native", "python"])
def ack_recording(request: pytest.FixtureRequest) -> Iterator[str]:
    """Both ack paths: on the Python one, the instrumentation's produce() gets our callbacks."""
    before = os.environ.get(ACK_RECORDING)
    os.environ[ACK_RECORDING] = request.param
    try:
        yield str(request.param)
    finally:
        if before is None:
            del os.environ[ACK_RECORDING]
        else:
            os.environ[ACK_RECORDING] = before


@pytest.fixture(autouse=True)
def _restore_confluent_kafka() -> Iterator[None]:
    """Undo the instrumentation and our rebinding: the next test in this worker gets
    confluent-kafka's module as it was."""
    module_type = type(confluent_kafka)
    names = ("Producer", "SerializingProducer", "Consumer")
    bound = {name: getattr(confluent_kafka, name) for name in names}
    yield
    instrumentor = ConfluentKafkaInstrumentor()
    if instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.uninstrument()
    confluent_kafka.__class__ = module_type  # first: our module type would compose what is set
    for name, value in bound.items():
        setattr(confluent_kafka, name, value)


@pytest.fixture
def spans() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer_provider(spans: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()  # not the global one: it can be set only once per process
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider


def _produce_and_check(
    producer: Any,
    topic: str,
    reader: TopicReader,
    spans: InMemorySpanExporter,
    progress: Any,
) -> None:
    """Produce ``RECORDS`` (half with a callback of the app's), then check: every record has its
    span and carries its trace context, the acks are recorded, and idle partitions get ticks
    (which have no spans: they are no records of the app's)."""
    delivered: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        delivered.append(err)

    for i in range(RECORDS):
        if i // 2:  # the second record on each partition
            producer.produce(topic, b"v", key=b"k", partition=i % 2, on_delivery=on_delivery)
        else:
            producer.produce(topic, b"v", key=b"k", partition=i % 2)
    assert producer.flush(10) == 0
    assert delivered == [None] * (RECORDS // 2)  # the app's callback, still called
    assert [s.name for s in spans.get_finished_spans()] == [f"{topic} send"] * RECORDS
    progress.drain_acks()
    progress.commit_acks()
    assert {(t, p) for (t, p) in progress._activity.latest if t == topic} == {
        (topic, 0),
        (topic, 1),
    }
    wait_for(
        lambda: ticks_by_partition(reader.ticks()) == {0: 2, 1: 2},
        message="two ticks on each idle partition",
    )
    data = [m for m in reader.records if not is_control_record(m)]
    assert len(data) == RECORDS
    assert all("traceparent" in dict(m.headers() or []) for m in data)
    assert len(spans.get_finished_spans()) == RECORDS


@pytest.mark.parametrize("order", ["opentelemetry first", "ours first"])
def test_a_producer_gets_ticks_and_spans_in_either_order_and_keeps_ticks_after_uninstrument(  # noqa: PLR0917 - fixtures
    order: str,
    ack_recording: str,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    """Both rebind ``confluent_kafka.Producer``; ours composes with whatever is bound, and with
    what is bound after it: OpenTelemetry's class gets our mixin in front of it, and the class
    it restores on ``uninstrument()`` is ours again."""
    instrumentor = ConfluentKafkaInstrumentor()
    if order == "opentelemetry first":
        instrumentor.instrument(tracer_provider=tracer_provider)
        install()
    else:
        install()
        instrumentor.instrument(tracer_provider=tracer_provider)
    assert is_installed()

    topic = create_topic("otel", partitions=2)
    config = {"bootstrap.servers": kafka_bootstrap, "progress.control.max.records": 2, **FAST}
    producer = confluent_kafka.Producer(config)  # as the app makes it, by the bound name
    assert producer.progress_control.ack_recording == ack_recording
    _produce_and_check(producer, topic, reader_for(topic, 2), spans, producer.progress_control)
    producer.close()

    instrumentor.uninstrument()
    assert confluent_kafka.Producer is Producer  # what it restores is ours again
    topic = create_topic("otel-uninstrumented")
    producer = confluent_kafka.Producer(config)
    producer.produce(topic, b"v", partition=0)
    assert producer.flush(10) == 0
    assert len(spans.get_finished_spans()) == RECORDS  # no new span
    reader = reader_for(topic, 1)
    wait_for(lambda: len(reader.ticks()) == 2, message="ticks after uninstrument()")
    producer.close()


def test_a_producer_wrapped_by_instrument_producer_keeps_its_ticks(
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
    spans: InMemorySpanExporter,
    tracer_provider: TracerProvider,
) -> None:
    """``instrument_producer()`` wraps the instance in a proxy that calls our producer's
    ``produce()``, ``poll()`` and ``flush()``: acks recorded, ticks sent, spans made."""
    topic = create_topic("otel-proxied", partitions=2)
    producer = Producer(
        {"bootstrap.servers": kafka_bootstrap, "progress.control.max.records": 2, **FAST}
    )
    proxied = ConfluentKafkaInstrumentor.instrument_producer(producer, tracer_provider)
    progress = producer.progress_control
    _produce_and_check(proxied, topic, reader_for(topic, 2), spans, progress)
    assert ConfluentKafkaInstrumentor.uninstrument_producer(proxied) is producer
    producer.close()


def test_a_class_another_library_binds_after_ours_is_composed_with_ours(
    kafka_bootstrap: str, create_topic: Callable[..., str]
) -> None:
    """Not only OpenTelemetry's, nor only ``Producer``: a ``SerializingProducer`` subclass bound
    after :func:`install` gets our mixin in front, and its ``produce()`` runs, with a
    positional callback (on the Python ack path, wrapped to record the ack)."""
    produced: list[str] = []

    class TracedSerializingProducer(KafkaSerializingProducer):  # as another library makes it
        def produce(self, *args: Any, **kwargs: Any) -> None:
            produced.append(args[0])
            super().produce(*args, **kwargs)

    config = {"bootstrap.servers": kafka_bootstrap, "value.serializer": StringSerializer(), **FAST}
    install()
    # confluent-kafka's SerializingProducer calls super() through its module's name for
    # itself: that one must stay confluent-kafka's class.
    confluent_kafka.SerializingProducer(config).close()
    confluent_kafka.SerializingProducer = TracedSerializingProducer  # type: ignore[misc]
    bound = confluent_kafka.SerializingProducer
    mro = bound.__mro__
    assert mro.index(_ProgressControlled) < mro.index(TracedSerializingProducer)  # ours first
    topic = create_topic("composed")
    producer = bound(config)
    delivered: list[object] = []
    producer.produce(topic, None, "v", 0, lambda err, _msg: delivered.append(err))
    assert producer.flush(10) == 0
    assert produced == [topic]
    assert delivered == [None]
    progress = producer.progress_control
    progress.drain_acks()
    progress.commit_acks()
    assert (topic, 0) in progress._activity.latest
    producer.close()


_APP = """
import json, sys, time
import confluent_kafka
from opentelemetry import trace
from opentelemetry.instrumentation.confluent_kafka import ConfluentKafkaInstrumentor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

# The app's own tracing set-up (the instrumentation, set up at start-up, traces through it).
provider = trace.get_tracer_provider()
if not isinstance(provider, TracerProvider):
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
spans = InMemorySpanExporter()
provider.add_span_processor(SimpleSpanProcessor(spans))

bootstrap, topic = sys.argv[1:]
producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
delivered = []
for _ in range(5):
    producer.produce(topic, b"v", b"k", partition=0, on_delivery=lambda e, m: delivered.append(e))
producer.flush()
while producer.progress_metrics().ticks_sent < 2:  # idle now: ticks follow
    time.sleep(0.1)
# The proxy's class subclasses ours here (made after ours was bound): it closes as it would on
# confluent-kafka's (nothing: it only wraps), without failing.
ConfluentKafkaInstrumentor.instrument_producer(producer).close()
producer.close()
print(json.dumps({
    "classes": [f"{c.__module__}.{c.__qualname__}" for c in type(producer).__mro__],
    "ack_recording": producer.progress_control.ack_recording,
    "delivered": len(delivered),
    "spans": len(spans.get_finished_spans()),
}))
"""


def test_an_unmodified_app_under_opentelemetry_instrument_and_progress_control_run(
    ack_recording: str,
    kafka_bootstrap: str,
    create_topic: Callable[..., str],
    reader_for: Callable[[str, int], TopicReader],
) -> None:
    """``opentelemetry-instrument progress-control run -- python app.py``: our ``sitecustomize``
    comes first on ``PYTHONPATH`` and runs OpenTelemetry's after it, so the app's producer
    has both (OpenTelemetry's class, made after ours was bound, subclasses it)."""
    topic = create_topic("otel-zero-code")
    reader = reader_for(topic, 1)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROGRESS_CONTROL_", "OTEL_"))}
    env |= {
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path.cwd()), env.get("PYTHONPATH")])),
        "PROGRESS_CONTROL_START_MS": "300",
        "PROGRESS_CONTROL_BACKOFF_MS": "100",
        "PROGRESS_CONTROL_MAX_RECORDS": "2",
        ACK_RECORDING: ack_recording,
        # Nothing exported anywhere, should a distro configure the SDK at start-up.
        "OTEL_TRACES_EXPORTER": "none",
        "OTEL_METRICS_EXPORTER": "none",
        "OTEL_LOGS_EXPORTER": "none",
    }
    opentelemetry_instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    result = subprocess.run(
        [
            str(opentelemetry_instrument),
            *CLI,
            "run",
            "--",
            sys.executable,
            "-c",
            _APP,
            kafka_bootstrap,
            topic,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert "interceptor.producer.Producer" in summary["classes"]
    assert (
        "opentelemetry.instrumentation.confluent_kafka.AutoInstrumentedProducer"
        in summary["classes"]
    )
    assert summary["ack_recording"] == ack_recording
    assert summary["delivered"] == 5
    assert summary["spans"] == 5
    wait_for(lambda: len(reader.ticks()) == 2, message="the app's ticks")
    assert all(
        "traceparent" in dict(m.headers() or []) for m in reader.records if not is_control_record(m)
    )
