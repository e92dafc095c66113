"""The main job, end to end on the embedded broker (``./dev demo``).

Two pipelines run side by side on the same machine, identical but for one setting:

- a sample producer sends sparse clicks through ``interceptor.Producer``, progress control
  attached by configuration only (``progress.control.*`` keys, or ``enabled=false``);
- the streams runtime sessionizes them per user with suppress-until-window-closes and writes
  closed sessions, and forwards the valid clicks (with its own propagated ticks) to an events
  topic;
- Spark's streaming job sessionizes the events topic with a watermark.

All users stop clicking before the end of the run. With progress control the last sessions close
about one gap after they end; without it they stay open. The report compares both, and a PNG
shows stream time and Spark's watermark against the wall clock.
"""

from __future__ import annotations

import json
import logging
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from progress_control.protocol import is_control_record
from progress_control.settings import load_settings
from progress_control_apps.demo.clicks import ClickPlan, ClickProducer, plan_clicks
from progress_control_apps.demo.fetching import MavenDownloads, jars_cached
from progress_control_apps.demo.formats import DemoFormat
from progress_control_apps.demo.logs import DemoLogs
from progress_control_apps.demo.plot import Sample, plot_time
from progress_control_apps.demo.steps import Steps
from progress_control_apps.demo.topology import sessionization
from progress_control_apps.dev.broker import BrokerSettings, EmbeddedKafkaBroker
from progress_control_apps.dev.jars import JarSet, fetch_jars, kafka_broker_jars
from streams_runtime import App

__all__ = ["DemoOptions", "ModeReport", "run_demo"]

_SAMPLE_S = 0.5
_CLIENT_LOG = logging.getLogger("progress_control_apps.demo.librdkafka")
"""librdkafka's log of the demo's own clients (Python logging: demo.log, never the terminal)."""


@dataclass(frozen=True)
class DemoOptions:
    """Knobs of the main job."""

    duration_s: float = 40.0
    users: int = 12
    partitions: int = 4
    gap_s: float = 4.0
    output_dir: Path = Path("out")
    spark: bool = True
    master: str = "local[2]"
    bootstrap_servers: str | None = None
    log_dir: Path | None = None
    """Where Spark's log goes (``spark.log``, see :mod:`progress_control_apps.demo.logs`); ``None``:
    Spark logs as it is configured already."""
    wire_format: Literal["json", "avro"] = "json"
    """The pipeline's records: JSON, or Avro through a Schema Registry
    (:mod:`progress_control_apps.demo.formats`)."""
    schema_registry_url: str | None = None
    """Avro: use this registry (Confluent's API) instead of starting the embedded one."""


@dataclass
class ModeReport:
    """The figures of one pipeline (with or without progress control)."""

    control: bool
    topics: dict[str, str] = field(default_factory=dict)
    """The pipeline's topics: clicks, events, sessions (runtime) and spark_sessions."""
    clicks_sent: int = 0
    sessions_expected: int = 0
    sessions_closed_runtime: int = 0
    sessions_closed_spark: int | None = None
    runtime_delay_s: dict[str, float] = field(default_factory=dict)
    spark_delay_s: dict[str, float] = field(default_factory=dict)
    ticks_sent_producer: int = 0
    ticks_sent_runtime: int = 0
    stream_time_behind_s: float | None = None
    """How far the runtime's stream time trailed the wall clock at the end of the run."""

    @property
    def sessions_stuck_runtime(self) -> int:
        return self.sessions_expected - self.sessions_closed_runtime


@dataclass
class _Pipeline:
    control: bool
    clicks: str
    events: str
    sessions: str
    spark_sessions: str
    app: App
    producer: ClickProducer
    sessions_output: _OutputTopic
    spark_output: _OutputTopic
    samples: list[Sample] = field(default_factory=list)
    spark_job: Any = None

    @property
    def name(self) -> str:
        return "with progress control" if self.control else "without progress control"


def run_demo(out: TextIO, options: DemoOptions | None = None) -> int:
    """Run the main job, print its report to ``out``; return a process exit code (0 when the
    pipeline with progress control closed every session)."""
    options = options or DemoOptions()
    broker_settings = None if options.bootstrap_servers else load_settings(BrokerSettings)
    fetches: list[tuple[str, JarSet, Path | None]] = []
    if broker_settings is not None:
        jar_set = kafka_broker_jars(broker_settings.kafka_version)
        if not jars_cached(jar_set, broker_settings.cache_dir):
            fetches.append(("the Kafka broker's", jar_set, broker_settings.cache_dir))
    if options.spark:
        from progress_control_apps.dev.jars import spark_kafka_connector_jars

        jar_set = spark_kafka_connector_jars()
        if not jars_cached(jar_set):
            fetches.append(("Spark's Kafka connector", jar_set, None))
    own_registry = options.wire_format == "avro" and not options.schema_registry_url
    steps = Steps(
        out,
        total=3 + (broker_settings is not None) + own_registry + options.spark + len(fetches),
    )
    with ExitStack() as stack:
        for what, jar_set, cache_dir in fetches:
            # First run only: minutes of downloads, shown as they go.
            with steps.step(f"Fetching {what} jars from Maven Central", MavenDownloads()):
                fetch_jars(jar_set, cache_dir, quiet=True)
        bootstrap, wire = _start_services(stack, steps, options, broker_settings)
        spark = None
        if options.spark:
            with steps.step("Starting Spark with its Kafka connector"):
                from progress_control_apps.spark.session import spark_session

                spark = spark_session(
                    options.master,
                    "progress-control-demo",
                    log_file=DemoLogs(options.log_dir).spark if options.log_dir else None,
                )
        plan = plan_clicks(options.users, options.duration_s, options.gap_s)
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="pc-demo-")))
        with steps.step("Creating topics, starting the runtime and the Spark jobs"):
            pipelines = [
                _start_pipeline(
                    stack,
                    bootstrap,
                    plan,
                    options,
                    control=control,
                    scratch=scratch,
                    spark=spark,
                    wire=wire,
                )
                for control in (True, False)
            ]
        started = time.time()
        with steps.step(f"Sending sparse clicks for {options.duration_s:.0f}s, then waiting"):
            for p in pipelines:
                p.producer.start()
            _run_and_sample(pipelines, plan, options, started, spark)
        with steps.step("Collecting results"):
            reports = [_report(p, plan, options) for p in pipelines]
            if spark is not None:
                # Stopping a query mid-batch makes Spark log the cancelled tasks as errors.
                spark.sparkContext.setLogLevel("OFF")
            for p in pipelines:
                p.app.close()
                if p.spark_job is not None:
                    p.spark_job.stop()
                p.producer.close()
            data_stopped = max(t for t, _ in plan.schedule())
            plot = plot_time(
                {p.name: p.samples for p in pipelines},
                data_stopped,
                options.output_dir / "stream-time.png",
                f"{options.users} users, {options.partitions} partitions, "
                f"session gap {options.gap_s:g}s",
            )
    _write_report(out, reports, options, plot)
    on = reports[0]
    return 0 if on.sessions_stuck_runtime == 0 else 1


def _start_services(
    stack: ExitStack, steps: Steps, options: DemoOptions, broker_settings: BrokerSettings | None
) -> tuple[str, DemoFormat]:
    """The broker (embedded unless given) and, in Avro, the schema registry (likewise)."""
    if broker_settings is None:
        assert options.bootstrap_servers is not None
        bootstrap = options.bootstrap_servers
    else:
        with steps.step("Starting the embedded Apache Kafka broker"):
            bootstrap = stack.enter_context(EmbeddedKafkaBroker(broker_settings)).bootstrap_servers
    registry_url = options.schema_registry_url
    if options.wire_format == "avro" and not registry_url:
        from progress_control_apps.dev.schema_registry import EmbeddedSchemaRegistry

        # The first run also fetches Apicurio Registry from Maven Central (about 160 MB).
        with steps.step("Starting the embedded schema registry", MavenDownloads()):
            registry_url = stack.enter_context(EmbeddedSchemaRegistry()).url
    return bootstrap, DemoFormat(options.wire_format, registry_url)


def _start_pipeline(
    stack: ExitStack,
    bootstrap: str,
    plan: ClickPlan,
    options: DemoOptions,
    *,
    control: bool,
    scratch: Path,
    spark: Any,
    wire: DemoFormat,
) -> _Pipeline:
    suffix = f"{'on' if control else 'off'}-{uuid.uuid4().hex[:6]}"
    names = {kind: f"demo-{kind}-{suffix}" for kind in ("clicks", "events", "sessions", "spark")}
    # Session outputs stamped by the broker on arrival: the delay measurement needs that time.
    append_time = {"message.timestamp.type": "LogAppendTime"}
    _create_topics(
        bootstrap,
        [
            NewTopic(names["clicks"], options.partitions, 1),
            NewTopic(names["events"], options.partitions, 1),
            NewTopic(names["sessions"], 1, 1, config=append_time),
            NewTopic(names["spark"], 1, 1, config=append_time),
        ],
    )
    gap_ms = int(options.gap_s * 1000)
    # Progress control for the demo's time scale: first tick after 1 s of silence, then one per
    # second. The defaults (10 s, exponential backoff) suit production rates.
    tick_config = {
        "progress.control.enabled": str(control).lower(),
        "progress.control.start.ms": "1000",
        "progress.control.backoff.ms": "1000",
        "progress.control.backoff.exponential": "false",
        "progress.control.max.records": "1000",
    }
    app = App(
        sessionization(names["clicks"], names["events"], names["sessions"], gap_ms, wire.serdes()),
        application_id=f"demo-{suffix}",
        bootstrap_servers=bootstrap,
        state_dir=scratch / f"state-{suffix}",
        commit_interval_ms=500,
        progress_propagation=control,
        progress_interval_ms=500,
    )
    app.start()
    stack.callback(app.close)
    if not app.wait_until("RUNNING", 60):
        raise RuntimeError(f"the streams runtime did not start: {app.error!r}")
    producer = ClickProducer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": _CLIENT_LOG, **tick_config},
        names["clicks"],
        plan,
        wire,
    )
    stack.callback(producer.close)
    sessions_output = _OutputTopic(
        bootstrap, names["sessions"], wire.session_reader(names["sessions"])
    )
    spark_output = _OutputTopic(bootstrap, names["spark"])
    stack.callback(sessions_output.close)
    stack.callback(spark_output.close)
    pipeline = _Pipeline(
        control,
        names["clicks"],
        names["events"],
        names["sessions"],
        names["spark"],
        app,
        producer,
        sessions_output,
        spark_output,
    )
    if spark is not None:
        from progress_control_apps.spark.source import KafkaSource
        from progress_control_apps.spark.stream import SessionizationStream, StreamConfig

        wire.register_events_schema(names["events"])
        job = SessionizationStream(
            spark,
            StreamConfig(
                source=KafkaSource(bootstrap, names["events"], schema=wire.spark_input_schema()),
                gap_ms=gap_ms,
                output_dir=str(options.output_dir / "spark" / suffix),
                checkpoint_dir=str(scratch / f"checkpoints-{suffix}"),
                output_topic=names["spark"],
            ),
        ).start()
        stack.callback(job.stop)
        pipeline.spark_job = job
    return pipeline


def _create_topics(bootstrap: str, topics: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result(timeout=30)


def _run_and_sample(
    pipelines: list[_Pipeline], plan: ClickPlan, options: DemoOptions, started: float, spark: Any
) -> None:
    """Sample stream time and watermarks until the producers are done and the pipeline with
    progress control closed every session (or a deadline passed)."""
    expected = len(plan.sessions)
    deadline = started + options.duration_s + 6 * options.gap_s + 30
    on = pipelines[0]
    while time.time() < deadline:
        now = time.time()
        for p in pipelines:
            p.samples.append(Sample(now - started, *_times(p, started)))
        producing = now < started + options.duration_s
        if not producing:
            closed = len(on.sessions_output.read())
            spark_done = spark is None or len(on.spark_output.read()) >= expected
            if closed >= expected and spark_done:
                # A few more samples for the picture, then stop.
                for _ in range(4):
                    time.sleep(_SAMPLE_S)
                    now = time.time()
                    for p in pipelines:
                        p.samples.append(Sample(now - started, *_times(p, started)))
                break
        time.sleep(_SAMPLE_S)
    for p in pipelines:
        p.producer.join()


def _times(p: _Pipeline, started: float) -> tuple[float | None, float | None]:
    stream_times = [
        sample.value
        for metric in p.app.metrics.registry.collect()
        if metric.name == "streams_stream_time_seconds"
        for sample in metric.samples
        if sample.value > 0  # 0: the task has not processed a record yet
    ]
    stream_time = (min(stream_times) - started) if stream_times else None
    watermark = None
    if p.spark_job is not None:
        wm = p.spark_job.metrics().watermark_ms
        # Spark starts the watermark at 0 (the epoch) until it has seen data.
        watermark = wm / 1000 - started if wm and wm / 1000 > started - 3600 else None
    return stream_time, watermark


class _OutputTopic:
    """Reads a one-partition output topic incrementally (committed records only), so the
    sampling loop and the report never re-read what they already have."""

    def __init__(
        self, bootstrap: str, topic: str, session_of: Callable[[bytes], Any] = json.loads
    ) -> None:
        self.session_of = session_of
        """The session in a record's value."""
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"demo-reader-{uuid.uuid4().hex[:6]}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": "read_committed",
                "logger": _CLIENT_LOG,
            }
        )
        self._partition = TopicPartition(topic, 0)
        self._consumer.assign([TopicPartition(topic, 0, 0)])
        self.records: list[Any] = []
        """Data records (sessions) read so far; control records are left out."""

    def read(self, timeout_s: float = 10.0) -> list[Any]:
        """Read up to the current end of the topic (or ``timeout_s``); returns :attr:`records`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = self._consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                # End of the partition, unless this is an old EOF event queued before the
                # records that arrived since.
                high = self._consumer.get_watermark_offsets(self._partition, timeout=10)[1]
                if (msg.offset() or 0) >= high:
                    break
                continue
            if not is_control_record(msg) and msg.value():
                self.records.append(msg)
        return self.records

    def close(self) -> None:
        self._consumer.close()


def _delays(output: _OutputTopic, gap_s: float) -> dict[str, float]:
    """Seconds from each session's gap end (last event + gap) to its output's arrival."""
    delays = [
        (msg.timestamp()[1] - int(output.session_of(msg.value())["end"])) / 1000 - gap_s
        for msg in output.records  # stamped with LogAppendTime
    ]
    if not delays:
        return {}
    return {
        "mean": round(statistics.fmean(delays), 2),
        "max": round(max(delays), 2),
        "min": round(min(delays), 2),
    }


def _report(p: _Pipeline, plan: ClickPlan, options: DemoOptions) -> ModeReport:
    runtime_sessions = p.sessions_output.read()
    report = ModeReport(
        control=p.control,
        topics={
            "clicks": p.clicks,
            "events": p.events,
            "sessions": p.sessions,
            "spark_sessions": p.spark_sessions,
        },
        clicks_sent=p.producer.sent,
        sessions_expected=len(plan.sessions),
        sessions_closed_runtime=len(runtime_sessions),
        runtime_delay_s=_delays(p.sessions_output, options.gap_s),
        ticks_sent_producer=p.producer.ticks_sent(),
        ticks_sent_runtime=int(p.app.metrics.total("streams_progress_ticks")),
    )
    if p.samples and p.samples[-1].stream_time_s is not None:
        report.stream_time_behind_s = round(p.samples[-1].wall_s - p.samples[-1].stream_time_s, 1)
    if p.spark_job is not None:
        report.sessions_closed_spark = len(p.spark_output.read())
        report.spark_delay_s = _delays(p.spark_output, options.gap_s)
    return report


def _write_report(out: TextIO, reports: list[ModeReport], options: DemoOptions, plot: Path) -> None:
    on, off = reports

    def delay(d: dict[str, float]) -> str:
        return f"mean {d['mean']:.1f}s, max {d['max']:.1f}s" if d else "-"

    def spark(n: int | None) -> str:
        return "-" if n is None else str(n)

    rows = [
        ("clicks sent", on.clicks_sent, off.clicks_sent),
        ("sessions (ground truth)", on.sessions_expected, off.sessions_expected),
        ("sessions closed by the runtime", on.sessions_closed_runtime, off.sessions_closed_runtime),
        ("sessions stuck in the runtime", on.sessions_stuck_runtime, off.sessions_stuck_runtime),
        (
            "sessions closed by Spark",
            spark(on.sessions_closed_spark),
            spark(off.sessions_closed_spark),
        ),
        ("delay gap end -> runtime output", delay(on.runtime_delay_s), delay(off.runtime_delay_s)),
        ("delay gap end -> Spark output", delay(on.spark_delay_s), delay(off.spark_delay_s)),
        ("control records sent by the producer", on.ticks_sent_producer, off.ticks_sent_producer),
        ("control records sent by the runtime", on.ticks_sent_runtime, off.ticks_sent_runtime),
        (
            "stream time behind wall clock at the end (s)",
            on.stream_time_behind_s,
            off.stream_time_behind_s,
        ),
    ]
    out.write("\nReport\n")
    out.write(f"{'':46} {'with control':>22} {'without control':>22}\n")
    for label, with_control, without in rows:
        out.write(f"{label:46} {with_control!s:>22} {without!s:>22}\n")
    out.write(f"\nPlot: {plot}\n")
    path = options.output_dir / "report.json"
    path.write_text(
        json.dumps({"with_control": asdict(on), "without_control": asdict(off)}, indent=2)
    )
    out.write(f"Report: {path}\n")
    if options.log_dir is not None:
        logs = DemoLogs(options.log_dir)
        names = ", ".join(p.name for p in (logs.spark, logs.python, logs.native_stderr))
        out.write(f"Logs: {options.log_dir} ({names})\n")
